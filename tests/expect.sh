# expect.sh — the pass/fail counters and `expect` of the CLI tests that
# source it (cli_doctor, cli_numerics, cli_penalty, cli_info; cli_bench and
# cli_onnx take the counters and keep checks of their own): run from their
# work folder.
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# expect RC PATTERN -- command...: the exit status, exactly one stderr line matching PATTERN
expect() {
    local rc=$1 pat=$2
    shift 3
    timeout 120 "$@" >out.txt 2>err.txt
    local got=$? lines
    lines=$(wc -l <err.txt)
    if [ "$got" != "$rc" ] || [ "$lines" != 1 ] || ! grep -qE -- "$pat" err.txt; then
        bad "$* -> rc $got (want $rc), stderr: $(cat err.txt)"
    else ok; fi
}
