#!/usr/bin/env bash
# Configures and builds ctrainer into build/ (extra arguments go to cmake's configure step).
# TensorBoard (protobuf-c) and training curves (cairo) are required here, not AUTO: a CI build that
# lost their dependencies must fail instead of silently building without them (scripts/setup.sh
# installs both; `scripts/build.sh -DCTRAINER_TENSORBOARD=OFF -DCTRAINER_PLOT=OFF` leaves them out).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCTRAINER_TENSORBOARD=ON -DCTRAINER_PLOT=ON "$@" >/dev/null
cmake --build build -j"$(nproc)"
