#!/usr/bin/env bash
# Installs what ctrainer needs on Debian 12 (only the packages that are missing), using sudo when not
# root. Every dependency of the build, the tests and the examples is listed here and nowhere else.
set -euo pipefail

packages=(
  build-essential cmake pkg-config          # toolchain
  libopenblas-openmp-dev                    # CPU GEMM; OpenMP build shares threads with our loops
  libdnnl-dev                               # oneDNN's sgemm, the float GEMMs' opt-in engine (CT_CPU_GEMM=onednn)
  libjansson-dev                            # JSON configs
  libhdf5-dev hdf5-tools                    # checkpoints and datasets (h5dump to inspect them)
  libopenmpi-dev openmpi-bin                # multi-process training
  zlib1g-dev                                # gzip'd IDX files
  libprotobuf-c-dev protobuf-c-compiler     # TensorBoard event records
  libcairo2-dev                             # `ctrainer plot`: PNG and SVG curves
  clang libclang-rt-14-dev libomp-14-dev    # fuzz targets (scripts/fuzz.sh): clang, libFuzzer, clang's OpenMP
  valgrind                                  # memcheck of short runs (scripts/valgrind.sh)
  dataset-fashion-mnist                     # the examples' data, in /usr/share/datasets/fashion-mnist
  fortunes                                  # text for the GPT example, in /usr/share/games/fortunes
  python3 python3-numpy python3-torch python3-sklearn python3-h5py python3-venv python3-pip  # test oracles
  python3-yaml python3-requests python3-packaging python3-typing-extensions  # transformers (oracle venv)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
