#!/usr/bin/env bash
# Run THERE, on a GPU machine (CUDA, cmake, ninja, gcc and PyTorch, but no apt and no network), from
# the repository root, as one command, with the .deb files that scripts/gpu/fetch-debs.sh put into
# .gpu-debs/ copied along with the working tree:
#     OUT=/path/to/results bash scripts/gpu/build-and-test.sh
# It unpacks the .debs with dpkg -x into /tmp/ctdeps (never into /), finds cuDNN and NCCL in the
# PyTorch environment's nvidia-* pip packages (or next to the CUDA toolkit), configures with CUDA
# (sm_90), MPI where OpenMPI was carried, and Ninja, without TensorBoard and training curves
# (-DCTRAINER_TENSORBOARD=OFF -DCTRAINER_PLOT=OFF: the GPU tests need neither, and leaving out
# protobuf-c and cairo keeps the carried .debs small), builds, runs the CUDA tests (ctest -L '^cuda$',
# which includes the one-GPU NCCL tests when MPI is on) and the unit tests (ctest -L unit), trains
# the Fashion-MNIST MLP and CNN on the GPU and on the CPU and compares them (compare-devices.py),
# times their training against PyTorch eager on the GPU (bench/fmnist_device.py), times the fused
# attention against PyTorch's (bench/attention.py), measures GPT-2 small's training
# throughput against PyTorch (bench/gpt2.py), and ends with a summary
# table. Each step's output goes to a log under $OUT (the folder whose contents come
# back from the GPU machine; /tmp/out when unset); a failed step prints its last lines and the script
# goes on where the next step still makes sense. Exit status: 0 when every step passed, 1 otherwise.
#
# Options:
#   --mpi ON|OFF      default: ON when OpenMPI's .debs were carried (and glibc >= 2.36), else OFF
#   --no-unit         skip the unit tests
#   --no-gpt2         skip the GPT-2 small throughput benchmark against PyTorch (bench/gpt2.py)
#   --build-dir DIR   default: build-gpu at the repository root (kept while the machine stays warm)
#   --deps DIR        where the .debs are unpacked (default /tmp/ctdeps)
#   --debs DIR        where the .debs are (default .gpu-debs at the repository root)
#   --cuda-arch N     CMAKE_CUDA_ARCHITECTURES (default 90: H100/H200)
#   --data DIR        the Fashion-MNIST .gz files, for the GPU-against-CPU training comparison
#                     (scripts/gpu/compare-devices.py; default /usr/share/datasets/fashion-mnist)
#   -- CMD...         after the tests, run CMD (through bash -c) in the same environment; its output
#                     goes to $OUT/extra.log and its status into the summary. E.g. a training run:
#                     -- './build-gpu/ctrainer train examples/configs/fashion_mnist_mlp.json ...'
# The environment the tests ran in is also written to DEPS/env.sh: later commands on the same warm
# machine can `. /tmp/ctdeps/env.sh` and use the build directly.
# CTDEPS_EXPOSE_ALL=1 puts every carried library first on the run-time path, also those the machine
# has (to check on a full development machine that the carried set is complete).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root" || exit 1
out="${OUT:-/tmp/out}"
deps=/tmp/ctdeps
debs="$root/.gpu-debs"
build="$root/build-gpu"
cuda_arch=90
mpi=""
run_unit=1
run_gpt2=1
extra=""
data_dir=""
while (($#)); do
  case "$1" in
    --mpi) mpi="${2:?--mpi needs ON or OFF}"; shift ;;
    --no-unit) run_unit=0 ;;
    --no-gpt2) run_gpt2=0 ;;
    --build-dir) build="${2:?}"; shift ;;
    --deps) deps="${2:?}"; shift ;;
    --debs) debs="${2:?}"; shift ;;
    --cuda-arch) cuda_arch="${2:?}"; shift ;;
    --data) data_dir="${2:?}"; shift ;;
    --) shift; extra="$*"; break ;;
    -h|--help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-and-test: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$build" in /*) ;; *) build="$root/$build" ;; esac
mkdir -p "$out"
ma=x86_64-linux-gnu
jobs="$(nproc 2>/dev/null || echo 4)"
python="$(command -v python3 || true)"

# --- bookkeeping: one row per step in the summary ---------------------------------------------------
rows=()
failed=0
row() { rows+=("$(printf '%-14s %-8s %6ss  %s' "$1" "$2" "$3" "$4")"); [[ "$2" == FAIL ]] && failed=1; return 0; }
# step NAME LOG CMD...: runs CMD, appending its output to LOG; on failure prints the log's tail.
step() {
  local name="$1" log="$2"; shift 2
  local t0=$SECONDS rc
  echo "== $name ($(basename "$log"))"
  { echo "== $name: $*"; "$@"; } >>"$log" 2>&1
  rc=$?
  step_s=$((SECONDS - t0))
  if ((rc != 0)); then
    echo "-- $name FAILED (exit $rc); last lines of $log:"
    tail -n 40 "$log" | sed 's/^/   | /'
  fi
  return $rc
}
# Counts from a ctest log: "P passed, F failed, S skipped of N".
ctest_counts() {
  local log="$1" total fails skipped
  total="$(grep -Eo 'tests failed out of [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$')"
  fails="$(grep -Eo '[0-9]+ tests failed out of' "$log" | tail -1 | grep -Eo '^[0-9]+')"
  skipped="$(grep -c '(Skipped)$' "$log")"
  if [[ -z "$total" ]]; then echo "no tests ran"; return; fi
  echo "$((total - fails - skipped)) passed, $fails failed, $skipped skipped of $total"
}

# --- 1. what this machine has -------------------------------------------------------------------------
envlog="$out/env.log"
: >"$envlog"
{
  echo "== machine"
  uname -a
  echo "glibc $(getconf GNU_LIBC_VERSION 2>/dev/null)"; grep PRETTY_NAME /etc/os-release 2>/dev/null
  echo "cores $jobs"
  for t in gcc g++ nvcc cmake ctest ninja dpkg python3 mpirun; do
    printf '%-8s %s\n' "$t" "$(command -v "$t" || echo '(none)')"
  done
  gcc --version | head -1; nvcc --version | tail -2; cmake --version | head -1
  nvidia-smi -L 2>&1 | head -4
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  echo "== system libraries of interest (ldconfig -p)"
  ldconfig -p 2>/dev/null | grep -E 'lib(openblas|jansson|hdf5|mpi|cudnn|nccl|cublas|cudart|gfortran|curl|sz|aec)\.' || true
  echo "== the Python environment's nvidia packages"
  [[ -n "$python" ]] && "$python" -c 'import nvidia, glob, os
for p in nvidia.__path__:
    for d in sorted(glob.glob(os.path.join(p, "*", "lib*")) + glob.glob(os.path.join(p, "*", "include"))):
        print(d, " ".join(sorted(os.listdir(d))[:12]))' 2>&1 | cut -c1-300
} >>"$envlog" 2>&1
glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
echo "machine: $(grep -h PRETTY_NAME /etc/os-release 2>/dev/null | cut -d= -f2), glibc ${glibc:-?}," \
     "$(nvidia-smi -L 2>/dev/null | head -1 || echo 'no nvidia-smi'), $jobs cores"

# --- 2. unpack the .debs ------------------------------------------------------------------------------
unpack() {
  shopt -s nullglob
  local files=("$debs"/*.deb) f t
  shopt -u nullglob
  if ((${#files[@]} == 0)); then
    echo "no .deb files in $debs (run scripts/gpu/fetch-debs.sh on the development machine and carry .gpu-debs)"
    return 1
  fi
  rm -rf "$deps"
  mkdir -p "$deps"
  for f in "${files[@]}"; do
    if command -v dpkg >/dev/null; then
      dpkg -x "$f" "$deps" || return 1
    else # no dpkg: a .deb is an ar archive holding data.tar.*
      t="$(mktemp -d)"
      (cd "$t" && ar x "$f" && tar -xf data.tar.* -C "$deps") || return 1
      rm -rf "$t"
    fi
  done
  echo "unpacked ${#files[@]} packages into $deps ($(du -sh "$deps" | cut -f1))"
  # Absolute links (zlib1g-dev's libz.so -> /lib/...) would point out of the tree: re-aim them.
  local l target
  while IFS= read -r -d '' l; do
    target="$(readlink "$l")"
    ln -sfn "$deps$target" "$l" && echo "relinked $l -> $deps$target"
  done < <(find "$deps" -type l -lname '/*' -print0)
  # The run-time view: our libraries where the machine lacks them, and always those we link against
  # or that belong to the carried OpenMPI (its parts must match each other), so the machine's own
  # newer copies of generic libraries (libcurl, libssl, libgfortran, ...) keep serving its programs.
  local always='^lib(openblas|jansson|hdf5|sz|aec|mpi|open-pal|open-rte|mca_common|oshmem|ompitrace|pmix)[._-]'
  local known d n soname
  known="$(ldconfig -p 2>/dev/null | awk '{print $1}')"
  [[ "${CTDEPS_EXPOSE_ALL:-0}" == 1 ]] && known="" # test the carried closure alone
  mkdir -p "$deps/lib-exposed"
  for d in "$deps/usr/lib/$ma" "$deps/lib/$ma"; do
    [[ -d "$d" ]] || continue
    for f in "$d"/lib*.so.*; do
      soname="$(basename "$f")"
      [[ -e "$f" ]] || continue
      if [[ "$soname" =~ $always ]] || ! grep -qxF "$soname" <<<"$known"; then
        # also present in a folder of the caller's LD_LIBRARY_PATH: leave it to that one
        n=0
        if ! [[ "$soname" =~ $always ]]; then
          for l in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do [[ -e "$l/$soname" ]] && n=1; done
        fi
        ((n)) || ln -sfn "$f" "$deps/lib-exposed/$soname"
      fi
    done
  done
  echo "exposed at run time ($deps/lib-exposed): $(cd "$deps/lib-exposed" && printf '%s\n' lib*.so.* | grep -E '\.so\.[0-9]+$' | tr '\n' ' ')"
  # Debian names mpirun/mpiexec through update-alternatives, which dpkg -x does not run.
  if [[ -e "$deps/usr/bin/orterun" ]]; then
    ln -sfn orterun "$deps/usr/bin/mpirun" && ln -sfn orterun "$deps/usr/bin/mpiexec"
  fi
  # Fashion-MNIST (fetch-debs.sh --with-data): the code and configs expect it in /usr/share/datasets.
  if [[ -d "$deps/usr/share/datasets/fashion-mnist" && ! -e /usr/share/datasets/fashion-mnist ]]; then
    mkdir -p /usr/share/datasets && ln -s "$deps/usr/share/datasets/fashion-mnist" /usr/share/datasets/fashion-mnist &&
      echo "linked /usr/share/datasets/fashion-mnist -> $deps/usr/share/datasets/fashion-mnist"
  fi
}
unplog="$out/env.log"
if step unpack "$unplog" unpack; then
  row unpack ok "$step_s" "$(ls "$debs"/*.deb | wc -l) .debs -> $deps"
  have_debs=1
else
  row unpack FAIL "$step_s" "see env.log; configuring against what the machine has"
  have_debs=0
fi

# --- 3. cuDNN and NCCL --------------------------------------------------------------------------------
# The PyTorch environment's nvidia-cudnn-cu13 / nvidia-nccl-cu13 hold include/ and lib/ with
# libcudnn.so.9 / libnccl.so.2 only (cmake/CtrainerCuda.cmake accepts the versioned names).
pkg_dir() { # pkg_dir MODULE -> its folder, or nothing
  [[ -n "$python" ]] || return 0
  "$python" -c "import $1 as m, os; print(os.path.realpath(list(m.__path__)[0]))" 2>/dev/null || true
}
cudnn_root="$(pkg_dir nvidia.cudnn)"
nccl_root="$(pkg_dir nvidia.nccl)"
# Some cuDNN packagings name the headers cudnn_v9.h only: give them the plain names in a shim.
if [[ -n "$cudnn_root" && ! -e "$cudnn_root/include/cudnn.h" && -e "$cudnn_root/include/cudnn_v9.h" ]]; then
  mkdir -p "$deps/cudnn-shim/include"
  for h in "$cudnn_root"/include/*.h; do ln -sfn "$h" "$deps/cudnn-shim/include/"; done
  for h in "$cudnn_root"/include/*_v9.h; do ln -sfn "$h" "$deps/cudnn-shim/include/$(basename "${h%_v9.h}").h"; done
  ln -sfn "$(ls -d "$cudnn_root"/lib* | head -1)" "$deps/cudnn-shim/lib"
  cudnn_root="$deps/cudnn-shim"
fi
[[ -n "$cudnn_root" && -e "$cudnn_root/include/cudnn.h" ]] || cudnn_root=""
[[ -n "$nccl_root" && -e "$nccl_root/include/nccl.h" ]] || nccl_root=""
cuda_home="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")"
for v in cudnn nccl; do
  r="${v}_root"
  if [[ -z "${!r}" ]]; then
    # the fallback: next to the CUDA toolkit (cmake searches there when the root is empty)
    if compgen -G "$cuda_home/lib64/lib$v.so*" >/dev/null; then printf -v "$r" '%s' "$cuda_home"; fi
  fi
done
cudnn_lib="$(dirname "$(ls "$cudnn_root"/lib*/libcudnn.so* 2>/dev/null | head -1)" 2>/dev/null)"
nccl_lib="$(dirname "$(ls "$nccl_root"/lib*/libnccl.so* 2>/dev/null | head -1)" 2>/dev/null)"
echo "cuDNN: ${cudnn_root:-not found}; NCCL: ${nccl_root:-not found}" | tee -a "$envlog"

# --- 4. MPI: the carried OpenMPI, relocated to $deps/usr ----------------------------------------------
if [[ -z "$mpi" ]]; then
  if ((have_debs)) && compgen -G "$debs/libopenmpi3_*.deb" >/dev/null; then mpi=ON; else mpi=OFF; fi
fi
# Debian 12's libevent (under OpenMPI) asks for glibc 2.36.
if [[ "$mpi" == ON && -n "$glibc" ]] && [[ "$(printf '%s\n' 2.36 "$glibc" | sort -V | head -1)" != 2.36 ]]; then
  echo "glibc $glibc is older than the carried OpenMPI needs (2.36): building without MPI" | tee -a "$envlog"
  mpi=OFF
fi

# --- 5. configure -------------------------------------------------------------------------------------
libdirs=("$deps/usr/lib/$ma" "$deps/lib/$ma" "$deps/usr/lib/$ma/openblas-openmp" "$deps/usr/lib/$ma/hdf5/serial"
         "$deps/usr/lib/$ma/pmix2/lib")
# The linker resolves our libraries' own dependencies (libhdf5 -> libsz, libcurl ...) through
# -rpath-link; nothing of $deps goes into the binaries' search path beyond the linked folders.
rpath_link="$(IFS=:; echo "${libdirs[*]}")"
cfg=(-S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
     -DCTRAINER_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$cuda_arch" "-DCTRAINER_MPI=$mpi"
     -DCTRAINER_TENSORBOARD=OFF -DCTRAINER_PLOT=OFF -DCTRAINER_WERROR=OFF -DCTRAINER_BENCH=ON)
[[ -n "$python" ]] && cfg+=("-DCT_PYTHON=$python")
[[ -n "$cudnn_root" ]] && cfg+=("-DCTRAINER_CUDNN_ROOT=$cudnn_root")
[[ -n "$nccl_root" ]] && cfg+=("-DCTRAINER_NCCL_ROOT=$nccl_root")
if ((have_debs)); then
  cfg+=("-DCMAKE_PREFIX_PATH=$deps/usr"
        "-DOpenBLAS_LIBRARY=$deps/usr/lib/$ma/openblas-openmp/libopenblas.so"
        "-DOpenBLAS_INCLUDE_DIR=$deps/usr/include/$ma/openblas-openmp"
        "-DJANSSON_LIBRARY=$deps/usr/lib/$ma/libjansson.so" "-DJANSSON_INCLUDE_DIR=$deps/usr/include"
        "-DHDF5_ROOT=$deps/usr/lib/$ma/hdf5/serial" -DHDF5_NO_FIND_PACKAGE_CONFIG_FILE=ON
        "-DZLIB_ROOT=$deps/usr"
        "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$rpath_link"
        "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,$rpath_link")
  if [[ "$mpi" == ON ]]; then
    # Library and headers given: FindMPI asks no compiler wrapper (mpicc would need relocating).
    cfg+=(-DMPI_C_LIB_NAMES=mpi
          "-DMPI_C_COMPILER_INCLUDE_DIRS=$deps/usr/lib/$ma/openmpi/include"
          "-DMPI_mpi_LIBRARY=$deps/usr/lib/$ma/openmpi/lib/libmpi.so"
          "-DMPIEXEC_EXECUTABLE=$deps/usr/bin/orterun")
  fi
fi

# The run-time environment (also written to $deps/env.sh).
run_path="$deps/lib-exposed:$deps/usr/lib/$ma/openblas-openmp:$deps/usr/lib/$ma/hdf5/serial:$deps/usr/lib/$ma/pmix2/lib"
[[ -n "$cudnn_lib" ]] && run_path+=":$cudnn_lib"
[[ -n "$nccl_lib" && "$nccl_lib" != "$cudnn_lib" ]] && run_path+=":$nccl_lib"
mkdir -p "$deps"
cat >"$deps/env.sh" <<EOF
# written by scripts/gpu/build-and-test.sh: the environment ctrainer's build ran its tests in
export LD_LIBRARY_PATH="$run_path\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$deps/usr"             # the carried OpenMPI, relocated from /usr
export PMIX_INSTALL_PREFIX="$deps/usr"
export PATH="$deps/usr/bin:\$PATH"        # its mpirun first (the Python MPI tests look it up)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One node: shared memory between the ranks, without the single-copy (process_vm_readv) path that
# containers and gVisor refuse; ob1 rather than UCX, which looks for network hardware.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export CT_BUILD="$build"
EOF
# Configure in that environment too: FindMPI may run mpiexec.
cfglog="$out/configure.log"
: >"$cfglog"
if step configure "$cfglog" bash -c '. "$1"; shift; cmake "$@"' _ "$deps/env.sh" "${cfg[@]}"; then
  # Where every dependency was taken from, for the record.
  grep -E '^(OpenBLAS_(LIBRARY|INCLUDE_DIR)|JANSSON_(LIBRARY|INCLUDE_DIR)|HDF5_hdf5(_hl)?_LIBRARY_RELEASE|HDF5_C_INCLUDE_DIR|ZLIB_(LIBRARY_RELEASE|INCLUDE_DIR)|MPI_mpi_LIBRARY|MPI_C_HEADER_DIR|MPIEXEC_EXECUTABLE|(CUDNN|NCCL)_(LIBRARY|INCLUDE_DIR)|CTRAINER_MPI|CMAKE_CUDA_COMPILER):' \
    "$build/CMakeCache.txt" | tee -a "$cfglog"
  cuda_on="$(grep -c 'ctrainer: CUDA enabled' "$cfglog")"
  row configure ok "$step_s" "MPI $mpi, CUDA $([ "$cuda_on" -gt 0 ] && echo on || echo OFF), sm_$cuda_arch"
  configured=1
else
  row configure FAIL "$step_s" "see configure.log"
  configured=0
fi

# --- 6. build -----------------------------------------------------------------------------------------
built=0
if ((configured)); then
  buildlog="$out/build.log"
  : >"$buildlog"
  if step build "$buildlog" cmake --build "$build" -j "$jobs"; then
    row build ok "$step_s" "$(grep -c 'warning:' "$buildlog") warnings, $jobs jobs"
    built=1
  else
    row build FAIL "$step_s" "$(grep -m1 -E 'error:|Error ' "$buildlog" | cut -c1-90)"
  fi
else
  row build skipped 0 "not configured"
fi

# --- 7. tests -----------------------------------------------------------------------------------------
# ctest_step NAME LOG ARGS...: ctest in the run-time environment; the row says pass/fail/skip counts.
ctest_step() {
  local name="$1" log="$2"; shift 2
  : >"$log"
  if step "$name" "$log" bash -c '. "$1"; shift; ctest "$@"' _ "$deps/env.sh" --test-dir "$build" \
       --output-on-failure --timeout 300 "$@"; then
    row "$name" ok "$step_s" "$(ctest_counts "$log")"
  else
    row "$name" FAIL "$step_s" "$(ctest_counts "$log"); see $(basename "$log")"
  fi
}
if ((built)); then
  libs="$(. "$deps/env.sh"; ldd "$build/ctrainer" "$build/libctrainer.so" 2>&1 | grep '=>' |
          sed 's/ (0x[0-9a-f]*)$//' | sort -u)"
  printf '== where the test programs find their libraries\n%s\n' "$libs" >>"$envlog"
  if grep -q 'not found' <<<"$libs"; then
    echo "-- missing libraries:"; grep 'not found' <<<"$libs" | sed 's/^/   | /'
  fi
  # The CUDA tests run one at a time (they share the GPU and some time themselves).
  ctest_step test-cuda "$out/test-cuda.log" -L '^cuda$'
  if grep -q '(Skipped)$' "$out/test-cuda.log"; then
    echo "-- skipped CUDA tests (a GPU machine should skip only NCCL tests that need more GPUs):"
    grep '(Skipped)$' "$out/test-cuda.log" | sed 's/^/   | /'
  fi
  if ((run_unit)); then
    ctest_step test-unit "$out/test-unit.log" -L unit -j "$(( jobs > 8 ? 8 : jobs ))"
  fi
else
  row tests skipped 0 "nothing built"
fi
# The Trainer on the GPU against the CPU: the Fashion-MNIST MLP and CNN, 300 steps each
# (scripts/gpu/compare-devices.py); needs the dataset's .gz files (--data DIR or the default place).
if [[ -x "$build/ctrainer" && -n "$python" ]] && ls "${data_dir:-/usr/share/datasets/fashion-mnist}"/*ubyte.gz >/dev/null 2>&1; then
  if step compare "$out/compare.log" bash -c '. "$1"; shift; "$@"' _ "$deps/env.sh" "$python" \
      "$root/scripts/gpu/compare-devices.py" "$build/ctrainer" "$out/compare" ${data_dir:+--data "$data_dir"}; then
    row compare ok "$step_s" "$(grep -c ': ok:' "$out/compare.log") comparisons agree (MLP, MLP with eval_async, CNN); see compare.log"
  else
    row compare FAIL "$step_s" "see compare.log"
  fi
else
  row compare skipped 0 "no ctrainer, python3 or Fashion-MNIST files (--data DIR)"
fi

# The Fashion-MNIST MLP and CNN, the Trainer on the GPU against PyTorch eager on it (bench/fmnist_device.py):
# training samples/s and peak GPU memory of each side, float32 and bf16, within two minutes each.
fmnist_dir="${data_dir:-/usr/share/datasets/fashion-mnist}"
if [[ -x "$build/ctrainer" && -n "$python" ]] && ls "$fmnist_dir"/*ubyte.gz >/dev/null 2>&1; then
  for precision in float32 bf16; do
    if step "fmnist-$precision" "$out/fmnist.log" bash -c '. "$1"; shift; "$@"' _ "$deps/env.sh" timeout 120 \
        "$python" "$root/bench/fmnist_device.py" --device cuda --build "$build" --python "$python" \
        ${data_dir:+--data "$data_dir"} $([[ $precision = bf16 ]] && echo --bf16); then
      row "fmnist-$precision" ok "$step_s" \
        "$(grep '^train_samples_per_s' "$out/fmnist.log" | tail -2 | awk '{printf "%s ", $NF}')x PyTorch (mlp, cnn)"
    else
      row "fmnist-$precision" FAIL "$step_s" "see fmnist.log"
    fi
  done
fi

# The fused attention against PyTorch's scaled_dot_product_attention at GPT-2 small's shapes
# (bench/attention.py): float32 on the CUDA cores and bf16 on the tensor cores, within a minute.
if [[ -x "$build/bench/bench_attention" && -n "$python" ]]; then
  if step attention "$out/attention.log" bash -c '. "$1"; shift; "$@"' _ "$deps/env.sh" timeout 120 "$python" \
      "$root/bench/attention.py" --build "$build" --python "$python" --seconds 1; then
    row attention ok "$step_s" \
      "$(grep -m1 '^forward .*bf16' "$out/attention.log" | tr -s ' ' | cut -c1-70); see attention.log"
  else
    row attention FAIL "$step_s" "see attention.log"
  fi
fi

# GPT-2 small throughput against PyTorch, eager and torch.compile (bench/gpt2.py): tokens/s, MFU and
# peak memory of each side, and ctrainer's op profile (where its step's time goes), within 5 minutes;
# --no-gpt2 leaves it out.
if [[ "$run_gpt2" = 1 && -x "$build/ctrainer" && -n "$python" ]]; then
  if step gpt2 "$out/gpt2.log" bash -c '. "$1"; shift; "$@"' _ "$deps/env.sh" timeout 300 "$python" "$root/bench/gpt2.py" \
      --build "$build" --python "$python" --profile; then
    row gpt2 ok "$step_s" "$(grep -m1 '^  ctrainer' "$out/gpt2.log" | tr -s ' ' | cut -c1-70); see gpt2.log"
  else
    row gpt2 FAIL "$step_s" "see gpt2.log"
  fi
fi

# A linear layer whose cuBLASLt epilogue (bias, GELU, bias gradient) has no algorithm on this GPU runs
# as separate ops, with one warning per GEMM shape (backends/cuda/linear.cu): counted here, so the
# figures above are read knowing whether the fused path ran.
lt_misses="$(cat "$out"/*.log 2>/dev/null | grep -c 'cuBLASLt has no algorithm' || true)"
row cublaslt "$([[ "$lt_misses" = 0 ]] && echo ok || echo note)" 0 \
  "$lt_misses warning(s) 'cuBLASLt has no algorithm' in the logs (0: every fused epilogue ran)"

if [[ -n "$extra" ]]; then
  : >"$out/extra.log"
  if step extra "$out/extra.log" bash -c '. "$1"; cd "$2" && bash -c "$3"' _ "$deps/env.sh" "$root" "$extra"; then
    row extra ok "$step_s" "${extra:0:60}"
  else
    row extra FAIL "$step_s" "${extra:0:60}; see extra.log"
  fi
fi

# --- 8. summary ---------------------------------------------------------------------------------------
{
  echo
  echo "== summary (logs in $out)"
  printf '%-14s %-8s %7s  %s\n' step result time detail
  printf '%s\n' "${rows[@]}"
} | tee "$out/summary.txt"
exit "$failed"
