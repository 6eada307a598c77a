#!/bin/sh
# Runs a test with the CPU kernels at one instruction-set level: at_level.sh LEVEL CTRAINER CMD...
# sets CT_CPU_ISA=LEVEL (v1 to v4) for CMD after `ctrainer version` has confirmed that the kernels
# then run at that level; exits 77 (skipped) where this CPU lacks the level. ctest's isa label runs
# the kernels' unit and oracle tests this way once per level (tests/CMakeLists.txt).
level=$1
ctrainer=$2
shift 2
case $level in
v1) name="x86-64 (SSE2)" ;;
v2 | v3 | v4) name="x86-64-$level " ;;
*) echo "at_level.sh: level '$level' is not v1 to v4" >&2; exit 2 ;;
esac
out=$(CT_CPU_ISA=$level "$ctrainer" version 2>&1)
rc=$?
if [ $rc -eq 2 ] && printf '%s\n' "$out" | grep -q 'which this CPU lacks'; then
    printf 'skipped: %s\n' "$out"
    exit 77
fi
if [ $rc -ne 0 ] || ! printf '%s\n' "$out" | grep -qF "kernels $name"; then
    printf 'CT_CPU_ISA=%s does not select the level (exit %d):\n%s\n' "$level" $rc "$out" >&2
    exit 1
fi
CT_CPU_ISA=$level exec "$@"
