"""What the native extension is built from, defined once.

Every build path reads this module: ``custom_op/_core/_build_script.py`` (the just-in-time
build in ``custom_op/_core/_build.py`` runs it), the repository's ``setup.py``
(``pip install``) and ``python -m custom_op.build``, so the sources, flags,
library discovery and build key cannot drift apart. It imports neither torch
nor custom_op, so the setup scripts can load it by path.

The build key must be computable on every import without starting a process:
a slim training image often has its compiler removed after the build, and a
key that asked the compiler for its version would no longer find that build.
So the key covers what decides whether a build can be loaded (sources, flags,
the stable-ABI target, the platform, where libjpeg-turbo comes from), and the
compiler's identity is only recorded in the build log.

The module uses torch's stable ABI and CPython's limited API only (see
docs/design.md, "The binding"): one build serves every torch from
TORCH_TARGET_VERSION on and every CPython from 3.10 on, so neither torch's
version nor Python's is part of the key, and ``pip install -U torch`` keeps the
build.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

#: custom_op/, the package folder (this file is in its _core/ layer).
PACKAGE_DIR = Path(__file__).resolve().parent.parent

#: The one translation unit, relative to the package folder.
SOURCES = ("decode_and_crop_jpeg.cpp",)
#: Headers it includes; they are part of the build key.
HEADERS = ("csrc/scale_rule.h", "csrc/jpeg_errors.h", "csrc/limits.h", "csrc/pixel_formats.h", "csrc/region.h",
           "csrc/fixed_point_passes.h", "csrc/resample.h", "csrc/grid_resample.h",
           "csrc/row_sinks.h", "csrc/restart_seek.h", "csrc/mcu_index.h", "csrc/index_coding.h",
           "csrc/huffman.h",
           "csrc/index_builder.h", "csrc/index_stats.h", "csrc/index_seek.h", "csrc/predictor_walk.h",
           "csrc/index_scan.h",
           "csrc/crop_quirk.h", "csrc/jpeg_phases.h",
           "csrc/jpeg_decoder.h", "csrc/grid_crop.h", "csrc/mirror.h",
           "csrc/prepare.h", "binding/errors.h", "binding/exact_resize.h",
           "binding/loaded_libjpeg.h", "binding/python_module.h", "binding/stable_tensors.h",
           "binding/thread_pool.h", "binding/aten_calls.h", "binding/window_decode.h",
           "binding/batch.h", "binding/index_kernels.h")
#: Python files whose content decides how the extension is built.
BUILD_FILES = ("_core/_build_script.py", "_core/_build_config.py")

LIBRARIES = ("jpeg",)
#: These come after Python's own CFLAGS and override them. -g0 drops the debug
#: information they ask for: it is most of the compile time and of the
#: module's size, and nobody debugs a cold-cache training job with gdb.
#: -fno-wrapv undoes CPython's -fwrapv, which stops GCC from vectorising the
#: loops that split pixels into planes (measured: a full 375 x 500 decode took
#: 2.0 ms with it, 1.55 ms without).
EXTRA_COMPILE_ARGS = ("-O3", "-g0", "-fno-wrapv", "-fvisibility=hidden")

#: What the compiler writes of a header's folder into the module (``__FILE__`` in assertion
#: messages and in torch's checks, compiled into the module's read-only data): the package's and
#: torch's folders, each replaced by the name of its folder alone, so that the same sources and
#: flags build the same bytes wherever the checkout or the environment lies (gcc 8 and clang 10
#: on accept the flag). Kept out of EXTRA_COMPILE_ARGS and so out of the build key, which must
#: not depend on the package's location either; reproducible_compile_args() fills it in.
FILE_PREFIX_MAP = "-ffile-prefix-map={folder}={name}"


def _torch_folders() -> list[str]:
    """The folder of the torch a build compiles against, as torch's include paths name it and
    resolved, without importing torch (this module must not; a file lookup is enough)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.origin:
        return []
    folder = os.path.dirname(os.path.abspath(spec.origin))
    return sorted({folder, os.path.realpath(folder)})


def reproducible_compile_args() -> list[str]:
    """The -ffile-prefix-map flags of a build here: the package's folder as ``custom_op`` and
    torch's as ``torch``, so that no path of this machine is compiled into the module."""
    folders = [(str(PACKAGE_DIR), "custom_op")] + [(folder, "torch") for folder in _torch_folders()]
    return [FILE_PREFIX_MAP.format(folder=folder, name=name) for folder, name in folders]


#: The stable-ABI target: torch's stable ABI promises that a module built with
#: this TORCH_TARGET_VERSION loads in every later torch. 2.10: what we use
#: (Tensor[] and std::vector arguments, torch_call_dispatcher,
#: torch::stable::empty, select, copy_, unsqueeze, get_num_threads) is there
#: from 2.10 (the headers refuse, at compile time, anything newer than the
#: target); ATen operators that only newer headers wrap are called by name
#: (binding/aten_calls.h), so 2.10's headers compile the source. 2.10 is the
#: torch of SageMaker's newest PyTorch training image, and the declared floor
#: (pyproject.toml; docs/install.md says which torch runs what test).
TORCH_TARGET_VERSION = (2, 10)
#: The oldest CPython of the abi3 module (torch's BuildExtension defines
#: Py_LIMITED_API for extensions marked py_limited_api; pyproject says >=3.10).
PYTHON_ABI_TAG = "abi3"


def torch_target_macro() -> str:
    """TORCH_TARGET_VERSION as torch/csrc/stable/version.h encodes it (major, minor in the top bytes)."""
    major, minor = TORCH_TARGET_VERSION
    return f"0x{(major << 56) | (minor << 48):016x}"


#: The namespace of every operator, C++ and Python (``torch.ops.custom_op_jpeg.*``). Ours alone:
#: a generic name such as "custom_op", common in example code, may already be defined by another
#: library in the same process, and torch allows one definition of a namespace.
OPERATOR_NAMESPACE = "custom_op_jpeg"


def define_macros(key: str) -> list[tuple[str, str]]:
    """The preprocessor definitions of every build: the key, the operator namespace and the
    stable-ABI target."""
    return [("CUSTOM_OP_BUILD_KEY", key), ("CUSTOM_OP_NAMESPACE", OPERATOR_NAMESPACE),
            ("TORCH_TARGET_VERSION", torch_target_macro())]



class JpegPrefixError(RuntimeError):
    """CUSTOM_OP_JPEG_PREFIX names a folder without libjpeg-turbo's headers."""


def jpeg_prefixes() -> list[Path]:
    """Install prefixes that hold libjpeg-turbo, besides the system's.

    An explicit ``CUSTOM_OP_JPEG_PREFIX`` (Homebrew's keg-only jpeg-turbo, a
    custom build) comes first; then an active conda environment that ships
    libjpeg-turbo, so headers and library stay in step.

    Raises:
        JpegPrefixError: CUSTOM_OP_JPEG_PREFIX is set but has no include/jpeglib.h.
    """
    explicit, conda = _prefix_variables()
    if explicit and not (explicit / "include" / "jpeglib.h").exists():
        raise JpegPrefixError(f"CUSTOM_OP_JPEG_PREFIX={explicit} has no include/jpeglib.h; "
                              "point it at the folder that holds include/ and lib/ of "
                              "libjpeg-turbo (e.g. $(brew --prefix jpeg-turbo))")
    return [prefix for prefix in (explicit, conda) if prefix is not None]


def _prefix_variables() -> tuple[Path | None, Path | None]:
    """(CUSTOM_OP_JPEG_PREFIX as given, CONDA_PREFIX when it holds jpeglib.h).

    A file check, no process: the build key reads this on every first call.
    """
    explicit = os.environ.get("CUSTOM_OP_JPEG_PREFIX")
    conda = os.environ.get("CONDA_PREFIX")
    has_conda_jpeg = bool(conda) and (Path(conda) / "include" / "jpeglib.h").exists()
    return (Path(explicit).expanduser() if explicit else None,
            Path(conda) if has_conda_jpeg else None)


def pkg_config_dirs() -> tuple[list[str], list[str]]:
    """(include dirs, library dirs) that ``pkg-config libjpeg`` reports.

    Empty when pkg-config or its libjpeg.pc is missing: the system paths are
    then the compiler's own. Runs a process, so only build paths call it.
    """
    try:
        done = subprocess.run(["pkg-config", "--cflags-only-I", "--libs-only-L", "libjpeg"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return [], []
    if done.returncode != 0:
        return [], []
    includes, libraries = [], []
    for flag in shlex.split(done.stdout):
        if flag.startswith("-I"):
            includes.append(flag[2:])
        elif flag.startswith("-L"):
            libraries.append(flag[2:])
    return includes, libraries


def include_dirs() -> list[str]:
    """Header folders for the build: the package's own, then libjpeg-turbo's."""
    static = static_jpeg_prefix()
    if static is not None:  # Its headers only: the system's would describe another library.
        return [str(PACKAGE_DIR), str(static / "include")]
    return ([str(PACKAGE_DIR)] + [str(p / "include") for p in jpeg_prefixes()]
            + pkg_config_dirs()[0])


def library_dirs() -> list[str]:
    """Library folders for the build: libjpeg-turbo's, when not the system's (none when static)."""
    if static_jpeg_prefix() is not None:
        return []
    return [str(p / "lib") for p in jpeg_prefixes()] + pkg_config_dirs()[1]


# libjpeg-turbo linked statically (what a wheel ships). The archive goes into
# the module and -Wl,--exclude-libs,ALL makes every symbol it brings local:
# torchvision and Pillow load their own libjpeg into the same process, and an
# exported jpeg_* of ours would be bound to their calls (or theirs to ours),
# a different version's struct layouts behind the same names.

#: Names a folder with include/jpeglib.h and lib/libjpeg.a to link statically
#: (``make wheel`` sets it to the folder ``make libjpeg-static`` unpacks).
#: Unset, a build links the system's shared library, as a checkout always has.
STATIC_JPEG_VARIABLE = "CUSTOM_OP_JPEG_STATIC"


def static_jpeg_prefix() -> Path | None:
    """The folder of a static libjpeg-turbo to link into the module, or None (the system's).

    A file check, no process: the build key reads it on every first call.

    Raises:
        JpegPrefixError: CUSTOM_OP_JPEG_STATIC names a folder without
            include/jpeglib.h and lib/libjpeg.a.
    """
    given = os.environ.get(STATIC_JPEG_VARIABLE, "")
    if not given:
        return None
    prefix = Path(given).expanduser().resolve()
    if not ((prefix / "include" / "jpeglib.h").is_file()
            and (prefix / "lib" / "libjpeg.a").is_file()):
        raise JpegPrefixError(f"{STATIC_JPEG_VARIABLE}={given} has no include/jpeglib.h and "
                              "lib/libjpeg.a; point it at an unpacked static libjpeg-turbo "
                              "(make libjpeg-static makes one), or unset it to link the "
                              "system's libjpeg")
    return prefix


def jpeg_link_identity() -> str:
    """Which libjpeg-turbo a build here links, for the build key.

    "system" (plus the prefixes, added by build_key), or "static <version>
    <archive's sha256>": a different archive is a different build, and the same archive
    unpacked in another folder (another checkout) is the same build, so that two checkouts
    make the same wheel.
    """
    static = static_jpeg_prefix()
    if static is None:
        return "system"
    archive = (static / "lib" / "libjpeg.a").read_bytes()
    return f"static {static_jpeg_version(static)} {hashlib.sha256(archive).hexdigest()}"


def static_jpeg_version(prefix: Path) -> str:
    """LIBJPEG_TURBO_VERSION from the folder's jconfig.h ("" when it has none)."""
    try:
        text = (prefix / "include" / "jconfig.h").read_text(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        parts = line.split()
        if parts[:2] == ["#define", "LIBJPEG_TURBO_VERSION"] and len(parts) == 3:
            return parts[2]
    return ""


def jpeg_link_arguments() -> dict:
    """How the module links libjpeg-turbo: the shared ``-ljpeg``, or the archive with hidden symbols.

    Returns:
        ``libraries``, ``extra_objects`` and the link flags that belong to the choice.
    """
    static = static_jpeg_prefix()
    if static is None:
        return {"libraries": list(LIBRARIES), "extra_objects": [], "extra_link_args": []}
    return {"libraries": [], "extra_objects": [str(static / "lib" / "libjpeg.a")],
            "extra_link_args": ["-Wl,--exclude-libs,ALL"]}


def extra_link_args(libraries: list[str]) -> list[str]:
    """An rpath per library folder, so the module finds the libjpeg it was built against."""
    return [f"-Wl,-rpath,{d}" for d in libraries]


def extension_arguments(key: str, source_prefix: str = "") -> dict:
    """Keyword arguments for torch's ``CppExtension``, for either setup script.

    Args:
        key: the build key, compiled into the module as its ``build_key``.
        source_prefix: the package folder relative to the calling setup script
            ("" for custom_op/_core/_build_script.py, "custom_op/" for the repository's).

    Returns:
        sources, include and library folders, libraries, flags and the key macro.
    """
    libraries = library_dirs()
    jpeg = jpeg_link_arguments()
    return {
        "sources": [source_prefix + name for name in SOURCES],
        "include_dirs": include_dirs(),
        "library_dirs": libraries,
        "libraries": jpeg["libraries"],
        "extra_objects": jpeg["extra_objects"],
        "extra_compile_args": list(EXTRA_COMPILE_ARGS) + reproducible_compile_args(),
        "extra_link_args": extra_link_args(libraries) + jpeg["extra_link_args"],
        "define_macros": define_macros(key),
        "py_limited_api": True,
    }


def extension_suffix() -> str:
    """The file name ending of the module: ".abi3.so" (a limited-API module), ".pyd" on Windows."""
    return ".pyd" if os.name == "nt" else f".{PYTHON_ABI_TAG}.so"


def module_path(root: Path, key: str) -> Path:
    """Where the build for ``key`` lives under a build folder: ``<root>/<key>/_C<suffix>``."""
    return root / key / f"_C{extension_suffix()}"


def compiler_identity() -> str:
    """The compilers setuptools will run and their ``--version``, for the build log."""
    lines = []
    for variable in ("CC", "CXX", "LDSHARED"):
        command = os.environ.get(variable) or sysconfig.get_config_var(variable) or ""
        argv = shlex.split(command)[:1]
        version = ""
        if argv:
            try:
                done = subprocess.run(argv + ["--version"], capture_output=True, text=True,
                                      timeout=30)
                version = (done.stdout.splitlines() or [""])[0]
            except (OSError, subprocess.SubprocessError) as error:
                version = f"unavailable: {error}"
        lines.append(f"{variable}={command!r}: {version}")
    return "\n".join(lines)


def build_key() -> str:
    """A hash of everything that makes one build unusable where another is.

    Sources, headers, build files, flags, the stable-ABI target
    (TORCH_TARGET_VERSION), the Python ABI tag (abi3), the machine, the
    prefixes that locate libjpeg-turbo and whether it is linked statically
    (and which archive). Not torch's version (the module is on
    its stable ABI), not Python's (abi3), not the package's location (a wheel
    is built in one folder and installed in another) and not the compiler
    (see the module docstring). Equal keys mean the existing build can be
    loaded as it is.

    Returns:
        20 hex digits.
    """
    digest = hashlib.sha256()

    def add(text: str | bytes) -> None:
        data = text.encode() if isinstance(text, str) else text
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)

    for name in SOURCES + HEADERS + BUILD_FILES:
        add(name)
        add((PACKAGE_DIR / name).read_bytes())
    for part in (torch_target_macro(), PYTHON_ABI_TAG, extension_suffix(), sys.platform,
                 platform.machine()):
        add(part)
    for part in EXTRA_COMPILE_ARGS + LIBRARIES:
        add(part)
    for prefix in _prefix_variables():
        add(str(prefix or ""))
    add(jpeg_link_identity())
    return digest.hexdigest()[:20]
