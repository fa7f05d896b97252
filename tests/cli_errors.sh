#!/usr/bin/env bash
# cli_errors.sh — bad input to `mixprec train` that needs more than a row of
# cli_bad_inputs.sh (mpirun, a capped memory): one clear error line naming the
# option/file and a non-zero exit, never a crash; standard output that cannot
# be written is an error too.
set -u
bin=$1
work=${MP_WORK:-/tmp/mp_cli_test}/errors
rm -rf "$work" && mkdir -p "$work"
pass=0 fail=0

# The plain bad-input rows (options, data files, checkpoints, output paths)
# are in the table of cli_bad_inputs.sh; these are the ones that need more.
syn=(--data synthetic --synthetic-size 100 --batch 10)
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

# standard output that cannot be written (a full disk): one line naming the command, exit 1, not a silent 0
full() { # NAME ARGS...: `mixprec ARGS... >/dev/full`
  local name=$1 err rc; shift
  err=$("$bin" "$@" 2>&1 >/dev/full); rc=$?
  if [ "$rc" -eq 1 ] && [ "$err" = "mixprec $name: cannot write standard output: No space left on device" ]; then
    pass=$((pass + 1))
  else fail=$((fail + 1)); echo "FAIL: mixprec $* >/dev/full -> rc $rc (want 1), stderr: $err"; fi
}
full info info --json
full version version
full eval eval --help
full doctor doctor "${syn[@]}" --synthetic-shape 1x8x8 --probe-steps 1 --policy-out "$work/full_policy.json"
full train train "${syn[@]}" --synthetic-shape 1x8x8 --max-steps 1

# help works everywhere
"$bin" --help | grep -q "train" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: mixprec --help"; }
"$bin" train --help | grep -q -- "--precision" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: train --help"; }
# eval refuses the augmentation options, so its help does not offer them; train's does
eval_help=$("$bin" eval --help)
! grep -qE -- "--augment|--random-resized-crop" <<<"$eval_help" && grep -q -- "--no-normalize" <<<"$eval_help" \
  && grep -q -- "--decode-memory-mb M" <<<"$eval_help" && pass=$((pass + 1)) \
  || { fail=$((fail + 1)); echo "FAIL: eval --help lists the augmentation options or lacks the data ones"; }
[ "$("$bin" train --help | grep -cE -- "^  (--augment|--random-resized-crop|--no-normalize) ")" -eq 3 ] \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: train --help lacks an augmentation option"; }
"$bin" version --help | grep -q "usage: mixprec version" && pass=$((pass + 1)) \
  || { fail=$((fail + 1)); echo "FAIL: version --help"; }
"$bin" version | grep -Eq "^mixprec [0-9]" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: version"; }

# every command that reads input files says in its --help that they must be regular files: a FIFO
# (--policy <(...), numerics plot <(zcat ...)) is refused like any other non-regular input
line="Input files must be regular files: pipes such as <(zcat ...) and devices are refused."
for cmd in train train-gan doctor bench eval export "numerics plot"; do
  read -ra words <<<"$cmd"
  "$bin" "${words[@]}" --help | grep -qxF -- "$line" && pass=$((pass + 1)) \
    || { fail=$((fail + 1)); echo "FAIL: $cmd --help does not say inputs must be regular files"; }
done
out=$("$bin" numerics plot <(echo '{}') 2>&1); rc=$?
[ "$rc" -ne 0 ] && grep -q "not a regular file (a FIFO)" <<<"$out" && pass=$((pass + 1)) \
  || { fail=$((fail + 1)); echo "FAIL: numerics plot <(...) -> rc $rc: $out"; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
