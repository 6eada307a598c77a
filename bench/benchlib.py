"""Helpers shared by the benchmark scripts."""
import json
import os
import subprocess
import sys

# Variables some machines set to pin OpenBLAS to an older kernel set than the CPU has (a workaround
# for OpenBLAS builds that mis-detect or mishandle new processors). Both sides of a benchmark use
# the same OpenBLAS (ctrainer for every GEMM, PyTorch for its linear layers), so they go together.
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


def run_json(cmd, env=None):
    """Runs cmd and returns the JSON object on the last line of its output (exits on failure)."""
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])
