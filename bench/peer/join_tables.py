#!/usr/bin/env python3
"""join_tables.py — put gpu_train_step's table beside its PyTorch peer's:
one row per (model, precision, batch) with both images/s and device MiB, the
speed ratio (ours / PyTorch) and the memory ratio, and whether our amp-*
cells are at least as fast as our own fp32 and tf32 at the same batch."""
import sys


def read(path):
    rows = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 6 or cells[0] in ("model", "") or cells[0].startswith("---"):
            continue
        try:
            rows[(cells[0], cells[1], int(cells[2]))] = (float(cells[4]), float(cells[5]))
        except ValueError:
            rows[(cells[0], cells[1], int(cells[2]))] = None
    return rows


def main():
    ours, peer = read(sys.argv[1]), read(sys.argv[2])
    print("| model | precision | batch | ours images/s | PyTorch images/s | speed ratio | ours MiB | PyTorch MiB | memory ratio | amp >= own fp32/tf32 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(ours, key=lambda k: (k[0], k[2], k[1])):
        model, prec, batch = key
        o, p = ours[key], peer.get(key)
        if o is None:
            print(f"| {model} | {prec} | {batch} | failed | | | | | | |")
            continue
        own = ""
        if prec.startswith("amp-"):
            base = [ours.get((model, b, batch)) for b in ("fp32", "tf32")]
            base = [b[0] for b in base if b]
            own = "yes" if base and o[0] >= max(base) else "NO"
        if p is None:
            print(f"| {model} | {prec} | {batch} | {o[0]:.0f} | - | - | {o[1]:.0f} | - | - | {own} |")
            continue
        print(f"| {model} | {prec} | {batch} | {o[0]:.0f} | {p[0]:.0f} | {o[0] / p[0]:.2f}x | {o[1]:.0f} | {p[1]:.0f} | "
              f"{o[1] / p[1] if p[1] else float('nan'):.2f} | {own} |")


if __name__ == "__main__":
    main()
