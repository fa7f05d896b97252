#!/usr/bin/env bash
# cli_gan.sh — `mixprec train-gan`: one epoch on tiny synthetic 1x28x28 data
# writes the sample grid (PNG of 280x280: 10 classes x 10 columns of 28x28,
# or PGM without libpng) and batch_times.jsonl (a record per epoch with every
# batch's time) and names the discriminator's class loss weights (2 on real
# images, 0 on generated ones by default); bad input (unknown precision,
# batch 0, an --out that cannot be created, an option of `train` only or one
# it does not use, a negative --aux-fake-weight, images of 2 channels) is one
# error line and exit 2 before any training; npy: data takes --val-fraction;
# --beta1 0 is used as given; skipped steps are counted per epoch.
set -u
bin=$1
work=${MP_WORK:-/tmp/mp_cli_test}/gan
rm -rf "$work" && mkdir -p "$work"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# 1. One epoch: 256 samples, batch 32 -> 8 batches.
out=$work/run
"$bin" train-gan --data synthetic --synthetic-shape 1x28x28 --synthetic-size 256 --epochs 1 --batch 32 \
  --device cpu --out "$out" >"$work/run.log" 2>&1 && ok || bad "train-gan failed: $(tail -3 "$work/run.log")"
grep -Eq "^epoch 1/1: D loss [0-9.]+ - G loss [0-9.]+ - 8 batches, [0-9.]+ ms/batch .* skipped steps G 0, D 0" \
  "$work/run.log" && ok || bad "no epoch line: $(cat "$work/run.log")"
if [ -f "$out/samples_epoch1.png" ]; then
  [ "$(head -c 8 "$out/samples_epoch1.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] && ok \
    || bad "samples_epoch1.png is not a PNG"
  # IHDR width and height (bytes 17-24): 280 x 280
  [ "$(head -c 24 "$out/samples_epoch1.png" | tail -c 8 | od -An -tx1 | tr -d ' \n')" = "0000011800000118" ] && ok \
    || bad "samples_epoch1.png is not 280x280"
elif [ -f "$out/samples_epoch1.pgm" ]; then
  [ "$(head -c 15 "$out/samples_epoch1.pgm")" = "$(printf 'P5\n280 280\n255\n')" ] && ok || bad "bad PGM header"
  grep -q "no libpng" "$work/run.log" && ok || bad "the PGM fallback is not announced"
else
  bad "no sample grid in $out: $(ls "$out")"
fi
python3 - "$out/batch_times.jsonl" <<'PY' && ok || bad "batch_times.jsonl check failed"
import json, math, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
assert len(recs) == 1, recs
r = recs[0]
assert r["epoch"] == 1 and r["model"] == "acgan" and r["precision"] == "fp32" and r["batch"] == 32, r
assert r["device"] == "cpu" and r["steps"] == 8 and len(r["batch_ms"]) == 8, r
assert all(t > 0 for t in r["batch_ms"]), r
assert math.isclose(r["batch_ms_mean"], sum(r["batch_ms"]) / 8, rel_tol=1e-3), r
assert r["batch_ms_min"] <= r["batch_ms_median"] <= r["batch_ms_max"], r
# an even count: the mean of the two middle times (each rounded to 3 decimals), not the upper one
ms = sorted(r["batch_ms"])
assert abs(r["batch_ms_median"] - (ms[3] + ms[4]) / 2) <= 6e-4, (r["batch_ms_median"], ms)
assert math.isfinite(r["d_loss"]) and math.isfinite(r["g_loss"]) and r["d_loss"] > 0, r
assert r["g_skipped"] == 0 and r["d_skipped"] == 0 and r["loss_scale"] == 1, r
assert r["samples"].endswith(("samples_epoch1.png", "samples_epoch1.pgm")), r
PY

# the same --out again: refused before training (older epochs' grids would stay beside the new ones)
"$bin" train-gan --data synthetic --synthetic-shape 1x28x28 --synthetic-size 256 --epochs 1 --batch 32 \
  --device cpu --out "$out" >"$work/again.log" 2>"$work/again.err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "^mixprec train-gan: --out $out already holds an earlier run's output \
($out/batch_times.jsonl)" "$work/again.err" && ! grep -q "^epoch" "$work/again.log" && ok \
  || bad "train-gan into a used --out: rc $rc, $(cat "$work/again.err")"

# the default --out: a new runs/gan-<second>[-N] of its own, written to; a run that fails after taking it (a
# batch larger than the data, checked once loaded) leaves no folder behind
mkdir -p "$work/cwd" && (cd "$work/cwd" && "$bin" train-gan --data synthetic --synthetic-shape 1x28x28 \
  --synthetic-size 64 --epochs 1 --batch 32 --device cpu --quiet >/dev/null 2>"$work/default.err"); rc=$?
made=$(ls -d "$work"/cwd/runs/gan-* 2>/dev/null)
[ "$rc" -eq 0 ] && [ "$(echo "$made" | wc -l)" -eq 1 ] && [ -s "$made/batch_times.jsonl" ] && ok \
  || bad "train-gan's default --out: rc $rc, folders '$made': $(cat "$work/default.err")"
(cd "$work/cwd" && "$bin" train-gan --data synthetic --synthetic-shape 1x28x28 --synthetic-size 64 --epochs 1 \
  --batch 128 --device cpu --quiet >/dev/null 2>"$work/default_fail.err"); rc=$?
[ "$rc" -eq 2 ] && grep -q "is larger than the training set" "$work/default_fail.err" \
  && [ "$(ls -d "$work"/cwd/runs/gan-* | wc -l)" -eq 1 ] && ok \
  || bad "a failed train-gan with the default --out: rc $rc, runs/ holds $(ls "$work/cwd/runs" | tr '\n' ' ')"

# 2. Bad input: one line naming the option, exit 2, nothing trained.
expect_error() { # expect_error NAME PATTERN ARGS...
  local name=$1 pattern=$2
  shift 2
  "$bin" train-gan --data synthetic --synthetic-shape 1x28x28 --synthetic-size 64 --epochs 1 --device cpu "$@" \
    >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  [ "$rc" = 2 ] && ok || bad "$name: exit $rc, expected 2"
  [ "$(wc -l <"$work/$name.err")" = 1 ] && ok || bad "$name: stderr is not one line: $(cat "$work/$name.err")"
  grep -q -- "$pattern" "$work/$name.err" && ok || bad "$name: message lacks '$pattern': $(cat "$work/$name.err")"
  [ ! -s "$work/$name.out" ] && ok || bad "$name: training output on stdout: $(cat "$work/$name.out")"
}
expect_error precision "--precision 'fp12': unknown precision" --precision fp12 --out "$work/e1"
expect_error batch0 "--batch 0 is out of range" --batch 0 --out "$work/e2"
touch "$work/a_file"
expect_error out_dir "--out $work/a_file/sub: $work/a_file is a regular file, not a directory" --out "$work/a_file/sub"
expect_error optimizer "--optimizer is not an option of train-gan" --optimizer sgd --out "$work/e3"
expect_error big_batch "--batch 100 is larger than the training set" --batch 100 --out "$work/e4"
expect_error shape "multiples of 4" --synthetic-shape 1x30x30 --out "$work/e5"
expect_error aux_weight "--aux-fake-weight -1 is out of range" --aux-fake-weight -1 --out "$work/e6"
# the sample grids are gray or RGB: other channel counts are refused before training, and the --out stays usable
grid="channels, but the sample grids need 1 (gray) or 3 (RGB)$"
expect_error channels "^mixprec train-gan: --synthetic-shape 2x28x28: 2 $grid" --synthetic-shape 2x28x28 \
  --out "$work/e11"
[ ! -e "$work/e11/batch_times.jsonl" ] && ok || bad "a refused 2-channel run left $work/e11/batch_times.jsonl"
# options of `train` the GAN does not use: refused, not silently ignored
expect_error augment "--augment is not used by train-gan" --augment --out "$work/e7"
expect_error rrc "--random-resized-crop is not used by train-gan" --random-resized-crop --out "$work/e8"
expect_error no_normalize "--no-normalize is not used by train-gan" --no-normalize --out "$work/e9"
expect_error data "--data 'imagenet': unknown dataset (known: .*npy:X.npy,Y.npy\[,XT.npy,YT.npy\], folder:DIR)" --data imagenet \
  --out "$work/e10"
for o in "npy:X.npy" "folder:DIR" "--val-fraction F" "--npy-layout L" "--image-size HxW" "--decode-threads N"; do
  "$bin" train-gan --help | grep -q -- "$o" && ok || bad "--help lacks $o"
done
# the .npy options it does use: --val-fraction holds out part of npy: data
python3 "${MP_SOURCE_DIR:-$(dirname "$0")/..}/tests/make_npy.py" "$work" 64 || bad "making the .npy files"
"$bin" train-gan --data "npy:$work/x.npy,$work/y.npy" --val-fraction 0.5 --epochs 1 --batch 16 --device cpu \
  --out "$work/npy" >"$work/npy.log" 2>&1 && ok || bad "train-gan on npy: data failed: $(tail -2 "$work/npy.log")"
grep -q ": 32 samples of 1x8x8," "$work/npy.log" && ok \
  || bad "--val-fraction 0.5 not applied: $(head -1 "$work/npy.log")"
# ...and so are .npy images of 2 channels, once loaded
mkdir -p "$work/c2" && python3 "${MP_SOURCE_DIR:-$(dirname "$0")/..}/tests/make_npy.py" "$work/c2" 64 2 \
  || bad "making the 2-channel .npy files"
"$bin" train-gan --data "npy:$work/c2/x.npy,$work/c2/y.npy" --epochs 1 --batch 16 --device cpu --out "$work/npy2" \
  >"$work/npy2.log" 2>"$work/npy2.err"; rc=$?
[ "$rc" = 2 ] && [ "$(wc -l <"$work/npy2.err")" = 1 ] && [ ! -s "$work/npy2.log" ] \
  && grep -q "^mixprec train-gan: $work/c2/x.npy .* has samples of 2x8x8: 2 $grid" "$work/npy2.err" && ok \
  || bad "train-gan on 2-channel npy: data: rc $rc, $(cat "$work/npy2.err")"
"$bin" train-gan --help | grep -q -- "--precision P" && ok || bad "--help lacks --precision"
"$bin" train-gan --help | grep -q -- "--aux-fake-weight W" && ok || bad "--help lacks --aux-fake-weight"
grep -q "D class loss weights real 2 generated 0," "$work/run.log" && ok \
  || bad "the banner does not give the default class loss weights: $(head -1 "$work/run.log")"

# 3. --beta1 0 is Adam without momentum, not the default 0.5: its losses differ from --beta1 0.5's (which are the
# default run's, bit for bit), and the banner names the beta1 used.
small=(--data synthetic --synthetic-shape 1x8x8 --synthetic-size 64 --device cpu --epochs 2 --batch 8)
for b in 0 0.5 default; do
  args=(--beta1 "$b")
  [ "$b" = default ] && args=()
  "$bin" train-gan "${small[@]}" "${args[@]}" --out "$work/beta1_$b" >"$work/beta1_$b.log" 2>&1 && ok \
    || bad "--beta1 $b failed: $(tail -3 "$work/beta1_$b.log")"
done
grep -q "Adam lr 0.0002 beta1 0, " "$work/beta1_0.log" && ok || bad "banner: $(head -1 "$work/beta1_0.log")"
grep -q "Adam lr 0.0002 beta1 0.5, " "$work/beta1_default.log" && ok \
  || bad "banner: $(head -1 "$work/beta1_default.log")"
python3 - "$work"/beta1_{0,0.5,default}/batch_times.jsonl <<'PY' && ok || bad "--beta1 0 check failed"
import json, sys
losses = [[(r["d_loss"], r["g_loss"]) for r in map(json.loads, open(p))] for p in sys.argv[1:]]
zero, half, default = losses
assert len(zero) == 2 and half == default, losses
assert zero != half, f"--beta1 0 trained as --beta1 0.5: {zero}"
PY

# 4. Skipped steps are counted per epoch (the *_total fields since the run began): fp16 with a loss scale of 1e30
# overflows every step of three epochs of 4 steps, so each epoch skips at most its 4 steps, not 4, 8, 12.
"$bin" train-gan "${small[@]}" --epochs 3 --batch 16 --precision amp-fp16 --loss-scale dynamic:1e30 \
  --max-loss-scale 1e30 --out "$work/skips" >"$work/skips.log" 2>&1 && ok || bad "skips: $(tail -3 "$work/skips.log")"
[ "$(grep -c "^epoch [123]/3: .* - skipped steps G [1-4], D [1-4] - " "$work/skips.log")" = 3 ] && ok \
  || bad "epoch lines' skipped steps: $(grep ^epoch "$work/skips.log")"
python3 - "$work/skips/batch_times.jsonl" <<'PY' && ok || bad "per-epoch skipped steps check failed"
import json, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
assert len(recs) == 3, recs
totals = {"g_skipped": 0, "d_skipped": 0, "forward_overflows": 0}
assert all(0 <= r[k] <= r["steps"] == 4 for r in recs for k in totals), recs
for r in recs:
    for k in totals:
        totals[k] += r[k]
        assert r[k + "_total"] == totals[k], (k, r)
assert totals["g_skipped"] > 4 and totals["d_skipped"] > 4, totals  # more than one epoch's steps in all
PY

echo "cli_gan: $pass passed, $fail failed"
[ "$fail" = 0 ]
