"""Helpers shared by the benchmark scripts."""
import json
import os
import subprocess
import sys

# Variables some machines set to pin OpenBLAS to an older kernel set than the CPU has (a workaround
# for OpenBLAS builds that mis-detect or mishandle new processors). PyTorch runs its linear layers
# on OpenBLAS, and ctrainer its float64 GEMMs (and its float ones under CT_CPU_GEMM=openblas), so
# both sides go together.
OPENBLAS_PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def add_openblas_arg(ap):
    ap.add_argument("--openblas", default="detect", choices=["detect", "environment"],
                    help="detect: unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for both sides, so OpenBLAS "
                         "picks the kernels for this CPU itself (the run prints which); environment: keep "
                         "them as they are set")


def openblas_env(env, mode):
    """env with the OpenBLAS pins removed when mode is 'detect'; returns (env, description)."""
    pinned = {k: env[k] for k in OPENBLAS_PINS if k in env}
    if mode == "detect" and pinned:
        env = {k: v for k, v in env.items() if k not in OPENBLAS_PINS}
        return env, "OpenBLAS detects the CPU (unset " + ", ".join(f"{k}={v}" for k, v in pinned.items()) + ")"
    if pinned:
        return env, "OpenBLAS pinned by " + ", ".join(f"{k}={v}" for k, v in pinned.items())
    return env, "OpenBLAS detects the CPU"


# An x86-64 level as both sides would meet it on a machine that has no more: ctrainer's kernels
# (CT_CPU_ISA), OpenBLAS's kernel set, PyTorch's own vectorised kernels (ATen) and its oneDNN (the
# CNN's convolutions), so that one machine measures what an older one would. v4 is the AVX-512
# machine itself; "best" leaves every side to detect the CPU.
LEVELS = {
    "v2": {"CT_CPU_ISA": "v2", "OPENBLAS_CORETYPE": "Nehalem", "ATEN_CPU_CAPABILITY": "default",
           "DNNL_MAX_CPU_ISA": "SSE41"},
    "v3": {"CT_CPU_ISA": "v3", "OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx2",
           "DNNL_MAX_CPU_ISA": "AVX2"},
    "v4": {"CT_CPU_ISA": "v4"},
}


def add_level_arg(ap):
    ap.add_argument("--level", default="best", choices=["best"] + sorted(LEVELS),
                    help="x86-64 level both sides run at: ctrainer's CT_CPU_ISA with the OpenBLAS kernel set, "
                         "PyTorch ATen and oneDNN limits of that level (v2: Nehalem/SSE4.1, v3: Haswell/AVX2); "
                         "best: each detects the CPU")


def level_env(env, level, blas_note):
    """env set up for --level, after openblas_env; returns (env, description), the description
    replacing openblas_env's when the level pins OpenBLAS itself."""
    if level == "best":
        return env, blas_note + "; every side at the CPU's best level"
    env = dict(env, **LEVELS[level])
    return env, "level " + level + ": " + ", ".join(f"{k}={v}" for k, v in LEVELS[level].items())


def ctrainer_level(ctrainer, env):
    """The level ctrainer's kernels run at under env and its float GEMMs' engine, as `ctrainer version`
    says ("x86-64-v4 (AVX-512), float GEMMs: oneDNN 2.6.3 sgemm (avx512_core)")."""
    if not os.path.exists(ctrainer):
        return f"unknown (no {ctrainer})"
    out = subprocess.run([ctrainer, "version"], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"failed: {ctrainer} version\n{out.stderr}")
    for line in out.stdout.splitlines():
        if line.startswith("CPU:") and "kernels " in line:
            return line.split("kernels ", 1)[1].split(", BLAS:")[0]
    return "unknown"


def run_json(cmd, env=None):
    """Runs cmd and returns the JSON object on the last line of its output (exits on failure)."""
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# The CPU targets of the issue, in one place for every benchmark: training and evaluation ratios
# against PyTorch, and the MLP's fraction of its GEMM-bound limit.
TARGETS = {"train": {"mlp": 1.5, "cnn": 2.0, "gpt": 2.0}, "eval": 1.5, "mlp_limit": 0.70}


def share_of_peak(samples_per_s, flops_per_sample, peak_flops):
    """The share of a multiply-add peak (FLOP/s; bench_sgemm's peak_gflops) that samples_per_s takes
    at flops_per_sample: above 1, no kernel on that level could reach the rate."""
    return samples_per_s * flops_per_sample / peak_flops
