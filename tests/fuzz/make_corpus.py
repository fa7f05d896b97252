#!/usr/bin/env python3
"""make_corpus.py — writes the committed seed corpus of the fuzzers
(tests/fuzz/corpus/<fuzzer>/): a few valid files and the interesting
defects, each small. Usage: make_corpus.py CORPUS_DIR CKPT_SEED, where
CKPT_SEED is the valid checkpoint fuzz_ckpt_meta writes when run with
MP_FUZZ_WRITE_SEED=CKPT_SEED. Python standard library only."""
import gzip, json, os, struct, sys

out, ckpt_seed = sys.argv[1], sys.argv[2]


def put(fuzzer, name, data):
    d = os.path.join(out, fuzzer)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(tensors, meta=None, pad=8):
    """tensors: [(name, dtype, shape, bytes)] laid out in order."""
    head, blob = {}, b""
    if meta is not None:
        head["__metadata__"] = meta
    for name, dt, shape, data in tensors:
        head[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % pad)
    return struct.pack("<Q", len(h)) + h + blob


f32 = lambda *v: struct.pack("<%df" % len(v), *v)
put("fuzz_safetensors", "valid_f32", safetensors([("w", "F32", [2, 2], f32(1, 2, 3, 4)), ("b", "F32", [2], f32(0, -1))],
                                                 {"format": "pt"}))
put("fuzz_safetensors", "mixed_dtypes", safetensors([("a", "F64", [1], struct.pack("<d", 0.5)),
                                                     ("h", "F16", [2], b"\x00\x3c\x00\xc0"),
                                                     ("z", "BF16", [0], b""), ("i", "I32", [], struct.pack("<i", 7))]))
put("fuzz_safetensors", "empty_header", struct.pack("<Q", 8) + b"{}      ")
put("fuzz_safetensors", "unused_dtype", safetensors([("u", "U8", [3], b"abc"), ("f8", "F8_E4M3", [1], b"\x01")]))
put("fuzz_safetensors", "overlap", struct.pack("<Q", 96) + json.dumps(
    {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
     "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode().ljust(96) + f32(1))
put("fuzz_safetensors", "truncated", safetensors([("w", "F32", [4], f32(1, 2, 3, 4))])[:-5])


def idx(code, shape, body):
    return bytes([0, 0, code, len(shape)]) + struct.pack(">%dI" % len(shape), *shape) + body


def idx_pair(images, labels):
    return struct.pack("<I", len(images)) + images + labels


img = idx(0x08, [2, 3, 3], bytes(range(18)))
lab = idx(0x08, [2], bytes([1, 9]))
put("fuzz_idx", "ubyte", idx_pair(img, lab))
put("fuzz_idx", "gzip", idx_pair(gzip.compress(img, mtime=0), gzip.compress(lab, mtime=0)))
put("fuzz_idx", "float_images_int_labels", idx_pair(idx(0x0D, [1, 2, 2], struct.pack(">4f", 0.5, 1, -2, 3e38)),
                                                    idx(0x0C, [1], struct.pack(">i", 3))))
put("fuzz_idx", "double_short", idx_pair(idx(0x0E, [1, 1, 2], struct.pack(">2d", 1, float("nan"))),
                                         idx(0x0B, [1], struct.pack(">h", 2))))
put("fuzz_idx", "label_out_of_range", idx_pair(img, idx(0x08, [2], bytes([1, 201]))))
put("fuzz_idx", "count_mismatch", idx_pair(img, idx(0x08, [3], bytes([1, 2, 3]))))

rec = lambda label, v: bytes([label]) + bytes([v]) * 3072
put("fuzz_cifar", "one_record", rec(3, 128))
put("fuzz_cifar", "two_records", rec(0, 0) + rec(9, 255))
put("fuzz_cifar", "bad_label", rec(10, 1))
put("fuzz_cifar", "partial_record", rec(1, 2)[:1000])

with open(ckpt_seed, "rb") as f:
    ck = f.read()
n = struct.unpack("<Q", ck[:8])[0]
header, data = json.loads(ck[8:8 + n]), ck[8 + n:]
put("fuzz_ckpt_meta", "valid", ck)


def with_meta(name, **changes):
    h = json.loads(json.dumps(header))
    for k, v in changes.items():
        k = k.replace("__", ".").replace("_dot_", ".")
        if v is None:
            h["__metadata__"].pop(k)
        else:
            h["__metadata__"][k] = v
    hb = json.dumps(h, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    put("fuzz_ckpt_meta", name, struct.pack("<Q", len(hb)) + hb + data)


with_meta("epoch_negative", mixprec__epoch="-5")
with_meta("epoch_fraction", mixprec__epoch="1.5")
with_meta("epoch_nan", mixprec__epoch="nan")
with_meta("epoch_huge", mixprec__epoch="1e300")
with_meta("global_step_1e30", mixprec__global_step="1e30")
with_meta("optim_steps_inf", mixprec__optim_steps="inf")
with_meta("optim_steps_negative", mixprec__optim_steps="-3")
with_meta("plan_step_negative", mixprec__plan_step="-1")
with_meta("batch_truncated", mixprec__batch="128.9")
with_meta("scale_zero", scaler__scale="0")
with_meta("no_epoch", mixprec__epoch=None)
for name, text in [("int", b"100000"), ("negative", b"-9223372036854775808"), ("double", b"6.5536e+04"),
                   ("junk", b"12abc"), ("control", b"1\n2\x01")]:
    put("fuzz_ckpt_meta", "text_" + name, text)
