#!/usr/bin/env bash
# cli_train.sh — short real training runs through the CLI: accuracy gates on
# Fashion-MNIST, the JSONL log, progress output, reproducibility by seed (and
# --init), repeated --loss-scale options, and cnn10 / the reference kernels on
# synthetic data.
set -u
bin=$1
work=${MP_WORK:-/tmp/mp_cli_test}/train
rm -rf "$work" && mkdir -p "$work"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# 1. Default model on 12k Fashion-MNIST samples, 2 epochs: >= 84% test accuracy.
if "$bin" train --train-samples 12000 --epochs 2 --log "$work/fm.jsonl" >"$work/fm.out" 2>&1; then ok; else bad "train run failed: $(tail -3 "$work/fm.out")"; fi
[ "$(wc -l <"$work/fm.jsonl")" -eq 2 ] && ok || bad "JSONL should have 2 records"
acc=$(tail -1 "$work/fm.jsonl" | sed -n 's/.*"test_acc":\([0-9.]*\).*/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a >= 0.84) }' && ok || bad "test accuracy $acc < 0.84"
for key in epoch train_loss train_acc test_acc epoch_time_s images_per_s; do
  grep -q "\"$key\":" "$work/fm.jsonl" && ok || bad "JSONL lacks $key"
done
grep -q "^Epoch 2/2" "$work/fm.out" && ok || bad "no Epoch header"
grep -Eq "[0-9]+/93 \[=+.*ms/step - loss: [0-9.]+ - acc: [0-9.]+" "$work/fm.out" && ok || bad "no Keras-style progress line"
grep -Eq "^epoch 2/2: loss [0-9.]+ - train acc [0-9.]+ - test loss [0-9.]+ - test acc [0-9.]+ - [0-9.]+s - [0-9]+ img/s" "$work/fm.out" && ok || bad "no per-epoch summary line"

# 2. Same seed -> the same losses; another seed -> different ones.
run_losses() { "$bin" train --data synthetic --synthetic-shape 1x12x12 --synthetic-size 640 --batch 32 --epochs 2 \
  --quiet --seed "$1" --log "$work/s$1_$2.jsonl" "${@:3}" && sed 's/"epoch_time_s.*//' "$work/s$1_$2.jsonl"; }
a=$(run_losses 5 a) && b=$(run_losses 5 b) && c=$(run_losses 6 c) || bad "synthetic runs failed"
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "same seed gave different losses"
[ "$a" != "$c" ] && ok || bad "different seeds gave identical losses"
# --init reaches the run: torch (PyTorch's default) starts elsewhere than he (the default), which --init he names
d=$(run_losses 5 d --init torch) && e=$(run_losses 5 e --init he) || bad "--init runs failed"
[ -n "$d" ] && [ "$d" != "$a" ] && ok || bad "--init torch gave the default's losses"
[ "$e" = "$a" ] && ok || bad "--init he differs from the default"

# 3. The reference kernels learn the same synthetic task (accuracy gate).
"$bin" train --data synthetic --synthetic-shape 1x12x12 --synthetic-size 640 --batch 32 --epochs 3 --quiet \
  --reference --log "$work/ref.jsonl" 2>"$work/ref.err" && ok || bad "reference run failed: $(cat "$work/ref.err")"
acc=$(tail -1 "$work/ref.jsonl" | sed -n 's/.*"test_acc":\([0-9.]*\).*/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' && ok || bad "reference synthetic accuracy $acc < 0.9"

# 4. cnn10 with SGD + nesterov + step schedule runs a few steps on CIFAR-shaped data.
"$bin" train --model cnn10 --data synthetic --synthetic-size 320 --batch 32 --epochs 1 --max-steps 4 \
  --optimizer sgd --nesterov --lr-schedule step:2:0.5,warmup:1 --augment --print-memory >"$work/cnn10.out" 2>&1 \
  && ok || bad "cnn10 run failed: $(tail -3 "$work/cnn10.out")"
grep -q "3x32x32" "$work/cnn10.out" && ok || bad "cnn10 run did not report its input shape"
# --print-memory: the arena's peak, at a named node, split by kind; the kinds add up to the peak
mem=$(grep "^memory: arena" "$work/cnn10.out")
grep -Eq "most alive at once [0-9.]+ MiB, at the (forward|backward) of '[a-z0-9_]+': activations [0-9.]+" \
  <<<"$mem" && ok || bad "--print-memory line: '$mem'"
awk -v m="$mem" 'BEGIN { split(m, h, "most alive at once "); peak = h[2] + 0; split(h[2], k, ":");
  n = split(k[2], f, ",");
  for (i = 1; i <= n; i++) { c = split(f[i], w, " "); sum += w[c] }
  exit !(peak > 0 && sum > peak - 0.35 && sum < peak + 0.35) }' \
  && ok || bad "--print-memory kinds do not add up: '$mem'"

# 5. A run stopped after epoch 1 and resumed from its checkpoint gives the
#    same losses as the uninterrupted run (weights, optimizer, scaler, steps).
args=(--data synthetic --synthetic-shape 1x12x12 --synthetic-size 640 --batch 32 --precision amp-fp16 --quiet
      --optimizer sgd --epochs 3)
"$bin" train "${args[@]}" --save "$work/full.st" --log "$work/full.jsonl" \
  && "$bin" train "${args[@]}" --stop-after 1 --save "$work/part.st" --log "$work/part.jsonl" \
  && "$bin" train "${args[@]}" --resume "$work/part.st" --save "$work/part.st" --log "$work/part.jsonl" \
  && ok || bad "save/resume runs failed"
strip() { sed 's/"epoch_time_s[^}]*//' "$1"; }
[ "$(wc -l <"$work/part.jsonl")" -eq 3 ] && [ "$(strip "$work/full.jsonl")" = "$(strip "$work/part.jsonl")" ] \
  && ok || bad "resumed run differs: $(diff <(strip "$work/full.jsonl") <(strip "$work/part.jsonl") | head -4)"
out=$("$bin" train "${args[@]}" --precision fp32 --resume "$work/part.st" 2>&1 >/dev/null)
grep -q "saved with precision amp-fp16, this run uses fp32" <<<"$out" && ok || bad "resume mismatch not reported: $out"
printf 'not a checkpoint' >"$work/bad.st"
out=$("$bin" train "${args[@]}" --resume "$work/bad.st" 2>&1 >/dev/null)
grep -q "$work/bad.st" <<<"$out" && ok || bad "corrupt checkpoint not named: $out"

# 6. The last --loss-scale wins: 'dynamic' after a static scale is the default dynamic scaler (the scale
#    the log ends with is the plain dynamic run's), and a static scale after 'dynamic' stays static.
ls_run() { "$bin" train --data synthetic --synthetic-shape 1x8x8 --synthetic-size 100 --batch 10 --epochs 1 \
  --max-steps 2 --precision amp-fp16 --quiet --log "$work/ls_$1.jsonl" "${@:2}" \
  && sed -n 's/.*"loss_scale":\([0-9.e+]*\).*/\1/p' "$work/ls_$1.jsonl"; }
dyn=$(ls_run dyn --loss-scale dynamic) && back=$(ls_run back --loss-scale 128 --loss-scale dynamic) \
  && stat=$(ls_run stat --loss-scale dynamic --loss-scale 128) || bad "--loss-scale runs failed"
[ -n "$dyn" ] && [ "$dyn" != 128 ] && [ "$back" = "$dyn" ] && ok \
  || bad "--loss-scale 128 --loss-scale dynamic ends at scale $back, --loss-scale dynamic at $dyn"
[ "$stat" = 128 ] && ok || bad "--loss-scale dynamic --loss-scale 128 ends at scale $stat"

# 7. Every policy trains the default model on Fashion-MNIST (12k samples, 2
#    epochs) within 1 point of fp32 for amp-* and o2-*; printed side by side.
declare -A acc
for p in fp32 amp-fp16 amp-bf16 o2-fp16 o2-bf16 fp16 bf16; do
  "$bin" train --precision "$p" --train-samples 12000 --epochs 2 --quiet --log "$work/p_$p.jsonl" 2>"$work/p_$p.err" \
    || bad "policy $p failed: $(cat "$work/p_$p.err")"
  acc[$p]=$(tail -1 "$work/p_$p.jsonl" | sed -n 's/.*"test_acc":\([0-9.]*\).*/\1/p')
done
printf 'test accuracy by policy: '
for p in fp32 amp-fp16 amp-bf16 o2-fp16 o2-bf16 fp16 bf16; do printf '%s=%s ' "$p" "${acc[$p]}"; done; echo
for p in amp-fp16 amp-bf16 o2-fp16 o2-bf16; do
  awk -v a="${acc[$p]}" -v b="${acc[fp32]}" 'BEGIN { d = a - b; exit !(d < 0.01 && d > -0.01) }' \
    && ok || bad "$p test accuracy ${acc[$p]} is not within 1 point of fp32 ${acc[fp32]}"
done

# 8. The set-up line says how bf16 runs on this CPU: without bf16 instructions
#    (mixprec info: neither AVX-512 BF16 nor AMX-BF16) it says the convolutions compute in f32.
out=$("$bin" train --precision amp-bf16 --data synthetic --synthetic-shape 1x12x12 --synthetic-size 64 --batch 32 \
  --epochs 1 2>&1) || bad "amp-bf16 set-up run failed: $out"
line=$(grep "low-precision ops run natively on bf16 tensors" <<<"$out")
[ -n "$line" ] && ok || bad "no native/emulated line: $out"
if ! "$bin" info --json | grep -Eq '"(avx512_bf16|amx_bf16)":[[:space:]]*true'; then
  grep -q "this CPU has no bf16 instructions: convolutions compute in f32" <<<"$line" && ok \
    || bad "a CPU without bf16 instructions is not named: $line"
else
  grep -q "no bf16 instructions" <<<"$line" && bad "a bf16 CPU said to have no bf16 instructions: $line" || ok
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
