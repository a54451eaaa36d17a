"""The native core: the extension module's build (_build, _build_config, _build_diagnosis,
_build_guard), its finding and checking (_loader, _module_check, _shipped), the module itself
with its error translation (_native, _errors), the fake kernels (_fakes), the public torch
operators (_ops) and the operator that raises traced argument errors (_deferred_errors).
Nothing here imports a module outside _core.
"""
