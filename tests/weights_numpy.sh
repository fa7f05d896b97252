#!/usr/bin/env bash
# weights_numpy.sh EVAL_WEIGHTS — a weights-only file written outside mixprec
# (tests/weights_numpy.py: NumPy-trained, PyTorch state_dict names and
# layout, an int64 counter beside) loads into a mixprec graph and evaluates
# to the test accuracy its maker computed (within 0.05 points: the same
# float32 logits up to summation order).
set -euo pipefail
eval_weights=$1
work=${MP_WORK:-/tmp/mp_cli_test}/weights
mkdir -p "$work"
python3 -c "import numpy, safetensors" 2>/dev/null \
  || { echo "weights_numpy: python3 cannot import numpy and safetensors (scripts/setup.sh test puts them in build/pyvenv)"; exit 1; }
want=$(python3 "$(dirname "$0")/weights_numpy.py" "$work/model.safetensors" | sed -n 's/^numpy test accuracy //p')
got=$("$eval_weights" "$work/model.safetensors" | sed -n 's/^mixprec test accuracy //p')
echo "numpy $want, mixprec $got"
awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0.8 && d <= 0.0005) }' \
  || { echo "FAIL: mixprec's accuracy $got differs from $want (or the model is not trained: want > 0.8)"; exit 1; }
