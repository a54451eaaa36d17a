"""The module a wheel (or ``pip install .``) ships, found without recomputing a build key.

The build key (_build_config.build_key) describes what a build *here* would
be: this torch, this Python, the libjpeg this machine would link. A wheel's
module was built elsewhere (torch 2.13 on a build machine, libjpeg-turbo 3.1
linked in statically), so the installed package cannot recompute its key.
The repository's setup.py therefore writes ``_prebuilt/shipped.json`` beside
the module: ``key`` (compiled into it), ``module`` (its path under
_prebuilt), ``torch_built`` and ``torch_git`` (the torch it was built
against), ``torch_minimum`` (for a module on torch's stable ABI,
``TORCH_TARGET_VERSION`` in _build_config: it runs on every torch from that
version on; null for a module on torch's C++ API, which runs only on the
torch it was built against) and ``libjpeg`` (what it links, for reports).
The loader asks :func:`shipped_key` first; when the module cannot run on
this torch, the usual key lookup (and just-in-time build) follows, and a line
on stderr says why.
"""

from __future__ import annotations

import json
import os
import sys

from . import _build_config

#: Written by the repository's setup.py when it builds the module.
MANIFEST = _build_config.PACKAGE_DIR / "_prebuilt" / "shipped.json"


def shipped_key() -> str | None:
    """The key of the module the package was installed with, when it runs on this torch, else None.

    The loader then finds it under ``_prebuilt/<key>/`` (and checks it, as any build).
    """
    try:
        manifest = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return None
    if not (MANIFEST.parent / manifest.get("module", "")).is_file():
        return None
    reason = _torch_mismatch(manifest)
    if reason:
        print(f"custom_op [pid {os.getpid()}]: the module installed with the package does not "
              f"run here ({reason}); looking for a build for this torch", file=sys.stderr)
        return None
    return manifest.get("key")


def _torch_mismatch(manifest: dict) -> str:
    """Why the shipped module cannot run on the imported torch ("" when it can)."""
    import torch  # Only an installed wheel gets here; its module links libtorch anyway.
    from torch.torch_version import TorchVersion

    minimum = manifest.get("torch_minimum")
    if minimum:
        if TorchVersion(torch.__version__) < minimum:
            return f"it needs torch {minimum} or newer, this is {torch.__version__}"
        return ""
    built = (manifest.get("torch_built"), manifest.get("torch_git"))
    if built != (torch.__version__, torch.version.git_version or ""):
        return (f"it was built for torch {built[0]} alone (not on torch's stable ABI), this "
                f"is {torch.__version__}")
    return ""
