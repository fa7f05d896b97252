#!/usr/bin/env bash
# cli_numerics.sh — `mixprec numerics plot`: a short `train --numerics-log`
# run drawn as non-empty SVG and PNG (gnuplot-nox, scripts/setup.sh); bad,
# missing and empty logs and bad options are one stderr line naming the file
# (and line) with a non-zero exit.
set -u
. "$(dirname "$0")/expect.sh"
bin=$(realpath "$1")
work=${MP_WORK:-/tmp/mp_cli_test}/numerics
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
D=(--data synthetic --synthetic-shape 1x8x8 --synthetic-size 256 --batch 32 --epochs 1 --threads 2 --quiet)

timeout 300 "$bin" train "${D[@]}" --precision amp-fp16 --numerics-log num.jsonl --numerics-every 1 >/dev/null 2>err.txt ||
    bad "train --numerics-log: $(cat err.txt)"
if command -v gnuplot >/dev/null; then
    timeout 120 "$bin" numerics plot num.jsonl -o plots >out.txt 2>err.txt
    if [ $? = 0 ] && [ -s plots/num.svg ] && [ -s plots/num.png ] && [ ! -s err.txt ] &&
        grep -q '<svg' plots/num.svg && [ "$(head -c 4 plots/num.png | tail -c 3)" = PNG ] &&
        grep -q 'fp16 max 65504' plots/num.gp && grep -q '^8 records' out.txt; then ok
    else bad "numerics plot: $(cat out.txt err.txt)"; fi
    # NaN/inf (counted beside amax, which covers finite values only) are marked at the panel's top, in the data
    # (4th column) and the script; the tensor with them is the first highlighted
    printf '%s\n' '{"step": 1, "tensors": [{"name": "ok", "kind": "output", "amax": 2, "amin_nonzero": 1, "nan": 0,' \
        ' "inf": 0}, {"name": "hot", "kind": "output", "amax": 65504, "amin_nonzero": 1, "nan": 0, "inf": 0}]}' \
        '{"step": 2, "tensors": [{"name": "ok", "kind": "output", "amax": 2, "amin_nonzero": 1, "nan": 0,' \
        ' "inf": 0}, {"name": "hot", "kind": "output", "amax": 65504, "amin_nonzero": 1, "nan": 0, "inf": 7}]}' |
        paste -d '' - - >inf.jsonl
    timeout 120 "$bin" numerics plot inf.jsonl -o pinf >out.txt 2>err.txt
    if [ $? = 0 ] && grep -q '^2 1 65504 1$' pinf/inf_output.dat 2>/dev/null &&
        grep -q '^2 1 2 0$' pinf/inf_output.dat &&
        grep -q 'red x at the top: NaN/inf' pinf/inf.gp && grep -q "title 'hot'" pinf/inf.gp; then ok
    else bad "numerics plot of a log with inf: $(cat out.txt err.txt pinf/inf_output.dat 2>/dev/null)"; fi
    # the default folder is the current one
    (timeout 120 "$bin" numerics plot num.jsonl >/dev/null 2>&1) && [ -s num.png ] && ok || bad "numerics plot into ."
else
    echo "cli_numerics: gnuplot not on PATH: plots not checked (scripts/setup.sh installs gnuplot-nox)"
    expect 1 'gnuplot not found on PATH' -- "$bin" numerics plot num.jsonl -o plots
fi
"$bin" numerics plot --help | grep -q -- '--highlight' && ok || bad "numerics plot --help"
"$bin" --help | grep -q '^  numerics' && ok || bad "mixprec --help lists numerics"

# bad logs: one line naming the file (and the line), exit 1
head -n 2 num.jsonl >trunc.jsonl && printf '{"step": 3, "tensors": [{"name": "fc1"' >>trunc.jsonl
head -n 1 num.jsonl >nokey.jsonl && printf '{"step": 2, "tensors": [{"name": "fc1", "kind": "output"}]}\n' >>nokey.jsonl
printf '{"step": 1, "tensors": [{"name": "a", "kind": "weird", "amax": 1, "amin_nonzero": 1}]}\n' >kind.jsonl
printf '[1, 2]\n' >arr.jsonl
: >empty.jsonl
printf '\n\n' >blank.jsonl
printf '{"step": 1, "tensors": [{"name": "a", "kind": "output", "amax": 0, "amin_nonzero": 0}]}\n' >zero.jsonl
expect 1 'trunc.jsonl:3: not JSON' -- "$bin" numerics plot trunc.jsonl -o p2
expect 1 'nokey.jsonl:2: tensors\[0\]\.amax: missing' -- "$bin" numerics plot nokey.jsonl -o p2
expect 1 "kind.jsonl:1: tensors\[0\]\.kind: 'weird' unknown" -- "$bin" numerics plot kind.jsonl -o p2
expect 1 'arr.jsonl:1: (not a JSON object|step: missing)' -- "$bin" numerics plot arr.jsonl -o p2
expect 1 'empty.jsonl: no records' -- "$bin" numerics plot empty.jsonl -o p2
expect 1 'blank.jsonl: no records' -- "$bin" numerics plot blank.jsonl -o p2
expect 1 'zero.jsonl: every tensor is zero at every step: nothing to plot' -- "$bin" numerics plot zero.jsonl -o p2
expect 1 'absent.jsonl: not found' -- "$bin" numerics plot absent.jsonl -o p2
# not a regular file: refused at once (expect's timeout fails a hang on the FIFO), never read without end
mkfifo fifo.jsonl
expect 1 'fifo.jsonl: not a regular file \(a FIFO\)' -- "$bin" numerics plot fifo.jsonl -o p2
expect 1 '/dev/zero: not a regular file \(a character device\)' -- "$bin" numerics plot /dev/zero -o p2
expect 1 "$work: is a directory" -- "$bin" numerics plot "$work" -o p2
# a line without end (a sparse file of NUL bytes, no disk used): an error naming the line, not all of it in memory
truncate -s 65M long.jsonl
expect 1 'long.jsonl:1: a line longer than 64 MiB' -- "$bin" numerics plot long.jsonl -o p2
rm -f long.jsonl
# bad usage: exit 2
expect 2 'which log' -- "$bin" numerics plot
expect 2 'unknown subcommand' -- "$bin" numerics draw num.jsonl
expect 2 "unknown option '--bogus'" -- "$bin" numerics plot num.jsonl --bogus
expect 2 '--highlight 11 is out of range' -- "$bin" numerics plot num.jsonl --highlight 11
expect 2 '-o .*num.jsonl' -- "$bin" numerics plot num.jsonl -o num.jsonl

echo "cli_numerics: $pass passed, $fail failed"
[ "$fail" = 0 ]
