"""The optional dependencies of the integrations, and the error that names the extra to install.

The core (decode functions, operators) needs torch alone, so a plain
``pip install custom_op`` leaves the installed torch as it is. EncodedJpeg, the
transforms and the datasets need torchvision (and numpy), the threads lane
torchdata too, the prepare tool tqdm and numpy, the MosaicML Streaming and
LitData readers their libraries: each is an extra of the package
(pyproject.toml). Without them, importing those parts raises an ImportError
that says which extra to install, rather than a bare "No module named
'torchvision'".

An extra that brings torchvision cannot keep the installed torch by itself:
each torchvision release requires the torch it was made for or a newer one,
and pip, asked for the newest torchvision the extra allows, replaces an older
torch to satisfy it (with the CUDA libraries of PyPI's build). Nothing in a
package's metadata can name the torch that happens to be installed, so the
command we print names it: with ``torch==<installed>`` on the same command
line, pip picks the torchvision release that fits the installed torch instead.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

#: extra -> the modules it brings that custom_op imports.
EXTRAS = {
    "torchvision": ("torchvision", "numpy"),
    "lane": ("torchvision", "numpy", "torchdata"),
    "prepare": ("tqdm", "numpy"),
    "mds": ("torchvision", "streaming"),
    "litdata": ("torchvision", "litdata"),
    "ray": ("ray",),
}


def installed_torch() -> str | None:
    """The installed torch's version as its metadata has it ("2.13.0+cpu"), or None.

    Read from the distribution's metadata, not by importing torch: the error that calls it may
    be raised while torch itself is still being imported.
    """
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def install_command(extra: str, package: str = "custom_op") -> str:
    """The pip command that installs ``extra`` and, when the extra brings torchvision, keeps torch.

    Args:
        extra: a key of EXTRAS.
        package: what pip installs, the package name or a wheel's path.

    Example:
        >>> install_command("prepare")
        "pip install 'custom_op[prepare]'"
    """
    command = f"pip install '{package}[{extra}]'"
    torch_version = installed_torch()
    if "torchvision" in EXTRAS.get(extra, ()) and torch_version is not None:
        command += f" 'torch=={torch_version}'"
    return command


def require(extra: str, what: str) -> None:
    """Raises ImportError naming ``extra`` if one of its modules cannot be found.

    Args:
        extra: a key of EXTRAS, the name of the extra in pyproject.toml.
        what: the part of custom_op that needs it, for the message.

    Raises:
        ImportError: a module of the extra is not installed; its ``name`` is the module's.

    Example:
        >>> require("torchvision", "custom_op.EncodedJpeg")  # nothing when torchvision is there
    """
    for module in EXTRAS[extra]:
        if importlib.util.find_spec(module) is None:
            command = install_command(extra)
            advice = ""
            if "torch==" in command:
                advice = (" (naming the installed torch keeps it: pip then picks the torchvision "
                          "release made for it, where without it pip may replace torch with its "
                          "newest release; docs/install.md lists the pairs)")
            raise ImportError(f"{what} needs {module}, which is not installed: install custom_op's "
                              f"'{extra}' extra, {command}{advice}. The decode functions and the "
                              "operators work without it.", name=module)
