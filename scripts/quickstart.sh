#!/usr/bin/env bash
# Quickstart: install what is missing, build, and run the main job (train an MLP on Fashion-MNIST).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
./build/ctrainer demo "$@"
