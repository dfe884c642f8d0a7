"""A real browser for the HTML reports: Debian's headless Chromium and a small PNG reader."""

from __future__ import annotations

import shutil
import struct
import zlib

import pytest

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--enable-logging=stderr", "--v=0", "--window-size=1100,700", "--hide-scrollbars",
]  # fmt: skip


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("needs Debian's chromium (apt-get install -y chromium)")
    return found


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered rows (RGB or RGBA bytes) of an 8-bit PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, idat, header = 8, b"", b""
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind, body = data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        offset += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6)
    step = 3 if colour == 2 else 4
    raw, stride, rows, previous = zlib.decompress(idat), width * step, [], bytes(width * step)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for x in range(stride):
            left = line[x - step] if x >= step else 0
            up, corner = previous[x], previous[x - step] if x >= step else 0
            if kind == 1:
                line[x] = (line[x] + left) & 255
            elif kind == 2:
                line[x] = (line[x] + up) & 255
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[x] = (line[x] + pred) & 255
        rows.append(bytes(line))
        previous = bytes(line)
    return width, height, rows


def count_colour(data: bytes, rgb: tuple[int, int, int]) -> int:
    """How many pixels of the PNG ``data`` have exactly this colour."""
    _, _, rows = png_pixels(data)
    step = len(rows[0]) // png_pixels_width(data)
    return sum(1 for row in rows for i in range(0, len(row), step) if tuple(row[i : i + 3]) == rgb)


def png_pixels_width(data: bytes) -> int:
    (width,) = struct.unpack(">I", data[16:20])
    return int(width)
