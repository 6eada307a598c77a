#!/usr/bin/env bash
# Makes build/oracle-venv: Debian's python3 (torch, numpy, h5py, sklearn from Debian) plus the PyPI
# packages in scripts/oracle-requirements.txt that Debian lacks (Hugging Face's schedulers). Prints
# the python to use; falls back to /usr/bin/python3 when PyPI cannot be reached (those tests then skip).
set -uo pipefail
cd "$(dirname "$0")/.."
venv=build/oracle-venv
req=scripts/oracle-requirements.txt
stamp=$venv/.installed
if [ -f "$req" ] && { [ ! -f "$stamp" ] || ! cmp -s "$req" "$stamp"; }; then
  /usr/bin/python3 -m venv --system-site-packages "$venv" >&2 &&
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2 && cp "$req" "$stamp"
fi
if [ -f "$stamp" ]; then echo "$PWD/$venv/bin/python"; else echo /usr/bin/python3; fi
