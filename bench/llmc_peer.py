"""llm.c's CPU trainer (train_gpt2.c, github.com/karpathy/llm.c) as a benchmark peer: its build from
a checkout the user gives, and its two input files made for a ctrainer GPT config. bench/gpt.py
uses it; no llm.c code is part of this repository.

- build(): compiles the checkout's train_gpt2.c into a temporary folder with the flags of llm.c's
  Makefile for its CPU target (`make -n train_gpt2` on Linux: cc -Ofast -Wno-unused-result
  -Wno-ignored-pragmas -Wno-unknown-attributes -march=native -fopenmp -DOMP ... -lm -lgomp), with
  bench/llmc_train.c as the main program (train_gpt2.c's own main() fixes B = 4, T = 64 and its
  data paths, and evaluates and samples text between steps).
- write_checkpoint(): a randomly initialised model in gpt2_build_from_checkpoint's format.
- write_tokens(): ctrainer's token file (flat uint16 ids) as llm.c's DataLoader reads it.
- step_lines() and num_parameters(): what the program prints."""
import math
import os
import re
import struct
import subprocess
import sys

# llm.c's Makefile: CFLAGS for every CPU target, then -march=native where the compiler takes it,
# then OpenMP's flags and libraries. CC is make's (cc unless the environment sets CC).
CFLAGS = ["-Ofast", "-Wno-unused-result", "-Wno-ignored-pragmas", "-Wno-unknown-attributes"]
OPENMP = ["-fopenmp", "-DOMP"]
LIBS = ["-lm", "-lgomp"]
MODEL_MAGIC, MODEL_VERSION = 20240326, 3  # gpt2_build_from_checkpoint's header
TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1  # llmc/dataloader.h's header
HEADER_INTS = 256
STEP_LINE = re.compile(r"^step (\d+): train loss (\S+) \(took (\S+) ms\)$")


def source(path):
    """The train_gpt2.c of --llmc PATH (an llm.c checkout, or that file itself), absolute; raises
    ValueError saying what is wrong with PATH."""
    if not os.path.exists(path):
        raise ValueError(f"--llmc {path}: no such file or directory (give an llm.c checkout or its train_gpt2.c)")
    src = os.path.join(path, "train_gpt2.c") if os.path.isdir(path) else path
    if not os.path.isfile(src):
        raise ValueError(f"--llmc {path}: no train_gpt2.c in this directory (give an llm.c checkout or its train_gpt2.c)")
    src = os.path.abspath(src)
    # The path becomes a C string in an #include line, which has no escapes.
    if any(c in src for c in '"\\\n'):
        raise ValueError(f"--llmc {path}: a path with a quote, backslash or newline cannot be #included; "
                         "copy the checkout elsewhere")
    return src


def build(src, level, out_dir):
    """Compiles src with bench/llmc_train.c into out_dir; returns (the program, the compile command
    as text). -march=native as the Makefile has it at level 'best', else -march=x86-64-vN, the level
    ctrainer's kernels are pinned to. Exits with the compiler's message if it fails."""
    cc = os.environ.get("CC", "cc")
    march = "-march=native" if level == "best" else f"-march=x86-64-{level}"
    exe = os.path.join(out_dir, "llmc_train")
    driver = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llmc_train.c")
    flags = [*CFLAGS, march, *OPENMP]
    cmd = [cc, *flags, f'-DLLMC_TRAIN_GPT2="{src}"', driver, *LIBS, "-o", exe]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        sys.exit(f"llm.c: cannot run the C compiler '{cc}' (set CC to one): {e}")
    if out.returncode != 0:
        sys.exit(f"llm.c: {src} did not compile with bench/llmc_train.c (it calls gpt2_build_from_checkpoint, "
                 f"gpt2_forward/zero_grad/backward/update and llmc/dataloader.h's DataLoader, as llm.c has "
                 f"them since July 2024):\n{' '.join(cmd)}\n{out.stderr.strip()}")
    return exe, " ".join([cc, *flags, *LIBS])


def parameter_shapes(L, C, maxT, Vp):
    """train_gpt2.c's parameter tensors in its order (fill_in_parameter_sizes), as (name, shape)."""
    return [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
            ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
            ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]


def write_checkpoint(path, model, seed):
    """model (a ctrainer GPT config's "model" object) as an llm.c checkpoint at path, initialised as
    ctrainer's GPT initialises (GPT-2's, nanoGPT's way: weights N(0, 0.02), the residual
    projections N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weights 1; wte's padding rows 0).
    Returns the number of parameters."""
    import numpy as np
    L, NH, C, maxT = model["n_layer"], model["n_head"], model["n_embd"], model["n_positions"]
    V = model["vocab_size"]
    Vp = model.get("padded_vocab_size") or V
    rng = np.random.default_rng(seed)
    proj_std = 0.02 / math.sqrt(2 * L)
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:8] = [MODEL_MAGIC, MODEL_VERSION, maxT, V, L, NH, C, Vp]
    count = 0
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name, shape in parameter_shapes(L, C, maxT, Vp):
            if name.endswith("b"):
                t = np.zeros(shape, dtype="<f4")
            elif name.startswith("ln"):
                t = np.ones(shape, dtype="<f4")
            else:
                t = rng.normal(0.0, proj_std if name.endswith("projw") else 0.02, shape).astype("<f4")
                if name == "wte":
                    t[V:] = 0
            f.write(t.tobytes())
            count += t.size
    return count


def write_tokens(src, dst):
    """ctrainer's token file src (flat little-endian uint16 ids) as llm.c's at dst: a header of 256
    int32 (magic, version, number of tokens) before the same ids."""
    data = open(src, "rb").read()
    n = len(data) // 2
    if len(data) % 2 or not 0 < n < 2**31:
        sys.exit(f"{src}: not a uint16 token file llm.c can read ({len(data)} bytes)")
    with open(dst, "wb") as f:
        f.write(struct.pack(f"<{HEADER_INTS}i", TOKENS_MAGIC, TOKENS_VERSION, n, *[0] * (HEADER_INTS - 3)))
        f.write(data)


def step_lines(out):
    """(step, loss, ms) of each step line llmc_train printed."""
    return [(int(m[1]), float(m[2]), float(m[3])) for m in map(STEP_LINE.match, out.splitlines()) if m]


def num_parameters(out):
    """The parameter count train_gpt2.c printed when it read the checkpoint, or None."""
    m = re.search(r"^num_parameters: (\d+)$", out, re.M)
    return int(m[1]) if m else None
