#!/usr/bin/env bash
# cli_bad_inputs.sh — drives the CLI through a table of bad inputs (files,
# options, checkpoint metadata, output paths) and asserts for each row:
#   - the exit status (the row's, or any non-zero one for "!"),
#   - exactly one stderr line, matching the row's pattern (which names the
#     file, option, key or tensor),
#   - no sanitizer report (the suite runs under ASan+UBSan too),
#   - no hang (each run is bounded with `timeout`),
#   - nothing that existed before the run was overwritten (checksums and
#     types of every file under the work folder, and of /dev/null, /dev/full),
#     not even by a write that fails (an existing export under a file size
#     limit).
# Every bad file is made here, at test time (python3, standard library).
# The rows in the second table exercise the training step and checkpoint
# loading (shapes and values checked against the model, divergence).
set -u
export LC_ALL=C # one sort order for sort and comm
bin=$(realpath "$1")
work=${MP_WORK:-/tmp/mp_cli_test}/bad_inputs
snap=$work.snapshots # outside $work: the snapshots are not part of what they compare
rm -rf "$work" "$snap" && mkdir -p "$work/in" "$work/c" "$snap"
in=$work/in
pass=0 fail=0
py=python3

# ---- bad files -----------------------------------------------------------------
cat >"$in/gen.py" <<'PY'
"""gen.py idx DIR N H TN TH TRAIN_LABEL TEST_LABEL [sbyte] | cifar DIR TEST_LABEL |
   meta IN OUT KEY=VALUE|-KEY ... | tensor IN OUT NAME (transpose|nan|inf|neg)"""
import json, os, struct, sys

def idx(path, code, shape, body):
    with open(path, "wb") as f:
        f.write(bytes([0, 0, code, len(shape)]) + struct.pack(">%dI" % len(shape), *shape) + body)

def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), bytearray(b[8 + n:])

def save(path, head, data):
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))

cmd, a = sys.argv[1], sys.argv[2:]
if cmd == "idx":
    d, n, h, tn, th, lab, tlab = a[0], *map(int, a[1:7])
    code = 0x09 if len(a) > 7 else 0x08
    os.makedirs(d, exist_ok=True)
    for pre, cnt, hw, bad in (("train", n, h, lab), ("t10k", tn, th, tlab)):
        idx(f"{d}/{pre}-images-idx3-ubyte", 0x08, [cnt, hw, hw], bytes((i * 7) % 256 for i in range(cnt * hw * hw)))
        labels = [i % 10 for i in range(cnt)]
        labels[cnt // 2] = bad
        idx(f"{d}/{pre}-labels-idx1-ubyte", code, [cnt], bytes(l % 256 for l in labels))
elif cmd == "cifar":
    d, tlab = a[0], int(a[1])
    os.makedirs(d, exist_ok=True)
    for i in range(1, 6):
        open(f"{d}/data_batch_{i}.bin", "wb").write(bytes([i % 10]) + bytes([i]) * 3072)
    open(f"{d}/test_batch.bin", "wb").write(bytes([3]) + bytes(3072) + bytes([tlab]) + bytes(3072))
elif cmd == "meta":
    head, data = load(a[0])
    for kv in a[2:]:
        if kv.startswith("-"):
            head["__metadata__"].pop(kv[1:])
        else:
            k, v = kv.split("=", 1)
            head["__metadata__"][k] = v.replace("\\n", "\n")
    save(a[1], head, data)
elif cmd == "tensor":
    head, data = load(a[0])
    name, how = a[2], a[3]
    t = head[name]
    if how == "transpose":
        t["shape"][0], t["shape"][1] = t["shape"][1], t["shape"][0]
    else:
        v = {"nan": float("nan"), "inf": float("inf"), "neg": -1.0}[how]
        b, e = t["data_offsets"]
        data[b:b + 4] = struct.pack("<f", v)
    save(a[1], head, data)
PY
gen() { $py "$in/gen.py" "$@" || { echo "FAIL: gen.py $*"; exit 1; }; }

gen idx "$in/test56" 64 28 16 56 1 1            # test images 56x56 beside 28x28 training images
gen idx "$in/train56" 64 56 16 28 1 1           # the other way round (an over-read in evaluation)
gen idx "$in/label201" 64 28 16 28 201 1        # a training label outside Fashion-MNIST's 10 classes
gen idx "$in/testlabel10" 64 28 16 28 1 10      # a test label outside them
gen idx "$in/labelneg" 64 28 16 28 -1 1 sbyte   # a negative (signed byte) label
gen cifar "$in/cifar_label" 10                  # CIFAR test record with label 10
gen cifar "$in/cifar_fifo" 1
rm "$in/cifar_fifo/data_batch_2.bin" && mkfifo "$in/cifar_fifo/data_batch_2.bin"
mkdir -p "$in/idx_fifo" && cp "$in/label201/"* "$in/idx_fifo/" && rm "$in/idx_fifo/train-images-idx3-ubyte" \
  && mkfifo "$in/idx_fifo/train-images-idx3-ubyte"
mkdir -p "$in/idx_dir/train-images-idx3-ubyte" && cp "$in/label201/"*labels* "$in/idx_dir/"
mkdir -p "$in/bad_magic" "$in/nan"
printf '\x00\x00\x08\x01\x00\x00\x00\x02\x01\x02' | gzip >"$in/bad_magic/train-labels-idx1-ubyte.gz"
printf 'garbagegarbagegarbage' | gzip >"$in/bad_magic/train-images-idx3-ubyte.gz"
{ printf '\x00\x00\x0d\x03\x00\x00\x00\x03\x00\x00\x00\x02\x00\x00\x00\x02'
  for i in 1 2 3 4 5 6 7 8 9; do printf '\x3f\x00\x00\x00'; done
  printf '\x7f\xc0\x00\x00\x3f\x00\x00\x00\x3f\x00\x00\x00'; } >"$in/nan/train-images-idx3-ubyte"
printf '\x00\x00\x08\x01\x00\x00\x00\x03\x00\x01\x01' >"$in/nan/train-labels-idx1-ubyte"
fm=/usr/share/datasets/fashion-mnist
if [ -r $fm/t10k-images-idx3-ubyte.gz ]; then
  mkdir -p "$in/truncated"
  head -c 200000 $fm/t10k-images-idx3-ubyte.gz >"$in/truncated/train-images-idx3-ubyte.gz"
  cp $fm/t10k-labels-idx1-ubyte.gz "$in/truncated/train-labels-idx1-ubyte.gz"
fi

# a real checkpoint of the run the resume rows continue, then edited copies
syn=(--data synthetic --synthetic-size 100 --synthetic-shape 1x8x8 --batch 10)
run=(train "${syn[@]}" --epochs 3 --precision amp-fp16 --quiet)
ck=$in/base.safetensors
if ! "$bin" "${run[@]}" --stop-after 1 --save "$ck" >/dev/null 2>"$in/base.err"; then
  echo "FAIL: could not write the base checkpoint: $(cat "$in/base.err")"; exit 1
fi
raw=$in/raw.safetensors # the same run without input normalization
if ! "$bin" "${run[@]}" --stop-after 1 --no-normalize --save "$raw" >/dev/null 2>"$in/raw.err"; then
  echo "FAIL: could not write the --no-normalize checkpoint: $(cat "$in/raw.err")"; exit 1
fi
meta() { local out=$in/$1.safetensors; shift; gen meta "$ck" "$out" "$@"; }
meta epoch_neg mixprec.epoch=-5
meta epoch_nan mixprec.epoch=nan
meta epoch_huge mixprec.epoch=1e300
meta epoch_frac mixprec.epoch=1.5
meta epoch_missing -mixprec.epoch
meta gstep_1e30 mixprec.global_step=1e30
meta gstep_2p53 mixprec.global_step=9007199254740992
meta gstep_neg mixprec.global_step=-4
meta osteps_neg mixprec.optim_steps=-1
meta osteps_inf mixprec.optim_steps=inf
meta osteps_over mixprec.optim_steps=11
meta pstep_neg mixprec.plan_step=-1
meta batch_trunc mixprec.batch=10.9
meta batch_other mixprec.batch=20
meta batch_space "mixprec.batch= 10"
meta model_other mixprec.model=cnn10
meta scale_zero scaler.scale=0
meta scale_nan scaler.scale=nan
meta tracker_frac scaler.growth_tracker=1.5
meta hysteresis3 scaler.hysteresis_left=3
meta newline_value 'mixprec.epoch=1\n2'
meta epoch_past_end mixprec.epoch=5
gen tensor "$ck" "$in/transposed.safetensors" fc2.weight transpose
gen tensor "$ck" "$in/bn_var_inf.safetensors" conv1_bn.running_var inf
gen tensor "$ck" "$in/bn_var_neg.safetensors" conv1_bn.running_var neg
gen tensor "$ck" "$in/weight_nan.safetensors" conv2.weight nan
gen tensor "$ck" "$in/adam_v_neg.safetensors" optim/fc2.bias/1 neg   # Adam's v, a mean of g^2
gen tensor "$ck" "$in/adam_m_neg.safetensors" optim/fc2.bias/0 neg   # Adam's m takes either sign
head -c 300 "$ck" >"$in/truncated.safetensors"
printf 'not a checkpoint at all' >"$in/garbage.safetensors"
mkfifo "$in/fifo.safetensors" "$in/fifo_policy.json"
mkdir -p "$in/adir"
echo "keep me" >"$in/existing.txt"
echo '{"mixprec_policy": 1}' >"$in/no_precision.json"
echo '{"mixprec_policy": 1, "precision": "amp-fp16"}' >"$in/amp16.json"
echo '{"mixprec_policy": 1, "precision": "fp16"}' >"$in/fp16.json"
echo '{"mixprec_policy": 1, "loss_scale": {"mode": "dynamic", "init": 128, "min": 1000}}' >"$in/min_over_init.json"
echo '{"mixprec_policy": 1, "loss_scale": {"mode": "dynamic", "init": 128}}' >"$in/init128.json"
echo '{"mixprec_policy": 1, "loss_scale": {"mode": "dynamic", "init": 1e-10}}' >"$in/init_tiny.json"
for k in optimizer schedule batch data warmup resume_garbage resume_done accumulate; do
  echo "keep me" >"$in/keep_$k.csv"
done
ln -s /dev/null "$in/link_to_null"
mkfifo "$in/out_fifo"
mkdir -p "$in/bench_fifo" && mkfifo "$in/bench_fifo/results.jsonl"
mkdir -p "$in/gan_fifo" && mkfifo "$in/gan_fifo/samples_epoch1.png" "$in/gan_fifo/samples_epoch1.pgm"
# inputs an output must not be written over: an .onnx model (exported from the base checkpoint) and .npy data
if ! "$bin" export --checkpoint "$ck" --input-shape 1x8x8 -o "$in/model.onnx" >/dev/null 2>"$in/export.err"; then
  echo "FAIL: could not export the .onnx model: $(cat "$in/export.err")"; exit 1
fi
$py "${MP_SOURCE_DIR:-$(dirname "$0")/..}/tests/make_npy.py" "$in" 100 \
  || { echo "FAIL: making the .npy files"; exit 1; }
# a set for each command, so a failure of one leaves the other's inputs whole
cp "$in/model.onnx" "$in/model_t.onnx" && cp "$in/x.npy" "$in/xt.npy" && cp "$in/y.npy" "$in/yt.npy"
cp "$in/model.onnx" "$in/export_keep.onnx" # an earlier export that a failed one must leave whole
npy=(--data "npy:$in/x.npy,$in/y.npy" --batch 10)
npy_t=(--data "npy:$in/xt.npy,$in/yt.npy" --batch 10)

# ---- the runner ----------------------------------------------------------------
# Types and checksums of everything that exists now (new files may appear).
snapshot() {
  { find "$work" -mindepth 1 -printf '%y %p\n'
    find "$work" -type f -exec md5sum {} +
    stat -c '%F %t:%T %n' /dev/null /dev/full; } | sort
}

# row ID RC PATTERN -- ARGS...   (RC "!" = any non-zero; WRAP=fsize0 limits
# the file size to 0 bytes, as a full disk)
row() {
  local id=$1 want=$2 pattern=$3; shift 4
  local dir=$work/c/$id rc why=""
  mkdir -p "$dir"
  snapshot >"$snap/$id.before"
  (cd "$dir" && if [ "${WRAP:-}" = fsize0 ]; then
     (trap '' XFSZ; ulimit -f 0; exec timeout -k 5 120 "$bin" "$@") 2>&1 >"$dir/out" | cat >"$dir/err"
     exit "${PIPESTATUS[0]}"
   else
     timeout -k 5 120 "$bin" "$@" >"$dir/out" 2>"$dir/err"
   fi); rc=$?
  snapshot >"$snap/$id.after"
  local lines; lines=$(wc -l <"$dir/err")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="hung (killed after 120 s)"
  elif [ "$rc" -eq 0 ]; then why="exit 0"
  elif [ "$want" != "!" ] && [ "$rc" -ne "$want" ]; then why="exit $rc, want $want"
  elif grep -qE "Sanitizer|runtime error:|internal assertion" "$dir/err"; then why="sanitizer report or assertion"
  elif [ "$lines" -ne 1 ]; then why="$lines stderr lines, want 1"
  elif ! grep -qE -- "$pattern" "$dir/err"; then why="message does not match /$pattern/"
  elif [ -n "$(comm -23 "$snap/$id.before" "$snap/$id.after")" ]; then
    why="changed what existed before: $(comm -23 "$snap/$id.before" "$snap/$id.after" | head -3 | tr '\n' ' ')"
  fi
  if [ -z "$why" ]; then pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $id: mixprec $* -> $why; stderr: $(head -c 600 "$dir/err")"
  fi
}

# ---- table 1: options -----------------------------------------------------------
row unknown_option 2 "unknown option '--bogus'" -- train --bogus
row unknown_command 2 "unknown command 'trian'" -- trian
row version_option 2 "mixprec version: unknown option '--bogus'" -- version --bogus
row model_unknown 2 "--model: unknown model 'resnet999'" -- train --model resnet999
row model_wrn_depth 2 "--model: model 'wrn-27-10': depth 27 is not 6n\+4" -- train --model wrn-27-10
row data_unknown 2 "--data 'imagenet': unknown dataset" -- train --data imagenet
row epochs_text 2 "--epochs 'many' is not an integer" -- train --epochs many
row seed_minus 2 "--seed '-1' is not a non-negative integer" -- train --seed -1
row seed_space_minus 2 "--seed ' -1' is not a non-negative integer" -- train "${syn[@]}" --max-steps 1 --seed " -1"
row seed_plus 2 "--seed '\+1' is not a non-negative integer" -- train "${syn[@]}" --max-steps 1 --seed +1
# every integer option: a digit first (or a '-', then out of range), as strtol's leading spaces and '+' are not
row batch_space_plus 2 "--batch ' \+10' is not an integer$" -- train "${syn[@]}" --epochs 1 --max-steps 1 --batch " +10"
row batch_plus 2 "--batch '\+10' is not an integer$" -- train "${syn[@]}" --epochs 1 --max-steps 1 --batch +10
row epochs_space 2 "--epochs ' 1' is not an integer$" -- train "${syn[@]}" --max-steps 1 --epochs " 1"
row batch_minus 2 "--batch -5 is out of range \[1, 1048576\]$" -- train "${syn[@]}" --max-steps 1 --batch -5
row shape_space 2 "--synthetic-shape ' 1x8x8' must be CxHxW" -- train "${syn[@]}" --max-steps 1 \
  --synthetic-shape " 1x8x8"
row bench_batches_space 2 "--batches ' 10' is not an integer$" -- bench --data synthetic --synthetic-size 100 \
  --synthetic-shape 1x8x8 --precisions fp32 --batches " 10" --out "$work/c/bench_batches_space/o"
row batch_zero 2 "--batch 0 is out of range" -- train --batch 0
row lr_nan 2 "--lr 'nan' is not a finite number" -- train --lr nan
row epochs_no_value 2 "--epochs needs a value" -- train --epochs
row precision_fp8 2 "--precision 'fp8'" -- train --precision fp8
row precision_fp12 2 "--precision 'fp12': unknown \(known: fp32, tf32, amp-fp16" -- train --precision fp12
row optimizer_unknown 1 "--optimizer 'rmsprop': unknown" -- train --optimizer rmsprop --data synthetic
row batch_too_large 1 "batch 70000 is larger than the training set" -- train "${syn[@]}" --batch 70000
row lr_schedule_bad 1 "--lr-schedule" -- train "${syn[@]}" --lr-schedule warp:9
row device_gpu 2 "--device 'gpu': expected cpu, cuda, cuda:N or auto" -- train --device gpu
row device_cuda7 1 "cuda:7" -- train "${syn[@]}" --device cuda:7
row bench_device 2 "--device 'cuda:x'" -- bench --device cuda:x
row override_layer 1 "no layer named 'conv9'" -- train "${syn[@]}" --precision amp-bf16 --precision-override conv9=fp32
row override_dtype 1 "dtype 'fp64' unknown" -- train "${syn[@]}" --precision amp-bf16 --precision-override fc2=fp64
row override_empty 2 "mixprec train: --precision-override is empty" -- train "${syn[@]}" --precision-override ""
# --bn-low against the run's final precision: one usage error naming where the precision came from
bnl="mixprec train: --bn-low applies to the fp16 and bf16 precisions only; this run's is"
row bn_low_amp 2 "$bnl amp-fp16 \(from --precision\)$" -- train "${syn[@]}" --precision amp-fp16 --bn-low
row bn_low_amp_policy 2 "$bnl amp-fp16 \(from --precision\)$" -- \
  train "${syn[@]}" --precision amp-fp16 --bn-low --policy "$in/no_precision.json"
row bn_low_policy_amp 2 "$bnl amp-fp16 \(from --policy $in/amp16.json\)$" -- \
  train "${syn[@]}" --bn-low --policy "$in/amp16.json"
# a --policy that is not a regular file: refused, naming it, without waiting on the FIFO or reading the device
row policy_fifo 2 "--policy $in/fifo_policy.json: not a regular file \(a FIFO\)$" -- \
  train "${syn[@]}" --policy "$in/fifo_policy.json"
row policy_dir 2 "--policy $in/adir: is a directory" -- train "${syn[@]}" --policy "$in/adir"
row policy_device 2 "--policy /dev/zero: not a regular file \(a character device\)$" -- \
  train "${syn[@]}" --policy /dev/zero
row bn_low_default 2 "$bnl fp32 \(the default\)$" -- train "${syn[@]}" --bn-low
row override_empty_doctor 2 "mixprec doctor: --precision-override is empty" -- \
  doctor "${syn[@]}" --precision-override ""
row override_twice 1 "--precision-override: layer 'fc2' given twice" -- \
  train "${syn[@]}" --precision amp-bf16 --precision-override fc2=fp32,fc2=bf16
row override_comma 1 "--precision-override 'fc2=fp32,': an empty entry" -- \
  train "${syn[@]}" --precision amp-bf16 --precision-override fc2=fp32,
row scale_growth 1 "--loss-scale-growth 1 must be > 1" -- train "${syn[@]}" --precision amp-fp16 --loss-scale-growth 1
row scale_backoff 1 "--loss-scale-backoff 1.5 must be in \(0, 1\)" -- train "${syn[@]}" --precision amp-fp16 --loss-scale-backoff 1.5
row scale_min_max 1 "--min-loss-scale 100 is larger than --max-loss-scale 10" -- train "${syn[@]}" --precision amp-fp16 --min-loss-scale 100 --max-loss-scale 10
row loss_scale_zero 2 "--loss-scale 0 must be a number > 0 or 'dynamic'" -- train "${syn[@]}" --precision amp-fp16 --loss-scale 0
row loss_scale_tiny 2 "--loss-scale 1e-50 must be a number > 0" -- train "${syn[@]}" --precision amp-fp16 --loss-scale 1e-50
row loss_scale_negative 2 "--loss-scale -1 is out of range" -- train "${syn[@]}" --loss-scale -1
row loss_scale_nan 2 "--loss-scale 'nan' is not a finite number" -- train "${syn[@]}" --loss-scale nan
row loss_scale_dynamic_zero 2 "--loss-scale dynamic:0: the initial scale must be a number > 0" -- train "${syn[@]}" --precision amp-fp16 --loss-scale dynamic:0
row loss_scale_dynamic_text 2 "--loss-scale dynamic: 'x' is not a finite number" -- train "${syn[@]}" --loss-scale dynamic:x
row loss_scale_dynamic_max 1 "--loss-scale 1e\+06 is larger than --max-loss-scale 1000" -- train "${syn[@]}" --precision amp-fp16 --loss-scale dynamic:1e6 --max-loss-scale 1000
# a policy file's loss scale that does not fit: the file's key is named, not a --loss-scale never given
row policy_min_over_init 2 "--policy $in/min_over_init.json: loss_scale.min: 1000 is larger than loss_scale.init 128$" -- \
  train "${syn[@]}" --precision amp-fp16 --policy "$in/min_over_init.json"
row policy_init_over_max 2 "--policy $in/init128.json: loss_scale.init: 128 is larger than --max-loss-scale 64$" -- \
  train "${syn[@]}" --precision amp-fp16 --policy "$in/init128.json" --max-loss-scale 64
row policy_init_under_min 2 "--policy $in/init128.json: loss_scale.init: 128 is smaller than --min-loss-scale 1000$" -- \
  train "${syn[@]}" --precision amp-fp16 --policy "$in/init128.json" --min-loss-scale 1000
row policy_init_tiny 2 "--policy $in/init_tiny.json: loss_scale.init: 1e-10 is below the default minimum loss scale 2\^-24 = 5.96046e-08; give loss_scale.min" -- \
  train "${syn[@]}" --precision amp-fp16 --policy "$in/init_tiny.json"
row gan_scale_window 2 "mixprec train-gan: --loss-scale-window 0 is out of range" -- train-gan --data synthetic --loss-scale-window 0
row gan_scale_value 2 "mixprec train-gan: --max-loss-scale needs a value" -- train-gan --data synthetic --max-loss-scale
row accumulate_zero 2 "--accumulate 0 is out of range" -- train --accumulate 0
row loss_scaling_maybe 2 "--loss-scaling 'maybe' must be on or off" -- train --loss-scaling maybe
row init_unknown 2 "mixprec train: --init: unknown initialization 'xavier' \(he, torch\)" -- train --init xavier
row init_doctor 2 "mixprec doctor: --init: unknown initialization 'He' \(he, torch\)" -- doctor --init He
row init_bench 2 "mixprec bench: --init: unknown initialization 'glorot' \(he, torch\)" -- bench --init glorot
row gpus_too_many 2 "--gpus 64: more GPUs than this machine has \(found" -- train "${syn[@]}" --gpus 64
row gpus_cpu 2 "--gpus 2: data-parallel training runs on GPUs, not with --device cpu" -- train "${syn[@]}" --gpus 2 --device cpu
row gpus_zero 2 "--gpus 0 is out of range" -- train --gpus 0
row allreduce_int8 2 "--allreduce 'int8' must be auto, fp32, fp16 or bf16" -- train --allreduce int8
row f32_grads_bf16 2 "--f32-weight-grads needs fp32 master weights" -- train --data-dir "$work/nodata" \
  --precision bf16 --f32-weight-grads
row f32_grads_policy_fp16 2 "--f32-weight-grads needs fp32 master weights .*fp16 \(from --policy $in/fp16.json\)$" -- \
  train "${syn[@]}" --f32-weight-grads --policy "$in/fp16.json"
row bucket_zero 2 "--bucket-mb 0 is out of range" -- train --bucket-mb 0
row dist_timeout_text 2 "--dist-timeout 'soon' is not a finite number" -- train --dist-timeout soon
# an inconsistent MPI launch: refused, not trained alone as rank 0 by every process
mpienv="mixprec train: the MPI launch environment:"
OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=5 row mpi_rank_outside 2 \
  "$mpienv OMPI_COMM_WORLD_RANK='5' must be a rank in \[0, 1\] \(OMPI_COMM_WORLD_SIZE=2\)$" -- "${run[@]}"
PMI_SIZE=many PMI_RANK=0 row mpi_size_junk 2 "$mpienv PMI_SIZE='many' must be a world size in \[1, 2147483647\]$" -- \
  "${run[@]}"

# ---- table 1: data files ----------------------------------------------------------
row data_dir_missing 1 "$work/none" -- train --data-dir "$work/none"
row idx_bad_magic 1 "$in/bad_magic/train-images-idx3-ubyte.gz" -- train --data-dir "$in/bad_magic"
[ -d "$in/truncated" ] && row idx_truncated 1 "$in/truncated/train-images-idx3-ubyte.gz: truncated" -- train --data-dir "$in/truncated"
row idx_nan_pixel 1 "$in/nan/train-images-idx3-ubyte.*sample 2" -- train --data-dir "$in/nan"
row test_shape_56 1 "t10k-images-idx3-ubyte\) has samples of 1x56x56 .*train-images-idx3-ubyte\) has 1x28x28" -- train --data-dir "$in/test56" --batch 16
row train_shape_56 1 "t10k-images-idx3-ubyte\) has samples of 1x28x28 .*train-images-idx3-ubyte\) has 1x56x56" -- train --data-dir "$in/train56" --batch 16
row train_label_201 1 "$in/label201/train-labels-idx1-ubyte: label 201 of sample 32 is outside the dataset's 10 classes" -- train --data-dir "$in/label201" --batch 16
row test_label_10 1 "$in/testlabel10/t10k-labels-idx1-ubyte: label 10 of sample 8 is outside" -- train --data-dir "$in/testlabel10" --batch 16
row label_negative 1 "$in/labelneg/train-labels-idx1-ubyte: label -1 of sample 32" -- train --data-dir "$in/labelneg" --batch 16
row mnist_label_201 1 "$in/label201/train-labels-idx1-ubyte: label 201" -- train --data mnist --data-dir "$in/label201" --batch 16
row bench_label_201 1 "$in/label201/train-labels-idx1-ubyte: label 201" -- bench --data-dir "$in/label201" --batches 16 --out "$work/c/bench_label_201/o"
row gan_test_shape 1 "t10k-images-idx3-ubyte\) has samples of 1x56x56" -- train-gan --data-dir "$in/test56" --out "$work/c/gan_test_shape/o"
row idx_images_fifo 1 "$in/idx_fifo/train-images-idx3-ubyte: not a regular file" -- train --data-dir "$in/idx_fifo"
row idx_images_dir 1 "$in/idx_dir/train-images-idx3-ubyte: is a directory" -- train --data-dir "$in/idx_dir"
row cifar_test_label 1 "$in/cifar_label/test_batch.bin: record 1 has label 10" -- train --data cifar10 --data-dir "$in/cifar_label" --batch 2
row cifar_fifo 1 "$in/cifar_fifo/data_batch_2.bin: not a regular file" -- train --data cifar10 --data-dir "$in/cifar_fifo" --batch 2
# more than the host can give (MIXPREC_HOST_MEM_LIMIT lowers that figure): one error naming the file and the bytes
MIXPREC_HOST_MEM_LIMIT=100000 row idx_host_mem 1 "^mixprec train: out of memory for the images of \
$in/test56/train-images-idx3-ubyte \(values 0 to 50176 of 50176\): asked 200704 bytes \(0\.00 GiB\), 100000 bytes \
\(0\.00 GiB\) available \(MIXPREC_HOST_MEM_LIMIT\)$" -- train --data-dir "$in/test56" --batch 16
MIXPREC_HOST_MEM_LIMIT=50000 row cifar_host_mem 1 "^mixprec train: out of memory for the 5 CIFAR-10 train images of \
$in/cifar_label \(3x32x32 each\): asked 61440 bytes \(0\.00 GiB\), 50000 bytes" -- train --data cifar10 \
  --data-dir "$in/cifar_label" --batch 2

# ---- table 1: checkpoints (--resume) ------------------------------------------------
res() { local id=$1 rc=$2 pat=$3; shift 3; row "$id" "$rc" "$pat" -- "${run[@]}" --resume "$@"; }
res resume_missing 1 "$in/none.safetensors: not found" "$in/none.safetensors"
res resume_fifo 1 "$in/fifo.safetensors: not a regular file \(a FIFO\)" "$in/fifo.safetensors"
res resume_device 1 "/dev/zero: not a regular file \(a character device\)" /dev/zero
res resume_dir 1 "$in/adir: is a directory" "$in/adir"
res resume_truncated 1 "$in/truncated.safetensors: " "$in/truncated.safetensors"
res resume_garbage 1 "$in/garbage.safetensors: " "$in/garbage.safetensors"
res epoch_neg 1 "epoch_neg.safetensors: metadata 'mixprec.epoch' = '-5' must be an integer in \[0, 100000\]" "$in/epoch_neg.safetensors"
res epoch_nan 1 "epoch_nan.safetensors: metadata 'mixprec.epoch' = 'nan' must be an integer" "$in/epoch_nan.safetensors"
res epoch_huge 1 "epoch_huge.safetensors: metadata 'mixprec.epoch' = '1e300' must be an integer" "$in/epoch_huge.safetensors"
res epoch_frac 1 "epoch_frac.safetensors: metadata 'mixprec.epoch' = '1.5' must be an integer" "$in/epoch_frac.safetensors"
res epoch_missing 1 "epoch_missing.safetensors: not a mixprec checkpoint \(metadata 'mixprec.epoch' missing\)" "$in/epoch_missing.safetensors"
res epoch_newline 1 "newline_value.safetensors: metadata 'mixprec.epoch' = '1\\\\x0a2'" "$in/newline_value.safetensors"
res global_step_1e30 1 "gstep_1e30.safetensors: metadata 'mixprec.global_step' = '1e30' must be an integer in \[0, 9007199254740991\]" "$in/gstep_1e30.safetensors"
res global_step_2p53 1 "gstep_2p53.safetensors: metadata 'mixprec.global_step'" "$in/gstep_2p53.safetensors"
res global_step_neg 1 "gstep_neg.safetensors: metadata 'mixprec.global_step' = '-4'" "$in/gstep_neg.safetensors"
res optim_steps_neg 1 "osteps_neg.safetensors: metadata 'mixprec.optim_steps' = '-1' must be an integer in \[0, 10\]" "$in/osteps_neg.safetensors"
res optim_steps_inf 1 "osteps_inf.safetensors: metadata 'mixprec.optim_steps' = 'inf'" "$in/osteps_inf.safetensors"
res optim_steps_over 1 "osteps_over.safetensors: metadata 'mixprec.optim_steps' = '11' must be an integer in \[0, 10\]" "$in/osteps_over.safetensors"
res plan_step_neg 1 "pstep_neg.safetensors: metadata 'mixprec.plan_step' = '-1'" "$in/pstep_neg.safetensors"
res batch_truncated 1 "batch_trunc.safetensors: metadata 'mixprec.batch' = '10.9' must be an integer" "$in/batch_trunc.safetensors"
res batch_space 1 "batch_space.safetensors: metadata 'mixprec.batch' = ' 10' must be an integer" "$in/batch_space.safetensors"
res batch_other 1 "--resume .*batch_other.safetensors: the checkpoint was saved with batch 20, this run uses 10" "$in/batch_other.safetensors"
res model_other 1 "--resume .*model_other.safetensors: the checkpoint was saved with model cnn10" "$in/model_other.safetensors"
res scale_zero 1 "scale_zero.safetensors: metadata 'scaler.scale': loss scaler state 'scale' = 0" "$in/scale_zero.safetensors"
res scale_nan 1 "scale_nan.safetensors: metadata 'scaler.scale' = 'nan' must be a finite number" "$in/scale_nan.safetensors"
# the inputs scaled otherwise than the checkpoint's run scaled them
res norm_dropped 1 "--resume .*base.safetensors: the checkpoint's run normalized its inputs \(channel 0: mean [0-9.]+, std [0-9.]+\), this run does not \(--no-normalize\)" "$ck" --no-normalize
res norm_added 1 "--resume .*raw.safetensors: the checkpoint's run did not normalize its inputs, this run does \(give --no-normalize" "$raw"
res tracker_frac 1 "tracker_frac.safetensors: metadata 'scaler.growth_tracker': .*must be an integer" "$in/tracker_frac.safetensors"

# ---- table 1: output paths ------------------------------------------------------------
row save_device 2 "--save /dev/null: is a character device, not a regular file" -- "${run[@]}" --save /dev/null
row save_link_to_device 2 "--save $in/link_to_null: is a character device" -- "${run[@]}" --save "$in/link_to_null"
row save_fifo 2 "--save $in/out_fifo: is a FIFO" -- "${run[@]}" --save "$in/out_fifo"
row save_dir 2 "--save $in/adir: is a directory" -- "${run[@]}" --save "$in/adir"
row save_no_dir 2 "--save $work/nodir/x.safetensors: directory $work/nodir does not exist" -- "${run[@]}" --save "$work/nodir/x.safetensors"
row log_no_dir 2 "--log $work/no/such/dir/x.jsonl: directory $work/no/such/dir does not exist" -- "${run[@]}" --log "$work/no/such/dir/x.jsonl"
row log_full_device 2 "--log /dev/full: is a character device" -- "${run[@]}" --log /dev/full
row log_fifo 2 "--log $in/out_fifo: is a FIFO" -- "${run[@]}" --log "$in/out_fifo"
WRAP=fsize0 row log_disk_full 1 "--log log.jsonl: write failed: File too large" -- "${run[@]}" --log log.jsonl
# a failed export leaves an existing model whole (the runner compares it), and no new or temporary file
ex=(export --checkpoint "$ck" --input-shape 1x8x8)
WRAP=fsize0 row export_disk_full 1 "^mixprec export: $in/export_keep.onnx: write failed: File too large \(writing the \
temporary file $in/export_keep.onnx.tmp.[0-9]+\)$" -- "${ex[@]}" -o "$in/export_keep.onnx"
WRAP=fsize0 row export_new_disk_full 1 "^mixprec export: new.onnx: write failed: File too large" -- "${ex[@]}" -o new.onnx
left=$(ls "$in" "$work/c/export_new_disk_full" | grep -E "\.onnx\.tmp\.|^new\.onnx")
[ -z "$left" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: a failed export left files: $left"; }
# an output that is the file standard output or error goes to (each row's cwd holds its out and err): the
# command's messages would be mixed into it
sr="is the file standard output is redirected to: the command's messages would be mixed into it"
row export_is_stdout 2 "^mixprec export: -o out $sr; give -o another path$" -- "${ex[@]}" -o out
row export_dev_stdout 2 "^mixprec export: -o /dev/stdout $sr" -- "${ex[@]}" -o /dev/stdout
row log_dev_stdout 2 "^mixprec train: --log /dev/stdout $sr" -- "${run[@]}" --log /dev/stdout
row monitor_csv_is_stdout 2 "^mixprec train: --monitor-csv ./out $sr" -- "${run[@]}" --monitor-csv ./out
row save_is_stderr 2 "^mixprec train: --save err is the file standard error is redirected to" -- "${run[@]}" --save err
row log_is_save 2 "--save run.st and --log ./run.st name the same file" -- "${run[@]}" --save run.st --log ./run.st
row csv_is_log 2 "--log $in/existing.txt and --monitor-csv $in/../in/existing.txt name the same file" -- "${run[@]}" --log "$in/existing.txt" --monitor-csv "$in/../in/existing.txt"
row log_is_resume 2 "--resume $ck and --log $ck name the same file" -- "${run[@]}" --resume "$ck" --log "$ck"
row numerics_log_is_resume 2 "--resume $ck and --numerics-log $ck name the same file" -- \
  "${run[@]}" --resume "$ck" --numerics-log "$ck"
row save_is_policy 2 "--policy $in/amp16.json and --save $in/amp16.json name the same file" -- \
  "${run[@]}" --policy "$in/amp16.json" --save "$in/amp16.json"
row log_is_policy 2 "--policy $in/amp16.json and --log $in/amp16.json name the same file" -- \
  "${run[@]}" --policy "$in/amp16.json" --log "$in/amp16.json"
# an output written over an input (the runner checks the input is left as it was)
ki="writing it would destroy the input; give the output its own path$"
row doctor_over_model 2 "doctor: --policy-out $in/../in/model.onnx is the --model input $in/model.onnx: $ki" -- \
  doctor "${syn[@]}" --model "$in/model.onnx" --probe-steps 1 --policy-out "$in/../in/model.onnx"
row doctor_over_npy 2 "doctor: --policy-out $in/y.npy is the --data input $in/y.npy: $ki" -- \
  doctor "${npy[@]}" --probe-steps 1 --policy-out "$in/y.npy"
row save_over_model 2 "train: --save $in/model_t.onnx is the --model input $in/model_t.onnx: $ki" -- \
  train "${syn[@]}" --model "$in/model_t.onnx" --max-steps 1 --save "$in/model_t.onnx"
row log_over_npy 2 "train: --log $in/xt.npy is the --data input $in/xt.npy: $ki" -- \
  train "${npy_t[@]}" --max-steps 1 --log "$in/xt.npy"
row monitor_csv_fifo 2 "--monitor-csv $in/out_fifo: is a FIFO" -- "${run[@]}" --monitor-csv "$in/out_fifo"
# a file that opens but takes no write (as root; otherwise refused at the open): the error names it
row monitor_csv_proc ! "/proc/version: cannot write" -- "${run[@]}" --monitor-csv /proc/version
row monitor_csv_no_dir 2 "--monitor-csv $work/nodir/m.csv: directory" -- "${run[@]}" --monitor-csv "$work/nodir/m.csv"
# a run refused before training leaves an existing --monitor-csv as it was (the runner compares it; one file each)
kept() {
  local id=$1 rc=$2 pat=$3; shift 3
  row "csv_kept_$id" "$rc" "$pat" -- "${run[@]}" --monitor-csv "$in/keep_$id.csv" "$@"
}
kept optimizer 1 "--optimizer 'bogus': unknown" --optimizer bogus
kept schedule 1 "--lr-schedule 'warp:9': unknown schedule" --lr-schedule warp:9
kept batch 1 "batch 70000 is larger than the training set" --batch 70000
# ...and one refused inside mp_fit, once the run's steps are known or the checkpoint read
kept warmup 1 "--lr-schedule 'cosine,warmup:1000': cosine needs more total steps \(30\) than warm-up steps \(1000\)" \
  --lr-schedule cosine,warmup:1000
kept resume_garbage 1 "--resume $in/garbage.safetensors: " --resume "$in/garbage.safetensors"
kept resume_done 1 "epoch_past_end.safetensors: the checkpoint already completed epoch 5 of --epochs 3" \
  --resume "$in/epoch_past_end.safetensors"
kept accumulate 1 "--accumulate 20 x --batch 10 is more than one epoch \(100 samples\)" --accumulate 20
row csv_kept_data 1 "$work/none" -- train --data-dir "$work/none" --monitor-csv "$in/keep_data.csv"
bsyn=(--data synthetic --synthetic-size 100 --synthetic-shape 1x8x8 --batches 10 --precisions fp32)
row bench_out_file 2 "--out $in/existing.txt: $in/existing.txt is a regular file, not a directory" -- bench "${bsyn[@]}" --out "$in/existing.txt"
row bench_out_under_file 2 "--out $in/existing.txt/sub: $in/existing.txt is a regular file" -- bench "${bsyn[@]}" --out "$in/existing.txt/sub"
row bench_results_fifo 2 "--out $in/bench_fifo/results.jsonl: is a FIFO" -- bench "${bsyn[@]}" --out "$in/bench_fifo"
row gan_samples_fifo 1 "$in/gan_fifo/samples_epoch1.p[ng][gm]: is a FIFO" -- train-gan "${syn[@]}" --epochs 1 --max-steps 2 --out "$in/gan_fifo"
# a full disk under the sample grid (larger than stdio's buffer, so libpng's own write fails): one line, the
# system's error, no "libpng error" of libpng's own beside it
WRAP=fsize0 row gan_samples_disk_full 1 "gan_full/samples_epoch1.p[ng][gm]: write failed: File too large$" -- \
  train-gan --data synthetic --synthetic-size 100 --synthetic-shape 3x32x32 --batch 10 --epochs 1 --max-steps 2 \
  --out gan_full --quiet
row gan_out_file 2 "--out $in/existing.txt: $in/existing.txt is a regular file" -- train-gan "${syn[@]}" --out "$in/existing.txt"

# ---- table 2: the training step and checkpoint loading ------------------------------
row ckpt_transposed 1 "fc2.weight" -- "${run[@]}" --resume "$in/transposed.safetensors"
row ckpt_bn_var_inf 1 "conv1_bn.running_var" -- "${run[@]}" --resume "$in/bn_var_inf.safetensors"
row ckpt_bn_var_neg 1 "conv1_bn.running_var" -- "${run[@]}" --resume "$in/bn_var_neg.safetensors"
row ckpt_weight_nan 1 "conv2.weight" -- "${run[@]}" --resume "$in/weight_nan.safetensors"
row ckpt_adam_v_neg 1 "--resume .*adam_v_neg.safetensors: tensor 'optim/fc2.bias/1' is an optimizer's second moment .* holds -1 at element 0$" -- \
  "${run[@]}" --resume "$in/adam_v_neg.safetensors"
row epoch_past_end 1 "epoch_past_end.safetensors: .*epoch 5" -- "${run[@]}" --resume "$in/epoch_past_end.safetensors"
row diverge_auto_fallback ! "diverged" -- train "${syn[@]}" --synthetic-size 1000 --epochs 2 --precision amp-fp16 --lr 100 --auto-fallback --quiet
row static_scale_skips_all ! "steps skipped|skipped on NaN" -- train "${syn[@]}" --synthetic-size 1000 --epochs 2 --precision amp-fp16 --loss-scale 1e30 --quiet
row forward_overflows_unbounded ! "diverged|steps skipped" -- train "${syn[@]}" --synthetic-size 1000 --epochs 2 --precision amp-fp16 --lr 100 --max-forward-overflows 1048576 --quiet
# skipped_steps in the log continues across --resume: a run split by --stop-after
# and --resume logs what the uninterrupted run logs (an exit-0 check, not a row)
d=$work/c/resume_skipped_steps && mkdir -p "$d"
sk=(train "${syn[@]}" --epochs 2 --max-steps 8 --precision amp-fp16 --loss-scale-window 1 --quiet)
"$bin" "${sk[@]}" --log "$d/whole.jsonl" 2>"$d/err0" && "$bin" "${sk[@]}" --log "$d/split.jsonl" --stop-after 1 \
  --save "$d/ck.safetensors" 2>"$d/err1" && "$bin" "${sk[@]}" --log "$d/split.jsonl" --resume "$d/ck.safetensors" 2>"$d/err2"
skipped() { grep -o '"skipped_steps":[0-9]*' "$1" 2>/dev/null | tr '\n' ' '; }
why="" && [ -n "$(skipped "$d/whole.jsonl")" ] && [ "$(skipped "$d/whole.jsonl")" = "$(skipped "$d/split.jsonl")" ] ||
  why="skipped_steps uninterrupted: $(skipped "$d/whole.jsonl"), split by --resume: $(skipped "$d/split.jsonl")"
if [ -z "$why" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: resume_skipped_steps: $why"; fi

# a negative first moment is a state Adam can be in: it resumes (an exit-0 check, not a row)
d=$work/c/adam_m_neg && mkdir -p "$d"
if "$bin" "${run[@]}" --resume "$in/adam_m_neg.safetensors" >/dev/null 2>"$d/err"; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: adam_m_neg: a negative Adam first moment was refused: $(cat "$d/err")"; fi

# the scaler's options are the resuming run's: a saved count beyond them is clamped and said (exit-0 checks)
d=$work/c/scaler_counts && mkdir -p "$d"
loud=(train "${syn[@]}" --epochs 3 --precision amp-fp16)
if "$bin" "${loud[@]}" --resume "$ck" --loss-scale-window 3 >"$d/w.out" 2>"$d/w.err" \
   && grep -q "base.safetensors: the loss scaler had counted 9 clean steps toward growing the scale, this run's --loss-scale-window is 3: it grows the scale at the next clean step$" "$d/w.out"
then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: scaler_window: $(cat "$d/w.err"; grep -i scaler "$d/w.out")"; fi
if "$bin" "${loud[@]}" --resume "$in/hysteresis3.safetensors" >"$d/h.out" 2>"$d/h.err" \
   && grep -q "hysteresis3.safetensors: the loss scaler had 3 overflows left to absorb, this run's --loss-scale-hysteresis allows 1$" "$d/h.out"
then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: scaler_hysteresis: $(cat "$d/h.err"; grep -i scaler "$d/h.out")"; fi

# a run without normalization resumes without it (an exit-0 check, not a row)
d=$work/c/raw_resume && mkdir -p "$d"
if "$bin" "${run[@]}" --resume "$raw" --no-normalize >/dev/null 2>"$d/err"; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: raw_resume: --no-normalize run not resumed with --no-normalize: $(cat "$d/err")"; fi

# a resumed run normalizes with the statistics its checkpoint recorded, whatever its data gives (another
# split, or samples decoded per batch, give others): resumed on other data and saved, the statistics stay
d=$work/c/norm_kept && mkdir -p "$d"
norm_of() { grep -ao '"mixprec.norm_[a-z]*":"[^"]*"' "$1" | sort; }
if "$bin" "${run[@]}" --synthetic-size 200 --resume "$ck" --stop-after 2 --save "$d/other.safetensors" \
     >/dev/null 2>"$d/err" && [ -n "$(norm_of "$ck")" ] && [ "$(norm_of "$ck")" = "$(norm_of "$d/other.safetensors")" ]
then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: norm_kept: $(cat "$d/err"); saved $(norm_of "$ck"), after $(norm_of "$d/other.safetensors")"; fi

# ---- beyond the table: stale temporary files of a killed save ---------------------------
d=$work/c/stale_tmp && mkdir -p "$d"
dead=4194301 # above any pid this machine hands out (pid_max <= 2^22)
echo partial >"$d/run.safetensors.tmp.$dead"
echo live >"$d/run.safetensors.tmp.$$"
if "$bin" "${run[@]}" --stop-after 1 --save "$d/run.safetensors" >/dev/null 2>"$d/err" && [ -s "$d/run.safetensors" ] \
   && [ ! -e "$d/run.safetensors.tmp.$dead" ] && [ -e "$d/run.safetensors.tmp.$$" ]; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: stale_tmp: the dead process's temporary file is still there, or the live one went: $(ls "$d") $(cat "$d/err")"; fi

# ---- beyond the table: more channels than mp_checkpoint_info's arrays hold (65) ---------
# saving records the statistics of every channel, and resuming applies and checks them as for
# fewer: --no-normalize added or dropped is refused, and the statistics stay on other data
d=$work/c/norm_wide && mkdir -p "$d"
$py "${MP_SOURCE_DIR:-$(dirname "$0")/..}/tests/make_npy.py" "$d" 100 65 || { echo "FAIL: making the 65-channel .npy files"; exit 1; }
wide=(train --data "npy:$d/x.npy,$d/y.npy" --batch 10 --epochs 3 --quiet)
if "$bin" "${wide[@]}" --stop-after 1 --save "$d/wide.safetensors" >/dev/null 2>"$d/err" \
   && "$bin" "${wide[@]}" --no-normalize --stop-after 1 --save "$d/raw.safetensors" >/dev/null 2>>"$d/err" \
   && [ "$(grep -ao '"mixprec.norm_std":"[^"]*"' "$d/wide.safetensors" | tr ',' '\n' | wc -l)" -eq 65 ]
then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: norm_wide_saved: $(cat "$d/err"); saved $(norm_of "$d/wide.safetensors" | cut -c1-120)"; fi
row norm_wide_dropped 1 "--resume .*wide.safetensors: the checkpoint's run normalized its inputs \(channel 0: mean [0-9.]+, std [0-9.]+\), this run does not \(--no-normalize\)" -- "${wide[@]}" --resume "$d/wide.safetensors" --no-normalize
row norm_wide_added 1 "--resume .*raw.safetensors: the checkpoint's run did not normalize its inputs, this run does \(give --no-normalize" -- "${wide[@]}" --resume "$d/raw.safetensors"
if "$bin" "${wide[@]}" --val-fraction 0.3 --resume "$d/wide.safetensors" --stop-after 2 --save "$d/other.safetensors" \
     >/dev/null 2>"$d/err" && [ "$(norm_of "$d/wide.safetensors")" = "$(norm_of "$d/other.safetensors")" ] \
   && "$bin" eval --checkpoint "$d/wide.safetensors" --data "npy:$d/x.npy,$d/y.npy" --json 2>>"$d/err" \
      | grep -q '"normalization":"the checkpoint'"'"'s"'
then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: norm_wide_kept: $(cat "$d/err"); saved $(norm_of "$d/wide.safetensors" | cut -c1-80), after $(norm_of "$d/other.safetensors" | cut -c1-80)"; fi
# an older checkpoint (no statistics recorded) resumes as before, with or without normalization;
# export records all 65 channels, and eval of the .onnx model equals eval of its checkpoint
gen meta "$d/wide.safetensors" "$d/old.safetensors" -mixprec.norm_mean -mixprec.norm_std
if "$bin" "${wide[@]}" --resume "$d/old.safetensors" --stop-after 2 >/dev/null 2>"$d/err" \
   && "$bin" "${wide[@]}" --resume "$d/old.safetensors" --stop-after 2 --no-normalize >/dev/null 2>>"$d/err" \
   && "$bin" export --checkpoint "$d/wide.safetensors" --input-shape 65x8x8 -o "$d/wide.onnx" >/dev/null 2>>"$d/err" \
   && "$bin" eval --checkpoint "$d/wide.safetensors" --data "npy:$d/x.npy,$d/y.npy" >"$d/ckpt.out" 2>>"$d/err" \
   && "$bin" eval --model "$d/wide.onnx" --data "npy:$d/x.npy,$d/y.npy" --batch 10 >"$d/onnx.out" 2>>"$d/err" \
   && grep -q "^eval: 10 samples" "$d/ckpt.out" && cmp -s "$d/ckpt.out" "$d/onnx.out"
then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: norm_wide_old_export: $(cat "$d/err" "$d/ckpt.out" "$d/onnx.out" 2>/dev/null)"; fi

# export writes a checkpoint's normalization into the model's metadata: a
# record of another channel count than the model's input was written as its
# own (for other runtimes to misread); now one error naming the key
meta norm3 mixprec.norm_mean=0.1,0.2,0.3 mixprec.norm_std=0.5,0.5,0.5
row export_norm_channels 1 "norm3.safetensors: metadata 'mixprec.norm_mean' records the input normalization of 3 \
channels, the model's input \(--input-shape 1x8x8\) has 1$" -- export --checkpoint "$in/norm3.safetensors" \
  --input-shape 1x8x8 -o norm3.onnx

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
