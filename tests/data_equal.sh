#!/usr/bin/env bash
# data_equal.sh MIXPREC DATA_EXPORT — the same Fashion-MNIST samples as IDX
# files, as .npy arrays and as a folder of PNG images (written by
# tools/data_export.c in the IDX order) train with the same seed to the same
# test accuracy (within 0.3 points; the bytes and the sample order are the
# same, so in practice equal), decoded once into memory and decoded per batch;
# and `mixprec eval` of the folder run's checkpoint reproduces the accuracy
# train logged for it.
set -u
bin=$1 export=$2
work=${MP_WORK:-/tmp/mp_cli_test}/data_equal
fm=/usr/share/datasets/fashion-mnist
rm -rf "$work" && mkdir -p "$work"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
n=6000
"$export" "$fm" "$work/copy" $n 10000 || { echo "FAIL: data_export"; exit 1; }
common=(--epochs 2 --batch 128 --seed 7 --quiet --threads 2)
acc() { sed -n 's/.*"test_acc":\([0-9.]*\).*/\1/p' "$1" | tail -1; }
"$bin" train "${common[@]}" --train-samples $n --log "$work/idx.jsonl" 2>"$work/idx.err" && ok || bad "IDX run: $(cat "$work/idx.err")"
c=$work/copy
"$bin" train "${common[@]}" --data "npy:$c/npy/x_train.npy,$c/npy/y_train.npy,$c/npy/x_test.npy,$c/npy/y_test.npy" \
  --log "$work/npy.jsonl" 2>"$work/npy.err" && ok || bad "npy run: $(cat "$work/npy.err")"
"$bin" train "${common[@]}" --data "folder:$c/folder" --save "$work/folder.safetensors" --log "$work/folder.jsonl" \
  2>"$work/folder.err" && ok || bad "folder run: $(cat "$work/folder.err")"
"$bin" train "${common[@]}" --data "folder:$c/folder" --decode-memory-mb 0 --decode-threads 2 \
  --log "$work/lazy.jsonl" 2>"$work/lazy.err" && ok || bad "folder run decoded per batch: $(cat "$work/lazy.err")"
a_idx=$(acc "$work/idx.jsonl") a_npy=$(acc "$work/npy.jsonl") a_folder=$(acc "$work/folder.jsonl") a_lazy=$(acc "$work/lazy.jsonl")
echo "test accuracy: IDX $a_idx, npy $a_npy, folder $a_folder, folder per batch $a_lazy"
for pair in "npy $a_npy" "folder $a_folder" "folder-per-batch $a_lazy"; do
  set -- $pair
  awk -v a="$a_idx" -v b="${2:-0}" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0.75 && d <= 0.003) }' \
    && ok || bad "$1 accuracy ${2:-none} vs IDX $a_idx (want within 0.3 points, IDX > 75%)"
done
# eval reproduces the accuracy of the saved (last) epoch, with the checkpoint's normalization
ev=$("$bin" eval --checkpoint "$work/folder.safetensors" --data "folder:$c/folder" --json 2>"$work/eval.err")
got=$(sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p' <<<"$ev")
[ -n "$got" ] && [ "$got" = "$a_folder" ] && ok || bad "eval accuracy '$got' != train's $a_folder: $ev $(cat "$work/eval.err")"
grep -q '"normalization":"the checkpoint'"'"'s"' <<<"$ev" && ok || bad "eval did not use the checkpoint's normalization: $ev"
grep -q '"samples":10000,' <<<"$ev" && ok || bad "eval sample count: $ev"
line=$("$bin" eval --checkpoint "$work/folder.safetensors" --data "folder:$c/folder" --precision bf16 2>&1)
grep -Eq "^eval: 10000 samples, loss [0-9.]+, accuracy [0-9.]+% \(bf16, cpu\)$" <<<"$line" && ok || bad "eval line: $line"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
