"""`ctrainer data convert` checked by h5py: the files it writes, read back by h5py, hold exactly the
source data (Fashion-MNIST IDX pixels and labels decoded here with numpy; random CSV files written
here), chunked by the requested rows, deflate-compressed at the requested level, with int64 labels
and a num_classes attribute for class ids, float32 labels otherwise. Runtime errors exit 1 with a
file:line:column message and leave no output behind. Also sets `ctrainer train` cannot count
classes from (no samples, float labels), refused naming the file, and labels of the loss's
ignore_index, which train."""
import gzip
import json
import os
import subprocess
import sys
import tempfile

from common import check, CTRAINER, finish, h5py, np, RNG

FMNIST = "/usr/share/datasets/fashion-mnist"


def convert(args):
    p = subprocess.run([CTRAINER, "data", "convert"] + args, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def read_idx(path):
    """An IDX file (gzip'd) decoded by numpy: the reference nobody here wrote the reader of."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    assert raw[0] == 0 and raw[1] == 0 and raw[2] == 8, "u8 IDX expected"
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def check_storage(label, ds, chunk_rows, level, n):
    check(ds.chunks is not None and ds.chunks[0] == min(chunk_rows, n) and ds.chunks[1:] == ds.shape[1:],
          f"{label}: chunks {ds.chunks}, expected ({min(chunk_rows, n)}, ...)")
    if level > 0:
        check(ds.compression == "gzip" and ds.compression_opts == level,
              f"{label}: compression {ds.compression} {ds.compression_opts}, expected gzip {level}")
    else:
        check(ds.compression is None, f"{label}: compression {ds.compression}, expected none")


def fashion_mnist(d):
    if not os.path.exists(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")):
        print("Fashion-MNIST not installed; skipping it")
        return
    for split in ("t10k", "train"):
        images = os.path.join(FMNIST, f"{split}-images-idx3-ubyte.gz")
        labels = os.path.join(FMNIST, f"{split}-labels-idx1-ubyte.gz")
        out = os.path.join(d, f"{split}.h5")
        # level 9 takes zlib ~20 s on the training images (long runs of zeros); the test split tries it
        chunk, level = int(RNG.integers(16, 4096)), int(RNG.integers(0, 10 if split == "t10k" else 7))
        rc, text = convert(["--images", images, "--labels", labels, "-o", out, "--chunk", str(chunk),
                            "--compression", str(level)])
        check(rc == 0, f"convert {split}: exit {rc}: {text}")
        if rc != 0:
            continue
        check("10 classes" in text, f"summary line: {text}")
        x, y = read_idx(images), read_idx(labels)
        with h5py.File(out, "r") as f:
            check(sorted(f.keys()) == ["features", "labels"], f"datasets {sorted(f.keys())}")
            feat, lab = f["features"], f["labels"]
            check(feat.dtype == np.uint8 and feat.shape == (x.shape[0], 1, 28, 28),
                  f"{split} features {feat.dtype} {feat.shape}")
            check(np.array_equal(feat[()][:, 0], x), f"{split}: pixels differ from the IDX file")
            check(lab.dtype == np.int64 and lab.shape == y.shape, f"{split} labels {lab.dtype} {lab.shape}")
            check(np.array_equal(lab[()], y.astype(np.int64)), f"{split}: labels differ from the IDX file")
            check(int(lab.attrs.get("num_classes", -1)) == 10, f"num_classes {lab.attrs.get('num_classes')}")
            check_storage(f"{split} features", feat, chunk, level, x.shape[0])
            check_storage(f"{split} labels", lab, chunk, level, x.shape[0])
        check(not [n for n in os.listdir(d) if ".tmp-" in n], "a temporary file was left behind")
        os.remove(out)


def random_csv(path, rows, cols, label, int_labels, header):
    """Writes a CSV of random numbers; returns (names, values as the text says them)."""
    names = [f"col{i}" if i != label else "y" for i in range(cols)]
    vals = RNG.standard_normal((rows, cols)) * 10.0 ** RNG.integers(-3, 4, size=(rows, cols))
    if int_labels:
        vals[:, label] = RNG.integers(0, 7, size=rows)
        vals[RNG.integers(rows), label] = 6  # the largest class occurs
    text = np.empty((rows, cols), dtype=object)
    for r in range(rows):
        for c in range(cols):
            v = vals[r, c]
            text[r, c] = str(int(v)) if int_labels and c == label else RNG.choice(["%.9g", "%.4e", "%.3f"]) % v
            vals[r, c] = float(text[r, c])
    with open(path, "w") as f:
        if header:
            f.write(",".join(names) + "\n")
        for r in range(rows):
            f.write(",".join(text[r]) + "\n")
    return names, vals


def csv_files(d):
    for trial in range(4):
        rows, cols = int(RNG.integers(1, 2500)), int(RNG.integers(2, 10))
        label, int_labels, header = int(RNG.integers(cols)), bool(trial % 2), trial < 3
        path, out = os.path.join(d, "in.csv"), os.path.join(d, "out.h5")
        names, vals = random_csv(path, rows, cols, label, int_labels, header)
        chunk, level = int(RNG.integers(1, 600)), int(RNG.integers(0, 10))
        how = "name" if header and RNG.integers(2) else "index"
        col_arg = names[label] if how == "name" else str(label)
        rc, text = convert(["--csv", path, "--label-column", col_arg, "-o", out, "--chunk", str(chunk),
                            "--compression", str(level)])
        print(f"csv: {rows}x{cols}, label column {label} by {how}, {'int' if int_labels else 'float'} labels, "
              f"chunk {chunk}, level {level}")
        check(rc == 0, f"convert csv: exit {rc}: {text}")
        if rc != 0:
            continue
        want_x = np.delete(vals, label, axis=1).astype(np.float32)
        with h5py.File(out, "r") as f:
            feat, lab = f["features"], f["labels"]
            check(feat.dtype == np.float32 and feat.shape == (rows, cols - 1), f"csv features {feat.dtype} {feat.shape}")
            check(np.array_equal(feat[()], want_x), "csv features differ from the values rounded to float32")
            if int_labels:
                check(lab.dtype == np.int64 and np.array_equal(lab[()], vals[:, label].astype(np.int64)),
                      f"csv class labels ({lab.dtype}) differ")
                check(int(lab.attrs.get("num_classes", -1)) == 7, f"num_classes {lab.attrs.get('num_classes')}")
            else:
                check(lab.dtype == np.float32 and np.array_equal(lab[()], vals[:, label].astype(np.float32)),
                      f"csv float labels ({lab.dtype}) differ")
                check("num_classes" not in lab.attrs, "float labels carry no num_classes")
            check_storage("csv features", feat, chunk, level, rows)
            check_storage("csv labels", lab, chunk, level, rows)
        os.remove(out)


def csv_errors(d):
    path, out = os.path.join(d, "bad.csv"), os.path.join(d, "bad.h5")
    cases = [("a,b,c\n1,2,3\n4,5\n", ":3:4: expected 3 fields"),
             ("a,b,c\n1,2,3\n4,oops,6\n", ":3:3: expected a finite number in column 'b', found 'oops'")]
    for text, want in cases:
        with open(path, "w") as f:
            f.write(text)
        rc, msg = convert(["--csv", path, "-o", out])
        check(rc == 1 and msg.startswith("ctrainer data convert: ") and path + want in msg,
              f"exit {rc}, message {msg!r}; expected {path + want!r}")
        check(not os.path.exists(out) and not [n for n in os.listdir(d) if ".tmp-" in n],
              "a failed conversion left a file behind")
    with open(path, "w") as f:
        f.write("a,b\n1,2\n")
    rc, msg = convert(["--csv", path, "--label-column", "zz", "-o", out])
    check(rc == 2 and "no label column 'zz'" in msg and "'a', 'b'" in msg, f"exit {rc}: {msg!r}")


def unusable_sets(d):
    """Sets a preset cannot count its classes from, named as such: a file of no samples (with
    num_classes given: no batches, the file named), float labels (a regression: give num_classes);
    and labels of a loss's ignore_index, which train."""
    x = RNG.random((16, 3)).astype("f4")
    files = {"empty": (np.zeros((0, 3), "f4"), np.zeros((0,), "i8")), "floats": (x, RNG.random(16)),
             "ignored": (x, np.where(np.arange(16) == 5, -100, np.arange(16) % 3).astype("i8"))}
    for name, (feat, lab) in files.items():
        with h5py.File(os.path.join(d, name + ".h5"), "w") as f:
            f["features"], f["labels"] = feat, lab

    def train(name, *extra):
        cfg = {"model": {"type": "mlp", "hidden": [4]}, "data": {"train": {"type": "hdf5", "path": name + ".h5"}},
               "training_args": {"max_steps": 1, "per_device_train_batch_size": 8, "save_strategy": "no",
                                 "output_dir": os.path.join(d, "out_" + name + str(len(extra))), "report_to": []}}
        path = os.path.join(d, name + ".json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        p = subprocess.run([CTRAINER, "train", path, *extra], capture_output=True, text=True)
        return p.returncode, p.stderr

    rc, err = train("empty")
    check(rc == 2 and "model.num_classes: the data it is counted from (" in err and "empty.h5) holds no samples" in err,
          f"an empty set: exit {rc}: {err[-300:]!r}")
    rc, err = train("empty", "--set", "model.num_classes=3")
    check(rc == 2 and "empty.h5 gives no batches (0 samples)" in err, f"an empty set, classes given: {err[-300:]!r}")
    rc, err = train("floats")
    check(rc == 2 and "are not class ids to count it from; give it" in err, f"float labels: exit {rc}: {err[-300:]!r}")
    rc, err = train("ignored")
    check(rc == 0, f"labels of ignore_index -100: exit {rc}: {err[-300:]!r}")


if not os.access(CTRAINER, os.X_OK):
    check(False, f"{CTRAINER} not found")
else:
    with tempfile.TemporaryDirectory() as tmp:
        fashion_mnist(tmp)
        csv_files(tmp)
        csv_errors(tmp)
        unusable_sets(tmp)
finish()
