"""An index= argument is checked before its entries are allocated: a sealed (well
checksummed) index whose header claims more entries than max_memory holds is refused (the
ordinary decode runs, counted as refused) without the process growing by what the entries
would take; a real index still serves the decode under the same max_memory."""

from __future__ import annotations

import json
import pathlib
import struct
import subprocess
import sys

import custom_op
from synthetic import photo_jpeg

_MASK = (1 << 64) - 1
_PRIME = 0x00000100000001B3
_BASIS = 0xCBF29CE484222325


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK


def _file_hash(data: bytes) -> int:
    """The index's checksum as csrc/mcu_index.h specifies it (eight FNV-1a lanes over
    little-endian words, folded, the tail bytes, an avalanche), written from that text."""
    lanes = [_BASIS ^ ((0x9E3779B97F4A7C15 * k) & _MASK) for k in range(8)]
    whole = len(data) // 64 * 64
    words = struct.unpack_from(f"<{whole // 8}Q", data)
    for i in range(0, len(words), 8):
        for k in range(8):
            lanes[k] = _rotl(((lanes[k] ^ words[i + k]) * _PRIME) & _MASK, 29)
    value = _BASIS ^ len(data)
    for lane in lanes:
        value = _rotl(((value ^ lane) * _PRIME) & _MASK, 31)
    for byte in data[whole:]:
        value = ((value ^ byte) * _PRIME) & _MASK
    for multiplier in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        value ^= value >> 33
        value = (value * multiplier) & _MASK
    return value ^ (value >> 33)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _sealed(body: bytes) -> bytes:
    return body + _file_hash(body).to_bytes(8, "little")


def _huge_index() -> bytes:
    """A sealed index of the largest grid an image can have (one component, 65535 x 65535,
    an entry every two MCUs), with a stream just long enough for that many entries: its
    entries would take about 400 MB."""
    entries = 8192 * 4096
    header = (b"CJMI\x03" + _varint(1 << 40) + bytes(8) + _varint(65535) + _varint(65535)
              + b"\x01\x11" + _varint(8192) + _varint(8192) + _varint(2) + _varint(600))
    return _sealed(header + bytes((entries - 1) * 2 // 8 + 1))


def test_the_checksum_written_from_the_spec_seals_like_the_core() -> None:
    index = custom_op.jpeg_index(photo_jpeg(160, 120, seed=44, index=0))
    assert _sealed(index[:-8]) == index


_CHILD = """
import json, resource, sys, torch, custom_op
data, huge = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
huge = torch.frombuffer(bytearray(huge), dtype=torch.uint8)
window = (96, 8, 48, 100)
expected = custom_op.decode_and_crop_jpeg(data, *window, max_memory=64 << 20)
before_stats = custom_op.index_stats()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
results = {}
for name, limit in (("64M", 64 << 20), ("default", None)):
    options = {} if limit is None else {"max_memory": limit}
    got = custom_op.decode_and_crop_jpeg(data, *window, index=huge, **options)
    results[name] = bool(torch.equal(got, expected))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
stats = custom_op.index_stats()
real = custom_op.jpeg_index(data)
indexed = custom_op.index_stats()["indexed"]
served = custom_op.decode_and_crop_jpeg(data, *window, index=real, max_memory=64 << 20)
print(json.dumps({"grown_kib": after - before, "same": results,
                  "refused": stats["refused"] - before_stats["refused"],
                  "real_indexed": custom_op.index_stats()["indexed"] - indexed,
                  "real_same": bool(torch.equal(served, expected))}))
"""


def test_a_huge_sealed_index_is_refused_without_allocating_its_entries(tmp_path) -> None:
    jpeg, index = tmp_path / "photo.jpg", tmp_path / "huge.cjmi"
    jpeg.write_bytes(photo_jpeg(160, 120, seed=44, index=1))
    index.write_bytes(_huge_index())
    run = subprocess.run([sys.executable, "-c", _CHILD, str(jpeg), str(index)],
                         capture_output=True, text=True, timeout=300,
                         cwd=pathlib.Path(__file__).parents[1])
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["grown_kib"] < 64 << 10, result  # the entries would take ~400 MB
    assert result["same"] == {"64M": True, "default": True}
    assert result["refused"] == 2
    assert result["real_indexed"] == 1 and result["real_same"]
