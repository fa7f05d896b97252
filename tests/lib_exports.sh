#!/usr/bin/env bash
# lib_exports.sh LIBMIXPREC_SO INCLUDE_DIR CC — the shared library's ABI:
# its soname is libmixprec.so.0, and the functions it exports are exactly
# those the public headers declare (each must be marked MP_API), so that no
# internal function becomes part of the ABI and no public one is missing.
set -euo pipefail
so=$1 inc=$2 cc=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0

soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" != libmixprec.so.0 ]; then
    echo "lib_exports: $so has soname '$soname', expected libmixprec.so.0"
    fail=1
fi

# Functions the public headers declare (not static inline), from the
# compiler's own list of the prototypes it saw (-aux-info).
headers=$(cd "$inc" && find . -name '*.h' | sed 's|^\./||' | sort)
for h in $headers; do echo "#include \"$h\""; done >"$work/all.c"
"$cc" -I"$inc" -aux-info "$work/aux" -c "$work/all.c" -o "$work/all.o"
grep -F "/* $inc/" "$work/aux" | grep -v ' static ' |
    sed -E 's|^/\*[^*]*\*/ *||; s/^[^(]*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*) \(.*/\1/' | sort -u >"$work/declared"

# Symbols the library defines in its dynamic symbol table, less the ones
# the linker itself adds.
nm -D --defined-only "$so" | awk '{print $NF}' | grep -vxE '_init|_fini|__bss_start|_edata|_end' |
    sort -u >"$work/exported"

comm -13 "$work/declared" "$work/exported" >"$work/extra"
comm -23 "$work/declared" "$work/exported" >"$work/missing"
if [ -s "$work/extra" ]; then
    echo "lib_exports: $so exports $(wc -l <"$work/extra") symbols no public header declares:"
    sed 's/^/  /' "$work/extra" | head -20
    fail=1
fi
if [ -s "$work/missing" ]; then
    echo "lib_exports: declared in $inc but not exported by $so (mark them MP_API, or define them):"
    sed 's/^/  /' "$work/missing"
    fail=1
fi
n=$(wc -l <"$work/declared")
if [ "$n" -lt 1 ]; then
    echo "lib_exports: found no function declared under $inc"
    fail=1
fi
if [ $fail = 0 ]; then
    echo "lib_exports: $so ($soname) exports exactly the $n functions declared under $inc"
fi
exit $fail
