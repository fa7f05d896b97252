#!/usr/bin/env python3
"""torch_cpu_step.py — the PyTorch CPU peer of bench/cpu_train_step: the same
cnn10 (bench/peer/torch_train_step.py's definition) trained the way a careful
PyTorch user would on a CPU: eager mode, channels_last, SGD with momentum 0.9,
synthetic data (default 1x28x28, batch 128, 10 classes), fp32 and
torch.autocast("cpu", dtype=torch.bfloat16) (amp-bf16, no scaler), on all of
the host's threads unless --threads says otherwise. Prints the CPU model and a
table: median ms/step over the timed steps (3 warm-up steps first), images/s
and each precision's speed relative to fp32, as cpu_train_step does.
--profile: 3 more steps under torch.profiler and the CPU ops by self time per
step on stderr (convolution, batch norm, ReLU, ... as in cpu_train_step
--profile).

  python3 bench/peer/torch_cpu_step.py [--model cnn10] [--batch 128] [--shape 1x28x28]
                                       [--precisions fp32,amp-bf16] [--steps 20] [--threads T] [--profile]

Needs only torch (a CPU build is enough); no virtual environment assumed."""
import argparse
import os
import platform
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train_step import MODELS  # noqa: E402  (the same architectures as the GPU peer)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def host_threads():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def onednn_version():
    m = re.search(r"(?:oneDNN\)?|MKL-DNN) (v[0-9.]+)", torch.__config__.show())
    return f"oneDNN {m.group(1)}" if m else "oneDNN version unknown"


def op_kind(name):
    n = name.lower()
    if "conv" in n or "mkldnn_convolution" in n:
        return "convolution"
    if "batch_norm" in n:
        return "batch norm"
    if "relu" in n or "threshold" in n:
        return "relu"
    if "pool" in n:
        return "pooling"
    if "sgd" in n or "add_" in n or "mul_" in n or "foreach" in n:
        return "optimizer / elementwise"
    return "other"


def print_op_profile(title, step, n=3):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            step()
    per = {}
    for e in prof.key_averages():
        if e.self_cpu_time_total > 0:
            per[e.key] = per.get(e.key, 0) + e.self_cpu_time_total / n / 1e3
    print(f"\ntorch profile: {title}, ms per step by op (self CPU time):", file=sys.stderr)
    for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {v:8.2f}  {op_kind(k):24s}  {k[:80]}", file=sys.stderr)
    kinds = {}
    for k, v in per.items():
        kinds[op_kind(k)] = kinds.get(op_kind(k), 0) + v
    total = sum(per.values())
    print("  by kind: " + ", ".join(f"{k} {v:.1f} ({100 * v / total:.1f}%)"
                                    for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
          + f", total {total:.1f} ms", file=sys.stderr)


def run_cell(name, precision, batch, shape, steps, profile):
    c, h, w = shape
    torch.manual_seed(0)
    model = MODELS[name](classes=10, cin=c).to(memory_format=torch.channels_last)
    x = torch.randn(batch, c, h, w).to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if precision not in ("fp32", "amp-bf16"):
        raise SystemExit(f"torch_cpu_step: --precisions: '{precision}' unknown (fp32, amp-bf16)")

    def step():
        opt.zero_grad(set_to_none=True)
        if precision == "amp-bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
        else:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        loss0 = float(step().detach())
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    if profile:
        print_op_profile(f"{name} {precision} batch {batch} {c}x{h}x{w}", step)
    ms = 1e3 * statistics.median(times)
    return ms, batch / (ms / 1e3), loss0, float(loss.detach())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cnn10", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--shape", default="1x28x28", help="CxHxW of the synthetic input")
    ap.add_argument("--precisions", default="fp32,amp-bf16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (default: all of the host's)")
    ap.add_argument("--profile", action="store_true", help="CPU ops per step on stderr")
    a = ap.parse_args()
    try:
        shape = tuple(int(v) for v in a.shape.split("x"))
        assert len(shape) == 3 and min(shape) > 0
    except (ValueError, AssertionError):
        raise SystemExit(f"torch_cpu_step: --shape wants CxHxW, got '{a.shape}'")
    if a.batch < 1 or a.steps < 1:
        raise SystemExit("torch_cpu_step: --batch and --steps must be positive")
    torch.set_num_threads(a.threads if a.threads > 0 else host_threads())
    print(f"torch_cpu_step: {cpu_model()}, {torch.get_num_threads()} threads, PyTorch {torch.__version__} "
          f"({onednn_version()}), median of {a.steps} steps")
    print("\n| what | batch | input | ms/step | images/s | vs fp32 | loss first -> last |")
    print("|---|---|---|---|---|---|---|")
    fp32_ips = None
    for p in a.precisions.split(","):
        ms, ips, l0, l1 = run_cell(a.model, p, a.batch, shape, a.steps, a.profile)
        if p == "fp32":
            fp32_ips = ips
        rel = f"{ips / fp32_ips:.2f}x" if fp32_ips else "-"
        print(f"| PyTorch {a.model} {p} training step | {a.batch} | {a.shape} | {ms:.1f} | {ips:.0f} | {rel} | "
              f"{l0:.3f} -> {l1:.3f} |", flush=True)


if __name__ == "__main__":
    main()
