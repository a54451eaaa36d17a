"""The optional dependencies of the integrations, and the error that names the extra to install.

The core (decode functions, operators) needs torch alone, so a plain
``pip install custom_op`` leaves the installed torch as it is. EncodedJpeg, the
transforms and the datasets need torchvision (and numpy), the prepare tool
tqdm and numpy, the MosaicML Streaming and LitData readers their libraries:
each is an extra of the package (pyproject.toml). Without
them, importing those parts raises an ImportError that says which extra to
install, rather than a bare "No module named 'torchvision'".
"""

from __future__ import annotations

import importlib.util

#: extra -> the modules it brings that custom_op imports.
EXTRAS = {
    "torchvision": ("torchvision", "numpy"),
    "prepare": ("tqdm", "numpy"),
    "mds": ("torchvision", "streaming"),
    "litdata": ("torchvision", "litdata"),
    "ray": ("ray",),
}


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
            advice = (" (pip then picks a torchvision for the installed torch, if there is one; "
                      "where none fits, it would replace torch)" if module == "torchvision" else "")
            raise ImportError(f"{what} needs {module}, which is not installed: install custom_op's "
                              f"'{extra}' extra, pip install 'custom_op[{extra}]'{advice}. The "
                              "decode functions and the operators work without it.", name=module)
