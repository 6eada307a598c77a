#!/usr/bin/env python3
"""Turns a CUDA source file of the backend into C++ that the host emulation (cuda_emulation.h) runs:
every launch `kernel<T><<<grid, block, shm, stream>>>(args...)` becomes
`ct_emu_launch(ct_emu_config(grid, block, shm, stream), [](auto... a) { kernel<T>(a...); }, args...)`,
and a #line directive
keeps the compiler's messages pointing at the original file. Nothing else changes, so the kernels
that run are the ones nvcc compiles.

Usage: rewrite_launches.py INPUT.cu OUTPUT.cpp"""
import os
import re
import sys

LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;{}]*>)?)(\s*)<<<(.*?)>>>(\s*)\((\s*)(\)?)", re.S)


def rewrite(text):
    def one(m):
        kernel, config, no_args = m.group(1), m.group(3), m.group(6)
        # a generic lambda, so that a kernel template whose arguments are deduced from the call's
        # (sum_partials<<<...>>>(n, f, part)) is named as the launch names it
        head = f"ct_emu_launch(ct_emu_config({config}), [](auto... a) {{ {kernel}(a...); }}"
        # the line breaks the pattern took, so that every later line keeps its number
        breaks = "\n" * sum(m.group(i).count("\n") for i in (2, 4, 5))
        return (head + ")" if no_args else head + ", ") + breaks
    return LAUNCH.sub(one, text)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    out = rewrite(text)
    if "<<<" in out:
        sys.exit(f"{src}: a launch the rewrite did not recognise")
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    with open(dst, "w") as f:
        f.write(f'#include "cuda_emulation.h"\n#line 1 "{src}"\n{out}')


if __name__ == "__main__":
    main()
