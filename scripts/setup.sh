#!/usr/bin/env bash
# setup.sh — the README's two set-up commands on a fresh Debian machine:
#   scripts/setup.sh run    install what is missing, build, train the default model
#   scripts/setup.sh test   install what is missing, build (twice: Release and
#                           ASan+UBSan) and run the whole test suite in both;
#                           after the Release suite, install and build and run
#                           the examples against the installation; at the end
#                           replay each fuzzer's seed corpus and fuzz it for
#                           30 s (scripts/fuzz 30; clang + libFuzzer)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case "$mode" in
  run|test) ;;
  *) echo "usage: scripts/setup.sh run|test" >&2; exit 2 ;;
esac

# Debian packages the build, the tests and the default job need.
packages=(build-essential cmake pkg-config doxygen python3 python3-venv zlib1g-dev libdnnl-dev libcjson-dev libpng-dev libjpeg-dev
          libprotobuf-c-dev protobuf-c-compiler libopenmpi-dev openmpi-bin dataset-fashion-mnist gnuplot-nox clang-14 libclang-rt-14-dev libomp-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

jobs=$(nproc)
werror=OFF
if [ -n "${CI:-}" ]; then werror=ON; fi

build() { # build DIR [cmake options...]
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DMP_WERROR=$werror "$@" >"$dir.cmake.log" 2>&1 \
    || { cat "$dir.cmake.log"; exit 1; }
  cmake --build "$dir" -j"$jobs"
}

mkdir -p build
build build
if [ "$mode" = run ]; then
  exec ./build/mixprec train
fi

# Python test oracles (NumPy, safetensors' reference reader and writer, onnx
# and onnxruntime) in a venv of the build: the tests find them first on PATH.
if ! build/pyvenv/bin/python -c "import numpy, safetensors, onnx, onnxruntime" 2>/dev/null; then
  echo "setup: installing the Python test oracles (numpy, safetensors, onnx, onnxruntime) into build/pyvenv"
  python3 -m venv build/pyvenv
  build/pyvenv/bin/pip install -q --disable-pip-version-check numpy safetensors onnx onnxruntime
fi
export PATH="$PWD/build/pyvenv/bin:$PATH"
ctest --test-dir build --output-on-failure -j"$jobs"
echo "setup: installing into a temporary prefix and building examples/ against it"
prefix=$(mktemp -d)
scripts/test-install.sh build "$prefix"
rm -rf "$prefix"
echo "setup: running the test suite again under AddressSanitizer + UndefinedBehaviorSanitizer"
mkdir -p build-asan
# The sanitizers instrument the host C code; the CUDA backend (compiled in the
# Release build above when nvcc and cuDNN are present) would only double the
# build time here, with no GPU to run it.
build build-asan -DMP_SANITIZE=ON -DMP_WITH_CUDA=OFF
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"
echo "setup: replaying the fuzzers' seed corpora and fuzzing each for 30 s"
scripts/fuzz 30
