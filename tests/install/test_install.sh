#!/bin/bash
# ctest install.package: `cmake --install` of this build, then a separate project built against it.
#
#   test_install.sh CMAKE BUILD_DIR VERSION CC [EXTRA_FLAGS]
#
# 1. installs BUILD_DIR into a temporary prefix, then MOVES the tree (the .pc file and the CMake
#    package must not remember where they were installed);
# 2. checks the layout: libctrainer.a, libctrainer.so with its SONAME, the headers under
#    include/ctrainer/ and no private ones, bin/ctrainer (--version), the man page;
# 3. compiles the umbrella header alone with only -I<prefix>/include/ctrainer, and every installed
#    header alone with `pkg-config --cflags ctrainer` (a header must include what it uses);
# 4. builds tests/install/consumer (a C program that trains a small MLP through the public API) with
#    find_package(ctrainer), against ctrainer::ctrainer and ctrainer::ctrainer_static, and runs both;
# 5. builds the same program with pkg-config, against the shared library (run with LD_LIBRARY_PATH)
#    and the static one (`pkg-config --static --libs`: Requires.private and Libs.private must be
#    complete), and runs both;
# 6. builds every example (examples/*.c: each file with a main() a program, linked with the others)
#    both ways, find_package and pkg-config, and runs custom_data, which needs no data files, from each,
#    and minimal (train, save, reload with ct_model_from_pretrained, predict).
# Everything happens in a fresh temporary directory, so parallel ctest runs do not collide.
# EXTRA_FLAGS: compiler and linker flags for the consumer (the sanitizers of a sanitizer build).
set -u
if [ $# -lt 4 ]; then
    echo "usage: $0 CMAKE BUILD_DIR VERSION CC [EXTRA_FLAGS]" >&2
    exit 2
fi
CMAKE=$1 BUILD=$2 VERSION=$3 CC=$4 EXTRA=${5:-}
HERE=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ctrainer-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
die() {
    echo "FAIL: $*"
    exit 1
}
# run LOG CMD...: runs CMD with its output in LOG; on failure shows the log.
run() {
    local log=$1
    shift
    if ! "$@" >"$log" 2>&1; then
        echo "command failed: $*"
        head -n 30 "$log"
        return 1
    fi
}
# check_app NAME LOG: what the consumer prints after a run that learnt.
check_app() {
    local name=$1 log=$2
    grep -qx "ctrainer version $VERSION" "$log" || fail "$name: no 'ctrainer version $VERSION' line"
    grep -qx "global_step 128" "$log" || fail "$name: not 128 optimizer steps"
    grep -qx "consumer ok" "$log" || fail "$name: the run did not learn"
    grep -E '^(global_step|training_loss|eval_accuracy) ' "$log" | sed "s/^/  $name: /"
}

# --- 1. install, then move the tree ---------------------------------------------------------------------
echo "== cmake --install $BUILD"
run "$tmp/install.log" "$CMAKE" --install "$BUILD" --prefix "$tmp/stage" || die "cmake --install failed"
mv "$tmp/stage" "$tmp/prefix"
P=$tmp/prefix
pc=$(find "$P" -name ctrainer.pc -print -quit)
[ -n "$pc" ] || die "no ctrainer.pc installed"
LIBDIR=$(dirname "$(dirname "$pc")")
INC=$P/include/ctrainer

# --- 2. layout ------------------------------------------------------------------------------------------
echo "== layout"
[ -f "$LIBDIR/libctrainer.a" ] || fail "no $LIBDIR/libctrainer.a"
[ -L "$LIBDIR/libctrainer.so" ] || fail "no symbolic link $LIBDIR/libctrainer.so"
soname=$(readelf -d "$LIBDIR/libctrainer.so" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
[ "$soname" = "libctrainer.so.${VERSION%%.*}" ] || fail "SONAME is '$soname', expected libctrainer.so.${VERSION%%.*}"
[ -f "$LIBDIR/$soname" ] || fail "no $LIBDIR/$soname"
for h in ctrainer.h ctrainer_version.h core/tensor.h core/status.h model/layers.h trainer/trainer.h \
         data/dataset.h eval/metric.h callbacks/callback.h dist/comm.h optim/optimizer.h; do
    [ -f "$INC/$h" ] || fail "header $h not installed"
done
private=$(cd "$INC" && find . -name '*_impl.h' -o -name '*_tmpl.h' -o -path './backends*' \
          -o -name pyrepr.h -o -name hdf5_util.h -o -name h5_image.h)
[ -z "$private" ] || fail "private headers installed: $private"
for f in ctrainerConfig.cmake ctrainerConfigVersion.cmake ctrainerTargets.cmake modules/FindOpenBLAS.cmake; do
    [ -f "$LIBDIR/cmake/ctrainer/$f" ] || fail "no $LIBDIR/cmake/ctrainer/$f"
done
[ -x "$P/bin/ctrainer" ] || die "no $P/bin/ctrainer"
"$P/bin/ctrainer" --version >"$tmp/version.txt" 2>&1 || fail "ctrainer --version exits non-zero"
head -1 "$tmp/version.txt" | grep -qx "ctrainer $VERSION" || fail "ctrainer --version says '$(head -1 "$tmp/version.txt")'"
# The build writes the man page where it could run the CLI (cmake/CtrainerManPage.cmake).
if [ -f "$BUILD/man/ctrainer.1" ]; then
    grep -q '^\.SS ctrainer train$' "$P/share/man/man1/ctrainer.1" 2>/dev/null || fail "no man page with ctrainer train"
else
    echo "  note: the build wrote no man page (it could not run ctrainer), so none is installed"
fi

# --- 3. headers -----------------------------------------------------------------------------------------
echo "== headers"
run "$tmp/umbrella.log" "$CC" -std=c11 -Wall -Werror -fsyntax-only -x c -I "$INC" "$INC/ctrainer.h" ||
    fail "ctrainer.h does not compile alone with -I <prefix>/include/ctrainer"
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
[ "$(pkg-config --modversion ctrainer)" = "$VERSION" ] || die "pkg-config --modversion ctrainer: not $VERSION"
cflags=$(pkg-config --cflags ctrainer) || die "pkg-config --cflags ctrainer failed"
n=0
while IFS= read -r h; do
    n=$((n + 1))
    printf '#include "%s"\n' "$h" >"$tmp/one.c"
    run "$tmp/one.log" "$CC" -std=c11 -Wall -Werror -fsyntax-only $cflags "$tmp/one.c" ||
        fail "header $h does not compile alone"
done < <(cd "$INC" && find . -name '*.h' | sed 's|^\./||' | sort)
echo "  $n headers compile alone"
printf '#include <ctrainer/ctrainer.h>\nint main(void) { return 0; }\n' >"$tmp/umbrella.c"
run "$tmp/umbrella2.log" "$CC" -std=c11 -Wall -Werror -fsyntax-only $cflags "$tmp/umbrella.c" ||
    fail "#include <ctrainer/ctrainer.h> does not compile with pkg-config --cflags"

# --- 4. find_package(ctrainer) --------------------------------------------------------------------------
echo "== find_package(ctrainer)"
if run "$tmp/cmake-configure.log" "$CMAKE" -S "$HERE/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$P" \
        -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$EXTRA" \
        -DCMAKE_EXE_LINKER_FLAGS="$EXTRA" &&
    run "$tmp/cmake-build.log" "$CMAKE" --build "$tmp/consumer" -j2; then
    grep -q "consumer: ctrainer $VERSION from $LIBDIR/cmake/ctrainer" "$tmp/cmake-configure.log" ||
        fail "find_package found another ctrainer: $(grep 'consumer: ctrainer' "$tmp/cmake-configure.log")"
    for kind in shared static; do
        exe=$tmp/consumer/consumer_$kind
        (cd "$tmp" && "$exe" "$tmp/out-cmake-$kind") >"$tmp/cmake-$kind.log" 2>&1 ||
            { cat "$tmp/cmake-$kind.log"; fail "consumer_$kind (find_package) failed"; }
        check_app "cmake $kind" "$tmp/cmake-$kind.log"
    done
    ldd "$tmp/consumer/consumer_shared" | grep -q "libctrainer.so.* => $LIBDIR/" ||
        fail "consumer_shared does not load $LIBDIR/libctrainer.so"
    if ldd "$tmp/consumer/consumer_static" | grep -q libctrainer; then fail "consumer_static loads libctrainer.so"; fi
else
    fail "the find_package consumer does not build"
fi

# --- 5. pkg-config --------------------------------------------------------------------------------------
echo "== pkg-config"
if run "$tmp/pc-shared-build.log" "$CC" -std=c11 $EXTRA -o "$tmp/pc_shared" "$HERE/consumer/app.c" \
        $(pkg-config --cflags --libs ctrainer) -lm; then
    LD_LIBRARY_PATH=$LIBDIR "$tmp/pc_shared" "$tmp/out-pc-shared" >"$tmp/pc-shared.log" 2>&1 ||
        { cat "$tmp/pc-shared.log"; fail "the pkg-config consumer (shared) failed"; }
    check_app "pkg-config shared" "$tmp/pc-shared.log"
    LD_LIBRARY_PATH=$LIBDIR ldd "$tmp/pc_shared" | grep -q "libctrainer.so.* => $LIBDIR/" ||
        fail "the pkg-config consumer does not load $LIBDIR/libctrainer.so"
else
    fail "cc \$(pkg-config --cflags --libs ctrainer) does not build the consumer"
fi
static_libs=()
for a in $(pkg-config --static --libs ctrainer); do
    [ "$a" = "-lctrainer" ] || static_libs+=("$a")
done
if run "$tmp/pc-static-build.log" "$CC" -std=c11 $EXTRA -o "$tmp/pc_static" "$HERE/consumer/app.c" $cflags \
        "$LIBDIR/libctrainer.a" "${static_libs[@]}" -lm; then
    "$tmp/pc_static" "$tmp/out-pc-static" >"$tmp/pc-static.log" 2>&1 ||
        { cat "$tmp/pc-static.log"; fail "the pkg-config consumer (static) failed"; }
    check_app "pkg-config static" "$tmp/pc-static.log"
else
    fail "libctrainer.a with pkg-config --static --libs ctrainer does not link the consumer"
fi

# --- 6. the examples -----------------------------------------------------------------------------------
echo "== examples"
EXAMPLES=$(cd "$HERE/../../examples" && pwd)
# check_example NAME EXE: custom_data trains its spirals and says it learned them.
check_example() {
    local name=$1 exe=$2
    (cd "$tmp" && LD_LIBRARY_PATH=$LIBDIR "$exe" "$EXAMPLES/configs/custom_data.json" \
        --set "training_args.output_dir=\"$tmp/out-$name\"") >"$tmp/$name.log" 2>&1 ||
        { tail -n 20 "$tmp/$name.log"; fail "$name failed"; }
    grep -qx "custom_data ok" "$tmp/$name.log" || fail "$name: the custom dataset and metric did not work"
}
if run "$tmp/examples-configure.log" "$CMAKE" -S "$HERE/consumer" -B "$tmp/examples" -DCMAKE_PREFIX_PATH="$P" \
        -DCT_EXAMPLES_DIR="$EXAMPLES" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_FLAGS="$EXTRA" -DCMAKE_EXE_LINKER_FLAGS="$EXTRA" &&
    run "$tmp/examples-build.log" "$CMAKE" --build "$tmp/examples" -j2; then
    check_example "custom_data (find_package)" "$tmp/examples/example_custom_data"
    "$tmp/examples/example_minimal" "$tmp/out-minimal" >"$tmp/minimal.log" 2>&1 || fail "minimal failed"
    grep -qx "predicted class of (0.6, 0.3): 1" "$tmp/minimal.log" ||
        fail "minimal: the reloaded model does not predict: $(tail -n 3 "$tmp/minimal.log")"
else
    fail "the examples do not build with find_package"
fi
helpers=() programs=()
for src in "$EXAMPLES"/*.c; do
    if grep -q '^int main(' "$src"; then programs+=("$src"); else helpers+=("$src"); fi
done
for src in "${programs[@]}"; do
    name=$(basename "$src" .c)
    run "$tmp/pc-$name.log" "$CC" -std=c11 $EXTRA -I "$EXAMPLES" -o "$tmp/pc_$name" "$src" "${helpers[@]}" \
        $(pkg-config --cflags --libs ctrainer) -lm || fail "example $name does not build with pkg-config"
done
echo "  ${#programs[@]} examples tried with pkg-config"
[ -x "$tmp/pc_custom_data" ] && check_example "custom_data (pkg-config)" "$tmp/pc_custom_data"

if [ $failures -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "install test passed"
