#!/usr/bin/env python3
"""The backend rule of docs/ARCHITECTURE.md, checked on the source tree: the op library dispatches on a
tensor's device in one place (core/ops/), through one const table per device kind, so

  - CT_HAVE_CUDA appears only in backends/cuda/ and core/ops/ (the registry that names the CUDA table);
  - a CUDA header (backends/cuda/*, the toolkit's <cuda*.h>, <cublas*.h>, <cudnn*.h>, <nccl.h>) is
    included only in backends/cuda/ and by the NCCL communicator (dist/nccl/comm_nccl.c, compiled only
    in builds with CUDA and MPI).

The files checked are those of the library's areas (CT_AREAS of CMakeLists.txt, the backends, the CLI);
tests and benchmarks may ask for CUDA themselves. Prints every violation as file:line and exits 1 if any.

With --nm NM LIBRARY... (the static and shared libraries of any build) it checks instead that each
library defines and needs no symbol of CUDA, cuBLAS, cuDNN or NCCL (a shared library's dynamic symbols
are what its users link against): those live in the CUDA module (libctrainer_cuda.so), loaded only
when a GPU is used. The one allowed name is ct_comm_nccl_create, the public NCCL entry point, which
finds the communicator in the module (dist/nccl/nccl_entry.c).

With --module NM MODULE PROGRAM... it checks that every ct_ function the CUDA module leaves undefined
(to bind to the library already in the process) is defined and exported by each PROGRAM (the ctrainer
program, linked with the static library) and shared library: otherwise loading the module fails there.
And that each is on CT_CUDA_MODULE_IMPORTS in CMakeLists.txt, which every program linked with the
static library is made to hold, whatever it calls.

Usage: check_backends.py [SOURCE_ROOT]
       check_backends.py --nm NM LIBRARY...
       check_backends.py --module NM MODULE PROGRAM..."""
import os
import re
import subprocess
import sys

CUDA_SYMBOL = re.compile(r"cuda|cublas|cudnn|nccl", re.I)
ALLOWED_SYMBOLS = {"ct_comm_nccl_create"}


def check_symbols(nm, lib):
    """The number of CUDA symbols in lib, each printed (external ones: a static library's own local
    names, such as the CUDA loader's, are not what it defines or needs)."""
    shared = re.search(r"\.so(\.|$)", os.path.basename(lib))
    out = subprocess.run([nm, "-A", "-g"] + (["-D"] if shared else []) + [lib], check=True, capture_output=True,
                         text=True).stdout
    bad, seen = [], 0
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        seen += 1
        sym = fields[-1]
        if CUDA_SYMBOL.search(sym) and sym not in ALLOWED_SYMBOLS:
            bad.append(f"{lib}: {line.strip()}")
    for b in bad:
        print(b)
    if seen < 100:
        sys.exit(f"check_backends: only {seen} symbols in {lib}: not the library?")
    print(f"check_backends: {seen} symbols in {os.path.basename(lib)}, {len(bad)} of CUDA, cuBLAS, cuDNN or NCCL")
    return len(bad)


def check_module(nm, module, hosts):
    def dynamic(path, undefined):
        """The dynamic symbols path leaves undefined, or those it defines."""
        args = [nm, "-D"] + (["-u"] if undefined else ["--defined-only"]) + [path]
        return {line.split()[-1] for line in subprocess.run(args, check=True, capture_output=True,
                                                             text=True).stdout.splitlines() if line.split()}
    needed = {s for s in dynamic(module, True) if s.startswith("ct_")}
    if not needed:
        sys.exit(f"check_backends: {module} needs no ct_ function: not the CUDA module?")
    # every import on CMakeLists.txt's list, which makes each program linked with the static library
    # hold it (a program that calls none of them would otherwise lack them)
    cmake = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "CMakeLists.txt")).read()
    listed = re.search(r"set\(CT_CUDA_MODULE_IMPORTS\s+([^)]*)\)", cmake)
    unlisted = sorted(needed - set(listed.group(1).split() if listed else []))
    for sym in unlisted:
        print(f"CMakeLists.txt: CT_CUDA_MODULE_IMPORTS lacks {sym}, which {os.path.basename(module)} calls")
    bad = len(unlisted)
    for host in hosts:
        missing = sorted(needed - dynamic(host, False))
        for sym in missing:
            print(f"{host}: does not export {sym}, which {os.path.basename(module)} calls")
        bad += len(missing)
        print(f"check_backends: {os.path.basename(host)} exports all but {len(missing)} of the {len(needed)} "
              f"functions the module needs")
    sys.exit(1 if bad else 0)


if len(sys.argv) >= 4 and sys.argv[1] == "--nm":
    sys.exit(1 if sum(check_symbols(sys.argv[2], lib) for lib in sys.argv[3:]) else 0)
if len(sys.argv) >= 5 and sys.argv[1] == "--module":
    check_module(sys.argv[2], sys.argv[3], sys.argv[4:])

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
text = open(os.path.join(root, "CMakeLists.txt")).read()
m = re.search(r"set\(CT_AREAS\s+([^)]*)\)", text)
if not m:
    sys.exit("check_backends: no set(CT_AREAS ...) in CMakeLists.txt")
areas = m.group(1).split() + ["backends/cpu", "backends/checked", "backends/cuda", "cli"]

HAVE_CUDA_OK = ("backends/cuda/", "core/ops/")
CUDA_INCLUDE_OK = ("backends/cuda/", "dist/nccl/comm_nccl.c")  # the latter is built into the module
CUDA_INCLUDE = re.compile(r'^\s*#\s*include\s+(?:"backends/cuda/[^"]+"|<(?:cuda|cublas|cudnn|nccl)[^>]*>)')

violations, checked, seen = [], 0, set()
for a in areas:
    base = os.path.join(root, a)
    for dirpath, _, files in os.walk(base):
        for name in sorted(files):
            if not name.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            path = os.path.relpath(os.path.join(dirpath, name), root)
            if path in seen:
                continue  # a nested area's file, met under its parent's walk already
            seen.add(path)
            checked += 1
            for lineno, line in enumerate(open(os.path.join(root, path), errors="replace"), 1):
                if "CT_HAVE_CUDA" in line and not path.startswith(HAVE_CUDA_OK):
                    violations.append(f"{path}:{lineno}: CT_HAVE_CUDA outside backends/cuda/ and core/ops/: "
                                      "go through the backend table (core/ops/backend.h)")
                if CUDA_INCLUDE.match(line) and not path.startswith(CUDA_INCLUDE_OK):
                    violations.append(f"{path}:{lineno}: includes a CUDA header outside backends/cuda/: "
                                      "go through the backend table (core/ops/backend.h)")

for v in violations:
    print(v)
if checked < 50:
    sys.exit(f"check_backends: only {checked} files found under {root}: wrong source root?")
print(f"check_backends: {checked} files, {len(violations)} CUDA references outside the backend")
sys.exit(1 if violations else 0)
