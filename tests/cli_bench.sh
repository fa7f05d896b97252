#!/usr/bin/env bash
# cli_bench.sh — `mixprec bench`: a tiny matrix writes results.jsonl (a record
# per cell with the seed-000 metrics), tables.md and the gnuplot plots; a cell
# that runs out of memory is recorded as OOM and the matrix goes on; without
# gnuplot it warns and still writes the rest; every bad input is one error line
# naming the option, exit 2, before any cell starts (GPU counts included: a
# count above the GPUs present, or above 1 with --device cpu); a CPU run of
# --gpus 1 records "gpus":1 and keeps the CPU table titles; a --data path holding
# a quote and a gnuplot command still plots, and the command does not run.
set -u
bin=$1
work=${MP_WORK:-/tmp/mp_cli_test}/bench
rm -rf "$work" && mkdir -p "$work"
. "${MP_SOURCE_DIR:-$(dirname "$0")/..}/tests/expect.sh"

# 1. The tiny matrix: small x {fp32, bf16} x {32, 64}, 3 steps per epoch.
out=$work/tiny
"$bin" bench --models small --precisions fp32,bf16 --batches 32,64 --steps 3 --train-samples 512 \
  --price-per-hour 2.5 --out "$out" >"$work/tiny.log" 2>&1 && ok || bad "tiny matrix failed: $(tail -3 "$work/tiny.log")"
grep -q "^\[1/4\] small fp32 batch 32: start" "$work/tiny.log" && ok || bad "no start line for cell 1"
grep -Eq "^\[4/4\] small bf16 batch 64: [0-9.]+ s/epoch \(projected\), [0-9]+ img/s, test acc" "$work/tiny.log" \
  && ok || bad "no result line for cell 4: $(cat "$work/tiny.log")"
python3 - "$out/results.jsonl" <<'PY' && ok || bad "results.jsonl check failed"
import json, math, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
assert len(recs) == 4, f"{len(recs)} records"
cells = {(r["precision"], r["batch"]) for r in recs}
assert cells == {("fp32", 32), ("fp32", 64), ("bf16", 32), ("bf16", 64)}, cells
for r in recs:
    assert r["model"] == "small" and r["status"] == "ok" and r["message"] == "", r
    assert r["gpus"] == 1 and r["images_per_s_vs_1gpu"] == 1, r  # the default --gpus 1
    assert 0 <= r["test_acc"] <= 1, r
    for k in ("time_per_epoch_s", "time_per_100_epochs_min", "images_per_s", "arena_bytes", "peak_rss_bytes",
              "cost_per_million_samples_usd", "cell_seconds"):
        assert isinstance(r[k], (int, float)) and r[k] > 0, (k, r)
    assert r["time_projected"] is True and r["steps"] == 3 and r["train_samples"] == 512, r
    assert math.isclose(r["time_per_100_epochs_min"], r["time_per_epoch_s"] * 100 / 60, rel_tol=1e-3), r
    assert math.isclose(r["cost_per_million_samples_usd"], 2.5 / 3600 / r["images_per_s"] * 1e6, rel_tol=1e-3), r
    fp32 = next(x for x in recs if x["precision"] == "fp32" and x["batch"] == r["batch"])
    if r["precision"] == "fp32":
        assert r["speedup_vs_fp32"] == 0 and r["acc_drop_vs_fp32"] == 0, r
    else:
        want = fp32["time_per_epoch_s"] / r["time_per_epoch_s"] - 1
        assert math.isclose(r["speedup_vs_fp32"], want, rel_tol=1e-2, abs_tol=1e-3), (r, want)
        assert math.isclose(r["acc_drop_vs_fp32"], fp32["test_acc"] - r["test_acc"], abs_tol=1e-5), r
PY
# the GPU monitor: a CSV for the matrix (just the header without NVML), a
# window per cell in the records (null without GPU readings), a status line
head -1 "$out/monitor.csv" 2>/dev/null | grep -q "^timestamp,elapsed_s,sm_clock_mhz" && ok || bad "no monitor.csv header"
grep -q "^GPU monitor: " "$work/tiny.log" && ok || bad "no GPU monitor status line"
python3 - "$out/results.jsonl" <<'PY' && ok || bad "results.jsonl lacks the GPU monitor fields"
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    for k in ("gpu_mean_load_pct", "gpu_mean_power_w", "gpu_energy_j", "gpu_energy_per_epoch_j", "gpu_peak_mem_used_mib"):
        assert k in r and (r[k] is None or r[k] >= 0), (k, r)
PY
"$bin" bench --models small --precisions fp32 --batches 32 --steps 1 --train-samples 256 --monitor-interval 0 \
  --out "$work/nomon" >"$work/nomon.log" 2>&1 && [ ! -e "$work/nomon/monitor.csv" ] && ok \
  || bad "--monitor-interval 0 still wrote monitor.csv or failed: $(tail -2 "$work/nomon.log")"
# --init torch: the same cell from PyTorch's initialization, said in the tables' header, another first loss
"$bin" bench --models small --precisions fp32 --batches 32 --steps 1 --train-samples 256 --monitor-interval 0 \
  --init torch --out "$work/torchinit" >"$work/torchinit.log" 2>&1 && ok \
  || bad "--init torch failed: $(tail -2 "$work/torchinit.log")"
grep -q "; seed 1, PyTorch's weight initialization (--init torch)\.$" "$work/torchinit/tables.md" && ok \
  || bad "tables.md does not say --init torch"
# the same --out again: refused before any training (the old plots would sit beside the new ones), files kept
before=$(md5sum "$work/nomon/results.jsonl")
"$bin" bench --models small --precisions fp32 --batches 32 --steps 1 --train-samples 256 --monitor-interval 0 \
  --out "$work/nomon" >"$work/again.log" 2>"$work/again.err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "^mixprec bench: --out $work/nomon already holds an earlier run's output \
($work/nomon/results.jsonl)" "$work/again.err" && ! grep -q "start" "$work/again.log" \
  && [ "$(md5sum "$work/nomon/results.jsonl")" = "$before" ] && ok \
  || bad "bench into a used --out: rc $rc, $(cat "$work/again.err")"
# the default --out, runs/bench-<second>: a folder another run of the same second holds is left alone and
# this run takes <second>-2 (the names of the next 10 seconds are taken in advance: the run may start in any)
now=$(date +%s) && mkdir -p "$work/cwd/runs" && for k in 0 1 2 3 4 5 6 7 8 9; do # the clock read once: no second skipped
  d=$work/cwd/runs/bench-$(date -d "@$((now + k))" +%Y%m%d-%H%M%S) && mkdir -p "$d" && echo other >"$d/results.jsonl"; done
(cd "$work/cwd" && "$bin" bench --models small --precisions fp32 --batches 32 --steps 1 --train-samples 256 \
  --monitor-interval 0 >"$work/default.log" 2>&1); rc=$?
taken=$(grep -o "writing to runs/bench-[0-9-]*" "$work/default.log" | cut -d' ' -f3)
[ "$rc" -eq 0 ] && [[ "$taken" =~ ^runs/bench-[0-9]{8}-[0-9]{6}-2$ ]] && [ -s "$work/cwd/$taken/results.jsonl" ] \
  && [ "$(cat "$work/cwd/${taken%-2}/results.jsonl")" = other ] && ok \
  || bad "a default --out of the same second: rc $rc, took '$taken': $(tail -2 "$work/default.log")"
# ... and a run that fails after taking its folder (the batch is checked against the data loaded) leaves none behind
n_before=$(ls "$work/cwd/runs" | wc -l)
(cd "$work/cwd" && "$bin" bench --models small --precisions fp32 --batches 512 --steps 1 --train-samples 256 \
  >/dev/null 2>"$work/default_fail.err"); rc=$?
[ "$rc" -eq 2 ] && grep -q "is larger than the training set" "$work/default_fail.err" && [ "$(ls "$work/cwd/runs" | wc -l)" -eq "$n_before" ] && ok \
  || bad "a failed bench with the default --out: rc $rc, runs/ holds $(ls "$work/cwd/runs" | tr '\n' ' ')"
loss() { grep -o '"train_loss":[0-9.e+-]*' "$1/results.jsonl"; }
[ -n "$(loss "$work/torchinit")" ] && [ "$(loss "$work/torchinit")" != "$(loss "$work/nomon")" ] && ok \
  || bad "--init torch trained the default's cell: $(loss "$work/torchinit") / $(loss "$work/nomon")"
grep -q "^| batch | 32 | 64 |$" "$out/tables.md" && ok || bad "tables.md lacks the batch columns"
for t in "time per epoch" "time per 100 epochs" "speed-up vs fp32" "test accuracy" "accuracy difference" \
         "images/s" "activation arena" "peak RSS" "cost per million samples"; do
  grep -q "^### small: $t" "$out/tables.md" && ok || bad "tables.md lacks the '$t' table"
done
grep -Eq "^\| bf16 \| -?[0-9.]+% \| -?[0-9.]+% \|$" "$out/tables.md" && ok || bad "tables.md lacks a bf16 percentage row"
for plot in time speedup accuracy; do
  f=$out/${plot}_small
  [ "$(head -c 8 "$f.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] && ok || bad "$f.png is not a PNG"
  grep -q "<svg" "$f.svg" 2>/dev/null && ok || bad "$f.svg is not an SVG"
done

# 2. A cell that runs out of memory is recorded as OOM and the matrix goes on
#    (memory capped for the run, as in cli_errors.sh).
oom_args=(bench --models cnn10 --precisions fp32 --batches 3000,8 --steps 1 --data synthetic
          --synthetic-shape 3x16x16 --synthetic-size 3000 --out "$work/oom")
if grep -q __asan_init "$bin"; then
  ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=1500:detect_leaks=0 "$bin" "${oom_args[@]}" \
    >"$work/oom.log" 2>&1; rc=$?
else
  (ulimit -v 2500000; "$bin" "${oom_args[@]}") >"$work/oom.log" 2>&1; rc=$?
fi
[ "$rc" -eq 0 ] && ok || bad "OOM matrix exited $rc: $(tail -3 "$work/oom.log")"
grep -Eq "^\[1/2\] cnn10 fp32 batch 3000: OOM: .*(cannot allocate|out of memory)" "$work/oom.log" \
  && ok || bad "no OOM line: $(cat "$work/oom.log")"
grep -q "^\[2/2\] cnn10 fp32 batch 8: .* img/s" "$work/oom.log" && ok || bad "the matrix did not go on after OOM"
python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert [x["status"] for x in r] == ["OOM", "ok"] and r[0]["message"] and r[0]["images_per_s"] is None, r
' "$work/oom/results.jsonl" && ok || bad "OOM records wrong: $(cat "$work/oom/results.jsonl")"
grep -q "^| fp32 | OOM | " "$work/oom/tables.md" && ok || bad "tables.md does not show the OOM cell"

# 3. Without gnuplot: one warning line, JSONL and tables still written, exit 0;
#    without an fp32 cell the speed-up is null.
out=$work/noplot
PATH=/nonexistent "$bin" bench --models small --precisions bf16 --batches 16 --steps 1 --data synthetic \
  --synthetic-shape 1x12x12 --synthetic-size 100 --out "$out" >"$work/noplot.log" 2>"$work/noplot.err"; rc=$?
[ "$rc" -eq 0 ] && ok || bad "run without gnuplot exited $rc: $(cat "$work/noplot.err")"
[ "$(wc -l <"$work/noplot.err")" -eq 1 ] && grep -q "warning: gnuplot not found" "$work/noplot.err" \
  && ok || bad "no single gnuplot warning: $(cat "$work/noplot.err")"
[ -s "$out/tables.md" ] && [ -f "$out/plots.gp" ] && ! ls "$out"/*.png >/dev/null 2>&1 && ok || bad "noplot outputs wrong"
python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert len(r) == 1 and r[0]["speedup_vs_fp32"] is None and r[0]["cost_per_million_samples_usd"] is None, r
' "$out/results.jsonl" && ok || bad "noplot record wrong: $(cat "$out/results.jsonl")"

# 4. Bad input: exit 2, one stderr line naming the option and value, no cell started.
touch "$work/a_file"
expect_bench() { # PATTERN -- ARGS...: `bench` refuses them, exit 2, one stderr line, no cell started
  local pattern=$1; shift 2
  local err rc
  err=$("$bin" bench --steps 1 --train-samples 512 "$@" 2>&1 >"$work/bad.out"); rc=$?
  if [ "$rc" -eq 2 ] && grep -q -- "$pattern" <<<"$err" && [ "$(wc -l <<<"$err")" -eq 1 ] \
     && ! grep -q "start" "$work/bad.out"; then
    ok
  else
    bad "mixprec bench $* -> rc $rc (want 2), stderr: $err (want /$pattern/), stdout: $(head -2 "$work/bad.out")"
  fi
}
bad_out=(--out "$work/bad_run")
expect_bench "\-\-models: unknown model 'resnet999'" -- "${bad_out[@]}" --models small,resnet999
expect_bench "\-\-precisions 'fp12': unknown precision" -- "${bad_out[@]}" --precisions fp32,fp12
expect_bench "\-\-batches 0 is out of range" -- "${bad_out[@]}" --batches 32,0
expect_bench "\-\-batches -64 is out of range" -- "${bad_out[@]}" --batches -64
expect_bench "\-\-batches 'big' is not an integer" -- "${bad_out[@]}" --batches big
expect_bench "\-\-monitor-interval -1 is out of range" -- "${bad_out[@]}" --monitor-interval -1
expect_bench "\-\-batches '' is not an integer" -- "${bad_out[@]}" --batches 32,,64
expect_bench "\-\-batches '32,64,32' lists '32' twice" -- "${bad_out[@]}" --batches 32,64,32
expect_bench "\-\-batches 1000 is larger than the training set" -- "${bad_out[@]}" --batches 1000
expect_bench "\-\-out $work/a_file/sub: $work/a_file is a regular file, not a directory" -- --out "$work/a_file/sub"
expect_bench "\-\-out $work/a_file: $work/a_file is a regular file, not a directory" -- --out "$work/a_file"
expect_bench "\-\-out '/proc/mixprec-bench': cannot create directory" -- --out /proc/mixprec-bench
expect_bench "\-\-price-per-hour 'cheap' is not a finite number" -- "${bad_out[@]}" --price-per-hour cheap
expect_bench "\-\-price-per-hour -1 is out of range" -- "${bad_out[@]}" --price-per-hour -1
expect_bench "\-\-epochs 0 is out of range" -- "${bad_out[@]}" --epochs 0
expect_bench "\-\-steps 'x' is not an integer" -- "${bad_out[@]}" --steps x
expect_bench "\-\-models needs a value" -- "${bad_out[@]}" --models
expect_bench "\-\-optimizer 'rmsprop': unknown" -- "${bad_out[@]}" --optimizer rmsprop
expect_bench "\-\-data 'imagenet': unknown dataset" -- "${bad_out[@]}" --data imagenet
expect_bench "unknown option '--batch'" -- "${bad_out[@]}" --batch 32
expect_bench "\-\-gpus 0 is out of range" -- "${bad_out[@]}" --gpus 0
expect_bench "\-\-gpus 0 is out of range" -- "${bad_out[@]}" --gpus 1,0
expect_bench "\-\-gpus 'x' is not an integer" -- "${bad_out[@]}" --gpus x
expect_bench "\-\-gpus '1.5' is not an integer" -- "${bad_out[@]}" --gpus 1.5
expect_bench "\-\-gpus '1,2,1' lists '1' twice" -- "${bad_out[@]}" --gpus 1,2,1
expect_bench "\-\-gpus needs a value" -- "${bad_out[@]}" --gpus
expect_bench "\-\-gpus 2: data-parallel training runs on GPUs, not with \-\-device cpu" -- "${bad_out[@]}" --gpus 1,2 \
  --device cpu
# more GPUs than present: 2 on the CPU-only CI machine (found 0), one more than found elsewhere
found=$("$bin" info | sed -n 's/^GPUs: \([0-9][0-9]*\)$/\1/p')
found=${found:-0}
over=$((found + 1 > 2 ? found + 1 : 2))
expect_bench "\-\-gpus $over: more GPUs than this machine has (found $found GPU" -- "${bad_out[@]}" --gpus "$over"
expect_bench "\-\-gpus $over: more GPUs than this machine has (found $found GPU" -- "${bad_out[@]}" --gpus "1,$over"
[ ! -e "$work/bad_run" ] && ok || bad "bad input created the output folder"

# 5. --gpus 1 on the CPU: a plain single-device matrix that records its GPU count.
out=$work/gpus1
"$bin" bench --models small --precisions fp32 --batches 16 --gpus 1 --device cpu --steps 1 --data synthetic \
  --synthetic-shape 1x12x12 --synthetic-size 100 --monitor-interval 0 --out "$out" >"$work/gpus1.log" 2>&1 \
  && ok || bad "--gpus 1 on the CPU failed: $(tail -3 "$work/gpus1.log")"
grep -q '"gpus":1,' "$out/results.jsonl" 2>/dev/null && ok || bad "no \"gpus\":1 in $(cat "$out/results.jsonl")"
grep -q "^\[1/1\] small fp32 batch 16: start" "$work/gpus1.log" && ok || bad "a 1-GPU cell's line names GPUs"
grep -q "^### small: time per epoch" "$out/tables.md" && ! grep -q "GPU" "$out/tables.md" && ok \
  || bad "CPU tables.md names GPU counts: $(grep '^###' "$out/tables.md" | head -3)"

# 6. The --data text is written into the plot titles as text: a data path holding a quote and a
#    gnuplot command still plots, and the command does not run.
npy_dir=$work/"d';system(\"touch INJECTED\");#"
mkdir -p "$npy_dir"
python3 "${MP_SOURCE_DIR:-$(dirname "$0")/..}/tests/make_npy.py" "$npy_dir" 64 || bad "making the .npy files"
out=$work/quoted
"$bin" bench --models small --precisions fp32 --batches 16 --steps 1 --monitor-interval 0 --device cpu \
  --data "npy:$npy_dir/x.npy,$npy_dir/y.npy" --out "$out" >"$work/quoted.log" 2>&1 && ok \
  || bad "a data path with a quote failed: $(tail -2 "$work/quoted.log")"
grep -q "<svg" "$out/time_small.svg" 2>/dev/null && ok || bad "a data path with a quote drew no plot"
[ ! -e "$out/INJECTED" ] && ok || bad "a gnuplot command in the data path ran"
grep -qF "set title 'small on npy:$work/d'';system(\"touch INJECTED\");#/x.npy," "$out/plots.gp" && ok \
  || bad "plots.gp title not quoted: $(grep -m1 'set title' "$out/plots.gp")"

"$bin" bench --help | grep -q -- "--price-per-hour" && ok || bad "bench --help"
"$bin" bench --help | grep -q -- "--gpus N,M" && ok || bad "bench --help lacks --gpus"
"$bin" --help | grep -q "bench" && ok || bad "mixprec --help does not list bench"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
