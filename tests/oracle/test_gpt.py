"""The GPT model against a PyTorch reference implementation of the same architecture (nanoGPT's
model.py, written out in gpt_reference.py), on random sizes, fresh random token ids and targets each run: the
logits, the mean cross-entropy and the gradient of that mean with respect to every parameter, in
float32 against the reference computed in float64 from the same float32 weights (relative error
< 1e-5, or at most 4 times PyTorch's own float32 error on a small random model conditioned so badly
that float32 cannot reach 1e-5: see check_close_f32). The weights are either ctrainer's own GPT-2
initialisation (read back from the harness and loaded into the reference by name) or random values of a
trained model's scale sent to ctrainer by name; parameter names must be nanoGPT's, one to one, with the
head tied to wte. Dropout > 0 is checked in eval mode, where both are the identity. With gradient
checkpointing (each block's activations made again in its backward) the same bounds hold."""
from common import RNG, check, check_close_f32, f32, finish, run  # first: skips the test when torch is missing
import copy

import numpy as np
import torch
import torch.nn.functional as F
from gpt_reference import GPT


def random_config():
    # At least 4 features: LayerNorm over 2 is a sign function whose steep middle turns float32
    # rounding of its input into large gradient errors, in any implementation.
    n_head = int(RNG.integers(1, 5))
    c = {"type": "gpt", "vocab_size": int(RNG.integers(20, 300)), "n_head": n_head,
         "n_embd": n_head * int(RNG.integers(max(2, -(-4 // n_head)), 17)), "n_layer": int(RNG.integers(1, 4)),
         "bias": bool(RNG.integers(0, 4) != 0), "dropout": 0.0}
    T = int(RNG.integers(1, 25))
    c["n_positions"] = T + int(RNG.integers(0, 6))
    return c, T


def random_weights(model):
    """A trained model's scale: weights N(0, s) for a random s per tensor, norm weights near 1,
    biases non-zero, so that no term hides behind a zero or a one."""
    params = {}
    for name, p in model.named_parameters():
        if ".ln_" in name:
            v = 1 + 0.2 * RNG.normal(size=p.shape) if name.endswith("weight") else 0.1 * RNG.normal(size=p.shape)
        elif name.endswith("bias"):
            v = 0.05 * RNG.normal(size=p.shape)
        else:
            v = RNG.uniform(0.02, 0.2) * RNG.normal(size=p.shape)
        params[name] = f32(v)
    return params


def one_case(label, c, T, ours, training=True, ignore=False, checkpointing=False):
    B = int(RNG.integers(1, 5))
    ref = GPT(c).double()
    names = {n for n, _ in ref.named_parameters()}
    ids = RNG.integers(0, c["vocab_size"], size=(B, T)).astype(np.int64)
    target = RNG.integers(0, c["vocab_size"], size=(B, T)).astype(np.int64)
    if ignore:  # some ignored positions: the mean is over the others
        target[RNG.uniform(size=(B, T)) < 0.25] = -100
        target[0, 0] = int(RNG.integers(0, c["vocab_size"]))
    spec = {"module": {k: v for k, v in c.items()}, "input_shape": [T], "batch": B, "dtype": "f32",
            "training": training, "seed": int(RNG.integers(0, 2**31)), "loss": {"type": "cross_entropy"},
            "gradient_checkpointing": checkpointing}
    tensors = {"x": ids, "target": target}
    params = None if ours else random_weights(ref)
    if params:
        tensors.update({f"params/{k}": v for k, v in params.items()})
    out = run("layer", spec, tensors)
    if out is None:
        return
    got_names = {k[len("values/"):] for k in out if k.startswith("values/")}
    check(got_names == names, f"{label}: parameter names differ from nanoGPT's: only ctrainer "
          f"{sorted(got_names - names)}, only PyTorch {sorted(names - got_names)}")
    if params is None:  # ctrainer's initialisation, read back
        params = {n: out[f"values/{n}"].astype(np.float64) for n in names if f"values/{n}" in out}
    with torch.no_grad():
        for n, p in ref.named_parameters():
            if n in params:
                p.copy_(torch.from_numpy(params[n]))
    ref.train(training)
    logits, loss = forward_backward(ref, c, ids, target)
    # What float32 can do on this case, the bound's measure: PyTorch in float32, summing in several
    # orders: its GEMMs split the work by thread (one thread and two, whatever OMP_NUM_THREADS the test
    # runs under), and the samples in reverse order add every weight's gradient the other way round.
    runs32 = []
    threads = torch.get_num_threads()
    for n_threads, reverse in ((1, False), (2, False), (1, True)):
        torch.set_num_threads(n_threads)
        ref32 = copy.deepcopy(ref).float()
        order = slice(None, None, -1 if reverse else 1)
        logits32, loss32 = forward_backward(ref32, c, ids[order].copy(), target[order].copy())
        logits32 = logits32.detach().double().numpy()[order]
        runs32.append((logits32, loss32.item(), dict(ref32.named_parameters())))
    torch.set_num_threads(threads)
    check_close_f32(f"{label}: logits", out["y"], logits.detach().numpy(), [r[0] for r in runs32])
    check_close_f32(f"{label}: loss sum", out["loss"][:1], [loss.item()], [[r[1]] for r in runs32])
    count = int((target != -100).sum())
    check(out["loss"][1] == count, f"{label}: loss count {out['loss'][1]} != {count}")
    for n, p in ref.named_parameters():
        if f"grads/{n}" in out:
            check_close_f32(f"{label}: gradient of {n}", out[f"grads/{n}"], p.grad.numpy(),
                            [r[2][n].grad.double().numpy() for r in runs32])


def forward_backward(model, c, ids, target):
    """The logits and the summed cross-entropy; the mean's gradient is left in the parameters' .grad."""
    logits = model(torch.from_numpy(ids))
    loss = F.cross_entropy(logits.reshape(-1, c["vocab_size"]), torch.from_numpy(target).reshape(-1),
                           ignore_index=-100, reduction="sum")
    (loss / int((target != -100).sum())).backward()
    return logits, loss


for rep in range(6):
    c, T = random_config()
    desc = (f"V={c['vocab_size']} C={c['n_embd']} H={c['n_head']} L={c['n_layer']} P={c['n_positions']} T={T} "
            f"bias={c['bias']}")
    one_case(f"gpt {desc}, ctrainer's init", c, T, ours=True, ignore=rep % 2 == 1)
    one_case(f"gpt {desc}, random weights", c, T, ours=False, ignore=rep % 2 == 0)
    c["dropout"] = float(RNG.uniform(0.05, 0.5))
    one_case(f"gpt {desc}, dropout {c['dropout']:.2f} in eval", c, T, ours=False, training=False)
    c["dropout"], c["n_layer"] = 0.0, max(2, c["n_layer"])  # two blocks at least: one is recomputed
    one_case(f"gpt {desc} L={c['n_layer']}, gradient checkpointing", c, T, ours=False, ignore=rep % 2 == 1,
             checkpointing=True)

# A longer context with more heads: the attention's softmax rows get long.
c = {"type": "gpt", "vocab_size": 257, "n_positions": 96, "n_embd": 48, "n_layer": 2, "n_head": 4, "bias": True,
     "dropout": 0.0}
one_case("gpt V=257 C=48 H=4 L=2 T=96", c, 96, ours=False)
# Heads wider than CT_FUSED_ATTENTION_MAX_HEAD_DIM (256) take the unfused attention without dropout.
c = {"type": "gpt", "vocab_size": 50, "n_positions": 40, "n_embd": 2 * int(RNG.integers(257, 270)), "n_layer": 1,
     "n_head": 2, "bias": True, "dropout": 0.0}
one_case(f"gpt V=50 C={c['n_embd']} H=2 L=1 T=40 (unfused: head dimension above 256)", c, 40, ours=False)
finish()
