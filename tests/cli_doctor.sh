#!/usr/bin/env bash
# cli_doctor.sh — `mixprec doctor` and `train --policy` end to end on a small
# synthetic run: the doctor writes a policy that train accepts and trains
# with; bad policy files and conflicting options are one stderr line naming
# the file and the key with a non-zero exit; --verify's table and
# --precision-override kept in the policy; `train --numerics-log` writes
# one valid JSON object per line; bad --numerics-every and doctor options; a
# --policy-out that is standard output's file is refused, and one whose write
# fails is left as it was.
set -u
. "$(dirname "$0")/expect.sh"
bin=$(realpath "$1")
work=${MP_WORK:-/tmp/mp_cli_test}/doctor
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
D=(--data synthetic --synthetic-shape 1x8x8 --synthetic-size 256 --batch 32 --epochs 1 --threads 2 --quiet)

# the doctor writes a policy; train applies it
timeout 300 "$bin" doctor "${D[@]}" --probe-steps 5 --policy-out pol.json >doc.txt 2>err.txt
if [ $? = 0 ] && grep -q '^verdict: ' doc.txt && grep -q '^fc1 ' doc.txt && [ ! -s err.txt ] &&
    python3 -c 'import json,sys; d=json.load(open("pol.json")); sys.exit(d["mixprec_policy"] != 1)'; then ok
else bad "doctor: $(cat doc.txt err.txt)"; fi
# a layer's "min scale" is what its most demanding gradient needs, so the window's lower end (the worst fp16
# gradient's) is reached by some layer's
lo=$(sed -n 's/^loss-scale window for fp16 gradients: \[2^\(-\{0,1\}[0-9]*\), .*/\1/p' doc.txt)
top=$(awk '$1 != "layer" && $(NF-1) ~ /^2\^/ { v = substr($(NF-1), 3) + 0; if (!n++ || v > m) m = v } END { print m }' \
  doc.txt)
[ -n "$lo" ] && [ -n "$top" ] && [ "$top" -ge "$lo" ] && ok \
  || bad "the layers' min scales reach 2^$top, below the window's 2^$lo: $(cat doc.txt)"
timeout 300 "$bin" train "${D[@]}" --policy pol.json --log run.jsonl >/dev/null 2>err.txt
if [ $? = 0 ] && grep -q '"precision":"amp-fp16"' run.jsonl; then ok; else bad "train --policy pol.json: $(cat err.txt)"; fi
# the default output is policy.json in the current directory
(timeout 300 "$bin" doctor "${D[@]}" --probe-steps 2 >/dev/null 2>&1) && [ -s policy.json ] && ok || bad "doctor default policy.json"
# the probe of a run shorter than --probe-steps (8 steps: 256 samples, batch 32) says how many it probes,
# and --planned-steps does not lengthen it (D without its last word, --quiet, which hides the line)
for planned in "" 100; do
  timeout 300 "$bin" doctor "${D[@]:0:${#D[@]}-1}" --policy-out short.json ${planned:+--planned-steps $planned} \
    >short.txt 2>err.txt
  if [ $? = 0 ] && grep -q "probing 8 steps in fp32 of a ${planned:-8}-step run" short.txt &&
      grep -q '^precision doctor: 8 probe steps' short.txt; then ok
  else bad "doctor's probe line${planned:+ (--planned-steps $planned)}: $(head -2 short.txt) $(cat err.txt)"; fi
done
"$bin" doctor --help | grep -q -- '--probe-steps' && ok || bad "doctor --help"
# --precision-override is part of the analysed policy and kept in the file
timeout 300 "$bin" doctor "${D[@]}" --probe-steps 3 --precision-override fc1=bf16 --policy-out ov.json >/dev/null 2>err.txt
if [ $? = 0 ] && python3 -c 'import json,sys; sys.exit(json.load(open("ov.json"))["overrides"].get("fc1") != "bf16")'; then ok
else bad "doctor --precision-override: $(cat err.txt)"; fi
timeout 300 "$bin" train "${D[@]}" --policy ov.json >/dev/null 2>err.txt && ok || bad "train --policy ov.json: $(cat err.txt)"
expect 2 "no layer named 'fc9'" -- "$bin" doctor "${D[@]}" --precision-override fc9=bf16

# --verify: the policy, the target unchanged (when not amp-fp16), amp-fp16 and fp32 side by side
timeout 300 "$bin" doctor "${D[@]}" --probe-steps 3 --policy-out ver.json --precision fp16 --verify >ver.txt 2>err.txt
if [ $? = 0 ] && [ ! -s err.txt ] && grep -q '^verify: 1 epoch each' ver.txt &&
    [ "$(grep -cE '^(doctor.s policy|unchanged|plain amp-fp16|fp32) .*%' ver.txt)" = 4 ] &&
    grep -qE '^unchanged +fp16 ' ver.txt; then ok
else bad "doctor --verify: $(cat ver.txt err.txt)"; fi
expect 2 '--verify-epochs needs --verify' -- "$bin" doctor "${D[@]}" --verify-epochs 2
expect 2 '--verify-epochs 0 is out of range' -- "$bin" doctor "${D[@]}" --verify --verify-epochs 0

# bad policy files: one line naming the file and the key, exit 2
printf '{not json' >nj.json
printf '{"mixprec_policy": 1, "overrides": {"fc9": "fp32"}}' >miss.json
printf '{"mixprec_policy": 1, "overrides": {"fc1": "fp8"}}' >dt.json
printf '{"mixprec_policy": 1, "overrides": {"fc1": "fp32"}}' >fc1.json
expect 2 'nj.json: not JSON' -- "$bin" train "${D[@]}" --policy nj.json
expect 2 "miss.json: overrides.fc9: no layer named 'fc9'" -- "$bin" train "${D[@]}" --policy miss.json
expect 2 "dt.json: overrides.fc1: dtype 'fp8' unknown" -- "$bin" train "${D[@]}" --policy dt.json
expect 2 'fc1.json: overrides.fc1 conflicts with --precision-override fc1=bf16' -- \
    "$bin" train "${D[@]}" --policy fc1.json --precision-override fc1=bf16
expect 2 "pol.json: precision: 'amp-fp16' conflicts with --precision bf16" -- \
    "$bin" train "${D[@]}" --policy pol.json --precision bf16
expect 2 'absent.json: not found' -- "$bin" train "${D[@]}" --policy absent.json
expect 2 '--policy needs a value' -- "$bin" train --policy
# --bn-low is taken when the file's precision is fp16 or bf16 (the refusals are cli_bad_inputs' bn_low_* rows)
printf '{"mixprec_policy": 1, "precision": "bf16"}' >bf16.json
bn=$("$bin" train "${D[@]}" --policy bf16.json --bn-low --print-precision 2>err.txt | awk '$2 == "batchnorm2d"')
if [ -n "$bn" ] && ! grep -qv ' bf16 *bf16 *$' <<<"$bn"; then ok
else bad "--bn-low under the file's bf16: BatchNorm is not bf16: $bn $(cat err.txt)"; fi

# doctor's own bad options, and its output path checked before probing
expect 2 '--probe-steps 0 is out of range' -- "$bin" doctor "${D[@]}" --probe-steps 0
expect 2 "--planned-steps 'x'" -- "$bin" doctor "${D[@]}" --planned-steps x
expect 2 '--policy-out .*/nodir/p.json' -- "$bin" doctor "${D[@]}" --policy-out "$work/nodir/p.json"
# the policy file is the file standard output goes to: refused, as the report would be mixed into it
timeout 300 "$bin" doctor "${D[@]}" --probe-steps 1 --policy-out stdout.json >stdout.json 2>err.txt; rc=$?
[ "$rc" = 2 ] && grep -q "^mixprec doctor: --policy-out stdout.json is the file standard output is redirected to" \
  err.txt && ok || bad "doctor --policy-out stdout.json >stdout.json: rc $rc, $(cat err.txt)"
# a write that fails (a file size limit, as a full disk) leaves the earlier policy whole and no temporary file
cp pol.json kept.json
(trap '' XFSZ; ulimit -f 0; exec timeout 300 "$bin" doctor "${D[@]}" --probe-steps 1 --policy-out kept.json) \
  2>&1 >/dev/null | cat >err.txt # through a pipe: the limit would stop the messages to a file too
rc=${PIPESTATUS[0]}
if [ "$rc" = 1 ] && [ "$(wc -l <err.txt)" = 1 ] && cmp -s pol.json kept.json && ! ls kept.json.tmp.* >/dev/null 2>&1 &&
    grep -q "^mixprec doctor: --policy-out kept.json: write failed: File too large" err.txt; then ok
else bad "doctor --policy-out under ulimit -f 0: rc $rc, $(cat err.txt) $(cmp pol.json kept.json)"; fi
expect 2 '--gpus is not a doctor option' -- "$bin" doctor "${D[@]}" --gpus 2
expect 2 "unknown option '--bogus'" -- "$bin" doctor --bogus

# --numerics-log: one JSON object per line
timeout 300 "$bin" train "${D[@]}" --precision amp-fp16 --numerics-log num.jsonl --numerics-every 2 >/dev/null 2>err.txt
if [ $? = 0 ] && [ "$(wc -l <num.jsonl)" -ge 3 ] &&
    python3 -c 'import json,sys
for l in open("num.jsonl"):
    d = json.loads(l); assert d["step"] % 2 == 0 and d["tensors"], l[:80]'; then ok
else bad "--numerics-log: $(cat err.txt)"; fi
expect 2 '--numerics-every 0 is out of range' -- "$bin" train "${D[@]}" --numerics-log n2.jsonl --numerics-every 0
expect 2 "--numerics-every 'x'" -- "$bin" train "${D[@]}" --numerics-log n2.jsonl --numerics-every x
expect 2 '--numerics-every needs --numerics-log' -- "$bin" train "${D[@]}" --numerics-every 5

echo "cli_doctor: $pass passed, $fail failed"
[ "$fail" = 0 ]
