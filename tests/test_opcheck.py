"""Every operator of custom_op's namespace passes ``torch.library.opcheck`` (issue 31, item 7).

opcheck checks an operator's schema against what its kernel does (a mutated or aliased
argument must be declared), its fake kernel against the real one (shapes, strides, dtypes),
its autograd registration, and its run under AOT dispatch with dynamic shapes. The cases
are enumerated per operator, and the operators from torch's registry: an operator without
cases fails test_every_registered_operator_has_cases. Each operator whose result a graph can
use also compiles under ``torch.compile(fullgraph=True)`` and gives the eager result.
"""

from __future__ import annotations

import pytest
import torch

import custom_op
from custom_op._core import _native
from custom_op._core._build_config import OPERATOR_NAMESPACE

#: Files for every channel count "unchanged" gives: 3 (colour), 1 (gray), 4 (CMYK).
FILES = {"rgb": "420-prog-q100-257x256", "gray": "gray-base-q50-7x13",
         "cmyk": "cmyk-444-base-q75-57x91", "baseline": "422-base-q100-257x256"}
RGB, GRAY, UNCHANGED = 0, 1, 2
LIMITS = (1 << 28, 256)  # max_pixels, max_scans
MEMORY = 1 << 28


@pytest.fixture(scope="module")
def files(corpus_by_id) -> dict[str, torch.Tensor]:
    tensors = {name: torch.frombuffer(bytearray(corpus_by_id[case].data), dtype=torch.uint8)
               for name, case in FILES.items()}
    tensors["restarts"] = torch.frombuffer(bytearray(custom_op.prepare_jpeg(tensors["rgb"])),
                                           dtype=torch.uint8)
    tensors["truncated"] = tensors["baseline"][: len(tensors["baseline"]) // 2].clone()
    tensors["index"] = torch.frombuffer(bytearray(custom_op.jpeg_index(tensors["baseline"])),
                                        dtype=torch.uint8)
    return tensors


def _batch_args(files, names, boxes, size, mode, contiguous, hflips, indexes):
    """The arguments the batch operators share, before ``out`` (_decode_batch_into only).
    ``indexes`` names a file's index per image, or "" for none (an empty tensor)."""
    datas = [files[name] for name in names]
    flat = [value for box in boxes for value in box]
    scales = [0] * len(datas) if size else []
    index_tensors = [files[name] if name else torch.empty(0, dtype=torch.uint8)
                     for name in indexes]
    return ([datas, flat, scales, *(size or (0, 0)), mode, True, True, *LIMITS, 2, True],
            [contiguous, MEMORY, hflips, index_tensors])


def _batch(files, names, boxes, size, mode, contiguous, hflips=(), indexes=()):
    head, tail = _batch_args(files, names, boxes, size, mode, contiguous, list(hflips), indexes)
    return (*head, *tail)


def _batch_into(files, names, boxes, size, mode, contiguous, hflips=(), indexes=()):
    head, tail = _batch_args(files, names, boxes, size, mode, contiguous, list(hflips), indexes)
    channels = 3 if mode == RGB else 1
    out = torch.empty((len(names), channels, *size), dtype=torch.uint8,
                      memory_format=torch.contiguous_format if contiguous else torch.channels_last)
    return (*head, out, *tail)


_WINDOWS = [(3, 5, 40, 60), (0, 0, 7, 13)]
#: operator name -> {case id: function of the files fixture giving the arguments}.
CASES = {
    "decode_and_crop_jpeg": {
        **{f"{mode}-{layout}": (lambda f, m=code, c=contiguous: (
            f["cmyk"], 3, 5, 40, 50, m, True, *LIMITS, True, c, MEMORY))
           for mode, code in (("rgb", RGB), ("unchanged", UNCHANGED))
           for layout, contiguous in (("hwc", False), ("chw", True))},
        "indexed": lambda f: (f["baseline"], 150, 5, 40, 50, RGB, True, *LIMITS, True, False,
                              MEMORY, f["index"])},
    "decode_and_resized_crop_jpeg": {
        **{f"scale{scale}": (lambda f, s=scale: (
            f["rgb"], 10, 20, 200, 180, 50, 40, s, True, RGB, True, *LIMITS, True, False, MEMORY))
           for scale in (8, 2, 0)},
        "indexed": lambda f: (f["baseline"], 150, 20, 60, 180, 50, 40, 0, True, RGB, True,
                              *LIMITS, True, False, MEMORY, f["index"])},
    "_decode_and_crop_jpeg": {
        f"{file}-{mode}-{layout}": (lambda f, n=file, m=code, c=contiguous: (
            f[n], 1, 2, 5, 9, m, True, *LIMITS, True, True, c, MEMORY))
        for file in ("rgb", "gray", "cmyk")
        for mode, code in (("rgb", RGB), ("gray", GRAY), ("unchanged", UNCHANGED))
        for layout, contiguous in (("hwc", False), ("chw", True))},
    "_decode_and_resized_crop_jpeg": {
        f"{file}-{mode}-scale{scale}-{layout}": (lambda f, n=file, m=code, s=scale, c=contiguous: (
            f[n], 0, 0, 50, 90, 20, 30, s, True, m, True, *LIMITS, True, c, MEMORY))
        for file in ("rgb", "cmyk")
        for mode, code in (("rgb", RGB), ("unchanged", UNCHANGED))
        for scale in (8, 4, 0)
        for layout, contiguous in (("hwc", False), ("chw", True))},
    "_decode_box_resized": {
        f"{mode}-{layout}": (lambda f, m=code, c=contiguous: (
            f["rgb"], 8, 16, 160, 160, [1.5, 2.25, 150.0, 140.5], 30, 28, 2, True, m, True,
            *LIMITS, True, c, MEMORY))
        for mode, code in (("rgb", RGB), ("gray", GRAY), ("unchanged", UNCHANGED))
        for layout, contiguous in (("hwc", False), ("chw", True))},
    "_decode_grid_crop": {
        f"{mode}-{layout}": (lambda f, m=code, c=contiguous: (
            f["rgb"], 128, 120, 10, 12, 40, 50, True, m, True, *LIMITS, True, c, MEMORY))
        for mode, code in (("rgb", RGB), ("unchanged", UNCHANGED))
        for layout, contiguous in (("hwc", False), ("chw", True))},
    "_decode_batch": {
        **{f"crop-{mode}-{layout}": (lambda f, m=code, c=contiguous: _batch(
            f, ["rgb", "gray"], _WINDOWS, None, m, c))
           for mode, code in (("rgb", RGB), ("gray", GRAY), ("unchanged", UNCHANGED))
           for layout, contiguous in (("hwc", False), ("chw", True))},
        **{f"resize-{mode}-{layout}": (lambda f, m=code, c=contiguous: _batch(
            f, ["rgb", "cmyk"], [(3, 5, 40, 60), (0, 0, 57, 91)], (24, 20), m, c))
           for mode, code in (("rgb", RGB), ("unchanged", UNCHANGED))
           for layout, contiguous in (("hwc", False), ("chw", True))},
        "hflips": lambda f: _batch(f, ["rgb", "baseline"], [(3, 5, 40, 60)] * 2, (16, 16), RGB,
                                   False, [1, 0]),
        "bad-file": lambda f: _batch(f, ["rgb", "truncated"], [(3, 5, 40, 60)] * 2, None, RGB,
                                     False),
        "window-outside": lambda f: _batch(f, ["rgb", "gray"], [(3, 5, 40, 60)] * 2, (8, 8), GRAY,
                                           True),
        "indexed": lambda f: _batch(f, ["baseline", "rgb"], [(150, 5, 40, 50)] * 2, None, RGB,
                                    False, indexes=["index", ""]),
        "foreign-index": lambda f: _batch(f, ["gray", "baseline"], [(3, 2, 4, 8), (150, 5, 40, 50)],
                                          (8, 8), RGB, True, indexes=["index", "index"]),
    },
    "_decode_batch_into": {
        **{f"{mode}-{layout}": (lambda f, m=code, c=contiguous: _batch_into(
            f, ["rgb", "gray", "cmyk"], [(3, 5, 40, 60), (0, 0, 7, 13), (1, 1, 50, 50)],
            (24, 20), m, c))
           for mode, code in (("rgb", RGB), ("gray", GRAY))
           for layout, contiguous in (("nhwc", False), ("nchw", True))},
        "hflips": lambda f: _batch_into(f, ["rgb", "baseline"], [(3, 5, 40, 60)] * 2, (16, 16),
                                        RGB, False, [0, 1]),
        "bad-file": lambda f: _batch_into(f, ["truncated", "rgb"], [(3, 5, 40, 60)] * 2, (8, 8),
                                          RGB, True),
        "indexed": lambda f: _batch_into(f, ["rgb", "baseline"], [(3, 5, 40, 60), (150, 5, 40, 50)],
                                         (16, 16), RGB, False, indexes=["", "index"]),
    },
    "_jpeg_size": {name: (lambda f, n=name: (f[n], LIMITS[0])) for name in ("rgb", "gray", "cmyk")},
    "_jpeg_sizes": {"three": lambda f: ([f["rgb"], f["gray"], f["cmyk"]], LIMITS[0]),
                    "unreadable": lambda f: ([f["rgb"], torch.zeros(16, dtype=torch.uint8)],
                                             LIMITS[0])},
    "_restart_geometry": {name: (lambda f, n=name: (f[n],)) for name in ("rgb", "restarts")},
    "_prepare_jpeg": {name: (lambda f, n=name: (f[n], *LIMITS, 64, MEMORY))
                      for name in ("rgb", "baseline")},
    "_intra_op_threads_in_batch": {f"threads{n}": (lambda f, n=n: (n,)) for n in (1, 2)},
    "_jpeg_index": {name: (lambda f, n=name: (f[n],))
                    for name in ("baseline", "gray", "rgb", "restarts")},
    "_index_stats": {"counts": lambda f: ()},
    # Raises when given an error type (tests/test_compile.py); without one, zeros of the shape.
    "_argument_error": {"no-error": lambda f: ("", "", [2, 3])},
}


def _registered_operators() -> set[str]:
    _native.ops()  # loaded: its operators registered
    prefix = f"{OPERATOR_NAMESPACE}::"
    return {name[len(prefix):].split(".")[0] for name in torch._C._dispatch_get_all_op_names()
            if name.startswith(prefix)}


def test_every_registered_operator_has_cases() -> None:
    assert _registered_operators() == set(CASES)


@pytest.mark.parametrize(("name", "case"), [(name, case) for name, cases in CASES.items()
                                            for case in cases])
def test_opcheck(files, name: str, case: str) -> None:
    operator = getattr(getattr(torch.ops, OPERATOR_NAMESPACE), name).default
    torch.library.opcheck(operator, CASES[name][case](files))


def _ns():
    return getattr(torch.ops, OPERATOR_NAMESPACE)


#: Operators whose results a graph can use, each in a function torch.compile traces whole: the
#: batch both ways (its outcomes come out of the graph as tensors), the box and grid decodes,
#: and the header read whose sizes are unbacked in the graph. Not prepare (bytes for a file),
#: the thread probe (a test's) or _argument_error (raised by the public functions' graphs).
COMPILED = {
    "_decode_batch": lambda f: _ns()._decode_batch.default(
        *_batch(f, ["rgb", "truncated"], _WINDOWS, (16, 12), RGB, False, [1, 0])),
    "_decode_batch_into": lambda f: _ns()._decode_batch_into.default(
        *_batch_into(f, ["rgb", "gray"], _WINDOWS, (16, 12), GRAY, True)),
    "_decode_box_resized": lambda f: _ns()._decode_box_resized.default(
        *CASES["_decode_box_resized"]["rgb-hwc"](f)).float().mean(),
    "_decode_grid_crop": lambda f: _ns()._decode_grid_crop.default(
        *CASES["_decode_grid_crop"]["unchanged-chw"](f)).float().mean(),
    "_jpeg_size": lambda f: torch.stack([f["rgb"][:1] * 0 + side
                                         for side in _ns()._jpeg_size.default(f["rgb"], LIMITS[0])]),
}


@pytest.mark.parametrize("name", list(COMPILED))
def test_operator_compiles_with_fullgraph(files, name: str) -> None:
    def traced(data: torch.Tensor):
        return COMPILED[name]({**files, "rgb": data})

    torch._dynamo.reset()
    compiled = torch.compile(traced, fullgraph=True, backend="aot_eager")
    got, expected = compiled(files["rgb"]), traced(files["rgb"])
    assert len(torch.utils._pytree.tree_leaves(got)) == len(torch.utils._pytree.tree_leaves(expected))
    assert all(torch.equal(a, b) for a, b in zip(torch.utils._pytree.tree_leaves(got),
                                                 torch.utils._pytree.tree_leaves(expected)))
