"""`ctrainer plot` end to end: the figure of a real run, checked with a PNG reader written here
(png_check.py: struct + zlib + numpy, no imaging library) and Python's XML parser.

A short training of tests/cli/configs/tiny_sequential.json (fresh seed, random logging interval,
two named evaluation sets with intervals) is plotted. Then:
  - the PNG is valid: signature, every chunk's CRC, IHDR first, IDAT inflating to exactly
    height x (1 + width x channels) bytes, every scanline's filter known; 1280 pixels wide (two
    columns), at least 400 high; --scale 2 doubles both sides;
  - its pixels show the run: mostly white background, the training colour (blue) and each
    evaluation set's colour (orange, green) in quantity; not one flat colour;
  - the SVG parses as XML with an <svg> root of the same size in points, and holds drawn paths;
  - the same state gives the same bytes, and the figure `ctrainer train` drew for the model card is
    the one `ctrainer plot` draws from trainer_state.json;
  - the picture changes when the data change: losses scaled, one evaluation value moved, entries
    removed (PNG pixels and SVG both differ);
  - Hugging Face-style files (NaN and Infinity tokens from Python's json), a single point, a state
    file given directly, --output with --format png (no SVG written) all work;
  - errors: a missing run directory (message names OUTPUT_DIR/trainer_state.json), an empty
    log_history, nothing to plot, malformed JSON (file:line:column), a log_history that is not a
    list, an unwritable output: exit 1 with the message; usage errors exit 2."""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from common import check, CTRAINER, finish, np, require_built_with, require_fashion_mnist, RNG, TINY_CONFIG
import png_check

require_built_with("plots")  # CTRAINER_PLOT=OFF, or AUTO without cairo

DATA = require_fashion_mnist()

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = TINY_CONFIG
SEED = int(RNG.integers(0, 2**31))
BLUE, ORANGE, GREEN = (0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E), (0x2C, 0xA0, 0x2C)


def run(*args):
    p = subprocess.run([CTRAINER, *args], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "2"})
    return p.returncode, p.stdout + p.stderr


def plot_ok(*args):
    code, out = run("plot", *args)
    check(code == 0, f"ctrainer plot {' '.join(args)} exited {code}: {out.strip()}")
    return out


def expect_fail(want_code, pattern, *args):
    code, out = run("plot", *args)
    check(code == want_code and pattern in out,
          f"ctrainer plot {' '.join(args)}: exit {code} (want {want_code}), output lacks '{pattern}': {out.strip()}")


def valid_png(path, min_w=600, min_h=400, pixels=True):
    try:
        w, h, info, img = png_check.read(path, pixels)
    except (png_check.PngError, OSError, ValueError) as e:
        check(False, f"{path}: {e}")
        return None
    check(w >= min_w and h >= min_h, f"{path}: {w}x{h}, at least {min_w}x{min_h} expected")
    return w, h, info, img


def valid_svg(path):
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        check(False, f"{path}: not XML: {e}")
        return None
    check(root.tag.endswith("svg"), f"{path}: root element {root.tag}")
    w = float(root.get("width", "0").rstrip("pt"))
    h = float(root.get("height", "0").rstrip("pt"))
    paths = sum(1 for el in root.iter() if el.tag.endswith("path"))
    check(w >= 600 and h >= 400 and paths > 50, f"{path}: {w}x{h} with {paths} paths")
    return w, h


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write_state(path, history, raw=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(raw if raw is not None else json.dumps({"global_step": 1, "log_history": history}, indent=2))


with tempfile.TemporaryDirectory() as d:
    out = os.path.join(d, "run")
    logging_steps = int(RNG.integers(3, 9))
    code, text = run("train", CONFIG, "--output_dir", out, "--seed", str(SEED), "--save_strategy", "no",
                     "--logging_steps", str(logging_steps))
    if code != 0:
        check(False, f"training failed ({code}): {text[-2000:]}")
        finish()
    state_file = os.path.join(out, "trainer_state.json")
    png, svg = os.path.join(out, "training_curves.png"), os.path.join(out, "training_curves.svg")
    card_png, card_svg = read(png), read(svg)  # drawn by `train` for the model card

    # --- the figure of the run ---
    said = plot_ok(out)
    check(f"wrote {png}" in said and f"wrote {svg}" in said, f"plot names its files: {said.strip()}")
    r = valid_png(png)
    if r:
        w, h, info, img = r
        check(w == 1280, f"two columns are 1280 pixels wide, got {w}")
        white = png_check.count_colour(img, (255, 255, 255), tol=3) / (w * h)
        check(0.5 < white < 0.98, f"white background fraction {white:.3f}")
        for name, rgb, least in (("training (blue)", BLUE, 800), ("eval: small (orange)", ORANGE, 300),
                                 ("eval: other (green)", GREEN, 300)):
            n = png_check.count_colour(img, rgb)
            check(n >= least, f"{name}: {n} pixels of {rgb}, at least {least} expected")
        check(len(np.unique(img.reshape(-1, img.shape[2]), axis=0)) > 100, "the image has many colours")
    sv = valid_svg(svg)
    if r and sv:
        check(abs(sv[0] - r[0]) < 1 and abs(sv[1] - r[1]) < 1, f"SVG {sv} and PNG {r[:2]} have one size")
    check(read(png) == card_png, "the model card's figure is the one `ctrainer plot` draws from trainer_state.json")
    check(read(svg) == card_svg, "and so is its SVG")
    first_png, first_svg = read(png), read(svg)
    plot_ok(out)
    check(read(png) == first_png and read(svg) == first_svg, "the same state gives the same bytes")

    big = os.path.join(d, "big")
    plot_ok(out, "--output", big, "--scale", "2", "--title", "Twice as large")
    r2 = valid_png(big + ".png", pixels=False)
    if r and r2:
        check(r2[0] == 2 * r[0] and abs(r2[1] - 2 * r[1]) <= 1, f"--scale 2: {r2[:2]} vs {r[:2]}")

    # --- the picture follows the data ---
    with open(state_file) as f:
        state = json.load(f)
    base_raw = png_check.read(png, pixels=False)[2]["raw"]

    def changed(label, edit):
        s = json.loads(json.dumps(state))
        edit(s["log_history"])
        run_dir = os.path.join(d, label)
        write_state(os.path.join(run_dir, "trainer_state.json"), None, json.dumps(s))
        plot_ok(run_dir, "--title", f"Training curves: {os.path.basename(out)}")
        p = os.path.join(run_dir, "training_curves.png")
        if valid_png(p, pixels=False):
            check(png_check.read(p, pixels=False)[2]["raw"] != base_raw, f"{label}: the pixels changed")
        check(read(os.path.join(run_dir, "training_curves.svg")) != first_svg, f"{label}: the SVG changed")

    def scale_losses(h):
        for e in h:
            if "loss" in e:
                e["loss"] *= 1.5

    def move_one_eval(h):
        e = next(e for e in h if "eval_small_accuracy" in e)
        e["eval_small_accuracy"] = max(0.0, e["eval_small_accuracy"] - 0.05)

    def drop_half(h):
        del h[len(h) // 2:]

    changed("scaled_losses", scale_losses)
    changed("one_eval_moved", move_one_eval)
    changed("entries_removed", drop_half)
    # the same data under another directory name only changes the title, so plot with the same title
    # to prove the comparison can see "no change"
    same = os.path.join(d, "same")
    write_state(os.path.join(same, "trainer_state.json"), None, json.dumps(state))
    plot_ok(same, "--title", f"Training curves: {os.path.basename(out)}")
    check(png_check.read(os.path.join(same, "training_curves.png"), pixels=False)[2]["raw"] == base_raw,
          "an unchanged state under the same title gives the same pixels")

    # --- other inputs ---
    hf = os.path.join(d, "hf")  # what Python's json module writes for nan and inf
    write_state(os.path.join(hf, "trainer_state.json"), None, json.dumps({"global_step": 4, "log_history": [
        {"loss": float("nan"), "learning_rate": 1e-3, "epoch": 0.25, "step": 1},
        {"loss": 2.0, "grad_norm": float("inf"), "learning_rate": 8e-4, "epoch": 0.5, "step": 2},
        {"loss": 0.05, "grad_norm": 1.5, "learning_rate": float("-inf"), "epoch": 0.75, "step": 3},
        {"eval_loss": 0.1, "eval_accuracy": float("nan"), "eval_accuracy_ci_low": 0.2, "epoch": 1.0, "step": 4}]}))
    plot_ok(hf)
    valid_png(os.path.join(hf, "training_curves.png"), min_w=1280, pixels=False)
    valid_svg(os.path.join(hf, "training_curves.svg"))

    single = os.path.join(d, "single")
    write_state(os.path.join(single, "trainer_state.json"), [{"loss": 0.7, "epoch": 0.1, "step": 5}])
    plot_ok(single)
    r = valid_png(os.path.join(single, "training_curves.png"))
    if r:
        check(png_check.count_colour(r[3], BLUE) > 10, "the single point is drawn")

    direct = os.path.join(d, "direct", "my_state.json")
    write_state(direct, [{"loss": 0.7, "epoch": 0.1, "step": 5}, {"loss": 0.5, "epoch": 0.2, "step": 10}])
    prefix = os.path.join(d, "direct", "figure.png")  # an extension in the prefix is dropped
    plot_ok(direct, "--output", prefix, "--format", "png", "--no-epochs")
    check(os.path.exists(os.path.join(d, "direct", "figure.png")), "--output PREFIX.png writes PREFIX.png")
    check(not os.path.exists(os.path.join(d, "direct", "figure.svg")), "--format png writes no SVG")
    plot_ok(direct, "--format", "svg")
    check(os.path.exists(os.path.join(d, "direct", "training_curves.svg")) and
          not os.path.exists(os.path.join(d, "direct", "training_curves.png")),
          "--format svg writes only the SVG, next to the state file")

    # --- errors ---
    missing = os.path.join(d, "no_such_run")
    expect_fail(1, f"{missing}/trainer_state.json: cannot open: No such file", missing)
    write_state(os.path.join(d, "empty", "trainer_state.json"), [])
    expect_fail(1, "log_history is empty", os.path.join(d, "empty"))
    write_state(os.path.join(d, "nothing", "trainer_state.json"), [
        {"train_runtime": 1.0, "train_loss": 0.5, "step": 3}, {"loss": 0.3}])
    expect_fail(1, "nothing to plot", os.path.join(d, "nothing"))
    write_state(os.path.join(d, "malformed", "trainer_state.json"), None, '{"log_history": [\n  {"loss": 1,}\n]}\n')
    expect_fail(1, "malformed/trainer_state.json:2:", os.path.join(d, "malformed"))
    write_state(os.path.join(d, "notalist", "trainer_state.json"), None, '{"log_history": {"loss": 1}}')
    expect_fail(1, "'log_history' must be a list", os.path.join(d, "notalist"))
    expect_fail(1, "cannot write", out, "--output", os.path.join(d, "no", "such", "dir", "x"))
    expect_fail(2, "usage: ctrainer plot OUTPUT_DIR")
    expect_fail(2, "--format expects png, svg or both, got 'jpg'", out, "--format", "jpg")
    expect_fail(2, "unknown option '--colour'", out, "--colour")
    expect_fail(2, "--output needs a value", out, "--output")
    expect_fail(2, "--scale expects a number from 0.5 to 4, got '9'", out, "--scale", "9")
    expect_fail(2, "unexpected argument", out, out)
    code, text = run("plot", "--help")
    check(code == 0 and "usage: ctrainer plot OUTPUT_DIR" in text, f"--help: {code} {text[:80]}")

finish()
