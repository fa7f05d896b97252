#!/usr/bin/env python3
"""make_onnx_corpus.py — writes the committed seed corpus of fuzz_onnx
(tests/fuzz/corpus/fuzz_onnx/): small ONNX models, valid ones covering the
imported ops and the constant chains exporters emit, and a few defects.
Python standard library only (a minimal protobuf writer for the fields the
models use). Usage: make_onnx_corpus.py CORPUS_DIR"""
import os
import struct
import sys

out = os.path.join(sys.argv[1], "fuzz_onnx")
os.makedirs(out, exist_ok=True)


def varint(v):
    v &= (1 << 64) - 1
    b = b""
    while True:
        byte, v = v & 0x7F, v >> 7
        b += bytes([byte | (0x80 if v else 0)])
        if not v:
            return b


def fint(field, v):
    return varint(field << 3) + varint(v)


def fbytes(field, data):
    data = data.encode() if isinstance(data, str) else data
    return varint(field << 3 | 2) + varint(len(data)) + data


def ffloat(field, f):
    return varint(field << 3 | 5) + struct.pack("<f", f)


# AttributeProto: name 1, f 2, i 3, ints 8, type 20 (FLOAT 1, INT 2, INTS 7)
def attr(name, v):
    if isinstance(v, float):
        return fbytes(1, name) + ffloat(2, v) + fint(20, 1)
    if isinstance(v, int):
        return fbytes(1, name) + fint(3, v) + fint(20, 2)
    return fbytes(1, name) + b"".join(fint(8, x) for x in v) + fint(20, 7)


# NodeProto: input 1, output 2, name 3, op_type 4, attribute 5
def node(op, ins, outs, name=None, **attrs):
    return (b"".join(fbytes(1, i) for i in ins) + b"".join(fbytes(2, o) for o in outs) + fbytes(3, name or outs[0])
            + fbytes(4, op) + b"".join(fbytes(5, attr(k, v)) for k, v in attrs.items()))


# TensorProto: dims 1, data_type 2 (FLOAT 1, INT64 7), name 8, raw_data 9
def tensor(name, dims, values, dtype=1):
    fmt = "<%d%s" % (len(values), "f" if dtype == 1 else "q")
    return b"".join(fint(1, d) for d in dims) + fint(2, dtype) + fbytes(8, name) + fbytes(9, struct.pack(fmt, *values))


def weights(name, *dims):
    n = 1
    for d in dims:
        n *= d
    return tensor(name, list(dims), [((k * 37) % 17 - 8) / 20.0 for k in range(n)])


# ValueInfoProto: name 1, type 2 -> tensor_type 1 -> elem_type 1, shape 2 -> dim 1 -> dim_value 1 | dim_param 2
def value_info(name, dims):
    shape = b"".join(fbytes(1, fbytes(2, d) if isinstance(d, str) else fint(1, d)) for d in dims)
    return fbytes(1, name) + fbytes(2, fbytes(1, fint(1, 1) + fbytes(2, shape)))


# GraphProto: node 1, name 2, initializer 5, input 11, output 12; ModelProto:
# ir_version 1, graph 7, opset_import 8 (domain 1, version 2)
def model(nodes, inits, inp, outp, opset=17):
    g = (b"".join(fbytes(1, n) for n in nodes) + fbytes(2, "g") + b"".join(fbytes(5, t) for t in inits)
         + fbytes(11, value_info(*inp)) + fbytes(12, value_info(*outp)))
    return fint(1, 8) + fbytes(7, g) + fbytes(8, fbytes(1, "") + fint(2, opset))


def put(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


x = ("x", ["N", 2, 6, 6])
cnn = model([node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["bn"], epsilon=1e-5),
             node("Relu", ["bn"], ["r"]), node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             node("Flatten", ["p"], ["f"], axis=1), node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)],
            [weights("w1", 3, 2, 3, 3), weights("b1", 3), weights("s", 3), weights("b", 3), weights("m", 3),
             tensor("v", [3], [1.0, 0.5, 2.0]), weights("fw", 4, 27), weights("fb", 4)], x, ("y", ["N", 4]))
put("cnn", cnn)
put("cnn_truncated", cnn[:len(cnn) * 2 // 3])
put("cnn_opset9", cnn[:-2] + fint(2, 9))
put("torch_reshape_chain", model(
    [node("Shape", ["x"], ["s"]), node("Gather", ["s", "zero"], ["n"], axis=0),
     node("Unsqueeze", ["n", "axes"], ["nu"]), node("Concat", ["nu", "m1"], ["t"], axis=0),
     node("Reshape", ["x", "t"], ["f"]), node("MatMul", ["f", "w"], ["mm"]), node("Add", ["mm", "b"], ["y"])],
    [tensor("zero", [], [0], 7), tensor("axes", [1], [0], 7), tensor("m1", [1], [-1], 7), weights("w", 72, 5),
     weights("b", 5)], x, ("y", ["N", 5])))
put("residual_concat", model(
    [node("Conv", ["x", "w1"], ["a"], kernel_shape=[1, 1]), node("Sigmoid", ["a"], ["sa"]),
     node("Mul", ["a", "sa"], ["m"]), node("Add", ["m", "a"], ["s"]), node("Concat", ["s", "x"], ["c"], axis=1),
     node("AveragePool", ["c"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
     node("GlobalAveragePool", ["ap"], ["y"])],
    [weights("w1", 2, 2, 1, 1)], x, ("y", ["N", 4, 1, 1]), opset=13))
put("generator", model(
    [node("Gemm", ["z", "w", "b"], ["h"], transB=1), node("LeakyRelu", ["h"], ["l"], alpha=0.2),
     node("Reshape", ["l", "shape"], ["r"]),
     node("ConvTranspose", ["r", "wt"], ["u"], kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1]),
     node("Dropout", ["u", "ratio"], ["d"]), node("Identity", ["d"], ["i"]), node("Tanh", ["i"], ["y"])],
    [weights("w", 16, 4), weights("b", 16), tensor("shape", [4], [0, 4, 2, 2], 7), weights("wt", 4, 1, 4, 4),
     tensor("ratio", [], [0.25])], ("z", ["N", 4]), ("y", ["N", 1, 4, 4]), opset=21))
put("constant_cast_slice", model(
    [node("Constant", [], ["k"], value_ints=[2, 3, -1]), node("Cast", ["k"], ["kc"], to=7),
     node("Slice", ["kc", "st", "en"], ["ks"]), node("Reshape", ["x", "kc2"], ["y"])],
    [tensor("st", [1], [0], 7), tensor("en", [1], [2], 7), tensor("kc2", [2], [0, -1], 7)], x, ("y", ["N", 72])))
put("asymmetric_pads", model([node("Conv", ["x", "w1"], ["y"], kernel_shape=[3, 3], pads=[0, 0, 1, 1])],
                             [weights("w1", 3, 2, 3, 3)], x, ("y", ["N", 3, 5, 5])))
put("unsupported_op", model([node("Softmax", ["x"], ["y"], axis=1)], [], x, ("y", ["N", 2, 6, 6])))
put("missing_initializer", model([node("Conv", ["x", "nowhere"], ["y"], kernel_shape=[3, 3])], [], x,
                                 ("y", ["N", 3, 4, 4])))
# an input whose TypeProto is a sequence (field 4) of float tensors, not a tensor
put("input_sequence_type", fint(1, 8) + fbytes(7, fbytes(1, node("Relu", ["x"], ["y"])) + fbytes(2, "g")
                                               + fbytes(11, fbytes(1, "x") + fbytes(2, fbytes(4, fbytes(1, fbytes(1, fint(1, 1))))))
                                               + fbytes(12, value_info("y", ["N", 2, 6, 6])))
    + fbytes(8, fbytes(1, "") + fint(2, 17)))
put("not_protobuf", b"\x08\x96\x01this is not an ONNX model\xff\xff")
