#!/usr/bin/env bash
# cli_errors.sh — bad input to `mixprec train` gives one clear error line
# naming the option/file and a non-zero exit, never a crash.
set -u
bin=$1
work=${MP_WORK:-/tmp/mp_cli_test}/errors
rm -rf "$work" && mkdir -p "$work"
pass=0 fail=0

# expect EXIT_CODE PATTERN -- ARGS...
expect() {
  local want_rc=$1 pattern=$2; shift 3
  local out rc
  out=$("$bin" "$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" -eq "$want_rc" ] && grep -q -- "$pattern" <<<"$out" && [ "$(wc -l <<<"$out")" -le 2 ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: mixprec $* -> rc $rc (want $want_rc), stderr: $out (want /$pattern/)"
  fi
}

expect 2 "unknown option '--bogus'" -- train --bogus
expect 2 "unknown command 'trian'" -- trian
expect 2 "\-\-model: unknown model 'resnet999'" -- train --model resnet999
expect 2 "\-\-model: model 'wrn-27-10': depth 27 is not 6n+4" -- train --model wrn-27-10
expect 1 "\-\-data 'imagenet': unknown dataset" -- train --data imagenet
expect 2 "\-\-epochs 'many' is not an integer" -- train --epochs many
expect 2 "\-\-batch 0 is out of range" -- train --batch 0
expect 2 "\-\-lr 'nan' is not a finite number" -- train --lr nan
expect 2 "\-\-epochs needs a value" -- train --epochs
expect 2 "\-\-precision 'fp8'" -- train --precision fp8
expect 1 "\-\-optimizer 'rmsprop': unknown" -- train --optimizer rmsprop --data synthetic
expect 1 "$work/none" -- train --data-dir "$work/none"
expect 1 "batch 70000 is larger than the training set" -- train --batch 70000
expect 1 "\-\-lr-schedule" -- train --data synthetic --synthetic-size 100 --batch 10 --lr-schedule warp:9
expect 2 "\-\-log $work/no/such/dir/x.jsonl: directory $work/no/such/dir does not exist" -- train --data synthetic --synthetic-size 100 --batch 10 --log "$work/no/such/dir/x.jsonl"

# mixed-precision options: clear errors before any training starts
syn=(--data synthetic --synthetic-size 100 --batch 10)
expect 2 "\-\-precision 'fp12': unknown (known: fp32, tf32, amp-fp16" -- train --precision fp12
# devices: a bad name, and a GPU this machine does not have (CPU-only build, no driver, or too few GPUs)
expect 2 "\-\-device 'gpu': expected cpu, cuda, cuda:N or auto" -- train --device gpu
expect 1 "cuda:7" -- train "${syn[@]}" --device cuda:7
expect 2 "\-\-device 'cuda:x'" -- bench --device cuda:x
expect 1 "no layer named 'conv9'" -- train "${syn[@]}" --precision amp-bf16 --precision-override conv9=fp32
expect 1 "dtype 'fp64' unknown" -- train "${syn[@]}" --precision amp-bf16 --precision-override fc2=fp64
expect 1 "\-\-loss-scale-growth 1 must be > 1" -- train "${syn[@]}" --precision amp-fp16 --loss-scale-growth 1
expect 1 "\-\-loss-scale-backoff 1.5 must be in (0, 1)" -- train "${syn[@]}" --precision amp-fp16 --loss-scale-backoff 1.5
expect 1 "\-\-min-loss-scale 100 is larger than \-\-max-loss-scale 10" -- train "${syn[@]}" --precision amp-fp16 --min-loss-scale 100 --max-loss-scale 10
expect 2 "\-\-accumulate 0 is out of range" -- train --accumulate 0
expect 2 "\-\-loss-scaling 'maybe' must be on or off" -- train --loss-scaling maybe

# data parallelism: more GPUs than present, a CPU device, bad options
expect 2 "\-\-gpus 64: more GPUs than this machine has (found" -- train "${syn[@]}" --gpus 64
expect 2 "\-\-gpus 2: data-parallel training runs on GPUs, not with \-\-device cpu" -- train "${syn[@]}" --gpus 2 --device cpu
expect 2 "\-\-gpus 0 is out of range" -- train --gpus 0
expect 2 "\-\-allreduce 'int8' must be auto, fp32, fp16 or bf16" -- train --allreduce int8
expect 2 "\-\-f32-weight-grads needs fp32 master weights" -- train --precision bf16 --f32-weight-grads
expect 2 "\-\-bucket-mb 0 is out of range" -- train --bucket-mb 0
expect 2 "\-\-dist-timeout 'soon' is not a finite number" -- train --dist-timeout soon
# under mpirun every rank says the world size does not match --gpus, and the job stops
if command -v mpirun >/dev/null && ldd "$bin" 2>/dev/null | grep -q libmpi; then
  out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 timeout 120 \
        mpirun -np 2 --oversubscribe "$bin" train "${syn[@]}" --gpus 3 2>&1); rc=$?
  n=$(grep -c "rank [01]: \-\-gpus 3, but mpirun started 2 ranks" <<<"$out")
  if [ "$rc" -ne 0 ] && [ "$n" -eq 2 ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL: mpirun -np 2 train --gpus 3 -> rc $rc, $n rank lines: $out"; fi
else
  echo "note: no mpirun or no MPI in this build: the mpirun world-size check is not run"
fi

# corrupt dataset files: a wrong magic, a truncated file
mkdir -p "$work/bad_magic" "$work/truncated"
printf '\x00\x00\x08\x01\x00\x00\x00\x02\x01\x02' | gzip >"$work/bad_magic/train-labels-idx1-ubyte.gz"
printf 'garbagegarbagegarbage' | gzip >"$work/bad_magic/train-images-idx3-ubyte.gz"
expect 1 "$work/bad_magic/train-images-idx3-ubyte.gz" -- train --data-dir "$work/bad_magic"
src=/usr/share/datasets/fashion-mnist
if [ -r $src/t10k-images-idx3-ubyte.gz ]; then
  head -c 200000 $src/t10k-images-idx3-ubyte.gz >"$work/truncated/train-images-idx3-ubyte.gz"
  cp $src/t10k-labels-idx1-ubyte.gz "$work/truncated/train-labels-idx1-ubyte.gz"
  expect 1 "truncated" -- train --data-dir "$work/truncated"
fi

# NaN in float IDX data: the error names the file and the sample index
mkdir -p "$work/nan"
{ printf '\x00\x00\x0d\x03\x00\x00\x00\x03\x00\x00\x00\x02\x00\x00\x00\x02'
  for i in 1 2 3 4 5 6 7 8 9; do printf '\x3f\x00\x00\x00'; done
  printf '\x7f\xc0\x00\x00\x3f\x00\x00\x00\x3f\x00\x00\x00'; } >"$work/nan/train-images-idx3-ubyte"
printf '\x00\x00\x08\x01\x00\x00\x00\x03\x00\x01\x01' >"$work/nan/train-labels-idx1-ubyte"
expect 1 "$work/nan/train-images-idx3-ubyte.*sample 2" -- train --data-dir "$work/nan"

# out of memory: a batch whose activations cannot be allocated is a clear
# error naming the batch and the bytes, not a crash (memory capped for the run)
oom_args=(train --model cnn10 --data synthetic --synthetic-size 3000 --batch 3000 --epochs 1)
if grep -q __asan_init "$bin"; then
  out=$(ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=1500:detect_leaks=0 "$bin" "${oom_args[@]}" 2>&1 >/dev/null); rc=$?
else
  out=$( (ulimit -v 2500000; "$bin" "${oom_args[@]}") 2>&1 >/dev/null); rc=$?
fi
if [ "$rc" -eq 1 ] && grep -Eq "cannot allocate [0-9]+ bytes .*batch 3000|out of memory" <<<"$out" && [ "$(wc -l <<<"$out")" -le 2 ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1)); echo "FAIL: out-of-memory run -> rc $rc, stderr: $out"
fi

# help works everywhere
"$bin" --help | grep -q "train" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: mixprec --help"; }
"$bin" train --help | grep -q -- "--precision" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: train --help"; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
