"""Generation (generate/generate.h, `ctrainer generate`, predict_with_generate) against references
nobody here wrote, on fresh random inputs each run:

1. The sampling distribution of one step against Hugging Face's own logits warpers
   (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper applied in generate()'s order, then
   softmax), on random logits with -inf entries and ties with the k-th largest: every probability
   within 1e-12. Needs transformers (the oracle venv); that part is skipped without it.
2. A small GPT trained for a few steps by `ctrainer train` on random text (its weights then replaced
   by larger random ones, so that logits depend on the whole window), then `ctrainer generate`:
   greedy continuations are, token by token, the argmax of the PyTorch reference (gpt_reference.py,
   float64, loaded from model.h5) on the same prefix, cropped to the window nanoGPT crops to (a token
   is accepted when its reference logit is within 1e-4 of the largest: float32 near-ties); sampled
   continuations are reproducible by seed, change with it, and over 3000 one-token samples follow the
   reference distribution (chi-square, p > 1e-6); top_k 1 sampling equals greedy; bad settings fail
   with the key named.
3. predict_with_generate: `ctrainer predict` writes /generated, each row the greedy continuation of
   its sample under the model's own window, checked against the reference the same way."""
import json
import os
import subprocess
import sys
import tempfile
import zlib

from common import CTRAINER, HARNESS, RNG, check, finish  # first: skips the test when torch is missing
import h5py
import numpy as np
import torch
from gpt_reference import GPT

TEST_GENERATE = os.path.join(os.path.dirname(os.path.abspath(HARNESS)), "test_generate")
ENV = {**os.environ, "OMP_NUM_THREADS": "2"}


def ctrainer(*args, expect=0):
    p = subprocess.run([CTRAINER, *args], capture_output=True, text=True, env=ENV)
    check(p.returncode == expect, f"ctrainer {' '.join(args)} exited {p.returncode}, expected {expect}: {p.stderr.strip()}")
    return p


# --- 1. one step against Hugging Face's warpers ------------------------------------------------------
def warpers_case(hf):
    V = int(RNG.integers(2, 300))
    logits = RNG.normal(0, 3, V)
    ties = RNG.random() < 0.3
    if ties:
        logits = np.round(logits)  # many exact ties
    if RNG.random() < 0.3:
        logits[RNG.random(V) < 0.2] = -np.inf
        logits[RNG.integers(V)] = 1.0
    temperature = float(RNG.choice([1.0, RNG.uniform(0.2, 3.0)]))
    top_k = int(RNG.choice([0, 1, int(RNG.integers(1, V + 3))]))
    # top-p over exact ties depends on the sort's order among them: not compared with ties.
    top_p = 1.0 if ties else float(RNG.choice([1.0, RNG.uniform(0.05, 1.0)]))
    x = torch.tensor(logits).view(1, V)
    if temperature != 1.0:
        x = hf.TemperatureLogitsWarper(temperature)(None, x)
    if top_k > 0:
        x = hf.TopKLogitsWarper(top_k=top_k)(None, x)
    if top_p < 1.0:
        x = hf.TopPLogitsWarper(top_p=top_p)(None, x)
    want = torch.softmax(x, dim=-1).view(-1).numpy()
    case = {"logits": [None if np.isneginf(v) else float(v) for v in logits], "temperature": temperature,
            "top_k": top_k, "top_p": top_p}
    return case, want


def check_warpers():
    try:
        import transformers.generation.logits_process as hf
    except ImportError as e:
        print(f"part 1 skipped: transformers is not installed here ({e})")
        return
    cases = [warpers_case(hf) for _ in range(300)]
    p = subprocess.run([TEST_GENERATE, "--probs"], input="".join(json.dumps(c) + "\n" for c, _ in cases),
                       capture_output=True, text=True)
    check(p.returncode == 0, f"test_generate --probs failed: {p.stderr}")
    got = [json.loads(line)["probs"] for line in p.stdout.splitlines()]
    check(len(got) == len(cases), f"{len(got)} answers for {len(cases)} cases")
    worst = 0.0
    for (case, want), g in zip(cases, got):
        err = float(np.max(np.abs(np.array(g) - want)))
        worst = max(worst, err)
        check(err < 1e-12, f"probs differ by {err:.3g} (V={len(want)} T={case['temperature']:.3f} "
                           f"top_k={case['top_k']} top_p={case['top_p']:.3f})")
    print(f"part 1: {len(cases)} random steps against Hugging Face's warpers, worst difference {worst:.3g}")


# --- 2. a trained model through `ctrainer generate` -------------------------------------------------
def reference_model(run_dir, c):
    model = GPT({"bias": True, **c, "dropout": 0.0}).double().eval()
    with h5py.File(os.path.join(run_dir, "model.h5"), "r") as f:
        state = {}
        f.visititems(lambda name, obj: state.__setitem__(name, obj) if isinstance(obj, h5py.Dataset) else None)
        named = dict(model.named_parameters())
        for name, p in named.items():
            key = next((k for k in state if k == name or k.endswith("/" + name)), None)
            check(key is not None, f"model.h5 has no {name}")
            if key is not None:
                with torch.no_grad():
                    p.copy_(torch.from_numpy(np.asarray(state[key], dtype=np.float64)))
    return model


def ref_logits(model, ids, window):
    ctx = ids[-window:]
    with torch.no_grad():
        return model(torch.tensor([ctx], dtype=torch.long))[0, -1].numpy()


def check_greedy(model, prompt_ids, new_ids, window, label):
    """Every new token is the reference's argmax on the prefix before it (up to float32 near-ties)."""
    seq = list(prompt_ids)
    for k, tok in enumerate(new_ids):
        logits = ref_logits(model, seq, window)
        ok = logits[tok] >= logits.max() - 1e-4 * max(1.0, abs(logits.max()))
        check(ok, f"{label}: new token {k} is {tok} (reference logit {logits[tok]:.6f}), the reference's argmax "
                  f"is {int(logits.argmax())} ({logits.max():.6f})")
        if not ok:
            return
        seq.append(tok)


def train_tiny(tmp):
    c = {"vocab_size": 256, "n_positions": int(RNG.integers(12, 20)), "n_embd": 16, "n_layer": 2, "n_head": 2}
    text = bytes(RNG.choice(list(b"abcdefgh ."), size=6000)).decode()
    open(os.path.join(tmp, "corpus.txt"), "w").write(text)
    ctrainer("data", "tokenize", "--input", os.path.join(tmp, "corpus.txt"), "--output", os.path.join(tmp, "train.bin"),
             "--val-output", os.path.join(tmp, "val.bin"))
    context = c["n_positions"] - int(RNG.integers(0, 4))
    config = {"model": {"type": "gpt", **c},
              "data": {"train": {"type": "tokens", "path": os.path.join(tmp, "train.bin"), "context": context},
                       "eval": {"type": "tokens", "path": os.path.join(tmp, "val.bin"), "context": context,
                                "limit": 6}},
              "loss": {"type": "cross_entropy"},
              "generation": {"max_new_tokens": 7},
              "training_args": {"output_dir": os.path.join(tmp, "run"), "max_steps": 8, "learning_rate": 3e-3,
                                "per_device_train_batch_size": 4, "per_device_eval_batch_size": 4,
                                "save_strategy": "no", "report_to": "none", "seed": int(RNG.integers(1 << 30))}}
    path = os.path.join(tmp, "run.json")
    json.dump(config, open(path, "w"))
    ctrainer("train", path)
    # A few steps leave the model close to a unigram model, whose argmax hardly depends on the
    # context: random weights of a larger scale make every logit depend on the whole window, so a
    # wrong window, position or crop changes the tokens.
    with h5py.File(os.path.join(tmp, "run", "model.h5"), "r+") as f:
        for name, d in f.items():
            base = 1.0 if ".ln_" in name and name.endswith(".weight") else 0.0
            d[...] = (base + RNG.normal(0, 0.4, d.shape)).astype(np.float32)
    resign(os.path.join(tmp, "run"), "model.h5")
    return path, c, context


def resign(run_dir, name):
    """Records the edited file's size and CRC-32 in the directory's manifest, as a save would: every
    reader of a saved model verifies the manifest first."""
    path = os.path.join(run_dir, "manifest.json")
    manifest = json.load(open(path))
    data = open(os.path.join(run_dir, name), "rb").read()
    manifest["files"][name] = {"size": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    json.dump(manifest, open(path, "w"))


def generate(config, run_dir, *args, expect=0):
    out = tempfile.mktemp(suffix=".json")
    p = ctrainer("generate", config, "--model", run_dir, "--output", out, *args, expect=expect)
    if expect != 0:
        return p
    result = json.load(open(out))
    os.remove(out)
    return result


def check_cli(tmp, config, c):
    run_dir = os.path.join(tmp, "run")
    model = reference_model(run_dir, c)
    prompts = ["".join(RNG.choice(list("abcdefgh ."), size=int(RNG.integers(1, c["n_positions"] + 6))))
               for _ in range(3)]
    max_new = int(RNG.integers(4, 14))
    args = sum((["--prompt", p] for p in prompts), [])
    greedy = generate(config, run_dir, *args, "--max_new_tokens", str(max_new))
    check(len(greedy) == 3, f"{len(greedy)} results for 3 prompts")
    for i, (p, g) in enumerate(zip(prompts, greedy)):
        check(g["prompt"] == p and len(g["generated_ids"]) == max_new, f"prompt {i}: echoed, {max_new} new tokens")
        check(g["generated_text"] == bytes(g["generated_ids"]).decode("utf-8", errors="replace"),
              f"prompt {i}: text = decoded ids (invalid UTF-8 replaced as Python does)")
        check_greedy(model, list(p.encode()), g["generated_ids"], c["n_positions"], f"greedy, prompt {i}")
    # The model is the one saved, whatever sizes the config's "model" gives (a run trained with --set).
    other = json.load(open(config))
    other["model"].update({"n_embd": 2 * c["n_embd"], "n_layer": c["n_layer"] + 1})
    other_path = os.path.join(tmp, "other_sizes.json")
    json.dump(other, open(other_path, "w"))
    again = generate(other_path, run_dir, *args, "--max_new_tokens", str(max_new))
    check(again == greedy, "a config of other sizes: the saved model generates as before")
    # The config's generation section is read: max_new_tokens 7 without the option.
    default = generate(config, run_dir, "--prompt", prompts[0])
    check(len(default[0]["generated_ids"]) == 7, "generation.max_new_tokens from the config")
    m = min(7, max_new)
    check(default[0]["generated_ids"][:m] == greedy[0]["generated_ids"][:m], "greedy runs of other lengths agree")
    # Sampling: seeded, reproducible, top_k 1 = greedy.
    s1 = generate(config, run_dir, *args, "--max_new_tokens", str(max_new), "--do_sample", "--seed", "5",
                  "--num_return_sequences", "2")
    s2 = generate(config, run_dir, *args, "--max_new_tokens", str(max_new), "--do_sample", "--seed", "5",
                  "--num_return_sequences", "2")
    s3 = generate(config, run_dir, *args, "--max_new_tokens", str(max_new), "--do_sample", "--seed", "6",
                  "--num_return_sequences", "2")
    check(len(s1) == 6 and s1 == s2, "same seed, same samples")
    check(s1 != s3, "another seed, other samples")
    k1 = generate(config, run_dir, *args, "--max_new_tokens", str(max_new), "--do_sample", "--top_k", "1")
    check([g["generated_ids"] for g in k1] == [g["generated_ids"] for g in greedy], "top_k 1 sampling is greedy")
    # One-token samples follow the reference distribution (temperature and top-k applied).
    temperature, top_k = float(RNG.uniform(0.7, 1.5)), int(RNG.integers(3, 12))
    n = 3000
    many = generate(config, run_dir, "--prompt", prompts[1], "--max_new_tokens", "1", "--do_sample",
                    "--temperature", str(temperature), "--top_k", str(top_k), "--num_return_sequences", str(n),
                    "--seed", str(int(RNG.integers(1 << 30))))
    counts = np.bincount([g["generated_ids"][0] for g in many], minlength=256)
    logits = ref_logits(model, list(prompts[1].encode()), c["n_positions"]) / temperature
    kth = np.sort(logits)[-top_k]
    logits[logits < kth] = -np.inf
    p = np.exp(logits - logits.max())
    p /= p.sum()
    check(counts[p == 0].sum() == 0, "no sample outside the top-k")
    # Chi-square over the kept tokens, pooling those expected fewer than 5 times.
    expected = p * n
    big = expected >= 5
    obs = np.append(counts[big], counts[~big & (p > 0)].sum())
    exp = np.append(expected[big], expected[~big & (p > 0)].sum())
    keep = exp > 0
    chi2 = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    dof = int(keep.sum()) - 1
    from math import erfc, sqrt
    # Wilson-Hilferty: the chi-square tail as a normal tail; p > 1e-6 <=> z < 4.75.
    z = ((chi2 / max(dof, 1)) ** (1 / 3) - (1 - 2 / (9 * max(dof, 1)))) / sqrt(2 / (9 * max(dof, 1)))
    check(dof == 0 or z < 4.75, f"{n} samples against the reference distribution: chi2 {chi2:.1f} on {dof} dof (z {z:.2f})")
    print(f"part 2: greedy of 3 prompts x {max_new} tokens matches the reference; sampling chi2 {chi2:.1f} on {dof} dof")
    # Bad settings: named, exit 2.
    for bad, key in [(["--temperature", "0", "--do_sample"], "temperature"), (["--top_p", "1.5"], "top_p"),
                     (["--max_new_tokens", "0"], "max_new_tokens")]:
        p = generate(config, run_dir, "--prompt", "ab", *bad, expect=2)
        check(key in p.stderr, f"{bad}: message names {key}: {p.stderr.strip()}")
    p = generate(config, os.path.join(tmp, "nowhere"), "--prompt", "ab", expect=2)
    check("nowhere" in p.stderr, f"missing model directory named: {p.stderr.strip()}")


# --- 3. predict_with_generate -------------------------------------------------------------------------
def check_predict(tmp, config, c, context):
    run_dir = os.path.join(tmp, "run")
    model = reference_model(run_dir, c)
    out = os.path.join(tmp, "pred.h5")
    new = int(RNG.integers(2, 6))
    ctrainer("predict", config, "--model", run_dir, "--output", out, "--predict_with_generate", "true",
             "--generation_max_length", str(context + new))
    with h5py.File(out, "r") as f:
        check("generated" in f, "predictions file has /generated")
        if "generated" not in f:
            return
        gen = np.asarray(f["generated"])
    val = np.fromfile(os.path.join(tmp, "val.bin"), dtype="<u2").astype(np.int64)
    check(gen.shape == (6, new), f"/generated shape {gen.shape}, expected (6, {new})")
    for i in range(min(6, gen.shape[0])):
        prompt = list(val[i * context:(i + 1) * context])  # the token dataset's windows (stride = context)
        check_greedy(model, prompt, [int(t) for t in gen[i]], context, f"predict_with_generate row {i}")
    p = ctrainer("predict", config, "--model", run_dir, "--output", out, "--predict_with_generate", "true",
                 "--generation_max_length", str(context), expect=2)
    check("generation_max_length" in p.stderr, f"no room: named: {p.stderr.strip()}")
    print(f"part 3: predict_with_generate, 6 samples x {new} tokens match the reference")


check_warpers()
with tempfile.TemporaryDirectory() as tmp:
    config, c, context = train_tiny(tmp)
    check_cli(tmp, config, c)
    check_predict(tmp, config, c, context)
finish()
