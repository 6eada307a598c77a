#!/usr/bin/env bash
# Quickstart: install what is missing, build, and run the main job: train the MLP of
# examples/configs/fashion_mnist_mlp.json on Fashion-MNIST through the Trainer. Extra arguments go to
# `ctrainer train` (e.g. --num_train_epochs 3 or --output_dir runs/try).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
./build/ctrainer train examples/configs/fashion_mnist_mlp.json "$@"
