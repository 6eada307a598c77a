#!/usr/bin/env bash
# Installs what is missing, builds with warnings as errors (and with TensorBoard and training curves
# required: scripts/build.sh), and runs the whole test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p build
python=$(scripts/oracle-venv.sh)
scripts/build.sh -DCTRAINER_WERROR=ON -DCT_PYTHON="$python"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build --output-on-failure -j2 "$@"
