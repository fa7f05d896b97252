#!/usr/bin/env python3
"""join_tables.py — put gpu_train_step's table beside its PyTorch peer's:
one row per (model, precision, batch) with our images/s and device MiB,
PyTorch's images/s in each mode it was run in (eager, compile,
reduce-overhead), the speed ratio against PyTorch eager and against the
fastest PyTorch mode, the memory ratio against eager, our share of the bf16
GEMM rate, and whether our amp-* cells are at least as fast as our own fp32
and tf32 at the same batch. Reads tables with or without the peer's mode
column (without: every row is eager)."""
import sys

MODES = ("eager", "compile", "reduce-overhead")


def read(path):
    """{(model, precision, batch, mode): (images/s, MiB, share) or None}"""
    rows, header = {}, None
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 6 or cells[0].startswith("---"):
            continue
        if cells[0] == "model":
            header = cells
            continue
        if header is None:
            continue
        col = {name: i for i, name in enumerate(header)}
        mode = cells[col["mode"]] if "mode" in col else "eager"
        try:
            key = (cells[0], cells[1], int(cells[2]), mode)
        except ValueError:
            continue
        try:
            share = cells[col["share of bf16 GEMM"]] if "share of bf16 GEMM" in col else ""
            rows[key] = (float(cells[col["images/s"]]), float(cells[col["device MiB"]]), share)
        except (ValueError, IndexError):
            rows[key] = None
    return rows


def ratio(a, b):
    return f"{a / b:.2f}x" if b else "-"


def main():
    ours, peer = read(sys.argv[1]), read(sys.argv[2])
    modes = [m for m in MODES if any(k[3] == m and v for k, v in peer.items())]
    print("| model | precision | batch | ours images/s | " + " | ".join(f"PyTorch {m}" for m in modes)
          + " | vs eager | vs best PyTorch | ours share of bf16 GEMM | ours MiB | eager MiB | memory ratio | amp >= own fp32/tf32 |")
    print("|---|---|---|---|" + "---|" * len(modes) + "---|---|---|---|---|---|---|")
    for key in sorted(ours, key=lambda k: (k[0], k[2], k[1])):
        model, prec, batch, _ = key
        o = ours[key]
        theirs = {m: peer.get((model, prec, batch, m)) for m in modes}
        cols = " | ".join(f"{theirs[m][0]:.0f}" if theirs[m] else "-" for m in modes)
        if o is None:
            print(f"| {model} | {prec} | {batch} | failed | {cols} | | | | | | | |")
            continue
        own = ""
        if prec.startswith("amp-"):
            base = [ours.get((model, b, batch, "eager")) for b in ("fp32", "tf32")]
            base = [b[0] for b in base if b]
            own = ("yes" if o[0] >= max(base) else "NO") if base else ""
        eager = theirs.get("eager")
        best = max((v[0] for v in theirs.values() if v), default=0)
        best_mode = next((m for m in modes if theirs[m] and theirs[m][0] == best), "")
        eager_mib = f"{eager[1]:.0f}" if eager else "-"  # eager not run: no memory to compare against
        mem = f"{o[1] / eager[1]:.2f}" if eager and eager[1] else "-"
        print(f"| {model} | {prec} | {batch} | {o[0]:.0f} | {cols} | {ratio(o[0], eager[0]) if eager else '-'} | "
              f"{ratio(o[0], best)} {best_mode} | {o[2]} | {o[1]:.0f} | {eager_mib} | {mem} | {own} |")


if __name__ == "__main__":
    main()
