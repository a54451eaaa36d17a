"""The registered operators (torch.ops.custom_op_jpeg.*) and torch.compile.

- ``torch.library.opcheck`` checks each operator's schema, its fake kernel
  (shapes, strides, the data-dependent channel count of "unchanged") and its
  behaviour under AOT dispatch with dynamic shapes.
- A function that takes a file's bytes as a uint8 tensor, decodes a window,
  converts and normalises compiles with ``fullgraph=True`` and equals eager.
- 50 random windows (and output sizes) share one graph with ``dynamic=True``
  and at most two without (automatic dynamic), under ``fullgraph=True``: the
  window's ints stay symbolic and the kernel chooses the DCT scale.
- Errors keep their Python types and messages through the operator, eager and
  compiled: JpegDecodeError, ValueError, TypeError, MemoryError.
- NormalizeBatch compiles with fullgraph; an EncodedJpeg refuses size queries
  and torch.compile with one message that says what to do.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms.v2 import functional as F

import custom_op
from custom_op import EncodedJpeg
from custom_op.transforms import NormalizeBatch

_REPO = pathlib.Path(__file__).resolve().parent.parent
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
#: Files for every channel count "unchanged" gives: 3 (colour), 1 (gray), 4 (CMYK).
FILES = {"rgb": "420-prog-q100-257x256", "gray": "gray-base-q50-7x13",
         "cmyk": "cmyk-444-base-q75-57x91"}
#: The mode codes of the kernels (custom_op._decode._single.MODES).
MODE_CODES = {"rgb": 0, "gray": 1, "unchanged": 2}
LIMITS = (1 << 28, 256)  # max_pixels, max_scans


@pytest.fixture(scope="module")
def tensors(corpus_by_id) -> dict[str, torch.Tensor]:
    return {name: torch.frombuffer(bytearray(corpus_by_id[case].data), dtype=torch.uint8)
            for name, case in FILES.items()}


def _window(data: torch.Tensor) -> tuple[int, int, int, int]:
    height, width, _ = custom_op.jpeg_size(data)
    return height // 4, width // 4, max(1, height // 2), max(1, width // 2)


@pytest.mark.parametrize(("file", "mode", "contiguous"), [
    ("rgb", "rgb", False), ("rgb", "gray", True), ("gray", "rgb", True),
    ("cmyk", "unchanged", False), ("cmyk", "unchanged", True), ("gray", "unchanged", False)],
    ids=lambda value: {False: "hwc", True: "chw"}.get(value, value))
def test_opcheck_decode_and_crop_jpeg(tensors, file: str, mode: str, contiguous: bool) -> None:
    data = tensors[file]
    args = (data, *_window(data), MODE_CODES[mode], True, *LIMITS, True, contiguous, 1 << 28)
    torch.library.opcheck(torch.ops.custom_op_jpeg.decode_and_crop_jpeg.default, args)


@pytest.mark.parametrize("contiguous", [False, True], ids=["hwc", "chw"])
@pytest.mark.parametrize("file", list(FILES))
@pytest.mark.parametrize("mode", ["rgb", "unchanged"])
@pytest.mark.parametrize("scale_num", [8, 2, 0], ids=["full", "half", "auto"])
def test_opcheck_decode_and_resized_crop_jpeg(tensors, mode: str, scale_num: int, file: str,
                                              contiguous: bool) -> None:
    """Every channel count, both layouts, full, reduced and kernel-chosen (0) DCT scales."""
    data = tensors[file]
    y, x, height, width = _window(data)
    out = (max(1, height // 3), max(1, width // 3))
    args = (data, y, x, height, width, *out, scale_num, True, MODE_CODES[mode], True, *LIMITS,
            True, contiguous, 1 << 28)
    torch.library.opcheck(torch.ops.custom_op_jpeg.decode_and_resized_crop_jpeg.default, args)


def _crop_and_normalise(data: torch.Tensor, top: int, left: int) -> torch.Tensor:
    crop = custom_op.decode_and_crop_jpeg(data, top, left, 96, 80)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    return (crop.float() / 255 - mean) / std


def test_fullgraph_compile_of_decode_convert_normalise_equals_eager(tensors) -> None:
    """Inductor, as a user compiles; three windows: one graph serves them (ints go symbolic)."""
    torch._dynamo.reset()
    compiled = torch.compile(_crop_and_normalise, fullgraph=True)
    for top, left in [(0, 0), (17, 33), (100, 150)]:
        assert torch.equal(compiled(tensors["rgb"], top, left),
                           _crop_and_normalise(tensors["rgb"], top, left))


@pytest.mark.parametrize("mode", ["gray", "unchanged"])
@pytest.mark.parametrize("contiguous", [False, True], ids=["hwc", "chw"])
def test_fullgraph_compile_of_each_mode_and_layout(tensors, mode: str, contiguous: bool) -> None:
    """The fake kernel's channels and strides let the graph run what eager runs (aot_eager:
    the fake kernels and AOT dispatch, without Inductor's compile time)."""
    def decode_resize_scale(data: torch.Tensor) -> torch.Tensor:
        crop = custom_op.decode_and_crop_jpeg(data, 3, 4, 40, 50, mode=mode, contiguous=contiguous)
        resized = custom_op.decode_and_resized_crop_jpeg(data, 0, 0, 57, 91, (20, 30), mode=mode,
                                                         contiguous=contiguous)
        return crop.float().mean(dim=(1, 2)) + resized.float().mean(dim=(1, 2))

    torch._dynamo.reset()
    compiled = torch.compile(decode_resize_scale, fullgraph=True, backend="aot_eager")
    for file in ("cmyk", "rgb"):
        assert torch.equal(compiled(tensors[file]), decode_resize_scale(tensors[file]))


def _random_windows(count: int, height: int, width: int, seed: int):
    """``count`` random (crop_y, crop_x, crop_height, crop_width, out_height, out_width).

    Sides from 2: torch specializes a size of exactly 1 (its 0/1 rule), so a
    1-pixel side gets a graph of its own, whatever custom_op does.
    """
    rng = np.random.default_rng(seed)
    for _ in range(count):
        crop_height, crop_width = int(rng.integers(2, height + 1)), int(rng.integers(2, width + 1))
        yield (int(rng.integers(0, height - crop_height + 1)),
               int(rng.integers(0, width - crop_width + 1)), crop_height, crop_width,
               int(rng.integers(2, 300)), int(rng.integers(2, 300)))


def _crop_mean(data, crop_y, crop_x, crop_height, crop_width, out_height, out_width):
    return custom_op.decode_and_crop_jpeg(data, crop_y, crop_x, crop_height, crop_width).float().mean()


def _resized_mean(data, crop_y, crop_x, crop_height, crop_width, out_height, out_width):
    resized = custom_op.decode_and_resized_crop_jpeg(data, crop_y, crop_x, crop_height, crop_width,
                                                     (out_height, out_width))
    return resized.float().mean()


@pytest.mark.parametrize("function", [_crop_mean, _resized_mean], ids=["crop", "resized"])
@pytest.mark.parametrize(("dynamic", "most_graphs"), [(True, 1), (None, 2)],
                         ids=["dynamic", "automatic-dynamic"])
def test_random_windows_share_one_graph(tensors, function, dynamic, most_graphs: int) -> None:
    """Issue 24: 10 random windows gave 8 graphs (operator.index fixed each int, the DCT scale
    was chosen in Python) and fullgraph failed on the 9th. Each call also equals eager."""
    data = tensors["rgb"]
    height, width, _ = custom_op.jpeg_size(data)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(function, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    for window in _random_windows(50, height, width, seed=24):
        assert torch.equal(compiled(data, *window), function(data, *window)), window
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= most_graphs


def test_compiled_resize_chooses_the_scale_by_size(tensors) -> None:
    """One graph serves windows decoded at different DCT scales (the kernel chooses), and each
    result is the eager one, so the graph did not freeze the first window's scale."""
    data = tensors["rgb"]
    torch._dynamo.reset()
    compiled = torch.compile(_resized_mean, fullgraph=True, dynamic=True, backend="aot_eager")
    windows = [(0, 0, 256, 256, 30, 30), (0, 0, 64, 64, 30, 30), (0, 0, 200, 200, 150, 150)]
    assert {custom_op._decode._single.choose_scale(w[2], w[3], w[4:], True) for w in windows} == {1, 4, 8}
    for window in windows:
        assert torch.equal(compiled(data, *window), _resized_mean(data, *window)), window


def test_fake_kernel_checks_what_the_kernel_checks(tensors) -> None:
    """A window the kernel refuses without reading the file, the fake refuses too, with the type
    the kernel's error has (ValueError), so tracing fails as running would."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    rest = (0, True, *LIMITS, True, False, 1 << 28)
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(tensors["rgb"])
        with pytest.raises(ValueError, match=r"crop window \(crop_y=-1"):
            torch.ops.custom_op_jpeg.decode_and_crop_jpeg.default(fake, -1, 0, 8, 8, *rest)
        with pytest.raises(ValueError, match="scale_num must be 1..8"):
            torch.ops.custom_op_jpeg.decode_and_resized_crop_jpeg.default(
                fake, 0, 0, 8, 8, 70000, 8, 0, True, *rest)
    with pytest.raises(ValueError, match=r"crop window \(crop_y=-1"):
        torch.ops.custom_op_jpeg.decode_and_crop_jpeg.default(tensors["rgb"], -1, 0, 8, 8, *rest)
    with pytest.raises(ValueError, match="scale_num must be 1..8"):
        torch.ops.custom_op_jpeg.decode_and_resized_crop_jpeg.default(
            tensors["rgb"], 0, 0, 8, 8, 70000, 8, 0, True, *rest)


def test_operators_exist_right_after_import(fresh_process) -> None:
    """Issue 24 item 2: torch.ops.custom_op_jpeg.* raised AttributeError until the first decode."""
    assert fresh_process.lines("after-import") == [
        "custom_op_jpeg::decode_and_crop_jpeg custom_op_jpeg::decode_and_resized_crop_jpeg"]


def _decode_errors(call) -> tuple[type, str]:
    with pytest.raises(Exception) as raised:
        call()
    return raised.type, str(raised.value)


@pytest.mark.parametrize("case", ["truncated", "not-jpeg", "outside", "strict"])
def test_compiled_errors_are_the_eager_ones(tensors, case: str) -> None:
    """The kernel raises the Python exception itself, so a compiled graph gives the type and
    message eager code gives (the Python wrapper's checks run at trace time)."""
    data = {"truncated": tensors["rgb"][: len(tensors["rgb"]) // 2].clone(),
            "not-jpeg": torch.full((200,), 7, dtype=torch.uint8),
            "outside": tensors["gray"], "strict": tensors["rgb"][:-400].clone()}[case]

    def decode(data: torch.Tensor) -> torch.Tensor:
        return custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 9).float() + 1

    torch._dynamo.reset()
    compiled = torch.compile(decode, fullgraph=True, backend="aot_eager")
    eager = _decode_errors(lambda: decode(data))
    assert _decode_errors(lambda: compiled(data)) == eager
    expected = ValueError if case == "outside" else custom_op.JpegDecodeError
    assert eager[0] is expected and eager[1].startswith("decode_and_crop_jpeg(): ")


_BAD_ARGUMENTS = {
    "negative-window": lambda d: custom_op.decode_and_crop_jpeg(d, -1, 0, 8, 8),
    "zero-height": lambda d: custom_op.decode_and_crop_jpeg(d, 0, 0, 0, 8),
    "float-data": lambda d: custom_op.decode_and_crop_jpeg(d.float(), 0, 0, 8, 8),
    "bad-mode": lambda d: custom_op.decode_and_crop_jpeg(d, 0, 0, 8, 8, mode="cmyk"),
    "resized-zero-size": lambda d: custom_op.decode_and_resized_crop_jpeg(d, 0, 0, 8, 8, (0, 4)),
    "resized-float-data": lambda d: custom_op.decode_and_resized_crop_jpeg(d.float(), 0, 0, 8, 8, 4),
    "batch-negative-box": lambda d: custom_op.decode_and_crop_jpeg_batch([d], [(0, -2, 8, 8)], size=4),
    "batch-float-data": lambda d: custom_op.decode_and_crop_jpeg_batch([d.float()], [(0, 0, 8, 8)]),
    "size-of-float-data": lambda d: torch.tensor(custom_op.jpeg_size(d.float())),
    "operator-negative-window": lambda d: torch.ops.custom_op_jpeg.decode_and_crop_jpeg.default(
        d, -1, 0, 8, 8, 0, True, *LIMITS, True, False, 1 << 28),
    "operator-float-data": lambda d: torch.ops.custom_op_jpeg.decode_and_resized_crop_jpeg.default(
        d.float(), 0, 0, 8, 8, 4, 4, 0, True, 0, True, *LIMITS, True, False, 1 << 28),
    "native-batch-bad-mode": lambda d: torch.ops.custom_op_jpeg._decode_batch.default(
        [d], [0, 0, 8, 8], [], 0, 0, 7, True, True, *LIMITS, 1, True, False, 1 << 28, [],
        [])[0][0],
}


@pytest.mark.parametrize("case", list(_BAD_ARGUMENTS))
def test_compiled_argument_errors_are_the_eager_ones(tensors, case: str) -> None:
    """Issue 31 item 10: under fullgraph, a bad argument to a public function raised Dynamo's
    Unsupported ("Observed exception"), one to an operator its TorchRuntimeError; now the
    compiled call raises what eager raises."""
    function = _BAD_ARGUMENTS[case]
    eager = _decode_errors(lambda: function(tensors["rgb"]))
    # The extension's own operators raise tagged RuntimeErrors (custom_op/_core/_native.py
    # gives them their types); the public functions and operators raise the types themselves.
    assert eager[0] in ((RuntimeError,) if case.startswith("native") else (TypeError, ValueError))
    torch._dynamo.reset()
    compiled = torch.compile(function, fullgraph=True, backend="aot_eager")
    assert _decode_errors(lambda: compiled(tensors["rgb"])) == eager


def _run_python(code: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_REPO), str(_REPO / "tests")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env, cwd=_REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


#: One fresh process for the properties that need a process of their own, checked in this
#: order (each section prints a marker line, then its results): the operators right after import,
#: the process's first decode inside a compiled function, then an allocation failure eager and
#: compiled under an address-space limit (last: the limit stays for the rest of the process).
_FRESH_PROCESS = """
import resource, sys, torch, custom_op
print("== after-import")
print(torch.ops.custom_op_jpeg.decode_and_crop_jpeg.default.name(),
      torch.ops.custom_op_jpeg.decode_and_resized_crop_jpeg.default.name())
print("== first-decode")
data = torch.frombuffer(bytearray(open(sys.argv[1], "rb").read()), dtype=torch.uint8)
crop = lambda data: custom_op.decode_and_crop_jpeg(data, 5, 6, 7, 8).float()
out = torch.compile(crop, fullgraph=True, backend="aot_eager")(data)
print("custom_op._C" in sys.modules, torch.equal(out, crop(data)))
print("== out-of-memory", flush=True)
import test_hostile
data = torch.frombuffer(bytearray(test_hostile._flat_progressive(16384, progressive=False)),
                        dtype=torch.uint8)
def decode(data, height, width):
    return custom_op.decode_and_crop_jpeg(data, 0, 0, height, width, max_memory=1 << 40).sum()
compiled = torch.compile(decode, fullgraph=True, backend="aot_eager", dynamic=True)
compiled(data, 8, 8)  # compiled now, under no limit
with open("/proc/self/statm") as statm:
    mapped = int(statm.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (mapped + (256 << 20), resource.RLIM_INFINITY))
for name, call in (("eager", decode), ("compiled", compiled)):
    try:
        call(data, 16384, 16384)  # an 805 MB output
        print(name, "no-error")
    except MemoryError as error:
        print(name, "MemoryError", str(error).split(":")[0])
    except Exception as error:
        print(name, type(error).__name__, str(error).replace(" ", "_")[:200])
"""


@dataclasses.dataclass(frozen=True)
class FreshProcess:
    """What the _FRESH_PROCESS script printed, by section."""

    returncode: int
    stdout: str
    stderr: str

    def lines(self, section: str) -> list[str]:
        """The lines printed after ``== section`` up to the next marker (none if never reached)."""
        lines = self.stdout.splitlines()
        marker = f"== {section}"
        assert marker in lines, (self.stdout, self.stderr[-3000:])
        after = lines[lines.index(marker) + 1:]
        ends = [n for n, line in enumerate(after) if line.startswith("== ")]
        return after[:ends[0]] if ends else after


@pytest.fixture(scope="module")
def fresh_process(corpus_by_id, tmp_path_factory) -> FreshProcess:
    """_FRESH_PROCESS run once in a new interpreter on the rgb file."""
    path = tmp_path_factory.mktemp("fresh_process") / "first.jpg"
    path.write_bytes(corpus_by_id[FILES["rgb"]].data)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_REPO), str(_REPO / "tests")])}
    done = subprocess.run([sys.executable, "-c", _FRESH_PROCESS, str(path)], capture_output=True,
                          text=True, timeout=300, env=env, cwd=_REPO)
    return FreshProcess(done.returncode, done.stdout, done.stderr)


def test_first_decode_of_a_process_may_be_inside_a_compiled_function(fresh_process) -> None:
    """The public operators are defined at import; the first call's kernel loads the extension."""
    assert fresh_process.lines("first-decode") == ["True True"]


def test_import_and_decode_leave_dynamo_unimported() -> None:
    """torch._dynamo takes seconds to import: a process that only decodes must not pay it."""
    assert _run_python("""
import io, sys, torch, custom_op
from PIL import Image
buffer = io.BytesIO()
Image.new("RGB", (16, 16)).save(buffer, format="JPEG")
data = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8)
print("torch._dynamo" in sys.modules)
""") == ["False"]


def test_operator_called_directly_raises_the_api_types(tensors) -> None:
    """torch.ops.custom_op_jpeg.* checks its arguments as the public functions do."""
    crop = torch.ops.custom_op_jpeg.decode_and_crop_jpeg.default
    rest = (0, True, *LIMITS, True, False, 1 << 28)
    with pytest.raises(custom_op.JpegDecodeError, match=r"^decode_and_crop_jpeg\(\): Not a JPEG"):
        crop(torch.zeros(64, dtype=torch.uint8), 0, 0, 1, 1, *rest)
    with pytest.raises(TypeError, match="data must be a uint8 tensor, got Float"):
        crop(torch.zeros(64), 0, 0, 1, 1, *rest)
    with pytest.raises(ValueError, match="mode must be 0 .rgb., 1 .gray. or 2"):
        crop(tensors["rgb"], 0, 0, 1, 1, 5, *rest[1:])
    with pytest.raises(ValueError, match="max_pixels, max_scans and max_memory must be positive"):
        crop(tensors["rgb"], 0, 0, 1, 1, 0, True, 0, 256, True, False, 1 << 28)


def test_operator_releases_the_gil_while_decoding() -> None:
    """This thread runs Python while another thread's operator call decodes: with the GIL held
    for the decode (one C++ call), its first step would come only after the decode."""
    pixels = np.random.default_rng(5).integers(0, 256, (2048, 2048, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=95, progressive=True)
    data = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8)  # loaded, warm
    started, times = threading.Event(), {}

    def decode() -> None:
        times["start"] = time.perf_counter()
        started.set()
        torch.ops.custom_op_jpeg.decode_and_crop_jpeg.default(data, 0, 0, 2048, 2048, 0, True, *LIMITS,
                                                         True, False, 1 << 28)
        times["end"] = time.perf_counter()

    worker = threading.Thread(target=decode)
    worker.start()
    started.wait()
    first_step = time.perf_counter()
    worker.join()
    assert first_step - times["start"] < (times["end"] - times["start"]) / 2


def test_allocation_failure_is_memory_error_through_the_operator(fresh_process) -> None:
    assert fresh_process.returncode == 0, fresh_process.stderr
    assert fresh_process.lines("out-of-memory") == ["eager MemoryError decode_and_crop_jpeg()",
                                                    "compiled MemoryError decode_and_crop_jpeg()"]


def test_normalize_batch_compiles_with_fullgraph() -> None:
    normalize = NormalizeBatch(MEAN, STD)
    batch = torch.randint(0, 256, (2, 3, 16, 12), dtype=torch.uint8)
    torch._dynamo.reset()
    compiled = torch.compile(normalize, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(batch), normalize(batch))


@pytest.mark.parametrize("query", [lambda e: e.shape, lambda e: e.ndim, lambda e: e.size(),
                                   lambda e: e.size(0), lambda e: e.dim(), lambda e: len(e),
                                   lambda e: e.numel()],
                         ids=["shape", "ndim", "size", "size0", "dim", "len", "numel"])
def test_encoded_jpeg_refuses_size_queries(tensors, query) -> None:
    """Third-party code asking an EncodedJpeg for its size fails there, saying what to do."""
    encoded = EncodedJpeg(tensors["rgb"])
    with pytest.raises(TypeError, match=r"^(\.shape|\.ndim|len\(\)|size\(\)|dim\(\)|numel\(\)) "
                                        r"cannot run on an EncodedJpeg: .* Decode it first .*"
                                        r"canvas_size"):
        query(encoded)
    assert encoded.nbytes == len(tensors["rgb"]) and encoded.canvas_size == (257, 256)


def test_resized_crop_of_encoded_jpeg_under_compile_is_one_clear_error(tensors) -> None:
    def crop(image: torch.Tensor) -> torch.Tensor:
        return F.resized_crop(image, 0, 0, 64, 64, [32, 32])

    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"torch.compile cannot take an EncodedJpeg .* decode it "
                                        r"before the compiled function"):
        torch.compile(crop, fullgraph=True, backend="aot_eager")(EncodedJpeg(tensors["rgb"]))
