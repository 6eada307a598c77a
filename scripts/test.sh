#!/usr/bin/env bash
# Installs what is missing, builds with warnings as errors (and with TensorBoard and training curves
# required: scripts/build.sh), and runs the whole test suite with ctest; then every fuzz target for a
# short time (scripts/fuzz.sh, CT_FUZZ_SECONDS each, default 30) and the sanitizer pass
# (scripts/sanitize.sh: the suite again under ASan+UBSan, the threaded code under TSan, short runs
# under valgrind). CT_FUZZ_SECONDS=0 or CT_SANITIZE=0 leaves those out for a quicker local run; both
# run even when the other failed, and any failure fails the script. Arguments go to ctest, in the
# sanitizer pass too.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p build
python=$(scripts/oracle-venv.sh)
scripts/build.sh -DCTRAINER_WERROR=ON -DCT_PYTHON="$python"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build --output-on-failure -j2 "$@"

rc=0
fuzz_seconds=${CT_FUZZ_SECONDS:-30}
[ "$fuzz_seconds" = 0 ] || scripts/fuzz.sh "$fuzz_seconds" || rc=1
[ "${CT_SANITIZE:-1}" = 0 ] || CT_PYTHON="$python" scripts/sanitize.sh -- "$@" || rc=1
exit $rc
