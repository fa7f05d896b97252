#!/usr/bin/env python3
"""torch_train_step.py — the PyTorch peer of bench/gpu/gpu_train_step: the
same architectures (cnn10, CIFAR resnet18) trained the way a careful PyTorch
user would on one GPU: eager mode, channels_last, cudnn.benchmark, SGD with
momentum 0.9, synthetic CIFAR-shaped data (3x32x32, 10 classes) kept on the
device; fp32 (TF32 off), tf32, amp-fp16 (torch.autocast + GradScaler),
amp-bf16 (autocast, no scaler), fp16 (.half() model, BatchNorm kept fp32, as
Apex's network_to_half), o2-fp16 (half model + fp32 BN + fp32 master copy,
Apex O2 style, GradScaler). Prints the same table as gpu_train_step: median
ms/step from CUDA events, images/s, device memory used by the run
(torch.cuda.mem_get_info difference, allocator cache and cuDNN workspaces
included). --profile: after timing, 3 more steps under torch.profiler, and the
CUDA kernels per step on stderr (top 12, then totals by kind), to set beside
gpu_train_step --profile."""
import argparse
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_bn_relu(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


def cnn10(classes=10, cin=3):
    layers, c = [], cin
    for stage, width in enumerate((64, 128, 256)):
        for _ in range(3):
            layers += conv_bn_relu(c, width)
            c = width
        if stage < 2:
            layers.append(nn.AvgPool2d(2))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, classes))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


def resnet18(classes=10, cin=3):
    layers, c = [nn.Conv2d(cin, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True)], 64
    for i, width in enumerate((64, 128, 256, 512)):
        for j in range(2):
            layers.append(BasicBlock(c, width, 2 if (i > 0 and j == 0) else 1))
            c = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes))


MODELS = {"cnn10": cnn10, "resnet18": resnet18}


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


def print_kernel_profile(title, step, n=3):
    import sys
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
    for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {v:7.3f}  {kernel_kind(k):11s}  {k[:110]}", file=sys.stderr)
    kinds = {}
    for k, v in per.items():
        kinds[kernel_kind(k)] = kinds.get(kernel_kind(k), 0) + v
    print("  by kind: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
          + f", total {sum(per.values()):.2f} ms", file=sys.stderr)


def run_cell(name, precision, batch, steps, profile=False):
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
        opt = torch.optim.SGD(master, lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda") if precision in ("amp-fp16", "o2-fp16") else None
    autocast = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(precision)

    def step():
        opt.zero_grad(set_to_none=True)
        if autocast is not None:
            with torch.autocast("cuda", dtype=autocast):
                loss = F.cross_entropy(model(x), y)
        else:
            out = model(x)
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
        return loss

    for _ in range(3):
        loss0 = step()
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
        print_kernel_profile(f"{name} {precision} batch {batch}", step)
    free1, _ = torch.cuda.mem_get_info()
    used = max(free0 - free1, 0) / 2**20
    del model, opt, x, y, master, scaler
    return ms, batch / (ms / 1e3), used, loss0, float(loss)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="cnn10,resnet18")
    ap.add_argument("--precisions", default="fp32,tf32,amp-fp16,amp-bf16,o2-fp16,fp16")
    ap.add_argument("--batches", default="128,512,2048")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="CUDA kernel times per step on stderr")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.zeros(1, device="cuda")
    print("| model | precision | batch | ms/step | images/s | device MiB | loss first -> last |")
    print("|---|---|---|---|---|---|---|")
    for name in a.models.split(","):
        for b in (int(v) for v in a.batches.split(",")):
            for p in a.precisions.split(","):
                ms, ips, mib, l0, l1 = run_cell(name, p, b, a.steps, a.profile)
                print(f"| {name} | {p} | {b} | {ms:.2f} | {ips:.0f} | {mib:.0f} | {l0:.3f} -> {l1:.3f} |", flush=True)


if __name__ == "__main__":
    main()
