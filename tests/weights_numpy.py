#!/usr/bin/env python3
"""weights_numpy.py OUT.safetensors — a classifier trained outside mixprec,
saved as PyTorch saves a model's state_dict (safetensors.torch.save_file
writes the same bytes as safetensors.numpy.save_file): a softmax regression
on Fashion-MNIST (pixels / 255, as mixprec's IDX loader scales them) trained
with NumPy, its parameters under the names a torch.nn.Linear called "fc"
has ("fc.weight" (10, 784), "fc.bias" (10)), plus an int64
"bn.num_batches_tracked" counter as a state_dict with BatchNorm carries.
Prints the test accuracy NumPy computes: the number mixprec must reproduce."""
import gzip, struct, sys

import numpy as np
from safetensors.numpy import save_file

DIR = "/usr/share/datasets/fashion-mnist"

def idx(name):
    for path in (f"{DIR}/{name}", f"{DIR}/{name}.gz"):
        try:
            data = (gzip.open if path.endswith(".gz") else open)(path, "rb").read()
            break
        except FileNotFoundError:
            continue
    else:
        sys.exit(f"weights_numpy: {DIR}/{name}[.gz] not found")
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)

x = idx("train-images-idx3-ubyte").reshape(60000, -1).astype(np.float32) / 255
y = idx("train-labels-idx1-ubyte").astype(np.int64)
xt = idx("t10k-images-idx3-ubyte").reshape(10000, -1).astype(np.float32) / 255
yt = idx("t10k-labels-idx1-ubyte").astype(np.int64)

rng = np.random.default_rng(1)
w = np.zeros((10, 784), np.float32)
b = np.zeros(10, np.float32)
for epoch in range(3):
    order = rng.permutation(60000)
    for i in range(0, 60000, 128):
        j = order[i : i + 128]
        logits = x[j] @ w.T + b
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(len(j)), y[j]] -= 1
        w -= 0.5 * (p.T @ x[j]) / len(j)
        b -= 0.5 * p.mean(0)
acc = float(((xt @ w.T + b).argmax(1) == yt).mean())
save_file({"fc.weight": w, "fc.bias": b, "bn.num_batches_tracked": np.array(1407, np.int64)}, sys.argv[1])
print(f"numpy test accuracy {acc:.4f}")
