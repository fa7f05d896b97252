"""make_npy.py DIR N: DIR/x.npy, N images of 1x8x8 (uint8, NCHW), and DIR/y.npy, their N labels (int64, 0-9),
for the CLI tests' npy: data (standard library only)."""
import os
import struct
import sys


def npy(path, descr, shape, body):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * (-(11 + len(h)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + body)


d, n = sys.argv[1], int(sys.argv[2])
npy(os.path.join(d, "x.npy"), "|u1", "(%d, 1, 8, 8)" % n, bytes(i % 251 for i in range(n * 64)))
npy(os.path.join(d, "y.npy"), "<i8", "(%d,)" % n, struct.pack("<%dq" % n, *[i % 10 for i in range(n)]))
