"""make_npy.py DIR N [C]: DIR/x.npy, N images of Cx8x8 (uint8, NCHW; C 1 unless given), and DIR/y.npy, their N
labels (int64, 0-9), for the CLI tests' npy: data (standard library only)."""
import os
import struct
import sys


def npy(path, descr, shape, body):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * (-(11 + len(h)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + body)


d, n = sys.argv[1], int(sys.argv[2])
c = int(sys.argv[3]) if len(sys.argv) > 3 else 1
npy(os.path.join(d, "x.npy"), "|u1", "(%d, %d, 8, 8)" % (n, c), bytes(i % 251 for i in range(n * c * 64)))
npy(os.path.join(d, "y.npy"), "<i8", "(%d,)" % n, struct.pack("<%dq" % n, *[i % 10 for i in range(n)]))
