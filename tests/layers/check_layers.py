#!/usr/bin/env python3
"""The layer rule of docs/ARCHITECTURE.md, checked on the source tree: every library file includes
headers of its own area or of an area below it, never of one above, so the areas form one order and
no include cycle between areas can arise.

The order is the one CMakeLists.txt builds (CT_AREAS), with the op backends right after core/ops and
the CLI on top. A file's area is the longest listed folder that contains it (dist/mpi/comm_mpi.c is
in dist, core/ops/ops.h in core/ops). Prints every violation as file:line and exits 1 if any.

Usage: check_layers.py [SOURCE_ROOT]"""
import os
import re
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))


def area_order():
    text = open(os.path.join(root, "CMakeLists.txt")).read()
    m = re.search(r"set\(CT_AREAS\s+([^)]*)\)", text)
    if not m:
        sys.exit("check_layers: no set(CT_AREAS ...) in CMakeLists.txt")
    areas = m.group(1).split()
    at = areas.index("core/ops") + 1
    return areas[:at] + ["backends/cpu", "backends/checked", "backends/cuda"] + areas[at:] + ["cli"]


ORDER = area_order()
# The backends are side by side: none may include another.
RANK = {a: i for i, a in enumerate(ORDER)}
RANK["backends/cuda"] = RANK["backends/cpu"]
RANK["backends/checked"] = RANK["backends/cpu"]


def area_of(path):
    best = None
    for a in ORDER:
        if path == a or path.startswith(a + "/"):
            if best is None or len(a) > len(best):
                best = a
    return best


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
violations = []
checked = 0
for a in ORDER:
    base = os.path.join(root, a)
    if not os.path.isdir(base):
        continue
    for dirpath, _, files in os.walk(base):
        for name in sorted(files):
            if not name.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            path = os.path.relpath(os.path.join(dirpath, name), root)
            own = area_of(path)
            if own != a:
                continue  # a nested area's file, checked under that area
            checked += 1
            for lineno, line in enumerate(open(os.path.join(root, path), errors="replace"), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = area_of(m.group(1))
                if target is None or target == own:
                    continue
                if own.startswith("backends/") and target.startswith("backends/"):
                    violations.append(f"{path}:{lineno}: includes {m.group(1)}: one backend never includes another")
                elif RANK[target] > RANK[own]:
                    violations.append(f"{path}:{lineno}: includes {m.group(1)}: area '{target}' is above '{own}' "
                                      f"(order: {' < '.join(ORDER)})")

for v in violations:
    print(v)
if checked < 50:
    sys.exit(f"check_layers: only {checked} files found under {root}: wrong source root?")
print(f"check_layers: {checked} files, {len(violations)} upward includes")
sys.exit(1 if violations else 0)
