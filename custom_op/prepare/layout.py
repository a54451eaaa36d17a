"""Where a JPEG's bytes lie outside its pixels: metadata segments, and what follows its end.

``--verify`` compares pixels by decoding; this module lets it compare the rest
of the file without libjpeg, as a second opinion on the rewrite: the
application segments (APPn: Exif, ICC, XMP, MPF) and comments that the copy
must keep, in order, and the bytes after the end-of-image marker, which it
must keep too (prepare_jpeg refuses files that have any, so both sides have
none). The walk follows the marker structure of ITU T.81 annex B: segments
with a length, scans whose entropy-coded data ends at the first marker that is
neither a stuffed byte (FF 00) nor a restart marker (FF D0..D7).
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

_SOI, _EOI, _SOS, _COM, _TEM = 0xD8, 0xD9, 0xDA, 0xFE, 0x01
_APP0, _APP15 = 0xE0, 0xEF
_RST0, _RST7 = 0xD0, 0xD7
# Markers libjpeg writes itself from the colour parameters (JFIF APP0, Adobe APP14) when the
# source's header has none: the copy may add one, whose effect the pixel comparison covers.
_JFIF, _ADOBE = (0xE0, b"JFIF\0"), (0xEE, b"Adobe")
#: A marker inside entropy-coded data: FF then neither 00 (stuffing), RSTn nor FF (fill).
_MARKER_IN_SCAN = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


class Layout(NamedTuple):
    """A JPEG's metadata segments and the bytes after its end-of-image marker."""

    metadata: list[tuple[int, bytes]]  # (marker, payload) of every APPn and COM, in file order
    trailer: bytes


def read_layout(data: bytes) -> Optional[Layout]:
    """The file's Layout; None when its marker structure cannot be followed."""
    if data[:2] != b"\xff\xd8":
        return None
    metadata, position = [], 2
    while position + 1 < len(data):
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte before a marker
            position += 1
            continue
        position += 2
        if marker == _EOI:
            return Layout(metadata, data[position:])
        if marker in (_SOI, _TEM) or _RST0 <= marker <= _RST7:
            continue  # no length field
        if position + 2 > len(data):
            return None
        end = position + int.from_bytes(data[position:position + 2], "big")
        if end > len(data) or end < position + 2:
            return None
        if _APP0 <= marker <= _APP15 or marker == _COM:
            metadata.append((marker, data[position + 2:end]))
        position = end
        if marker == _SOS:
            found = _MARKER_IN_SCAN.search(data, position)
            if found is None:
                return None
            position = found.start()
    return None


def _is(kind: tuple[int, bytes], segment: tuple[int, bytes]) -> bool:
    return segment[0] == kind[0] and segment[1].startswith(kind[1])


def compare(original: bytes, prepared: bytes) -> Optional[str]:
    """Why ``prepared`` does not keep ``original``'s metadata and trailing bytes; None if it does.

    The copy must hold the original's APPn and COM segments, the same bytes
    in the same order, plus at most a JFIF or Adobe marker that libjpeg adds
    for the colour space when the original has none; and the same bytes after
    the end-of-image marker.
    """
    before, after = read_layout(original), read_layout(prepared)
    if before is None or after is None:
        which = "original" if before is None else "prepared file"
        return f"the {which}'s marker structure cannot be followed"
    if before.trailer != after.trailer:
        return (f"the original has {len(before.trailer)} bytes after its end-of-image marker, "
                f"the prepared file {len(after.trailer)}")
    added = [kind for kind in (_JFIF, _ADOBE)
             if not any(_is(kind, segment) for segment in before.metadata)]
    copied = [segment for segment in after.metadata
              if not any(_is(kind, segment) for kind in added)]
    if before.metadata != copied:
        return "the prepared file does not keep the original's metadata segments (APPn, COM)"
    return None
