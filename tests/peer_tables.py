#!/usr/bin/env python3
"""peer_tables.py SOURCE_DIR — bench/peer/join_tables.py, which makes the
speed issue's ratio table, on two small made-up tables in gpu_train_step's
and bench/peer's formats: each ratio is ours over the right PyTorch cell,
the best mode is named, a cell PyTorch did not run (eager) shows "-"
rather than a number or nan, a failed cell of ours says so, and amp's "at least own fp32/tf32" column compares with our own rows.
Prints each mismatch and exits 1; exits 0 when the table is right."""
import os, subprocess, sys, tempfile

source = sys.argv[1]
OURS = """| model | precision | batch | ms/step | images/s | device MiB | TFLOP/s | share of bf16 GEMM | loss first -> last | arena MiB |
|---|---|---|---|---|---|---|---|---|---|
| netA | fp32 | 128 | 2.0 | 1000 | 500 | 1 | 1.0% | 2 -> 1 | 400 |
| netA | amp-bf16 | 128 | 1.0 | 3000 | 400 | 1 | 2.0% | 2 -> 1 | 300 |
| netB | amp-bf16 | 512 | 1.0 | 6000 | 900 | 1 | 3.0% | 2 -> 1 | 800 |
| netC | amp-bf16 | 64 | failed | | | | | | |
"""
PEER = """| model | precision | batch | mode | ms/step | images/s | device MiB | TFLOP/s | share of bf16 GEMM | loss first -> last | optimizer | compile + warm-up s |
|---|---|---|---|---|---|---|---|---|---|---|---|
| netA | amp-bf16 | 128 | eager | 1 | 1500 | 800 | 1 | 1% | 2 -> 1 | fused | 0 |
| netA | amp-bf16 | 128 | reduce-overhead | 1 | 2000 | 900 | 1 | 1% | 2 -> 1 | fused | 50 |
| netB | amp-bf16 | 512 | reduce-overhead | 1 | 5000 | 1000 | 1 | 1% | 2 -> 1 | fused | 50 |
"""

with tempfile.TemporaryDirectory() as d:
    paths = []
    for name, text in (("ours.md", OURS), ("peer.md", PEER)):
        paths.append(os.path.join(d, name))
        with open(paths[-1], "w") as f:
            f.write(text)
    out = subprocess.run([sys.executable, os.path.join(source, "bench/peer/join_tables.py"), *paths],
                         capture_output=True, text=True, check=True).stdout

rows = {}
for line in out.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if cells[0] == "model":
        header = cells
    elif not cells[0].startswith("---"):
        rows[(cells[0], cells[1])] = dict(zip(header, cells))

expect = {
    ("netA", "amp-bf16"): {"PyTorch eager": "1500", "PyTorch reduce-overhead": "2000", "vs eager": "2.00x",
                           "vs best PyTorch": "1.50x reduce-overhead", "eager MiB": "800", "memory ratio": "0.50",
                           "amp >= own fp32/tf32": "yes"},
    ("netB", "amp-bf16"): {"PyTorch eager": "-", "vs eager": "-", "vs best PyTorch": "1.20x reduce-overhead",
                           "eager MiB": "-", "memory ratio": "-"},
    ("netC", "amp-bf16"): {"ours images/s": "failed"},
}
bad = []
for key, want in expect.items():
    got = rows.get(key)
    if got is None:
        bad.append(f"no row for {key}")
        continue
    bad += [f"{key} {col}: {got.get(col)!r}, expected {v!r}" for col, v in want.items() if got.get(col) != v]
if "nan" in out:
    bad.append("a cell reads nan")
for b in bad:
    print("peer_tables:", b)
print(out if bad else f"peer_tables: {len(expect)} rows as expected")
sys.exit(1 if bad else 0)
