"""The native core: the extension module's build (_build, _build_config, _build_diagnosis,
_build_guard), its finding and checking (_loader, _module_check, _shipped), the module itself
with its error translation (_native, _errors) and the public torch operators with their fake
kernels (_ops). Nothing here imports a module outside _core.
"""
