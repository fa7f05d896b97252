#!/usr/bin/env python3
"""torch_onnx.py — PyTorch's side of the ONNX round trips (scripts/gpu-check
onnx): models defined in PyTorch (torch_models.py) exported with
torch.onnx.export in inference form, batch norm kept as BatchNormalization
nodes (not folded into the convolutions), for mixprec to import.

  torch_onnx.py export OUTDIR [MODEL ...]   CIFAR-shaped (3x32x32, 10 classes)
                                           untrained models -> OUTDIR/MODEL.onnx
  torch_onnx.py fmnist DATADIR OUT.onnx    cnn10 on 1x28x28 trained 2 epochs on
                                           Fashion-MNIST (IDX files in DATADIR),
                                           inputs normalized by the training set's
                                           mean/std as mixprec does; prints its
                                           test accuracy, then exports it
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from idx_files import idx_file, read_idx
from torch_models import MODELS


def batchnorm_nodes(path):
    import onnx
    return sum(n.op_type == "BatchNormalization" for n in onnx.load(path).graph.node)


def export(model, shape, path):
    """Inference-form export with batch norm kept: the TorchScript exporter
    folds BN into the convolutions in EVAL mode, so PRESERVE an eval()
    model; fall back to the dynamo exporter without its optimizer."""
    model = model.eval().cpu()
    x = torch.randn(2, *shape)
    try:
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17, input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
                          training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
        how = "TorchScript exporter, PRESERVE"
    except Exception as e:  # noqa: BLE001 - any exporter failure: try the other one
        print(f"torch_onnx: TorchScript exporter failed ({type(e).__name__}: {e}); trying dynamo", file=sys.stderr)
        torch.onnx.export(model, (x,), path, dynamo=True, optimize=False, opset_version=18,
                          input_names=["input"], output_names=["logits"],
                          dynamic_shapes=({0: torch.export.Dim("N")},))
        how = "dynamo exporter"
    bn = batchnorm_nodes(path)
    want = sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    print(f"torch_onnx: {path}: {how}, {bn} BatchNormalization nodes (model has {want})", file=sys.stderr)
    if bn != want:
        raise SystemExit(f"torch_onnx: {path}: batch norm was folded or lost ({bn} of {want} nodes)")


def fmnist(datadir, out, epochs=2, batch=128, seed=1):
    torch.manual_seed(seed)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False  # fp32, as mixprec's eval
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    xs = {s: read_idx(idx_file(datadir, f"{s}-images-idx3-ubyte")) for s in ("train", "t10k")}
    ys = {s: read_idx(idx_file(datadir, f"{s}-labels-idx1-ubyte")) for s in ("train", "t10k")}
    train = torch.tensor(xs["train"], dtype=torch.float32).div_(255).unsqueeze(1)
    mean, std = train.mean().item(), train.std(unbiased=False).item()
    norm = lambda t: ((torch.tensor(t, dtype=torch.float32).div_(255).unsqueeze(1) - mean) / std).to(dev)
    xtr, ytr = norm(xs["train"]), torch.tensor(ys["train"], dtype=torch.int64, device=dev)
    xte, yte = norm(xs["t10k"]), torch.tensor(ys["t10k"], dtype=torch.int64, device=dev)
    model = MODELS["cnn10"](cin=1).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(xtr), device=dev)
        for i in range(0, len(xtr) - batch + 1, batch):
            idx = perm[i:i + batch]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            correct = sum((model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
                          for i in range(0, len(xte), 1000))
        print(f"pytorch epoch {epoch + 1}: test accuracy {100 * correct / len(xte):.2f}% "
              f"(normalized by mean {mean:.4f} std {std:.4f})", flush=True)
    export(model, (1, 28, 28), out)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "export":
        os.makedirs(sys.argv[2], exist_ok=True)
        for name in sys.argv[3:] or ["resnet18", "mobilenetv2"]:
            export(MODELS[name](), (3, 32, 32), os.path.join(sys.argv[2], f"{name}.onnx"))
    elif len(sys.argv) == 4 and sys.argv[1] == "fmnist":
        fmnist(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
