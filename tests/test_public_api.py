"""The public surface: what ``dir(custom_op)`` shows and how its exception is named."""

from __future__ import annotations

import pickle
import subprocess
import sys
import traceback

import pytest
import torch

import custom_op


def test_dir_lists_the_api_only():
    listed = set(dir(custom_op))
    assert listed == set(custom_op.__all__) | {"__version__"}
    # Helpers of __init__.py and private modules stay out of dir() and tab completion.
    assert not {"Any", "importlib", "_C", "_decode", "_loader", "_LAZY"} & listed


#: What each public name is: a function, a class, or a module, defined inside custom_op.
KINDS = {"decode_and_crop_jpeg": "function", "decode_and_crop_jpeg_batch": "function",
         "decode_and_resized_crop_jpeg": "function", "jpeg_size": "function",
         "libjpeg_version": "function", "prepare_jpeg": "function", "seekable": "function",
         "jpeg_index": "function", "index_stats": "function",
         "configure_index_cache": "function", "index_cache_stats": "function",
         "JpegDecodeError": "class", "EncodedJpeg": "class", "DecodeOptions": "class",
         "JpegFolder": "class", "CocoJpegDetection": "class", "transforms": "module",
         "datasets": "module", "lane": "module"}


def test_every_listed_name_has_a_kind():
    assert set(KINDS) == set(custom_op.__all__)


@pytest.mark.parametrize("name", custom_op.__all__)
def test_every_listed_name_resolves(name):
    import inspect

    value = getattr(custom_op, name)
    kind = KINDS[name]
    if kind == "module":
        assert inspect.ismodule(value) and value.__name__ == f"custom_op.{name}"
        return
    assert (inspect.isclass(value) if kind == "class" else inspect.isfunction(value)), value
    assert value.__name__ == name and value.__module__.startswith("custom_op"), value


def test_private_names_stay_reachable():
    # Tests and the build tools use them by name; hiding them from dir() must not remove them.
    assert callable(custom_op._C.libjpeg_version)


def test_decode_error_is_named_where_it_is_imported_from():
    with pytest.raises(custom_op.JpegDecodeError) as caught:
        custom_op.decode_and_crop_jpeg(torch.frombuffer(bytearray(b"\x89PNG" * 8),
                                                        dtype=torch.uint8), 0, 0, 1, 1)
    last_line = traceback.format_exception_only(caught.type, caught.value)[-1]
    assert last_line.startswith("custom_op.JpegDecodeError: decode_and_crop_jpeg(): "), last_line
    assert custom_op.JpegDecodeError.__module__ == "custom_op"
    # DataLoader workers send it to the main process pickled: it must come back the same class.
    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is custom_op.JpegDecodeError and str(again) == str(caught.value)


def test_the_ray_package_lists_its_step_defined_inside_it():
    """custom_op.ray holds the Ray Data decode step; custom_op's own surface stays without it
    (importing it needs Ray), as custom_op.prepare does."""
    import inspect

    import custom_op.ray

    assert set(custom_op.ray.__all__) == {"JpegDecoder", "decode_batches", "decode_epochs"}
    assert "ray" not in custom_op.__all__
    for name in custom_op.ray.__all__:
        value = getattr(custom_op.ray, name)
        assert (inspect.isclass(value) or inspect.isfunction(value)) and value.__name__ == name
        assert value.__module__.startswith("custom_op.ray."), value.__module__
        assert all(part in value.__doc__ for part in ("Args:", "Raises:", "Example:")), name


_MOVED_TO_LANE = ["BatchLane", "EpochShuffle", "HfRows", "LaneBatchSampler", "ShardLoader", "ShardSet",
                  "lane_dataloader", "lane_threads", "shard_loader"]


@pytest.mark.parametrize("name", _MOVED_TO_LANE)
def test_a_lane_name_under_datasets_warns_and_is_the_lanes_own(name):
    import custom_op.datasets
    import custom_op.lane

    with pytest.warns(DeprecationWarning, match=rf"custom_op\.datasets\.{name} .*custom_op\.lane\.{name}"):
        moved = getattr(custom_op.datasets, name)
    assert moved is getattr(custom_op.lane, name)
    assert name not in custom_op.datasets.__all__ and name in custom_op.lane.__all__


def test_importing_the_sources_imports_neither_the_lane_nor_ray():
    code = ("import sys, custom_op.datasets; "
            "print(sorted(m for m in sys.modules if m.startswith(('custom_op.lane', 'custom_op.ray', 'ray'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
