#!/usr/bin/env python3
"""onnxruntime_eval.py — test accuracy of an ONNX classifier on Fashion-MNIST
(IDX files) in onnxruntime on the CPU, inputs normalized as the model's
metadata records (mixprec.norm_mean / mixprec.norm_std, which `mixprec
export` writes), else as mixprec's train does by default (the training set's
mean and population std), to set beside the accuracy mixprec printed for
the model it exported.

  onnxruntime_eval.py MODEL.onnx [DATADIR]   (default /usr/share/datasets/fashion-mnist)"""
import sys

import numpy as np
import onnx
import onnxruntime as ort

from idx_files import idx_file, read_idx


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    d = sys.argv[2] if len(sys.argv) == 3 else "/usr/share/datasets/fashion-mnist"
    props = {p.key: p.value for p in onnx.load(sys.argv[1]).metadata_props}
    if "mixprec.norm_mean" in props:
        mean, std, how = float(props["mixprec.norm_mean"]), float(props["mixprec.norm_std"]), "the model's metadata"
    else:
        train = read_idx(idx_file(d, "train-images-idx3-ubyte")).astype(np.float32) / 255
        mean, std, how = train.mean(dtype=np.float64), train.std(dtype=np.float64), "the training set's"
    x = ((read_idx(idx_file(d, "t10k-images-idx3-ubyte")).astype(np.float32) / 255 - np.float32(mean))
         / np.float32(std))[:, None]
    y = read_idx(idx_file(d, "t10k-labels-idx1-ubyte")).astype(np.int64)
    sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    pred = np.concatenate([sess.run(None, {name: x[i:i + 500]})[0].argmax(1) for i in range(0, len(x), 500)])
    print(f"onnxruntime {ort.__version__}: {sys.argv[1]}: {len(y)} test samples, accuracy {100 * (pred == y).mean():.2f}% "
          f"(normalized by {how}: mean {mean:.6g}, std {std:.6g})")


if __name__ == "__main__":
    main()
