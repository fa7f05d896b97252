#!/usr/bin/env bash
# cli_penalty.sh — `--gradient-penalty` of `mixprec train` (l2:LAMBDA) and
# `mixprec train-gan` (r1:GAMMA, wgan-gp:LAMBDA): a malformed value (no
# colon, unknown kind, the other command's kind, a negative, NaN, infinite
# or non-numeric weight) is one error line and exit 2 before any data is
# read; a penalty with an option it cannot support (--accumulate) is
# one error line and exit 1; a short penalized run of each kind prints the
# penalty, the loss scale and the skipped steps in its epoch line and log.
set -u
bin=$1
work=${MP_WORK:-/tmp/mp_cli_test}/penalty
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "${MP_SOURCE_DIR:-$(dirname "$0")/..}/tests/expect.sh"

syn=(--data synthetic --synthetic-shape 1x12x12 --synthetic-size 96 --batch 16 --epochs 1 --device cpu)
gan=(--data synthetic --synthetic-shape 1x8x8 --synthetic-size 64 --batch 16 --epochs 1 --device cpu)

# 1. malformed values, for each command
expect 2 "--gradient-penalty 'l2' must be KIND:WEIGHT" -- "$bin" train --gradient-penalty l2 "${syn[@]}"
expect 2 "unknown kind 'l3'" -- "$bin" train --gradient-penalty l3:1 "${syn[@]}"
expect 2 "r1 is a penalty of .mixprec train-gan." -- "$bin" train --gradient-penalty r1:1 "${syn[@]}"
expect 2 "weight '-0.5' must be a finite number >= 0" -- "$bin" train --gradient-penalty l2:-0.5 "${syn[@]}"
expect 2 "weight 'nan' must be a finite number >= 0" -- "$bin" train --gradient-penalty l2:nan "${syn[@]}"
expect 2 "weight 'x' must be a finite number >= 0" -- "$bin" train --gradient-penalty l2:x "${syn[@]}"
expect 2 "--gradient-penalty needs a value" -- "$bin" train "${syn[@]}" --gradient-penalty
expect 2 "l2 is a penalty of .mixprec train." -- "$bin" train-gan --gradient-penalty l2:1 "${gan[@]}"
expect 2 "weight 'inf' must be a finite number >= 0" -- "$bin" train-gan --gradient-penalty wgan-gp:inf "${gan[@]}"
expect 2 "weight '-1' must be a finite number >= 0" -- "$bin" train-gan --gradient-penalty r1:-1 "${gan[@]}"
expect 2 "unknown kind 'gp'" -- "$bin" train-gan --gradient-penalty gp:10 "${gan[@]}"
expect 2 "--gradient-penalty is not a doctor option" -- "$bin" doctor --gradient-penalty l2:1 "${syn[@]}"

# 2. options a penalty cannot be combined with: one line naming both, exit 1
expect 1 "gradient penalty l2 with --accumulate 2: not supported" -- \
  "$bin" train --gradient-penalty l2:0.1 --accumulate 2 "${syn[@]}"

# 3. penalized runs: the epoch line names the penalty, the scale and the skipped steps
"$bin" train --gradient-penalty l2:0.01 --model small --precision amp-fp16 --log "$work/l2.jsonl" \
  "${syn[@]}" >l2.out 2>l2.err && ok || bad "train l2 failed: $(tail -3 l2.err)"
grep -Eq "^epoch 1/1: .* - l2 penalty [0-9.e+-]+ - loss scale [0-9.e+]+ - [0-9]+ skipped steps" l2.out && ok \
  || bad "no l2 penalty in the epoch line: $(grep epoch l2.out)"
python3 - "$work/l2.jsonl" <<'PY' && ok || bad "l2.jsonl lacks the penalty: $(cat "$work/l2.jsonl")"
import json, math, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
assert r["penalty"] == "l2" and r["penalty_weight"] == 0.01, r
assert math.isfinite(r["penalty_value"]) and r["penalty_value"] > 0, r
assert r["skipped_steps"] <= 2, r
PY
for k in r1:10 wgan-gp:10; do
  "$bin" train-gan --gradient-penalty $k --precision amp-fp16 --out "$work/gan_${k%%:*}" "${gan[@]}" \
    >gan.out 2>gan.err && ok || bad "train-gan $k failed: $(tail -3 gan.err)"
  grep -Eq "^epoch 1/1: .* - ${k%%:*} penalty [0-9.e+-]+ - loss scale [0-9.e+]+ - skipped steps G [0-9]+, D [0-9]+" \
    gan.out && ok || bad "train-gan $k: no penalty in the epoch line: $(grep epoch gan.out)"
  grep -q "\"penalty\":\"${k%%:*}\"" "$work/gan_${k%%:*}/batch_times.jsonl" && ok \
    || bad "train-gan $k: batch_times.jsonl lacks the penalty"
done

echo "cli_penalty: $pass passed, $fail failed"
[ "$fail" = 0 ]
