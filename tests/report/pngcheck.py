#!/usr/bin/env python3
"""Decodes an 8-bit RGB/RGBA PNG with the standard library and says whether it is blank.

Usage: pngcheck.py FILE [MIN_FRACTION]  -> prints "WxH, N colours, F% not background";
exit 0 when at least MIN_FRACTION (default 0.01) of the pixels differ from the corner
pixel and more than 16 colours are used, 1 when blank, 2 when it cannot be read.
"""
import struct
import sys
import zlib


def decode(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG (depth {depth}, colour type {colour}, interlace {interlace})")
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def main():
    path = sys.argv[1]
    need = float(sys.argv[2]) if len(sys.argv) > 2 else 0.01
    try:
        w, h, bpp, rows = decode(path)
    except (OSError, ValueError, zlib.error, TypeError, struct.error) as e:
        print(f"{path}: cannot decode: {e}")
        return 2
    bg = rows[0][:bpp]
    colours, other = set(), 0
    for r in rows:
        for x in range(0, len(r), bpp):
            px = r[x:x + bpp]
            colours.add(px)
            other += px != bg
    frac = other / (w * h)
    print(f"{path}: {w}x{h}, {len(colours)} colours, {100 * frac:.1f}% not background")
    return 0 if frac >= need and len(colours) > 16 else 1


if __name__ == "__main__":
    sys.exit(main())
