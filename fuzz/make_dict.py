#!/usr/bin/env python3
"""Writes the libFuzzer dictionaries fuzz/<target>.dict from the sources, so they follow the readers.

  run_config    every training argument and its string values (`ctrainer config --defaults` and the
                allowed values in docs/config.md), every key and type name in the readers' key
                tables (model/, data/, eval/, callbacks/, optim/, trainer/), the data files of the
                target's directory, JSON punctuation
  checkpoint    every key of the JSON files in fuzz/corpus/checkpoint/ (the template's trainer state,
                scheduler, progress and manifest) and the file names a manifest lists
  safetensors   the format's keys and dtype names (core/format/safetensors.c)

Usage: fuzz/make_dict.py [CTRAINER]   (CTRAINER: a built ctrainer program, default build/ctrainer)
"""
import glob
import json
import os
import re
import subprocess
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
os.chdir(root)


def quote(word):
    """libFuzzer's dictionary syntax: backslash escapes, \\xNN for bytes outside printable ASCII."""
    out = ""
    for c in word:
        if c in '"\\':
            out += "\\" + c
        elif " " <= c <= "~":
            out += c
        else:
            out += "\\x%02x" % ord(c)
    return '"' + out + '"'


def write(name, header, tokens, words):
    lines = ["# " + h for h in header]
    lines += [quote(t) for t in tokens]
    lines += [quote('"%s"' % w) for w in sorted(words)]
    with open("fuzz/%s.dict" % name, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("fuzz/%s.dict: %d entries" % (name, len(lines) - len(header)))


def run_config(ctrainer):
    words = set()
    defaults = json.loads(subprocess.check_output([ctrainer, "config", "--defaults"]))
    for k, v in defaults["training_args"].items():
        words.add(k)
        if isinstance(v, str) and v:
            words.add(v)
    for line in open("docs/config.md"):
        cols = line.split("|")
        if line.startswith("|") and len(cols) > 4:
            words.update(re.findall(r"`([a-z_0-9]+)`", cols[4]))
    sources = []
    for area in ("model", "data", "eval", "callbacks", "optim"):
        sources += glob.glob(area + "/*.c")
    sources += ["generate/generate.c", "trainer/run.c", "config/run_config.c", "search/hp_space.c"]
    for path in sources:
        text = open(path).read()
        for m in re.finditer(r"keys\[\]\s*=\s*\{([^}]*)\}", text):
            words.update(re.findall(r'"([^"]+)"', m.group(1)))
        words.update(re.findall(r'\{"([a-z_0-9]+)",\s*ct_\w+_from_json\}', text))
        words.update(re.findall(r'strcmp\(\w+, "([a-z_0-9]+)"\) == 0', text))
        for m in re.finditer(r"names?\[\]\s*=\s*\{([^}]*)\}", text):
            words.update(re.findall(r'"([a-z_0-9]+)"', m.group(1)))
    words.update(["model", "data", "loss", "metrics", "training_args", "callbacks", "init_from", "generation",
                  "train", "eval", "test"])
    words = {w for w in words if re.fullmatch(r"[A-Za-z_0-9.\-]+", w) and len(w) < 40}
    files = ["images.idx", "labels.idx", "images.idx.gz", "labels.idx.gz", "tokens.bin", "data.h5",
             "model.safetensors", "."]
    tokens = ["{", "}", "[", "]", ":", ",", "true", "false", "null", '""', "1e308", "-1", "0", "1", "0.5", "\x00",
              "--", "=", "training_args.", "model."]
    write("run_config",
          ["Dictionary for fuzz_run_config, written by fuzz/make_dict.py: JSON syntax, the separators of",
           "the input (NUL, --name=value), every key and type name the config readers know, the training",
           "arguments and their values, and the data files of the target's directory."],
          tokens, words | set(files))


def keys_of(value, out):
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(k)
            keys_of(v, out)
    elif isinstance(value, list):
        for v in value:
            keys_of(v, out)
    elif isinstance(value, str) and re.fullmatch(r"[A-Za-z_0-9.\-]+", value) and len(value) < 40:
        out.add(value)


def checkpoint():
    words = set()
    for path in glob.glob("fuzz/corpus/checkpoint/*"):
        data = open(path, "rb").read()[2:]
        try:
            keys_of(json.loads(data), words)
        except ValueError:
            pass
    words.update(["model.h5", "optimizer.h5", "scheduler.json", "trainer_state.json", "rng_state_0.json",
                  "training_args.json", "run_config.json", "manifest.json", "ctrainer-checkpoint",
                  "ctrainer-progress"])
    write("checkpoint",
          ["Dictionary for fuzz_checkpoint, written by fuzz/make_dict.py: the keys and names of the",
           "template checkpoint's JSON files (fuzz/corpus/checkpoint/)."],
          ["{", "}", "[", "]", ":", ",", "true", "false", "null", "-1", "0x1p-3"], words)


def safetensors():
    text = open("core/format/safetensors.c").read()
    m = re.search(r"\{\s*([^;]*?)\};", text[text.find("static const struct"):])
    dtypes = set(re.findall(r'"([A-Z0-9_]+)"', m.group(1))) if m else set()
    words = dtypes | {"dtype", "shape", "data_offsets", "__metadata__", "format", "pt"}
    write("safetensors",
          ["Dictionary for fuzz_safetensors, written by fuzz/make_dict.py: the header's keys and the",
           "format's dtype names; the 8-byte header sizes are left to the fuzzer."],
          ["{", "}", "[", "]", ":", ",", "  "], words)


if __name__ == "__main__":
    run_config(sys.argv[1] if len(sys.argv) > 1 else "build/ctrainer")
    checkpoint()
    safetensors()
