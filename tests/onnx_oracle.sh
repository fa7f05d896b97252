#!/usr/bin/env bash
# onnx_oracle.sh ONNX_RUN — mixprec's ONNX import and export against
# onnxruntime (tests/onnx_oracle.py): every supported op, a ResNet-style, a
# MobileNet-style and a GAN's networks; import within 1e-5 relative, import ->
# export round trip within 1e-6.
set -euo pipefail
onnx_run=$1
work=${MP_WORK:-/tmp/mp_cli_test}/onnx
mkdir -p "$work"
python3 -c "import numpy, onnx, onnxruntime" 2>/dev/null \
  || { echo "onnx_oracle: python3 cannot import numpy, onnx and onnxruntime (scripts/setup.sh test puts them in build/pyvenv)"; exit 1; }
exec python3 "$(dirname "$0")/onnx_oracle.py" "$onnx_run" "$work"
