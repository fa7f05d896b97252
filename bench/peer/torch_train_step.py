#!/usr/bin/env python3
"""torch_train_step.py — the PyTorch peer of bench/gpu/gpu_train_step: the
same architectures (torch_models.py: cnn10, resnet18, resnet50, mobilenetv2,
wrn-28-10) trained the way a careful PyTorch user would on one GPU:
channels_last, cudnn.benchmark, SGD with momentum 0.9 (the fused CUDA kernel
where this PyTorch has it), synthetic CIFAR-shaped data (3x32x32, 10 classes)
kept on the device, in eager mode and under torch.compile (`--modes
eager,compile,reduce-overhead`: Inductor's default mode, and Inductor with
CUDA graphs; the model is compiled, the fused optimizer step is one kernel
either way); fp32 (TF32 off), tf32, amp-fp16 (torch.autocast + GradScaler),
amp-bf16 (autocast, no scaler), fp16 (.half() model, BatchNorm kept fp32, as
Apex's network_to_half), o2-fp16 (half model + fp32 BN + fp32 master copy,
Apex O2 style, GradScaler). Prints the same table as gpu_train_step: median
ms/step from CUDA events, images/s, device memory used by the run
(torch.cuda.mem_get_info difference, allocator cache and cuDNN workspaces
included). --profile: after timing, 3 more steps under torch.profiler, and the
CUDA kernels per step on stderr (top 12, then totals by kind, then the timeline
of kernels, memsets and copies: idle time between them by gap length), to set
beside gpu_train_step --profile and dev/cuda_kernel_trace.c. Each row also
gives the step's FLOPs (counted per convolution and linear layer as
mp_graph_flops counts them) as TFLOP/s and, with --gemm-tflops, as a share of
the bf16 GEMM rate measured in the same call."""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_models import MODELS


def half_keep_bn(model):
    model.half()
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.float()
    return model


def kernel_kind(name):
    n = name.lower()
    if "bn_" in n or "batch_norm" in n or "batchnorm" in n or "welford" in n:
        return "batch norm"
    if "conv" in n or "xmma" in n or "cudnn" in n or "implicit" in n or "sm90" in n or "nhwc" in n:
        return "convolution"
    if "gemm" in n or "cutlass" in n:
        return "gemm"
    return "other"


def kernel_timeline(intervals):
    """(span, busy, idle by gap length) in µs of GPU activity intervals [(start, end)]: the span from the first
    start to the last end, the time something runs, and the idle rest split into gaps <= 2, 2-5, 5-20 and > 20 µs."""
    edges = (2, 5, 20)
    idle = [0.0, 0.0, 0.0, 0.0]
    intervals = sorted(intervals)
    covered = intervals[0][0]
    for start, end in intervals:
        if start > covered:
            gap = start - covered
            idle[sum(gap > e for e in edges)] += gap
        covered = max(covered, end)
    span = covered - intervals[0][0]
    return span, span - sum(idle), idle


def print_kernel_profile(title, step, n=3):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    per = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = e.cuda_time_total
        if t > 0 and e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.key] = per.get(e.key, 0) + t / n / 1e3
    print(f"\ntorch profile: {title}, ms per step by kernel:", file=sys.stderr)
    for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:int(os.environ.get("PEER_PROFILE_TOP", "12"))]:
        print(f"  {v:7.3f}  {kernel_kind(k):11s}  {k[:110]}", file=sys.stderr)
    kinds = {}
    for k, v in per.items():
        kinds[kernel_kind(k)] = kinds.get(kernel_kind(k), 0) + v
    print("  by kind: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
          + f", total {sum(per.values()):.2f} ms", file=sys.stderr)
    # kernels, memsets and copies, as dev/cuda_kernel_trace.c records ours (all three count as running)
    spans = [(e.time_range.start, e.time_range.end) for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start]
    if spans:
        span, busy, idle = kernel_timeline(spans)
        print(f"  timeline over the {n} steps, per step: span {span / n / 1e3:.3f} ms, some kernel running "
              f"{busy / n / 1e3:.3f}, idle {(span - busy) / n / 1e3:.3f} by gap length <= 2 us "
              f"{idle[0] / n / 1e3:.3f}, 2-5 us {idle[1] / n / 1e3:.3f}, 5-20 us {idle[2] / n / 1e3:.3f}, > 20 us "
              f"{idle[3] / n / 1e3:.3f} (the gaps between the {n} steps spread over them)", file=sys.stderr)


def make_sgd(params):
    """SGD with momentum 0.9, PyTorch's fused CUDA kernel where it has one."""
    try:
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, fused=True), "fused"
    except (TypeError, RuntimeError):
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=True), "foreach"


def step_flops(model, x):
    """FLOPs of one training step of `model` on batch x, counted as mixprec's
    mp_graph_flops counts them: 2 per multiply-add of every convolution and
    linear layer, once forward and twice backward (input and weight
    gradients), the backward's input gradient left out where the layer's
    input needs none (the first convolution). torch.utils.flop_counter
    counts a depthwise convolution's weight gradient as a dense one's, 7.4x
    mobilenetv2's step."""
    total = 0

    def count(m, inputs, out):
        nonlocal total
        per_output = m.in_features if isinstance(m, nn.Linear) else \
            m.kernel_size[0] * m.kernel_size[1] * (m.in_channels // m.groups)
        total += 2 * out.numel() * per_output * (3 if inputs[0].requires_grad else 2)

    hooks = [m.register_forward_hook(count) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    was_training = model.training
    model.eval()  # the running statistics untouched
    try:
        model(x[:1])  # one sample (FLOPs grow with the batch), autograd on: requires_grad says which inputs get one
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    return total * x.shape[0]


def run_cell(name, precision, batch, steps, mode="eager", profile=False):
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    free0, _ = torch.cuda.mem_get_info()
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    model = MODELS[name]().cuda().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 32, 32, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,), device="cuda")
    master = None
    if precision in ("fp16", "o2-fp16"):
        half_keep_bn(model)
        x = x.half()
    if precision == "o2-fp16":  # fp32 master copy, Apex O2 style
        master = [p.detach().clone().float().requires_grad_() for p in model.parameters()]
        opt, sgd = make_sgd(master)
    else:
        opt, sgd = make_sgd(model.parameters())
    scaler = torch.amp.GradScaler("cuda") if precision in ("amp-fp16", "o2-fp16") else None
    autocast = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(precision)
    net = model
    if mode != "eager":
        net = torch.compile(model, mode=None if mode == "compile" else mode, dynamic=False)

    def step(forward=net):
        if mode == "reduce-overhead" and forward is net:
            torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        if autocast is not None:
            with torch.autocast("cuda", dtype=autocast):
                loss = F.cross_entropy(forward(x), y)
        else:
            out = forward(x)
            loss = F.cross_entropy(out.float(), y)
        if master is not None:
            model.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            for m, p in zip(master, model.parameters()):
                m.grad = p.grad.float()
            scaler.step(opt)
            scaler.update()
            with torch.no_grad():
                for m, p in zip(master, model.parameters()):
                    p.copy_(m)
        elif scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss.detach().clone() if mode == "reduce-overhead" else loss  # CUDA graphs reuse outputs

    flops = step_flops(model, x)
    t0 = time.perf_counter()
    for _ in range(3):
        loss0 = step()
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - t0
    loss0 = float(loss0)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    for i in range(steps):
        ev[i].record()
        loss = step()
    ev[steps].record()
    torch.cuda.synchronize()
    times = [ev[i].elapsed_time(ev[i + 1]) for i in range(steps)]
    ms = statistics.median(times)
    if profile:
        print_kernel_profile(f"{name} {precision} batch {batch} {mode}", step)
    free1, _ = torch.cuda.mem_get_info()
    used = max(free0 - free1, 0) / 2**20
    del model, net, opt, x, y, master, scaler
    if mode != "eager":
        torch._dynamo.reset()
    return dict(ms=ms, ips=batch / (ms / 1e3), mib=used, l0=loss0, l1=float(loss), tflops=flops / (ms / 1e3) / 1e12,
                sgd=sgd, warmup_s=warmup_s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="cnn10,resnet18", help="of " + ",".join(MODELS))
    ap.add_argument("--precisions", default="fp32,tf32,amp-fp16,amp-bf16,o2-fp16,fp16")
    ap.add_argument("--batches", default="128,512,2048")
    ap.add_argument("--modes", default="eager", help="eager,compile,reduce-overhead")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--gemm-tflops", type=float, default=0, help="bf16 GEMM rate measured in this call")
    ap.add_argument("--profile", action="store_true", help="CUDA kernel times per step on stderr")
    a = ap.parse_args()
    modes = a.modes.split(",")
    for m in modes:
        if m not in ("eager", "compile", "reduce-overhead"):
            ap.error(f"--modes: unknown mode '{m}' (eager, compile, reduce-overhead)")
    for m in a.models.split(","):
        if m not in MODELS:
            ap.error(f"--models: unknown model '{m}' (known: {', '.join(MODELS)})")
    torch.backends.cudnn.benchmark = True
    torch.zeros(1, device="cuda")
    print(f"PyTorch {torch.__version__}, {torch.cuda.get_device_name()}", file=sys.stderr)
    print("| model | precision | batch | mode | ms/step | images/s | device MiB | TFLOP/s | share of bf16 GEMM "
          "| loss first -> last | optimizer | compile + warm-up s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in a.models.split(","):
        for b in (int(v) for v in a.batches.split(",")):
            for p in a.precisions.split(","):
                for mode in modes:
                    try:
                        r = run_cell(name, p, b, a.steps, mode, a.profile)
                    except Exception as e:  # one failed cell (e.g. out of memory) must not end the table
                        print(f"torch_train_step: {name} {p} {b} {mode}: {type(e).__name__}: {e}"[:400], file=sys.stderr)
                        print(f"| {name} | {p} | {b} | {mode} | failed | | | | | | | |", flush=True)
                        torch._dynamo.reset()
                        continue
                    share = f"{100 * r['tflops'] / a.gemm_tflops:.1f}%" if a.gemm_tflops > 0 else ""
                    print(f"| {name} | {p} | {b} | {mode} | {r['ms']:.2f} | {r['ips']:.0f} | {r['mib']:.0f} | "
                          f"{r['tflops']:.1f} | {share} | {r['l0']:.3f} -> {r['l1']:.3f} | {r['sgd']} | "
                          f"{r['warmup_s']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
