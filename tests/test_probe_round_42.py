"""Session 42's checks: what earlier probe rounds left unprobed (notes/issues.md, session 42)."""

from __future__ import annotations

import pytest
import torch

import efa
from tests.helpers import make_model, mixed_data

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
                      "max_distance": 9, "context": 1}),
    ("fenchel", {"tol": 1e-6, "max_iter": 20, "precision": "float64", "relative": "auto",
                 "num_buckets": 8, "max_distance": 12, "context": 1}),
    ("ot", {"gamma": 0.5, "learn_gamma": False, "cost": "positions", "cost_scale": 2.0,
            "alpha": 3.0, "learn_alpha": False}),
    ("ot", {"cost": COST, "context": 2, "relative": "auto", "num_buckets": 8,
            "max_distance": 12}),
]


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
