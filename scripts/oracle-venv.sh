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
# Optional: TensorBoard's reader for tests/oracle/test_tensorboard.py, in a step of its own that may
# fail (that test is then skipped); nothing above depends on it.
tb_req=scripts/oracle-tensorboard-requirements.txt
tb_stamp=$venv/.installed-tensorboard
if [ -f "$stamp" ] && [ -f "$tb_req" ] && { [ ! -f "$tb_stamp" ] || ! cmp -s "$tb_req" "$tb_stamp"; }; then
  if "$venv/bin/pip" install -q --disable-pip-version-check -r "$tb_req" >&2; then
    cp "$tb_req" "$tb_stamp"
  else
    echo "oracle-venv: tensorboard could not be installed; tests/oracle/test_tensorboard.py will be skipped" >&2
  fi
fi
if [ -f "$stamp" ]; then echo "$PWD/$venv/bin/python"; else echo /usr/bin/python3; fi
