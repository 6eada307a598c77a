"""Linear, activations, Flatten and Sequential against PyTorch on fresh random inputs."""
from common import RNG, finish  # first: skips the test when torch is missing
from layer_check import check_layer, drawn_away_from_kinks
import torch.nn as nn

B = int(RNG.integers(1, 9))
fin, fout = int(RNG.integers(1, 40)), int(RNG.integers(1, 40))
x = RNG.normal(size=(B, fin))
for bias in (True, False):
    check_layer(f"linear bias={bias}", {"type": "linear", "in_features": fin, "out_features": fout, "bias": bias},
                nn.Linear(fin, fout, bias=bias), x)
x3 = RNG.normal(size=(B, 5, fin))
check_layer("linear on [B, T, C]", {"type": "linear", "out_features": fout}, nn.Linear(fin, fout), x3)

acts = [({"type": "relu"}, nn.ReLU()), ({"type": "gelu"}, nn.GELU()),
        ({"type": "gelu", "approximate": "tanh"}, nn.GELU(approximate="tanh")),
        ({"type": "tanh"}, nn.Tanh()), ({"type": "sigmoid"}, nn.Sigmoid())]
for spec, mod in acts:
    check_layer(spec["type"] + str(spec.get("approximate", "")), spec, mod, 3 * RNG.normal(size=(B, 3, 4)))

img = RNG.normal(size=(B, 2, 3, 4))
seq = {"type": "sequential", "layers": [{"type": "flatten"}, {"type": "linear", "out_features": 16},
                                        {"type": "gelu"}, {"type": "linear", "out_features": 7}]}
check_layer("sequential mlp", seq, nn.Sequential(nn.Flatten(), nn.Linear(24, 16), nn.GELU(), nn.Linear(16, 7)), img)

# A ReLU after a linear layer is applied by the layer (ct_op_linear_forward on the CPU). A batch of
# a few rows runs on the calling thread; on the larger ones the CPU splits the forward and the
# backward GEMMs over the threads (the isa tests run with 2) into blocks of rows where there are more
# rows than columns and of columns otherwise, the last block shorter than the others. Rows with a
# value next to a ReLU's kink are left out (drawn_away_from_kinks), and every layer is wide enough that
# the output is not all zero.
shapes = ((int(RNG.integers(2, 9)), (16, 40)), (int(RNG.integers(130, 200)), (64, 100), (40, 64), (40, 64)),
          (int(RNG.integers(40, 64)), (100, 140)))
for rows, *ranges in shapes:
    fi, fh, fo = (int(RNG.integers(*ranges[min(i, len(ranges) - 1)])) for i in range(3))
    for bias in (True, False):
        for dtype in ("f32", "f64"):
            spec = {"type": "sequential", "layers": [{"type": "linear", "out_features": fh, "bias": bias},
                                                     {"type": "relu"}, {"type": "linear", "out_features": fo},
                                                     {"type": "relu"}]}
            ref = nn.Sequential(nn.Linear(fi, fh, bias=bias), nn.ReLU(), nn.Linear(fh, fo), nn.ReLU())
            xr = drawn_away_from_kinks(ref, lambda: RNG.normal(size=(rows, fi)))
            check_layer(f"linear+relu rows={len(xr)} {fi}-{fh}-{fo} bias={bias} {dtype}", spec, ref, xr,
                        dtype=dtype, tol=1e-5 if dtype == "f32" else 1e-9)
seq3 = {"type": "sequential", "layers": [{"type": "linear", "out_features": 24}, {"type": "relu"}]}
ref3 = nn.Sequential(nn.Linear(fin, 24), nn.ReLU())
check_layer("linear+relu on [B, T, C]", seq3, ref3, drawn_away_from_kinks(ref3, lambda: RNG.normal(size=x3.shape)))
finish()
