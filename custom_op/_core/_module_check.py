"""Checking a built module before it is loaded, and clearing a damaged one.

A build folder can hold a module cut short (an interrupted copy of a
``python -m custom_op.build --into DIR`` folder, a full disk) or overwritten
with something else. Loading it is not safe: the dynamic loader maps the
file's segments, and touching a page past the end of a truncated file kills
the process with SIGBUS, no message; garbage gives an ImportError that a
retry repeats forever. So every module is checked before it is loaded:

- a build writes a record beside the module (``_C<suffix>.json``: its size
  and SHA-256), and the module must match it;
- a module without a record (built by an older custom_op) must at least be a
  whole ELF file: its headers, every segment and its section table inside
  the file, which is what a truncation breaks.

A damaged module in a writable build folder is removed (under the build's
lock, so that a process building the same key never loses its fresh file)
and then built again; in a read-only folder, or inside an installed package,
the error says exactly what to delete or reinstall. Only the loader calls
:func:`usable_build`; the builders call :func:`write_record`.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from pathlib import Path

#: The folder of the module a package was installed with (see _shipped.py).
#: This file imports nothing of custom_op: setup.py loads it by path.
_INSTALLED_ROOT = Path(__file__).resolve().parent.parent / "_prebuilt"  # custom_op/_prebuilt


def record_path(module: Path) -> Path:
    """The record of ``module``: its file name with ``.json`` appended."""
    return module.with_name(module.name + ".json")


def write_record(built: Path, module: Path | None = None) -> None:
    """Records ``built``'s size and hash for the module that will live at ``module``.

    Written atomically (a temporary name, then a rename), before the module
    itself is renamed into place.

    Args:
        built: the finished module file.
        module: where it will be loaded from (default: ``built`` itself).
    """
    target = record_path(module or built)
    data = built.read_bytes()
    record = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(record))
    os.replace(partial, target)


def damage(module: Path) -> str:
    """What is wrong with the module file, or "" when it may be loaded."""
    try:
        data = module.read_bytes()
    except OSError as error:
        return f"unreadable: {error}"
    try:
        record = json.loads(record_path(module).read_text())
    except FileNotFoundError:
        return _elf_damage(data)
    except (OSError, ValueError) as error:
        return f"its record {record_path(module)} is unreadable ({error})"
    if record.get("size") != len(data):
        return f"{len(data)} bytes where the build wrote {record.get('size')}"
    if record.get("sha256") != hashlib.sha256(data).hexdigest():
        return "its content differs from what the build wrote (SHA-256)"
    return ""


def _elf_damage(data: bytes) -> str:
    """"" when ``data`` is a whole 64-bit little-endian ELF file, else what is wrong."""
    if data[:4] != b"\x7fELF":
        return "not an ELF shared object"
    if len(data) < 64 or data[4] != 2 or data[5] != 1:
        return "not a complete 64-bit little-endian ELF header"
    (phoff, shoff) = struct.unpack_from("<QQ", data, 32)
    (phentsize, phnum, shentsize, shnum) = struct.unpack_from("<HHHH", data, 54)
    ends = [phoff + phentsize * phnum, shoff + shentsize * shnum]
    if ends[0] > len(data):
        return f"cut short: {len(data)} bytes, its program headers end at {ends[0]}"
    for index in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + index * phentsize)
        if p_type != 0:  # PT_NULL describes nothing
            ends.append(p_offset + p_filesz)
    if max(ends) > len(data):
        return f"cut short: {len(data)} bytes, its contents reach {max(ends)}"
    return ""


def usable_build(module: Path, root: Path, key: str) -> bool:
    """True when the existing ``module`` may be loaded; False when it was damaged and removed.

    Args:
        module: an existing module file under ``root``.
        root: its build folder (the package's prebuilt folder, or a build root).
        key: its build key (the lock and the folder are named after it).

    Raises:
        ImportError: it is damaged and cannot be removed here; the message
            says what to delete (or to reinstall, for a module the package
            was installed with).
    """
    problem = damage(module)
    if not problem:
        return True
    if root.resolve() == _INSTALLED_ROOT:
        raise ImportError(f"custom_op: the module installed with the package, {module}, is "
                          f"damaged ({problem}). Reinstall custom_op "
                          "(pip install --force-reinstall --no-deps <the same wheel or source>).")
    try:
        _remove_if_still_damaged(module, root, key)
    except OSError as error:
        raise ImportError(f"custom_op: the build {module} is damaged ({problem}) and cannot be "
                          f"removed ({error}). Delete its folder: rm -r '{module.parent}' "
                          "(or run python -m custom_op.build where the folder is writable); "
                          "the next call builds it again.") from error
    print(f"custom_op [pid {os.getpid()}]: removed a damaged build {module} ({problem}); "
          "building it again", file=sys.stderr, flush=True)
    return False


def _remove_if_still_damaged(module: Path, root: Path, key: str) -> None:
    # Under the build's lock: another process may have removed it and built a
    # good one since we looked, and that one must stay.
    import filelock

    with filelock.FileLock(str(root / f"{key}.lock")):
        if module.exists() and damage(module):
            record_path(module).unlink(missing_ok=True)
            module.unlink()
