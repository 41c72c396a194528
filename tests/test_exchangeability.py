"""The exchangeability experiments (efa reproduce exchangeability, temperature-cme): --quick
runs against the results contract, and the pieces they measure with against closed forms."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from efa.generators import GPLatent
from experiments import get
from experiments.cme import exchangeability as ex
from experiments.cme import temperature_cme as tc
from experiments.harness import runner


def _run(name, seeds, tmp_path):
    report = runner.reproduce(name, seeds, quick=True, progress=False,
                              command=f"efa reproduce {name} --quick")
    folder = runner.write_atomically(report, tmp_path / name, get(name).plots)
    doc = json.loads((folder / "results.json").read_text())
    assert doc["seeds"] == list(range(seeds)) and doc["rows"]
    for row in doc["rows"]:
        assert len(row["values"]) == seeds and all(math.isfinite(v) for v in row["values"])
    return doc, folder


@pytest.mark.slow
def test_quick_exchangeability_writes_every_part(tmp_path):
    doc, folder = _run("exchangeability", 2, tmp_path)
    parts = {r["setting"][:3] for r in doc["rows"] if r["metric"] == ex.TREND}
    assert parts == {"(a)", "(b)", "(c)", "(d)", "(e)", "(f)"}
    verdicts = {n[:3] for n in doc["notes"] if "shown" in n and n[:3] in parts}
    assert verdicts == parts
    for png in ("a_cme_rates", "b_softmax_floor", "c_heads_linearity", "d_generalisation_gap",
                "e_excess_over_bayes", "f_ssl_transfer"):
        assert (folder / f"{png}.png").stat().st_size > 0
    assert "C8" in (folder / "results.md").read_text()


@pytest.mark.slow
def test_quick_temperature_cme_runs_on_the_real_data(tmp_path):
    doc, folder = _run("temperature-cme", 1, tmp_path)
    models = {r["model"] for r in doc["rows"]}
    assert {"EFA cme ℓ=1", "EFA softmax ℓ=1", "Gaussian conditional"} <= models
    assert doc["learned_cme"]["ℓ=1"]["ridge"][0][0][0] > 1e-4  # λ > min_ridge, per head
    assert (folder / "temperature_cme.png").stat().st_size > 0


def test_softmax_floor_is_the_large_sample_limit():
    """Fixed-temperature softmax attention at huge L approaches the quadrature floor."""
    spec = ex.SPEC
    theta = ex._query_angles(spec.queries)
    q, truth = torch.stack([theta.cos(), theta.sin()], -1), ex._circle_mean(theta)
    k, v = ex.circle_data(200_000, torch.Generator().manual_seed(0))
    big = ex._rmse(torch.softmax(q @ k.T / spec.bandwidth, -1) @ v, truth)
    assert big == pytest.approx(ex.softmax_floor(spec.bandwidth, spec.queries), rel=0.02)


def test_condition_number_and_r_squared():
    u = torch.tensor([0.0, 1.0], dtype=torch.float64)
    w = torch.tensor([[1.0, 0.0], [math.cos(0.1), math.sin(0.1)]], dtype=torch.float64)
    b = u @ torch.linalg.inv(w)  # B W = W_DS: the head's coefficients on the features
    assert ex.condition_number(w, u) == pytest.approx(float(b @ b))
    assert ex.condition_number(w[:1], torch.tensor([0.6, 0.8], dtype=torch.float64)) == \
        pytest.approx(0.36)
    q = torch.randn(50, 3, dtype=torch.float64)
    assert ex.r_squared(q @ torch.randn(3, 2, dtype=torch.float64) + 1, q) == pytest.approx(1)
    assert ex.r_squared(q**2, q) < 0.5


def test_gp_peer_is_leave_one_city_out_kriging():
    gen = GPLatent(dim=2, lengthscale=0.7, noise_var=0.2)
    s = gen.sample(3, 6, seed=0)
    data = s.sequences
    from efa.core.data import Sequences

    days = Sequences({"coords": data.fields["c"], tc.tx.NAME: data.fields["y"]}, data.lengths)
    pred = tc.gp_predict(days, gen.bandwidth, gen.ridge, torch.zeros(2), torch.ones(2))
    np.testing.assert_allclose(pred.numpy(), gen.bayes(data).mean.numpy(), atol=1e-6)


def test_least_squares_matches_lstsq_and_repeats_bit_for_bit():
    """The R² and linear-head fits solve least squares without MKL's lstsq, whose last bit
    moved between runs of the same process."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(500, 3, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64) + 0.1 * torch.randn(
        500, 1, generator=g, dtype=torch.float64)
    b = ex.least_squares(x, y)
    assert torch.allclose(b, torch.linalg.lstsq(x, y).solution, rtol=1e-10, atol=1e-12)
    runs = set()
    for k in range(5):
        _ = [torch.empty(7 * k + 1, dtype=torch.float64) for _ in range(k)]  # other alignments
        runs.add(ex.least_squares(x.clone(), y.clone()).numpy().tobytes())
    assert len(runs) == 1
