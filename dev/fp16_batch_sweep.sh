#!/usr/bin/env bash
# fp16_batch_sweep.sh — seed 000's accuracy finding at small scale: the default
# model on Fashion-MNIST with SGD (momentum 0.9) at large batch and several
# learning rates, in fp32, amp-fp16 and pure fp16, four runs at a time with
# THREADS threads each; prints test accuracy per run. Used to pick the
# configuration of tests/test_fp16_degrades (needs many cores: GPU host).
#   dev/fp16_batch_sweep.sh BUILD_DIR [EPOCHS] [BATCHES] [LRS]
build=${1:-build}; epochs=${2:-2}; batches=${3:-"2048"}; lrs=${4:-"0.1 0.4 1.6"}
threads=${THREADS:-4}
run() {
  local b=$1 lr=$2 p=$3
  acc=$(OMP_NUM_THREADS=$threads "$build/mixprec" train --batch "$b" --epochs "$epochs" --optimizer sgd --lr "$lr" \
        --momentum 0.9 --precision "$p" 2>&1 | grep -o "test accuracy [0-9.]*%" | tail -1)
  echo "batch $b lr $lr $p: ${acc:-failed}"
}
for b in $batches; do for lr in $lrs; do for p in fp32 amp-fp16 fp16; do
  run "$b" "$lr" "$p" &
  while [ "$(jobs -r | wc -l)" -ge $(( $(nproc) / threads )) ]; do sleep 1; done
done; done; done
wait
