"""A flat gray progressive JPEG of any size and scan count, written byte by byte.

Every block is mid-gray with no AC energy, so the entropy-coded data is tiny:
the DC scan spends one bit per block (one Huffman code of one bit), and each
AC scan covers the whole image with a few end-of-band runs of up to 32767
blocks. A few hundred kilobytes then describe a 100-megapixel image whose
every scan libjpeg walks block by block: the shape of file that makes
decoding cost seconds while its bytes say little (tests/test_scan_work.py).
"""

from __future__ import annotations

import struct

# The AC table codes EOBn (run lengths 2^n .. 2^(n+1) - 1) for n = 0..14, as
# 4-bit codes: 15 symbols 0x00, 0x10, ... 0xE0.
_EOB_SYMBOLS = [n << 4 for n in range(15)]
_MAX_EOB_RUN = 32767


def _segment(marker: int, payload: bytes) -> bytes:
    return struct.pack(">HH", 0xFF00 | marker, len(payload) + 2) + payload


def _huffman_table(table_class: int, counts: list[int], symbols: list[int]) -> bytes:
    lengths = counts + [0] * (16 - len(counts))
    return bytes([table_class << 4 | 0]) + bytes(lengths) + bytes(symbols)


def _scan_header(ss: int, se: int, ah: int, al: int) -> bytes:
    return _segment(0xDA, bytes([1, 1, 0x00, ss, se, ah << 4 | al]))


class _Bits:
    """MSB-first bit writer with JPEG's 0xFF byte stuffing and 1-padding."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.value = 0
        self.count = 0

    def put(self, value: int, length: int) -> None:
        self.value = (self.value << length) | value
        self.count += length
        while self.count >= 8:
            self.count -= 8
            byte = (self.value >> self.count) & 0xFF
            self.out.append(byte)
            if byte == 0xFF:
                self.out.append(0x00)
        self.value &= (1 << self.count) - 1

    def finish(self) -> bytes:
        if self.count:
            self.put((1 << (8 - self.count)) - 1, 8 - self.count)
        return bytes(self.out)


def _eob_runs(blocks: int) -> bytes:
    """An AC scan's data: end-of-band runs covering `blocks` blocks."""
    bits = _Bits()
    left = blocks
    while left:
        run = min(left, _MAX_EOB_RUN)
        n = run.bit_length() - 1
        bits.put(n, 4)  # The symbol EOBn has code n (4 bits, canonical order).
        if n:
            bits.put(run - (1 << n), n)
        left -= run
    return bits.finish()


def flat_progressive(height: int, width: int, ac_scans: int, *, refine: bool = False) -> bytes:
    """A gray progressive JPEG: one DC scan, then `ac_scans` scans of bands 1..63.

    With refine=False every AC scan is a first scan at Al=0, which libjpeg
    accepts again and again without a warning. With refine=True the first AC
    scan is at Al=1 and the others refine it (Ah=1, Al=0): libjpeg warns of a
    bogus progression from the second refinement on (strict=False goes on),
    and walks the 63 coefficients of every block in each, its slowest scan.
    """
    blocks = ((height + 7) // 8) * ((width + 7) // 8)
    quantization = _segment(0xDB, bytes([0]) + bytes([1] * 64))
    frame = _segment(0xC2, struct.pack(">BHHB", 8, height, width, 1) + bytes([1, 0x11, 0]))
    dc_table = _segment(0xC4, _huffman_table(0, [1], [0]))
    ac_table = _segment(0xC4, _huffman_table(1, [0, 0, 0, len(_EOB_SYMBOLS)], _EOB_SYMBOLS))
    dc_data = bytes(blocks // 8) + (bytes([(1 << (8 - blocks % 8)) - 1]) if blocks % 8 else b"")
    parts = [b"\xff\xd8", quantization, frame, dc_table, ac_table, _scan_header(0, 0, 0, 0), dc_data]
    ac_data = _eob_runs(blocks)
    for index in range(ac_scans):
        if refine:
            header = _scan_header(1, 63, 0, 1) if index == 0 else _scan_header(1, 63, 1, 0)
        else:
            header = _scan_header(1, 63, 0, 0)
        parts += [header, ac_data]
    parts.append(b"\xff\xd9")
    return b"".join(parts)
