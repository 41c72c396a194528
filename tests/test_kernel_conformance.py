"""The contract every registered attention kernel meets, run over the registry: a kernel added
with @register_kernel passes or fails here without a test of its own (docs/design.md).

For each kernel, in float64: the model's natural parameters equal the definition (one masked
copy per predicted position, run in full) in both directions, at depths 1 and 2, for every
algorithm the configuration allows; no weight falls where the mask forbids it; the loss's
gradient passes gradcheck; and the kernel's options survive save/load. A kernel with options
adds a row to OPTIONS, which sets each of them away from its default once."""

from __future__ import annotations

import pytest
import torch

import efa
from efa.core.kernels import KERNELS
from tests.helpers import gradcheck_query_weight, make_model, mixed_data, naive_natural_params

NAMES = sorted(KERNELS)  # every kernel registered when the package is imported


def _model(name, **kw):
    kernel = KERNELS[name]
    modes = ["auto", "copies"] if kernel.row_local else ["copies"]
    return [make_model(attention={"kernel": name}, mode=m, **kw) for m in modes]


def test_the_registry_holds_the_built_in_kernels():
    assert {"softmax", "linear", "cme", "generalized", "second_order", "fenchel", "ot"} <= set(
        NAMES)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
@pytest.mark.parametrize("layers", [1, 2])
def test_exact_against_the_masked_copies(name, direction, layers):
    data = mixed_data(n=3, max_len=5)
    for model in _model(name, num_layers=layers, direction=direction, block="pre_ln"):
        fast = model.natural_params(data)
        slow = naive_natural_params(model, data)
        for field, eta in slow.items():
            m = data.predicted(field)
            torch.testing.assert_close(fast[field][m], eta[m], atol=1e-7, rtol=0,
                                       msg=lambda s, f=field: f"{name} {f}: {s}")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("causal", [False, True])
def test_no_weight_where_the_mask_forbids_it(name, causal):
    torch.manual_seed(0)
    b, h, i, d = 2, 2, 5, 3
    kernel = KERNELS[name](h, d, 0.5, causal).double()
    q, k, v = (torch.randn(b, h, i, d, dtype=torch.float64) for _ in range(3))
    allowed = torch.rand(b, 1, i, i) < 0.6
    allowed |= torch.eye(i, dtype=torch.bool)  # every query may see something
    if causal:
        allowed &= torch.ones(i, i, dtype=torch.bool).tril()
    out, w = kernel(q, k, v, allowed)
    assert w is not None and w.shape == (b, h, i, i), name
    assert torch.all(w.masked_select(~allowed.expand_as(w)) == 0), name
    assert torch.isfinite(out).all() and torch.isfinite(w).all(), name


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_of_the_loss(name):
    model = make_model(num_layers=1, head_dim=2, attention={"kernel": name},
                       mode="copies", direction="bidirectional")
    assert gradcheck_query_weight(model, mixed_data(n=2, max_len=3, missing=False), atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_options_survive_save_and_load(name, tmp_path):
    model = _model(name, num_layers=1)[0].float()
    data = mixed_data(n=2, dtype=torch.float32)
    loaded = efa.load(efa.save(model, tmp_path / name))
    assert loaded.config.attention == model.config.attention
    assert loaded.blocks[0].attn.kernel.options() == model.blocks[0].attn.kernel.options()
    for field, eta in model.natural_params(data).items():
        assert torch.equal(eta, loaded.natural_params(data)[field]), (name, field)


COST = [[float(abs(i - j)) for j in range(6)] for i in range(6)]

# Every option of every kernel away from its default at least once: an option that options()
# forgets, or that load() does not hand back to the kernel, changes the natural parameters.
OPTIONS = [
    ("cme", {"similarity": "exponential", "bandwidth": 0.5, "ridge": 2.0, "learn": False}),
    ("cme", {"similarity": "linear", "posterior_variance": True, "min_ridge": 1e-3,
             "ridge": 0.5}),
    ("cme", {"similarity": "rbf+linear", "rbf_dims": 1}),
    ("generalized", {"alpha": 0.3, "learn_alpha": False, "relative": "auto", "num_buckets": 8,
                     "max_distance": 16}),
    ("generalized", {"relative": "causal", "num_buckets": 4, "max_distance": 8, "context": 2,
                     "context_hidden": 3}),
    ("second_order", {"alpha": 2.0, "relative": "bidirectional", "num_buckets": 8,
                      "max_distance": 9, "context": 1, "context_hidden": 5}),
    ("second_order", {"learn_alpha": False, "tol": 1e-5}),
    ("fenchel", {"tol": 1e-6, "max_iter": 20, "precision": "float64", "relative": "auto",
                 "num_buckets": 8, "max_distance": 12, "context": 1, "context_hidden": 4}),
    ("fenchel", {"alpha": 0.7, "learn_alpha": False}),
    ("ot", {"gamma": 0.5, "learn_gamma": False, "cost": "positions", "cost_scale": 2.0,
            "alpha": 3.0, "learn_alpha": False}),
    ("ot", {"cost": COST, "context": 2, "context_hidden": 3, "relative": "auto",
            "num_buckets": 8, "max_distance": 12}),
]


def test_the_options_table_moves_every_option_of_every_kernel():
    for name in NAMES:
        defaults = getattr(KERNELS[name], "DEFAULTS", {})
        moved = {k for n, o in OPTIONS if n == name for k, v in o.items() if v != defaults[k]}
        assert moved == set(defaults), f"{name}: no row moves {sorted(set(defaults) - moved)}"


@pytest.mark.parametrize("name,options", OPTIONS, ids=[f"{n}-{i}" for i, (n, _) in
                                                        enumerate(OPTIONS)])
@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
def test_kernel_options_away_from_their_defaults_survive_save_and_load(name, options,
                                                                       direction, tmp_path):
    torch.manual_seed(0)
    model = make_model(attention={"kernel": name, **options}, num_layers=2,
                       direction=direction, mode="copies").float().eval()
    with torch.no_grad():  # learned parts (buckets, preference nets) away from their zero start
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    loaded = efa.load(efa.save(model, tmp_path / "m"))
    for ours, theirs in zip(model.blocks, loaded.blocks, strict=True):
        assert theirs.attn.kernel.options() == ours.attn.kernel.options()
    saved, read = model.state_dict(), loaded.state_dict()
    assert saved.keys() == read.keys()
    assert all(torch.equal(saved[k], read[k]) for k in saved)
    data = mixed_data(n=3, max_len=5, dtype=torch.float32)
    want, got = model.natural_params(data), loaded.natural_params(data)
    for field in want:
        m = data.predicted(field)
        assert torch.equal(want[field][m], got[field][m]), (name, field)
