#!/usr/bin/env bash
# cli_info.sh — `mixprec info` (text and --json) agrees with /proc/cpuinfo and
# the libraries the loader can find, and rejects bad options in one line;
# `mixprec train`'s GPU monitor options: clear errors before training, the
# one-line "GPU monitor: ..." status, the summary and the CSV.
set -u
bin=$(realpath "$1")
work=${MP_WORK:-/tmp/mp_cli_test}/info
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
. "${MP_SOURCE_DIR:-$(dirname "$0")/..}/tests/expect.sh"


# 1. text output
"$bin" info >"$work/info.txt" 2>"$work/info.err" && ok || bad "mixprec info failed: $(cat "$work/info.err")"
[ ! -s "$work/info.err" ] && ok || bad "mixprec info wrote to stderr: $(cat "$work/info.err")"
grep -Eq "^CPU: .+" "$work/info.txt" && ok || bad "no CPU line"
grep -Eq "^  cores: [0-9]+ physical, $(getconf _NPROCESSORS_ONLN) hardware threads \($(nproc) available" "$work/info.txt" \
  && ok || bad "cores line disagrees with getconf/nproc: $(grep cores: "$work/info.txt")"
grep -Eq "^  bf16 path: (native|emulated)" "$work/info.txt" && ok || bad "no bf16 path line"
grep -Eq "^GPUs: " "$work/info.txt" && ok || bad "no GPUs line"
for lib in oneDNN "CUDA driver" "CUDA runtime" cuDNN cuBLASLt NCCL NVML; do
  grep -Eq "^  $lib +([0-9]|driver [0-9]|not found \(|not built in \(|unknown)" "$work/info.txt" && ok || bad "library line for $lib missing"
done

# 2. CPU features agree with the kernel's flags
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
features=$(grep '^  features:' "$work/info.txt")
if [ "$cpu_flags" != "  " ]; then
  for pair in "AVX2:avx2" "FMA:fma" "F16C:f16c" "AVX-512F:avx512f" "AVX-512 BF16:avx512_bf16" \
              "AVX-512 FP16:avx512_fp16" "AMX-TILE:amx_tile" "AMX-BF16:amx_bf16" "AMX-FP16:amx_fp16"; do
    label=${pair%%:*} flag=${pair##*:}
    [[ $cpu_flags == *" $flag "* ]] && want=yes || want=no
    grep -q -- "[:,] $label $want\(,\|$\)" <<<"$features" && ok || bad "$label should be '$want' (cpuinfo) in: $features"
  done
  if [[ $cpu_flags != *" avx512_bf16 "* && $cpu_flags != *" amx_bf16 "* ]]; then
    grep -q "^  bf16 path: emulated" "$work/info.txt" && ok || bad "no bf16 hardware, yet: $(grep 'bf16 path' "$work/info.txt")"
  fi
fi

# 3. what the loader finds: NVML and the CUDA driver
if ldconfig -p 2>/dev/null | grep -q "libnvidia-ml.so.1 "; then
  grep -Eq "^  NVML +driver [0-9]" "$work/info.txt" && ok || bad "NVML present but: $(grep NVML "$work/info.txt")"
else
  grep -q "^  NVML  *not found (libnvidia-ml.so.1" "$work/info.txt" && ok || bad "NVML absent but: $(grep NVML "$work/info.txt")"
fi
if ! ldconfig -p 2>/dev/null | grep -q "libcuda.so.1 "; then
  grep -q "^GPUs: none (CUDA driver not found: libcuda.so.1" "$work/info.txt" && ok || bad "no driver but: $(grep GPUs "$work/info.txt")"
else
  grep -Eq "^(GPUs: [0-9]+|GPUs: none \(cuInit|GPUs: none \(the CUDA driver)" "$work/info.txt" && ok || bad "GPUs: $(grep GPUs "$work/info.txt")"
  grep -E "^  GPU [0-9]+: .*compute capability (9|[1-9][0-9])\." "$work/info.txt" | grep -vq "tensor cores: fp16, bf16, tf32, fp8" \
    && bad "an sm_90+ GPU without fp8 tensor cores" || ok
fi

# 4. --json parses and says the same
"$bin" info --json >"$work/info.json" 2>"$work/info.err" && ok || bad "info --json failed: $(cat "$work/info.err")"
CPU_FLAGS="$cpu_flags" NPROC=$(nproc) python3 - "$work/info.json" <<'PY' && ok || bad "info --json content (above)"
import json, os, sys
d = json.load(open(sys.argv[1]))
flags = os.environ["CPU_FLAGS"].split()
errors = []
cpu = d["cpu"]
if flags:
    for k, v in cpu["features"].items():
        if v != (k in flags):
            errors.append(f"feature {k}: json {v}, cpuinfo {k in flags}")
if cpu["available_cpus"] != int(os.environ["NPROC"]):
    errors.append(f"available_cpus {cpu['available_cpus']} != nproc")
if not cpu["model"] or cpu["physical_cores"] < 1 or not isinstance(cpu["bf16_native"], bool):
    errors.append("cpu model / physical_cores / bf16_native")
if not isinstance(d["gpus"], list) or (not d["gpus"] and not d["gpu_error"]):
    errors.append("gpus must be a list, with gpu_error when empty")
for g in d["gpus"]:
    if not g["name"] or "." not in g["compute_capability"] or g["memory_mib"] <= 0:
        errors.append(f"gpu entry {g}")
want = {"onednn", "cuda_driver", "cuda_runtime", "cudnn", "cublaslt", "nccl", "nvml"}
if set(d["libraries"]) != want:
    errors.append(f"libraries {sorted(d['libraries'])}")
for k, l in d["libraries"].items():
    if l["found"] != (l["version"] is not None) or not l["detail"]:
        errors.append(f"library {k}: {l}")
for e in errors:
    print("FAIL:", e)
sys.exit(1 if errors else 0)
PY

# 5. options
expect 2 "mixprec info: unknown option '--bogus'" -- "$bin" info --bogus
expect 2 "unknown option '--jsn'" -- "$bin" info --jsn
"$bin" info --help | grep -q -- "--json" && ok || bad "info --help"
"$bin" --help | grep -q "^  info " && ok || bad "mixprec --help does not list info"

# 6. train's monitor options: errors before any training starts
syn=(train --data synthetic --synthetic-size 100 --synthetic-shape 1x8x8 --batch 10 --epochs 1)
expect 2 "\-\-monitor-interval -1 is out of range" -- "$bin" "${syn[@]}" --monitor-interval -1
expect 2 "\-\-monitor-interval 'often' is not a finite number" -- "$bin" "${syn[@]}" --monitor-interval often
expect 2 "\-\-monitor-interval needs a value" -- "$bin" "${syn[@]}" --monitor-interval
expect 2 "\-\-monitor-interval 1e-09 is below 0.01 s" -- "$bin" "${syn[@]}" --monitor-interval 1e-9
expect 2 "\-\-monitor-csv $work/no/such/dir/m.csv: directory $work/no/such/dir does not exist" -- "$bin" "${syn[@]}" --monitor-csv "$work/no/such/dir/m.csv"
! grep -q "Epoch" "$work/out.txt" && ok || bad "training started despite an unwritable --monitor-csv"
"$bin" train --help | grep -q -- "--monitor-interval S" && ok || bad "train --help lacks --monitor-interval"

# 7. a short run with the monitor: one status line, the summary, the CSV
echo "an older run" >"$work/m.csv" # replaced: the run writes its own CSV
if "$bin" "${syn[@]}" --monitor-interval 1 --monitor-csv "$work/m.csv" >"$work/run.out" 2>&1; then ok; else bad "monitored run failed: $(tail -3 "$work/run.out")"; fi
[ "$(grep -c '^GPU monitor: ' "$work/run.out")" -eq 1 ] && ok || bad "want one 'GPU monitor:' line: $(grep 'GPU monitor' "$work/run.out")"
grep -Eq "^monitor: wall time [0-9.]+ s, peak RSS [0-9.]+ MiB$" "$work/run.out" && ok || bad "no time/RSS summary line"
header="timestamp,elapsed_s,sm_clock_mhz,mem_clock_mhz,gpu_load_pct,mem_used_mib,power_w,temp_c,fan_pct"
[ "$(head -1 "$work/m.csv" 2>/dev/null)" = "$header" ] && ok || bad "CSV header: $(head -1 "$work/m.csv" 2>/dev/null)"
if ldconfig -p 2>/dev/null | grep -q "libnvidia-ml.so.1 "; then
  grep -Eq "^GPU monitor: .+ \(GPU 0\), every 1 s, CSV $work/m.csv$" "$work/run.out" && ok || bad "status: $(grep 'GPU monitor' "$work/run.out")"
  grep -Eq "^monitor: GPU mean load [0-9.]+%, mean power [0-9.]+ W, energy [0-9.]+ k?J \([0-9.]+ k?J per epoch\)" "$work/run.out" \
    && ok || bad "no GPU summary line: $(grep '^monitor' "$work/run.out")"
  rows=$(($(wc -l <"$work/m.csv") - 1))
  [ "$rows" -ge 2 ] && ok || bad "CSV has $rows rows, want >= 2 (start and stop)"
  awk -F, 'NR > 1 && (NF != 9 || $2 == "" || $7 == "") { exit 1 }' "$work/m.csv" && ok || bad "CSV rows lack fields"
else
  grep -q "^GPU monitor: off (NVML not found: libnvidia-ml.so.1" "$work/run.out" && ok || bad "status: $(grep 'GPU monitor' "$work/run.out")"
  [ "$(wc -l <"$work/m.csv")" -eq 1 ] && ok || bad "without NVML the CSV should hold the header only"
fi
"$bin" "${syn[@]}" --monitor-interval 0 >"$work/off.out" 2>&1 && ok || bad "run with --monitor-interval 0 failed"
grep -q "^GPU monitor: off (--monitor-interval 0)$" "$work/off.out" && ok || bad "interval 0: $(grep 'GPU monitor' "$work/off.out")"
grep -q "^monitor: wall time" "$work/off.out" && ok || bad "interval 0 still reports time and RSS"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
