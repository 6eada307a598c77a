"""Reading PNG files with nothing but struct, zlib and numpy, for the tests of the training curves
(test_plot.py, test_model_card.py): every chunk's CRC, IHDR, the IDAT stream inflated and every
scanline's filter undone (PNG spec, section 9), so that the tests can look at the pixels."""
import struct
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # colour type -> samples per pixel


class PngError(Exception):
    pass


def chunks(data):
    """[(type, body)], every CRC checked."""
    if data[:8] != SIGNATURE:
        raise PngError(f"no PNG signature: {data[:8]!r}")
    out, pos = [], 8
    while pos < len(data):
        if pos + 12 > len(data):
            raise PngError(f"truncated chunk at byte {pos}")
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if len(body) != length:
            raise PngError(f"chunk {kind!r} at byte {pos} is truncated")
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            raise PngError(f"chunk {kind!r} at byte {pos}: bad CRC")
        out.append((kind, body))
        pos += 12 + length
    return out


def _unfilter(raw, height, stride, bpp):
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int64)
    for y in range(height):
        f, line = rows[y, 0], rows[y, 1:].astype(np.int64)
        if f == 0:
            cur = line
        elif f == 1:  # Sub: each byte adds the one bpp to its left; a running sum per channel
            cur = line.copy()
            for c in range(bpp):
                cur[c::bpp] = np.cumsum(line[c::bpp]) & 255
        elif f == 2:  # Up
            cur = (line + prev) & 255
        elif f in (3, 4):  # Average and Paeth depend on the byte just decoded to the left
            cur = line.tolist()
            up = prev.tolist()
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                b = up[i]
                if f == 3:
                    cur[i] = (cur[i] + ((a + b) >> 1)) & 255
                else:
                    c = up[i - bpp] if i >= bpp else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                    cur[i] = (cur[i] + pred) & 255
            cur = np.array(cur, dtype=np.int64)
        else:
            raise PngError(f"row {y}: unknown filter type {f}")
        out[y] = cur
        prev = cur
    return out


def read(path, pixels=True):
    """(width, height, info, image): image is an array [height, width, channels] (None without
    pixels=True); info has the IHDR fields and the size of the inflated data."""
    with open(path, "rb") as f:
        data = f.read()
    cs = chunks(data)
    kinds = [k for k, _ in cs]
    if kinds[0] != b"IHDR" or kinds[-1] != b"IEND" or b"IDAT" not in kinds:
        raise PngError(f"chunk order {kinds[:3]}...{kinds[-2:]}: IHDR first, IDAT, IEND last expected")
    width, height, depth, colour, comp, filt, interlace = struct.unpack(">IIBBBBB", cs[0][1])
    if depth != 8 or colour not in CHANNELS or comp != 0 or filt != 0 or interlace != 0:
        raise PngError(f"unexpected IHDR: depth {depth}, colour type {colour}, interlace {interlace}")
    raw = zlib.decompress(b"".join(b for k, b in cs if k == b"IDAT"))
    bpp = CHANNELS[colour]
    stride = width * bpp
    if len(raw) != height * (stride + 1):
        raise PngError(f"IDAT inflates to {len(raw)} bytes, {height} rows of {stride + 1} expected")
    info = {"depth": depth, "colour": colour, "raw": raw}
    image = _unfilter(raw, height, stride, bpp).reshape(height, width, bpp) if pixels else None
    return width, height, info, image


def count_colour(image, rgb, tol=12):
    """Pixels within tol of rgb in every channel."""
    diff = np.abs(image[:, :, :3].astype(np.int64) - np.array(rgb, dtype=np.int64))
    return int(np.all(diff <= tol, axis=2).sum())
