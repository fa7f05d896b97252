#!/usr/bin/env python3
"""onnx_oracle.py ONNX_RUN WORKDIR — mixprec's ONNX import and export against
onnxruntime. Builds, with onnx.helper, a model per supported op (and the
constant chains exporters emit) plus a ResNet-style, a MobileNet-style and a
GAN-generator network with random weights; each is run in onnxruntime and in
mixprec (ONNX_RUN: import, fp32 inference forward, export). mixprec's output
must equal onnxruntime's within 1e-5 relative (max |a - b| / max |b|), and the
exported model, run in onnxruntime, the original's within 1e-6 (fp16 weights:
within 1e-2, every weight initializer stored as float16)."""
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

onnx_run, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(19)
TOL_IMPORT, TOL_ROUNDTRIP, TOL_FP16 = 1e-5, 1e-6, 1e-2


class Net:
    """A graph under construction: nodes, initializers, a fresh name per value."""

    def __init__(self, name, shape, dynamic_batch=True, dynamic=()):
        self.name, self.shape, self.nodes, self.inits, self.k = name, shape, [], [], 0
        dims = ["N" if dynamic_batch else shape[0]] + [("d%d" % i if i in dynamic else d) for i, d in
                                                        enumerate(shape[1:], 1)]
        self.input = helper.make_tensor_value_info("input", TensorProto.FLOAT, dims)

    def fresh(self, base):
        self.k += 1
        return "%s_%d" % (base, self.k)

    def init(self, base, array):
        n = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def w(self, base, *shape, scale=None):
        fan = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else 1.0 / np.sqrt(fan)
        return self.init(base, (rng.standard_normal(shape) * s).astype(np.float32))

    def op(self, op_type, inputs, name=None, **attrs):
        out = self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name if name is not None else out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, pad=None, group=1, bias=True, dilation=1):
        pad = k // 2 if pad is None else pad
        ins = [x, self.w("w", cout, cin // group, k, k)] + ([self.w("b", cout, scale=0.1)] if bias else [])
        return self.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=group,
                       dilations=[dilation, dilation])

    def bn(self, x, c, eps=1e-5, var=(0.5, 2.0)):
        return self.op("BatchNormalization", [x, self.init("scale", rng.uniform(0.5, 1.5, c).astype(np.float32)),
                                              self.init("beta", rng.uniform(-0.5, 0.5, c).astype(np.float32)),
                                              self.init("mean", rng.uniform(-0.2, 0.2, c).astype(np.float32)),
                                              self.init("var", rng.uniform(*var, c).astype(np.float32))],
                       epsilon=eps, momentum=0.9)

    def gemm(self, x, fin, fout, **attrs):
        return self.op("Gemm", [x, self.w("fc_w", fout, fin), self.w("fc_b", fout, scale=0.1)], transB=1, **attrs)

    def torch_flatten(self, x):
        """x.view(x.size(0), -1) as torch.onnx.export writes it: Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
        shape = self.op("Shape", [x])
        n = self.op("Gather", [shape, self.init("zero", np.array(0, np.int64))], axis=0)
        n1 = self.op("Unsqueeze", [n, self.init("axes", np.array([0], np.int64))])
        target = self.op("Concat", [n1, self.init("minus1", np.array([-1], np.int64))], axis=0)
        return self.op("Reshape", [x, target])

    def model(self, out, opset=17):
        y = helper.make_tensor_value_info(out, TensorProto.FLOAT, None)
        g = helper.make_graph(self.nodes, self.name, [self.input], [y], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="onnx_oracle")
        m.ir_version = min(m.ir_version, 10)
        # the output's shape, as shape inference finds it
        m.graph.output[0].CopyFrom(onnx.shape_inference.infer_shapes(m).graph.output[0])
        onnx.checker.check_model(m)
        return m


def run_ort(path, x):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    i = s.get_inputs()[0]
    if len(i.shape) == 4 and x.ndim == 2:  # mixprec's input for (N, F) features is (N, F, 1, 1)
        x = x.reshape(x.shape + (1, 1))
    return s.run(None, {i.name: x})[0]


def rel(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


failures, worst = [], {"import": 0.0, "roundtrip": 0.0, "fp16": 0.0}


def check(name, m, batch=3, extra=(), input_shape=None):
    path = os.path.join(work, name + ".onnx")
    onnx.save(m, path)
    shape = [batch] + list(input_shape if input_shape else net_shape[name][1:])
    x = rng.standard_normal(shape).astype(np.float32)
    want = run_ort(path, x)
    xin, out, exp = (os.path.join(work, name + s) for s in (".in.f32", ".out.f32", ".export.onnx"))
    x.tofile(xin)
    args = [onnx_run, path, xin, str(batch), out, exp] + list(extra)
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        failures.append("%s: onnx_run failed: %s" % (name, (r.stderr or r.stdout).strip()))
        return
    got = np.fromfile(out, np.float32)
    if got.size != want.size:
        failures.append("%s: mixprec gave %d values, onnxruntime %d (%s)" % (name, got.size, want.size, want.shape))
        return
    e_imp = rel(got, want)
    onnx.checker.check_model(onnx.load(exp))
    e_rt = rel(run_ort(exp, x), want)
    exp16 = os.path.join(work, name + ".export16.onnx")
    r16 = subprocess.run([onnx_run, path, xin, str(batch), out, exp16, "--fp16-weights"] + list(extra),
                         capture_output=True, text=True)
    if r16.returncode != 0:
        failures.append("%s: fp16 export failed: %s" % (name, r16.stderr.strip()))
        return
    m16 = onnx.load(exp16)
    onnx.checker.check_model(m16)
    weights = [t for t in m16.graph.initializer if t.name.endswith(".f16")]
    e_16 = rel(run_ort(exp16, x), want)
    worst["import"], worst["roundtrip"], worst["fp16"] = (max(worst["import"], e_imp), max(worst["roundtrip"], e_rt),
                                                         max(worst["fp16"], e_16))
    ok = e_imp <= TOL_IMPORT and e_rt <= TOL_ROUNDTRIP and e_16 <= TOL_FP16 and all(
        t.data_type == TensorProto.FLOAT16 for t in weights)
    print("%-22s out %-16s import %.2e  round trip %.2e  fp16 weights %.2e  %s" % (
        name, tuple(want.shape), e_imp, e_rt, e_16, "ok" if ok else "FAIL"))
    if not ok:
        failures.append("%s: errors import %.3g (<= %g), round trip %.3g (<= %g), fp16 %.3g (<= %g)" % (
            name, e_imp, TOL_IMPORT, e_rt, TOL_ROUNDTRIP, e_16, TOL_FP16))


net_shape = {}
models = []


def add(name, build, shape=(3, 3, 8, 8), **kw):
    net = Net(name, shape, **{k: v for k, v in kw.items() if k in ("dynamic_batch", "dynamic")})
    net_shape[name] = shape
    models.append((name, build(net), {k: v for k, v in kw.items() if k in ("extra", "input_shape")}))


# ---- one model per op --------------------------------------------------------
add("conv", lambda n: n.model(n.conv("input", 3, 4, 3)))
add("conv_group_dilation", lambda n: n.model(n.conv("input", 4, 6, 3, stride=2, pad=2, group=2, bias=False,
                                                    dilation=2)), shape=(3, 4, 9, 9))
add("conv_depthwise_5x5", lambda n: n.model(n.conv("input", 3, 3, 5, stride=2, group=3)))
add("conv_transpose", lambda n: n.model(n.op("ConvTranspose", ["input", n.w("w", 3, 5, 4, 4), n.w("b", 5)],
                                             kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1])))
add("conv_transpose_group", lambda n: n.model(n.op("ConvTranspose", ["input", n.w("w", 4, 3, 3, 3)], strides=[2, 2],
                                                   pads=[1, 1, 1, 1], output_padding=[1, 1], group=2)),
    shape=(3, 4, 5, 5))
add("batchnorm", lambda n: n.model(n.bn("input", 3, eps=0.1, var=(0.01, 0.5))))  # eps matters
add("relu", lambda n: n.model(n.op("Relu", ["input"])))
add("leaky_relu", lambda n: n.model(n.op("LeakyRelu", ["input"], alpha=0.2)))
add("sigmoid", lambda n: n.model(n.op("Sigmoid", ["input"])))
add("tanh", lambda n: n.model(n.op("Tanh", ["input"])))
add("maxpool", lambda n: n.model(n.op("MaxPool", ["input"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])))
add("maxpool_stride1", lambda n: n.model(n.op("MaxPool", ["input"], kernel_shape=[2, 2])))
add("avgpool_pad", lambda n: n.model(n.op("AveragePool", ["input"], kernel_shape=[3, 3], strides=[2, 2],
                                          pads=[1, 1, 1, 1], count_include_pad=1)))
add("avgpool", lambda n: n.model(n.op("AveragePool", ["input"], kernel_shape=[2, 2], strides=[2, 2])))
add("global_avgpool", lambda n: n.model(n.op("GlobalAveragePool", ["input"])))
add("gemm", lambda n: n.model(n.gemm(n.op("Flatten", ["input"]), 192, 10)))
add("gemm_alpha_beta_notrans", lambda n: n.model(n.op("Gemm", [n.op("Flatten", ["input"]), n.w("w", 192, 7),
                                                               n.w("c", 7)], alpha=0.5, beta=2.0)))
add("matmul_add", lambda n: n.model(n.op("Add", [n.op("MatMul", [n.op("Flatten", ["input"]), n.w("w", 192, 6)]),
                                                 n.w("b", 6)])))
add("matmul", lambda n: n.model(n.op("MatMul", [n.op("Flatten", ["input"]), n.w("w", 192, 6)])))
add("add", lambda n: n.model(n.op("Add", [n.conv("input", 3, 4, 3), n.conv("input", 3, 4, 1)])))
add("mul", lambda n: n.model(n.op("Mul", [n.conv("input", 3, 4, 3), n.op("Sigmoid", [n.conv("input", 3, 4, 1)])])))
add("concat", lambda n: n.model(n.op("Concat", [n.conv("input", 3, 4, 3), "input", n.conv("input", 3, 2, 1)],
                                     axis=1)))
add("concat_features", lambda n: n.model(n.op("Concat", [n.gemm(n.op("Flatten", ["input"]), 192, 5),
                                                         n.gemm(n.op("Flatten", ["input"]), 192, 3)], axis=-1)))
add("flatten", lambda n: n.model(n.op("Flatten", [n.conv("input", 3, 2, 3)], axis=1)))
add("reshape", lambda n: n.model(n.op("Reshape", [n.op("Relu", ["input"]), n.init("s", np.array([0, 12, 4, 4],
                                                                                                   np.int64))])))
add("reshape_constant_node", lambda n: n.model(n.op("Reshape", ["input", n.op(
    "Constant", [], value=numpy_helper.from_array(np.array([-1, 192], np.int64)))])))
add("reshape_torch_chain", lambda n: n.model(n.gemm(n.torch_flatten(n.conv("input", 3, 2, 3)), 128, 4)))
add("dropout", lambda n: n.model(n.op("Dropout", [n.conv("input", 3, 4, 3), n.init("r", np.array(0.3, np.float32))])))
add("identity", lambda n: n.model(n.op("Identity", [n.op("Relu", ["input"])])))
add("opset13", lambda n: n.model(n.op("Relu", [n.bn(n.conv("input", 3, 4, 3), 4)]), opset=13))
add("opset21", lambda n: n.model(n.gemm(n.op("Flatten", [n.op("GlobalAveragePool", [n.conv("input", 3, 4, 3)])]), 4,
                                        3), opset=21))
add("fixed_batch", lambda n: n.model(n.op("Reshape", [n.conv("input", 3, 2, 3), n.init("s", np.array([3, 128],
                                                                                                       np.int64))])),
    dynamic_batch=False)
add("dynamic_hw", lambda n: n.model(n.gemm(n.op("Flatten", [n.op("GlobalAveragePool", [n.conv("input", 3, 4, 3)])]),
                                           4, 5)), dynamic=(2, 3), extra=["--input-shape", "3x8x8"])


# ---- networks -----------------------------------------------------------------
def resnet(n):
    def block(x, cin, cout, stride):
        y = n.op("Relu", [n.bn(n.conv(x, cin, cout, 3, stride, bias=False), cout)])
        y = n.bn(n.conv(y, cout, cout, 3, bias=False), cout)
        sc = x if stride == 1 and cin == cout else n.bn(n.conv(x, cin, cout, 1, stride, pad=0, bias=False), cout)
        return n.op("Relu", [n.op("Add", [y, sc])])

    x = n.op("Relu", [n.bn(n.conv("input", 3, 16, 3, bias=False), 16)])
    x = block(block(x, 16, 16, 1), 16, 32, 2)
    x = block(x, 32, 64, 2)
    x = n.op("GlobalAveragePool", [x])
    return n.model(n.gemm(n.torch_flatten(x), 64, 10))


def mobilenet(n):
    def inverted(x, cin, cout, stride, t):
        h = cin * t
        y = n.op("Relu", [n.bn(n.conv(x, cin, h, 1, pad=0, bias=False), h)])
        y = n.op("Relu", [n.bn(n.conv(y, h, h, 3, stride, group=h, bias=False), h)])
        y = n.bn(n.conv(y, h, cout, 1, pad=0, bias=False), cout)
        return n.op("Add", [x, y]) if stride == 1 and cin == cout else y

    x = n.op("Relu", [n.bn(n.conv("input", 3, 16, 3, 2, bias=False), 16)])
    x = inverted(inverted(x, 16, 16, 1, 1), 16, 24, 2, 6)
    x = inverted(x, 24, 24, 1, 6)
    x = n.op("Relu", [n.bn(n.conv(x, 24, 64, 1, pad=0, bias=False), 64)])
    x = n.op("Flatten", [n.op("GlobalAveragePool", [x])])
    x = n.op("Dropout", [x, n.init("ratio", np.array(0.2, np.float32))])
    return n.model(n.gemm(x, 64, 10))


def generator(n):
    x = n.op("Relu", [n.gemm("input", 16, 32 * 4 * 4)])
    x = n.op("Reshape", [x, n.init("s", np.array([-1, 32, 4, 4], np.int64))])
    x = n.op("Relu", [n.bn(n.op("ConvTranspose", [x, n.w("w", 32, 16, 4, 4)], strides=[2, 2], pads=[1, 1, 1, 1]), 16)])
    return n.model(n.op("Tanh", [n.op("ConvTranspose", [x, n.w("w", 16, 3, 4, 4), n.w("b", 3)], strides=[2, 2],
                                                        pads=[1, 1, 1, 1])]))


def discriminator(n):
    x = n.op("LeakyRelu", [n.conv("input", 3, 16, 4, 2, pad=1)], alpha=0.2)
    x = n.op("LeakyRelu", [n.bn(n.conv(x, 16, 32, 4, 2, pad=1, bias=False), 32)], alpha=0.2)
    return n.model(n.op("Sigmoid", [n.gemm(n.op("Flatten", [x]), 32 * 4 * 4, 1)]))


add("resnet_style", resnet, shape=(3, 3, 32, 32))
add("mobilenet_style", mobilenet, shape=(3, 3, 32, 32))
add("gan_generator", generator, shape=(3, 16))
add("gan_discriminator", discriminator, shape=(3, 3, 16, 16))

for name, m, kw in models:
    check(name, m, extra=kw.get("extra", ()))
print("onnx_oracle: %d models; worst relative error: import %.2e (<= %g), round trip %.2e (<= %g), fp16 weights %.2e"
      % (len(models), worst["import"], TOL_IMPORT, worst["roundtrip"], TOL_ROUNDTRIP, worst["fp16"]))
for f in failures:
    print("FAIL " + f)
sys.exit(1 if failures else 0)
