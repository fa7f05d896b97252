#!/usr/bin/env bash
# dnnl_verbose_summary.sh — run a command under DNNL_VERBOSE=1 and sum oneDNN's
# execution times per primitive kind, implementation and propagation kind
# (where a training step's library time goes; reorders included).
#   dev/dnnl_verbose_summary.sh build/bench/cpu_train_step --model cnn10 --steps 1
DNNL_VERBOSE=1 "$@" 2>/dev/null | awk -F, '
  $1 ~ /_verbose$/ && $2 == "exec" {
    key = $4 " | " $5 " | " $6 " | " $7; t[key] += $NF; n[key]++; total += $NF }
  END {
    for (k in t) printf "%9.2f ms %5d x | %s\n", t[k], n[k], k
    printf "%9.2f ms total\n", total }' | sort -rn | head -40
