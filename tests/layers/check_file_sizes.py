#!/usr/bin/env python3
"""The house rule on long files, checked on the source tree: a C, CUDA or Python file of more than
600 lines says in its opening paragraph why it is one file ("Why one file ...", or "Why one long
file ..."), so that the next reader knows whether to split it or to leave it whole.

The files checked are every *.c, *.h, *.cu, *.cuh and *.py below SOURCE_ROOT, leaving out build
folders (build*/), .git and caches. The opening paragraph is the file's first comment (C) or its module
docstring (Python). Prints every file that breaks the rule with its length and exits 1 if any.

Usage: check_file_sizes.py [SOURCE_ROOT]"""
import os
import re
import sys

LIMIT = 600
EXTENSIONS = (".c", ".h", ".cu", ".cuh", ".py")
REASON = re.compile(r"Why one (long )?file", re.I)


def opening(text, path):
    """The first comment of a C file, or the module docstring of a Python one ("" when none)."""
    if path.endswith(".py"):
        m = re.match(r'\s*(#![^\n]*\n)?\s*(?:"""(.*?)"""|\'\'\'(.*?)\'\'\')', text, re.S)
        return (m.group(2) or m.group(3) or "") if m else ""
    m = re.search(r"/\*(.*?)\*/", text, re.S)
    return m.group(1) if m else ""


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    bad = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if not (d.startswith("build") or d.startswith(".") or d == "__pycache__"))
        for name in sorted(filenames):
            if not name.endswith(EXTENSIONS):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            lines = text.count("\n")
            if lines > LIMIT and not REASON.search(opening(text, path)):
                bad.append(f"{os.path.relpath(path, root)}: {lines} lines, and its opening paragraph does not say "
                           f"why it is one file (\"Why one file of over {LIMIT} lines: ...\")")
    for b in bad:
        print(b)
    print(f"{len(bad)} file(s) over {LIMIT} lines without the reason")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
