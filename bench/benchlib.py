"""Helpers shared by the benchmark scripts."""
import json
import subprocess
import sys


def run_json(cmd, env=None):
    """Runs cmd and returns the JSON object on the last line of its output (exits on failure)."""
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])
