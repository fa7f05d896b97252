#!/usr/bin/env bash
# cli_onnx.sh MIXPREC — ONNX through the CLI: a model trained and saved by
# `train` is exported (`export --format onnx`, fp32 and fp16 weights), then
# trained again from the .onnx file (`train --model m.onnx`, starting from the
# exported weights, which `export --model m.onnx` writes back unchanged) and
# benchmarked beside a zoo model (`bench --models m.onnx,small`). Bad model
# files and bad export options each exit non-zero with one stderr line naming
# the file or option. The exported models must run in onnxruntime (python3
# with numpy and onnxruntime: scripts/setup.sh test puts them in build/pyvenv).
set -u
bin=$(realpath "$1")
work=${MP_WORK:-/tmp/mp_cli_test}/onnx_cli
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "${MP_SOURCE_DIR:-$(dirname "$0")/..}/tests/expect.sh"
data=(--data synthetic --synthetic-shape 1x12x12 --synthetic-size 256 --epochs 1 --seed 3)
syn=("${data[@]}" --batch 32)

# expect_named NAME RC PATTERN -- ARGS...: exit status RC ("!" = any non-zero) and
# exactly one stderr line, matching PATTERN
expect_named() {
  local name=$1 want=$2 pattern=$3
  shift 4
  timeout 300 "$bin" "$@" >"$name.out" 2>"$name.err"
  local rc=$? lines
  lines=$(wc -l <"$name.err")
  if { [ "$want" = "!" ] && [ $rc -ne 0 ]; } || [ "$rc" = "$want" ]; then :; else
    bad "$name: exit $rc, expected $want: $(cat "$name.err")"; return; fi
  if [ "$lines" -ne 1 ] || ! grep -Eq -- "$pattern" "$name.err"; then
    bad "$name: stderr should be one line matching '$pattern', got $lines: $(cat "$name.err")"; return; fi
  ok
}

"$bin" train "${syn[@]}" --max-steps 8 --save run.safetensors >train.out 2>&1 || bad "train --save: $(tail -3 train.out)"
"$bin" export --format onnx --checkpoint run.safetensors --model small --input-shape 1x12x12 -o m.onnx >export.out 2>&1 \
  && [ -s m.onnx ] && ok || bad "export: $(cat export.out)"
"$bin" export --checkpoint run.safetensors --model small --input-shape 1x12x12 --fp16-weights -o m16.onnx \
  >export16.out 2>&1 && [ -s m16.onnx ] && [ "$(stat -c %s m16.onnx)" -lt "$(stat -c %s m.onnx)" ] && ok \
  || bad "export --fp16-weights: $(cat export16.out)"
# an imported model keeps its weights: exported again, it computes the same
# logits (checked in onnxruntime below)
"$bin" export --model m.onnx --input-shape 1x12x12 -o again.onnx >again.out 2>&1 && ok || bad "export --model m.onnx: $(cat again.out)"
# eval of the exported model without a checkpoint (its own weights) equals
# eval of the checkpoint it came from: same samples, loss and accuracy
evaldata=(--data synthetic --synthetic-shape 1x12x12 --synthetic-size 256 --seed 3 --precision fp32 --batch 32)
"$bin" eval --checkpoint run.safetensors "${evaldata[@]}" >eval_ckpt.out 2>&1 \
  && "$bin" eval --model m.onnx "${evaldata[@]}" >eval_onnx.out 2>&1 \
  && grep -q "^eval: .* samples, loss" eval_onnx.out && [ "$(cat eval_ckpt.out)" = "$(cat eval_onnx.out)" ] && ok \
  || bad "eval --model m.onnx vs --checkpoint: $(cat eval_ckpt.out eval_onnx.out)"
expect_named eval_no_weights 2 "--checkpoint FILE is required unless --model is an .onnx" -- eval --model small
"$bin" train "${syn[@]}" --model m.onnx --max-steps 2 >train_onnx.out 2>&1 && grep -q "test accuracy" train_onnx.out && ok \
  || bad "train --model m.onnx: $(tail -3 train_onnx.out)"
"$bin" bench "${data[@]}" --batches 32 --models m.onnx,small --precisions fp32,amp-bf16 --steps 2 --out bench >bench.out 2>&1 \
  && grep -q "4 ok, 0 failed" bench.out && ok || bad "bench --models m.onnx,small: $(tail -5 bench.out)"

echo "this is not an ONNX file" >bad.onnx
head -c 3000 m.onnx >truncated.onnx
expect_named train_bad_onnx 1 "bad.onnx: not an ONNX model" -- train "${syn[@]}" --model bad.onnx
expect_named train_truncated_onnx 1 "truncated.onnx: " -- train "${syn[@]}" --model truncated.onnx
expect_named train_missing_onnx 2 "--model: model file missing.onnx: not found" -- train --model missing.onnx
expect_named train_shape_onnx 1 "m.onnx: the model takes 1x12x12 inputs .* the data has 3x8x8" -- \
  train --data synthetic --synthetic-shape 3x8x8 --model m.onnx --max-steps 1
# bench reports a model that cannot be built as the failure of its cells
"$bin" bench "${data[@]}" --batches 32 --models bad.onnx --precisions fp32 --steps 1 --out bench2 >bench2.out 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "bad.onnx fp32 batch 32: error: bad.onnx: not an ONNX model" bench2.out \
  && grep -q "0 ok, 1 failed" bench2.out && ok || bad "bench --models bad.onnx: exit $rc: $(tail -3 bench2.out)"
expect_named export_no_output 2 "needs -o" -- export --checkpoint run.safetensors
expect_named export_format 2 "--format 'tflite'" -- export --format tflite --checkpoint run.safetensors -o x.onnx
expect_named export_no_checkpoint 2 "needs --checkpoint" -- export -o x.onnx
expect_named export_missing_checkpoint 1 "nope.safetensors" -- export --checkpoint nope.safetensors -o x.onnx
expect_named export_wrong_model 1 "run.safetensors: .*saved for model 'small', this model is 'cnn10'\): give --model the model" -- \
  export --checkpoint run.safetensors --model cnn10 --input-shape 1x12x12 -o x.onnx
grep -q "mp_weights_opts" export_wrong_model.err && bad "export_wrong_model names an API option: $(cat export_wrong_model.err)"
# eval of a checkpoint under another --model: what to do, no API option names
expect_named eval_wrong_model 1 "run.safetensors: .*saved for model 'small', this model is 'cnn10'\): give the --model the \
checkpoint was trained with \(or leave --model out\)$" -- eval --checkpoint run.safetensors --model cnn10 \
  --data synthetic --synthetic-shape 1x12x12 --synthetic-size 256
! grep -q mp_weights_opts eval_wrong_model.err && ok || bad "eval names an API option: $(cat eval_wrong_model.err)"
# eval of m.onnx (10 outputs) against other class counts: the error names the
# model's output width and the file it comes from (the .onnx file or the
# checkpoint), never the checkpoint's rows as "the data's classes"; labels
# within the 10 outputs evaluate, as they do for a 10-class checkpoint
python3 - <<'PY' || bad "could not write the npy files"
import struct
def npy(name, descr, shape, body):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * (-(11 + len(h)) % 64) + "\n"
    open(name, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + body)
npy("x64.npy", "|u1", "(64, 1, 12, 12)", bytes((i * 7) % 251 for i in range(64 * 144)))
for k in (4, 12):
    npy("y64_%d.npy" % k, "<i8", "(64,)", struct.pack("<64q", *[i % k for i in range(64)]))
PY
"$bin" train --data npy:x64.npy,y64_4.npy --batch 16 --epochs 1 --max-steps 2 --save c4.safetensors >c4.out 2>&1 \
  || bad "train on 4 classes: $(tail -3 c4.out)"
expect_named eval_onnx_ckpt_classes 1 "^mixprec eval: --model m.onnx gives 10 classes \(its output width\), --checkpoint \
c4.safetensors has 4 \(its tensor 'fc2.weight' has 4 rows\)" -- eval --model m.onnx --checkpoint c4.safetensors "${evaldata[@]}"
expect_named eval_onnx_data_classes 1 "x64.npy .*: the data has 12 classes \(labels up to 11\), more than the 10 classes of \
--model m.onnx \(its output width\)$" -- eval --model m.onnx --data npy:x64.npy,y64_12.npy
"$bin" eval --model m.onnx --data npy:x64.npy,y64_4.npy >eval_onnx4.out 2>&1 && grep -q "^eval: 6 samples" eval_onnx4.out \
  && "$bin" eval --model m.onnx --checkpoint run.safetensors --data npy:x64.npy,y64_4.npy >eval_onnx4c.out 2>&1 \
  && grep -q "^eval: 6 samples" eval_onnx4c.out && ok \
  || bad "eval --model m.onnx of 4-class data: $(cat eval_onnx4.out eval_onnx4c.out)"
expect_named export_shape 2 "--input-shape '1x12'" -- export --checkpoint run.safetensors --input-shape 1x12 -o x.onnx
expect_named export_shape_wrap 2 "--input-shape '4294967297x12x12' must be CxHxW" -- \
  export --checkpoint run.safetensors --input-shape 4294967297x12x12 -o x.onnx
expect_named export_to_dir 2 "-o .*" -- export --checkpoint run.safetensors --input-shape 1x12x12 -o "$work"
# -o naming the file the weights come from is refused before anything is written
cp run.safetensors keep.safetensors && cp m.onnx keep.onnx
expect_named export_over_checkpoint 2 "-o ./keep.safetensors and --checkpoint keep.safetensors name the same file" -- \
  export --checkpoint keep.safetensors --input-shape 1x12x12 -o ./keep.safetensors
expect_named export_over_model 2 "-o keep.onnx and --model keep.onnx name the same file" -- \
  export --model keep.onnx --input-shape 1x12x12 -o keep.onnx
cmp -s keep.safetensors run.safetensors && cmp -s keep.onnx m.onnx && ok || bad "export -o overwrote its input"
[ ! -e x.onnx ] && ok || bad "a failed export left x.onnx"
"$bin" export --help | grep -q -- "--fp16-weights" && ok || bad "export --help"

python3 - m.onnx m16.onnx again.onnx <<'PY' && ok || bad "onnxruntime cannot run the exported models (or python3 lacks onnxruntime)"
import sys
import numpy as np, onnxruntime as ort
x = np.random.default_rng(0).standard_normal((5, 1, 12, 12)).astype(np.float32)
outs = []
for path in sys.argv[1:]:
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    outs.append(s.run(None, {s.get_inputs()[0].name: x})[0])
    assert outs[-1].shape == (5, 10), outs[-1].shape
assert np.max(np.abs(outs[0] - outs[1])) <= 1e-2 * np.max(np.abs(outs[0])), "fp16 weights change the logits"
assert np.array_equal(outs[0], outs[2]), "an imported and re-exported model computes other logits"
PY

# the input normalization travels in the model's metadata: the checkpoint's
# per-channel statistics (and again after import -> export), the identity
# for a run that did not normalize; eval of either model equals eval of
# its checkpoint; a malformed record is one error naming the key
python3 - run.safetensors m.onnx again.onnx <<'PY' && ok || bad "normalization metadata of the exported models"
import json, struct, sys
import onnx
with open(sys.argv[1], "rb") as f:
    meta = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"]
for path in sys.argv[2:]:
    props = {p.key: p.value for p in onnx.load(path).metadata_props}
    for key in ("mixprec.norm_mean", "mixprec.norm_std"):
        got = [float(v) for v in props[key].split(",")]
        want = [float(v) for v in meta[key].split(",")]
        assert len(got) == len(want) == 1 and abs(got[0] - want[0]) <= 1e-6 * abs(want[0]), (path, key, got, want)
PY
"$bin" train "${syn[@]}" --max-steps 4 --no-normalize --save raw.safetensors >raw.out 2>&1 \
  && "$bin" export --checkpoint raw.safetensors --model small --input-shape 1x12x12 -o raw.onnx >raw_export.out 2>&1 \
  && "$bin" eval --checkpoint raw.safetensors "${evaldata[@]}" >raw_ckpt.out 2>&1 \
  && "$bin" eval --model raw.onnx "${evaldata[@]}" >raw_onnx.out 2>&1 && [ "$(cat raw_ckpt.out)" = "$(cat raw_onnx.out)" ] \
  && ok || bad "--no-normalize run: eval of its export differs: $(cat raw.out raw_export.out raw_ckpt.out raw_onnx.out | tail -6)"
python3 - m.onnx badmeta.onnx <<'PY' || bad "could not write badmeta.onnx"
import sys, onnx
m = onnx.load(sys.argv[1])
for p in m.metadata_props:
    if p.key == "mixprec.norm_std":
        p.value = "0.5,abc"
onnx.save(m, sys.argv[2])
PY
expect_named eval_bad_metadata 1 "badmeta.onnx: metadata mixprec.norm_std: '0.5,abc' is not a list of" -- eval --model badmeta.onnx "${evaldata[@]}"
# a weights-only file (no run metadata, no optimizer state: what
# mp_graph_save_weights or PyTorch's save_file write; no normalization:
# evaluated without) exports as --help says and computes what its run did;
# export refused it as "not a mixprec checkpoint"
python3 - raw.safetensors weights_only.safetensors <<'PY' || bad "could not write weights_only.safetensors"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head, data = json.loads(f.read(n)), f.read()
out, blob = {}, b""
for name, t in sorted(head.items()):
    if name == "__metadata__" or name.startswith("optim/"):
        continue
    b, e = t["data_offsets"]
    out[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [len(blob), len(blob) + e - b]}
    blob += data[b:e]
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + blob)
PY
"$bin" export --checkpoint weights_only.safetensors --model small --input-shape 1x12x12 -o weights_only.onnx \
  >weights_only_export.out 2>&1 \
  && "$bin" eval --model weights_only.onnx "${evaldata[@]}" --no-normalize >weights_only_eval.out 2>&1 \
  && [ "$(cat raw_ckpt.out)" = "$(cat weights_only_eval.out)" ] && ok \
  || bad "export of a weights-only file: $(cat weights_only_export.out weights_only_eval.out | tail -3)"
echo "cli_onnx: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
