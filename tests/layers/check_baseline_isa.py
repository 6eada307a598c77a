#!/usr/bin/env python3
"""The library's objects compiled for baseline x86-64 hold no instruction beyond it, so the binary
runs on any x86-64 CPU and leaves the wider paths to the kernel copies chosen at run time
(backends/cpu/isa.c): no VEX or EVEX encoded instruction (AVX and later: mnemonics starting with
'v' on xmm/ymm/zmm registers, FMA, BMI), no SSE3/SSSE3/SSE4 or POPCNT/LZCNT/MOVBE instruction.
A compiler that slipped one in (a -march left in the flags, a builtin that expands to a newer
instruction) would make the baseline binary die with SIGILL on an older CPU.

As a control, the objects after --wide (the x86-64-v3 copy of the kernels) must contain AVX
instructions: otherwise the levels are not compiled as they claim and this check proves nothing.

Usage: check_baseline_isa.py OBJDUMP BASELINE_OBJECT... --wide V3_OBJECT...
Prints each offending instruction as object:function: instruction and exits 1 if any."""
import re
import subprocess
import sys

# Beyond SSE2: SSE3, SSSE3 and SSE4.1/4.2 vector instructions (prefixes of their mnemonics), and the
# general-purpose ones of x86-64-v2 and v3 (whole mnemonics).
NEWER = re.compile(r"^(addsubp[sd]|hadd|hsub|lddqu|movddup|movs[hl]dup|pabs|palignr|phadd|phsub|pmaddubsw|"
                   r"pmulhrsw|pshufb|psign|blendp|blendvp|pblend|dpp[sd]|extractps|insertps|mpsadbw|"
                   r"packusdw|pcmpeqq|pcmpgtq|pcmp[ei]str|pextr[bdq]|pinsr[bdq]|phminposuw|pmax(sb|sd|ud|uw)|"
                   r"pmin(sb|sd|ud|uw)|pmovsx|pmovzx|pmuldq|pmulld|ptest|round[ps][sd]|movntdqa|crc32)")
NEWER_GP = {"popcnt", "lzcnt", "tzcnt", "movbe", "andn", "bextr", "blsi", "blsmsk", "blsr", "bzhi", "mulx", "pdep",
            "pext", "rorx", "sarx", "shlx", "shrx"}
# VEX/EVEX: every AVX form is a 'v' mnemonic (the few non-AVX ones starting with 'v' are excluded).
VEX = re.compile(r"^v(?!err|erw|mcall|mlaunch|mresume|mxoff|mxon|mread|mwrite|mptrld|mptrst|mclear|mfunc)[a-z]")
FUNC = re.compile(r"^[0-9a-f]+ <(.+)>:$")


def instructions(objdump, obj):
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", obj], check=True, capture_output=True,
                         text=True).stdout
    func = "?"
    for line in out.splitlines():
        m = FUNC.match(line)
        if m:
            func = m.group(1)
            continue
        parts = line.split("\t")
        if len(parts) >= 2 and re.match(r"^\s*[0-9a-f]+:$", parts[0]):
            mnemonic = parts[1].split()[0] if parts[1].split() else ""
            yield func, mnemonic, parts[1].strip()


def main(argv):
    objdump, rest = argv[1], argv[2:]
    if "--wide" not in rest:
        sys.exit(__doc__)
    cut = rest.index("--wide")
    baseline, wide = rest[:cut], rest[cut + 1:]
    bad = 0
    for obj in baseline:
        for func, mnemonic, text in instructions(objdump, obj):
            if VEX.match(mnemonic) or NEWER.match(mnemonic) or mnemonic.rstrip("lqw") in NEWER_GP:
                print(f"{obj}:{func}: {text}")
                bad += 1
    avx = sum(1 for obj in wide for _, mnemonic, _ in instructions(objdump, obj) if VEX.match(mnemonic))
    if avx == 0:
        print("control failed: the x86-64-v3 objects hold no AVX instruction")
        bad += 1
    print(f"{len(baseline)} baseline objects, {bad} instruction(s) beyond x86-64; {avx} AVX instructions in "
          f"the {len(wide)} x86-64-v3 objects")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
