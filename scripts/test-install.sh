#!/usr/bin/env bash
# test-install.sh BUILD_DIR PREFIX — installs the build into PREFIX and builds
# every examples/*.c against that installation alone, four ways:
#   pkg-config, shared   cc $(pkg-config --cflags mixprec) NAME.c $(pkg-config --libs mixprec)
#   pkg-config, static   the same with libmixprec.a and `pkg-config --libs --static`
#   CMake, shared        find_package(mixprec) + mixprec::mixprec (examples/CMakeLists.txt)
#   CMake, static        mixprec::mixprec_static
# then runs each program from a copy of examples/ outside the source tree: it
# must exit 0. The pkg-config shared build runs in full, and when
# examples/NAME.expect exists, each of its non-empty lines is an extended
# regular expression some line of its output must match; the other three run
# with --smoke (a training example then stops after a few steps), so that a
# long example trains once per CI run.
# Programs read data (Fashion-MNIST) from its usual place.
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: scripts/test-install.sh BUILD_DIR PREFIX" >&2
    exit 2
fi
build=$1
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$2"
prefix=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc=${CC:-cc}
cflags=(-std=c11 -O2 -Wall -Wextra -Werror)

say() { echo "test-install: $*"; }
die() { say "$*"; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; die "cmake --install failed"; }
pc=$(find "$prefix" -name mixprec.pc -path '*/pkgconfig/*' | head -1)
[ -n "$pc" ] || die "no mixprec.pc under $prefix"
export PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
libdir=$(cd "$(pkg-config --variable=libdir mixprec)" && pwd -P)
[ -f "$libdir/libmixprec.a" ] && [ -e "$libdir/libmixprec.so.0" ] || die "libmixprec.a and libmixprec.so.0 are not both in $libdir"
say "installed into $prefix: $(cd "$prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"
say "pkg-config --cflags --libs mixprec: $(pkg-config --cflags --libs mixprec)"
say "pkg-config --libs --static mixprec: $(pkg-config --libs --static mixprec)"

# The examples, away from the source tree's include/ and src/.
mkdir -p "$work/examples"
cp "$src"/examples/*.c "$src"/examples/CMakeLists.txt "$work/examples/"
cp "$src"/examples/*.expect "$work/examples/" 2>/dev/null || true
names=$(cd "$work/examples" && ls ./*.c | sed 's|^\./||; s|\.c$||')
[ -n "$names" ] || die "no examples/*.c"

# check EXE NAME HOW LINKAGE [--smoke]: run, match NAME.expect (a full run),
# and check that the program uses the installed shared library
# (LINKAGE=shared) or none (static).
check() {
    local exe=$1 name=$2 how=$3 linkage=$4 smoke=${5:-} log="$work/$name.$3.log" start end
    local so
    so=$(ldd "$exe" | awk '$1 == "libmixprec.so.0" {print $3}')
    [ -z "$so" ] || so=$(cd "$(dirname "$so")" && pwd -P)/libmixprec.so.0
    if [ "$linkage" = shared ] && [ "$so" != "$libdir/libmixprec.so.0" ]; then
        die "$name ($how) loads libmixprec.so.0 from '${so:-nowhere}', not from $libdir"
    fi
    if [ "$linkage" = static ] && [ -n "$so" ]; then
        die "$name ($how) should be linked statically but loads $so"
    fi
    start=$(date +%s.%N)
    (cd "$work" && "$exe" $smoke) >"$log" 2>&1 || { tail -20 "$log"; die "$name ($how) exited with status $?"; }
    end=$(date +%s.%N)
    if [ -z "$smoke" ] && [ -f "$work/examples/$name.expect" ]; then
        while IFS= read -r re; do
            [ -n "$re" ] || continue
            grep -Eq -- "$re" "$log" || { tail -20 "$log"; die "$name ($how): no output line matches '$re' ($name.expect)"; }
        done <"$work/examples/$name.expect"
    fi
    say "$name ($how): ok in $(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}') s: $(tail -1 "$log")"
}

mkdir -p "$work/pc"
for name in $names; do
    # shellcheck disable=SC2046 # pkg-config prints flags to split
    "$cc" "${cflags[@]}" $(pkg-config --cflags mixprec) "$work/examples/$name.c" -o "$work/pc/$name" \
        $(pkg-config --libs mixprec) -Wl,-rpath,"$libdir" -lm || die "$name: shared link with pkg-config failed"
    check "$work/pc/$name" "$name" "pkg-config shared" shared
    static_libs=$(pkg-config --libs --static mixprec | sed 's/-lmixprec\b/-l:libmixprec.a/')
    # shellcheck disable=SC2046,SC2086
    "$cc" "${cflags[@]}" $(pkg-config --cflags --static mixprec) "$work/examples/$name.c" -o "$work/pc/${name}_static" \
        $static_libs -lm || die "$name: static link with pkg-config --static failed"
    check "$work/pc/${name}_static" "$name" "pkg-config static" static --smoke
done

cmake -S "$work/examples" -B "$work/cmake" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="${cflags[*]}" >"$work/cmake.log" 2>&1 \
    || { cat "$work/cmake.log"; die "find_package(mixprec) project failed to configure"; }
cmake --build "$work/cmake" -j"$(nproc)" >"$work/cmake-build.log" 2>&1 \
    || { tail -40 "$work/cmake-build.log"; die "find_package(mixprec) project failed to build"; }
for name in $names; do
    check "$work/cmake/$name" "$name" "CMake mixprec::mixprec" shared --smoke
    check "$work/cmake/${name}_static" "$name" "CMake mixprec::mixprec_static" static --smoke
done
say "every example built four ways against $prefix and ran"
