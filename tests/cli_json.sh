#!/usr/bin/env bash
# cli_json.sh MIXPREC — every JSON the CLI writes is valid JSON when the paths
# in it hold a double quote and a backslash: the train --log records (an
# npy: data path, an .onnx model path), eval --json (of a checkpoint and of an
# .onnx model), bench's results.jsonl, train-gan's batch_times.jsonl (its
# samples path) and info --json. python3's json module reads each one back
# and must find the paths unchanged.
set -u
bin=$(realpath "$1")
work=${MP_WORK:-/tmp/mp_cli_test}/json
rm -rf "$work" && mkdir -p "$work" || exit 1
d=$work/'we"ird\dir'
mkdir -p "$d" || exit 1
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# check FILE KEY=VALUE...: every line of FILE is a JSON object whose KEYs
# hold the VALUEs
check() {
  python3 - "$@" <<'PY'
import json, sys
path, want = sys.argv[1], dict(kv.split("=", 1) for kv in sys.argv[2:])
lines = open(path, encoding="utf-8").read().splitlines()
assert lines, "no records"
for line in lines:
    rec = json.loads(line)
    for k, v in want.items():
        assert rec.get(k) == v, "%s is %r, want %r" % (k, rec.get(k), v)
PY
}

# 200 samples of 1x12x12 in 10 classes, as two .npy files (a tenth held out)
python3 - "$d" <<'PY' || { echo "FAIL: making the .npy files"; exit 1; }
import os, struct, sys
def npy(name, descr, shape, body):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * (-(10 + len(h) + 1) % 64) + "\n"
    open(os.path.join(sys.argv[1], name), "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + body)
npy("x.npy", "|u1", "(200, 1, 12, 12)", bytes((i * 37) % 251 for i in range(200 * 144)))
npy("y.npy", "<i8", "(200,)", struct.pack("<200q", *[i % 10 for i in range(200)]))
PY
data="npy:$d/x.npy,$d/y.npy"
run=(--data "$data" --epochs 1 --batch 20)

# 1. train --log: the data path
"$bin" train "${run[@]}" --model small --log "$d/run.jsonl" --save "$d/run.safetensors" >"$work/train.out" 2>&1 \
  && ok || bad "train: $(tail -3 "$work/train.out")"
check "$d/run.jsonl" "data=$data" model=small && ok || bad "train --log: $(cat "$d/run.jsonl")"

# 2. the model path: an .onnx model under the same folder
"$bin" export --checkpoint "$d/run.safetensors" --model small --input-shape 1x12x12 -o "$d/m.onnx" \
  >"$work/export.out" 2>&1 && ok || bad "export: $(cat "$work/export.out")"
"$bin" train "${run[@]}" --model "$d/m.onnx" --max-steps 2 --log "$d/onnx.jsonl" >"$work/onnx.out" 2>&1 \
  && ok || bad "train --model m.onnx: $(tail -3 "$work/onnx.out")"
check "$d/onnx.jsonl" "data=$data" "model=$d/m.onnx" && ok || bad "train --log of an .onnx model: $(cat "$d/onnx.jsonl")"

# 3. eval --json of the checkpoint and of the .onnx model
"$bin" eval --checkpoint "$d/run.safetensors" --data "$data" --json >"$work/eval.json" 2>"$work/eval.err" \
  && check "$work/eval.json" "checkpoint=$d/run.safetensors" model=small && ok \
  || bad "eval --json: $(cat "$work/eval.json" "$work/eval.err")"
"$bin" eval --model "$d/m.onnx" --data "$data" --json >"$work/eval_onnx.json" 2>"$work/eval_onnx.err" \
  && check "$work/eval_onnx.json" "model=$d/m.onnx" && ok \
  || bad "eval --model m.onnx --json: $(cat "$work/eval_onnx.json" "$work/eval_onnx.err")"

# 4. bench: results.jsonl names the data and the .onnx model
"$bin" bench --data "$data" --models "$d/m.onnx" --precisions fp32 --batches 20 --steps 2 --out "$d/bench" \
  >"$work/bench.out" 2>&1 && ok || bad "bench: $(tail -3 "$work/bench.out")"
check "$d/bench/results.jsonl" "data=$data" "model=$d/m.onnx" status=ok && ok \
  || bad "results.jsonl: $(cat "$d/bench/results.jsonl")"

# 5. train-gan: batch_times.jsonl names the sample grid under --out
"$bin" train-gan --data synthetic --synthetic-shape 1x28x28 --synthetic-size 64 --epochs 1 --batch 32 --device cpu \
  --out "$d/gan" >"$work/gan.out" 2>&1 && ok || bad "train-gan: $(tail -3 "$work/gan.out")"
python3 -c 'import json, sys
r = json.loads(open(sys.argv[1] + "/batch_times.jsonl").read())
assert r["samples"].startswith(sys.argv[1] + "/samples_epoch1."), r["samples"]' "$d/gan" && ok \
  || bad "batch_times.jsonl: $(cat "$d/gan/batch_times.jsonl")"

# 6. info --json
"$bin" info --json >"$work/info.json" 2>&1 && python3 -c 'import json, sys; json.load(open(sys.argv[1]))' \
  "$work/info.json" && ok || bad "info --json: $(head -5 "$work/info.json")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
