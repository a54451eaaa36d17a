"""Finding, building and loading custom_op's native extension.

The extension is one file, ``_C.abi3.so``: a module on CPython's limited API
whose loading registers the operators (``torch.ops.custom_op_jpeg._*``, on torch's
stable ABI). ``import custom_op`` loads an existing build
(:func:`load_existing_build`, a dlopen of a few milliseconds, no process); with
none, nothing native is loaded until the first decode, which builds it
(:func:`load_extension`). Pure-Python parts (datasets, transforms'
construction) therefore import without a compiler or a build. This module
imports nothing else of custom_op's but the build configuration: the
operators' Python side (custom_op/_core/_ops.py) sits above it.

Builds are looked for by build key (see _build_config.build_key; for the
module a wheel was installed with, the key its manifest gives, see
custom_op/_core/_shipped.py), first match wins:

1. ``custom_op/_prebuilt/<key>/`` inside the package: what ``pip install``
   built (read-only; ``pip uninstall`` removes it with the package);
2. the build folder, :func:`build_root`: ``$CUSTOM_OP_BUILD_DIR`` if set
   (``python -m custom_op.build --into DIR`` fills one); else, in a source
   checkout whose package folder is writable, ``custom_op/_build/``; else the
   per-user cache ``$XDG_CACHE_HOME/custom_op`` (default ``~/.cache/custom_op``).
   An installed package never builds inside site-packages.

With no build for the key, the extension is built into the build folder
(custom_op/_core/_build.py). Finding and loading a build starts no process. The key
does not depend on torch's version (_build_config.build_key), so a build
survives ``pip install -U torch``.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import site
import sys
import sysconfig
import threading
from pathlib import Path
from types import ModuleType

from . import _build_config, _module_check, _shipped

MODULE_NAME = "custom_op._C"
#: Where ``pip install`` puts the module it builds, inside the package.
PREBUILT_DIR = _build_config.PACKAGE_DIR / "_prebuilt"


def current_build_key() -> str:
    """The build key of this environment: sources, flags, stable-ABI target, libjpeg prefix.

    An installed wheel's module, when it runs on this torch, is this environment's
    build: its key comes from the manifest (custom_op/_core/_shipped.py).
    """
    shipped = _shipped.shipped_key()
    if shipped is not None:
        return shipped
    return _build_config.build_key()


def is_installed_package() -> bool:
    """True when the package lies in a site-packages folder (pip install, not a checkout)."""
    parent = _build_config.PACKAGE_DIR.parent
    candidates = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    candidates.update(getattr(site, "getsitepackages", lambda: [])())
    if site.ENABLE_USER_SITE:
        candidates.add(site.getusersitepackages())
    return any(parent == Path(folder).resolve() for folder in candidates)


def build_root() -> Path:
    """The folder that JIT builds go to: see the module docstring."""
    override = os.environ.get("CUSTOM_OP_BUILD_DIR")
    if override:
        return Path(override).expanduser()
    package_dir = _build_config.PACKAGE_DIR
    if not is_installed_package() and os.access(package_dir, os.W_OK):
        return package_dir / "_build"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "custom_op"


def find_build(key: str, roots: list[Path] | None = None) -> Path | None:
    """The first existing build for ``key`` (see the module docstring), or None."""
    for root in roots if roots is not None else [PREBUILT_DIR, build_root()]:
        path = _build_config.module_path(root, key)
        # A damaged module (cut short, garbage) is removed and so not found, or raises.
        if path.exists() and _module_check.usable_build(path, root, key):
            return path
    return None


_load_lock = threading.Lock()


def load_extension() -> ModuleType:
    """Returns custom_op._C, finding or building it once per build key.

    Raises:
        ImportError: the build failed (now or, remembered, before); the message
            says what is missing and where the build log is.
    """
    with _load_lock:  # Two threads' first calls must not load (or build) twice.
        loaded = sys.modules.get(MODULE_NAME)
        if loaded is not None:
            return loaded
        key = current_build_key()
        path = find_build(key)
        if path is None:
            from . import _build  # Only a cold start builds; a warm one skips its imports.

            path = _build.build(build_root(), key)
        return load_module(path, key)


def load_existing_build() -> ModuleType | None:
    """custom_op._C if it is loaded or a build for the current key exists (then loads it), else
    None. Builds nothing and starts no process: ``import custom_op`` calls it.

    Raises:
        ImportError: the build found does not load (another key, a missing library).
    """
    with _load_lock:
        loaded = sys.modules.get(MODULE_NAME)
        if loaded is not None:
            return loaded
        key = current_build_key()
        path = find_build(key)
        return None if path is None else load_module(path, key)


def load_module(path: Path, key: str) -> ModuleType:
    """Loads the module at ``path`` as custom_op._C, checking its build key.

    Loading it defines the operators' namespace, which torch lets one library
    define per process; a second definition fails inside the module's static
    initialisers, where nothing can turn it into an exception, and the process
    dies. So the namespace is checked first, and a taken one raises here.

    Raises:
        ImportError: the module was built for another key; a copy of the
            module is already loaded in this process; or another library
            already defined the operators' namespace.
    """
    import torch  # noqa: F401 - the module links against libtorch, which this import loads

    _check_namespace_free(path)
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    if getattr(module, "build_key", None) != key:
        raise ImportError(f"custom_op: {path} was built for key "
                          f"{getattr(module, 'build_key', None)!r}, expected {key!r} (this is a "
                          "bug in custom_op)")
    sys.modules[MODULE_NAME] = module
    return module


def _check_namespace_free(path: Path) -> None:
    """Raises ImportError when loading ``path`` would define the operators' namespace twice."""
    import torch

    namespace = _build_config.OPERATOR_NAMESPACE
    loaded = sys.modules.get(MODULE_NAME)
    if loaded is not None or hasattr(getattr(torch.ops, namespace), "_decode_batch"):
        where = getattr(loaded, "__file__", "an unknown file")
        raise ImportError(f"custom_op: a copy of the native module is already loaded in this "
                          f"process (from {where}), so {path} cannot be loaded beside it: "
                          f"torch allows one definition of the {namespace!r} operators per "
                          "process. Load or check the other build in a new process.")
    try:
        probe = torch.library.Library(namespace, "DEF")
    except RuntimeError as error:
        raise ImportError(f"custom_op: another library in this process has already defined "
                          f"the operator namespace {namespace!r}, so custom_op's operators "
                          f"cannot be registered. torch's message: {error}") from None
    probe._destroy()  # frees the namespace for the module's own definition
