"""The sequence experiments (MovieLens sequences and ratings, Instacart): --quick runs against the
results contract, and the peers and Table-3 scoring against closed forms."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from efa import Category, Sequences, TrainConfig, Value, evaluate, fit
from efa.baselines import ContextLogit, RatingGLM, Unigram, fit_convex, select_l2
from efa.core.families import Poisson
from experiments import get
from experiments.efa_paper.instacart import co_purchase
from experiments.harness import runner

ROW_KEYS = {"setting", "model", "metric", "mean", "std", "values", "paper"}


@pytest.mark.slow
@pytest.mark.parametrize("name, seeds", [("movielens-sequence", 2), ("movielens-ratings", 1),
                                         ("instacart", 1)])
def test_quick_run_writes_the_results_contract(name, seeds, tmp_path):
    report = runner.reproduce(name, seeds, quick=True, progress=False,
                              command=f"efa reproduce {name}")
    folder = runner.write_atomically(report, tmp_path / name, get(name).plots)
    doc = json.loads((folder / "results.json").read_text())
    assert doc["experiment"] == name and doc["seeds"] == list(range(seeds))
    assert doc["command"] == f"efa reproduce {name}" and doc["wall_seconds"] > 0
    assert doc["rows"]
    for row in doc["rows"]:
        assert ROW_KEYS <= set(row)
        assert len(row["values"]) == seeds and all(math.isfinite(v) for v in row["values"])
    models = {r["model"] for r in doc["rows"]}
    assert {"FM", "EFA"} & models or "EFA + distinct" in models
    assert "efa reproduce" in (folder / "results.md").read_text()
    assert list(folder.glob("*.png"))
    if name == "movielens-sequence":  # the tables' HR@10 / NDCG@10 are efa.recommend's too
        assert doc["claims"]["recommend_reproduces_hr_ndcg"]["largest difference"] < 1e-9
    if name == "instacart":
        assert set(doc["table3"]) and "Table 3" in (folder / "results.md").read_text()


@pytest.mark.slow
def test_bag_grid_picks_on_validation_and_checks_the_specs(tmp_path):
    report = runner.reproduce("bag-grid", 1, quick=True, progress=False,
                              command="efa reproduce bag-grid --quick")
    folder = runner.write_atomically(report, tmp_path / "bag-grid", get("bag-grid").plots)
    doc = json.loads((folder / "results.json").read_text())
    assert len(doc["rows"]) == 2 * 2 * 2  # supports × l2 values × directions
    for key, chosen in doc["chosen"].items():
        rows = [r for r in doc["rows"] if r["setting"] == key]
        sums = {}
        for r in rows:
            sums[r["model"]] = sums.get(r["model"], 0.0) + r["mean"]
        best = min(sums, key=sums.get)
        assert best == f"bag_l2 {chosen['bag_l2']:g}, bag_scale {chosen['bag_scale']:g}"
        assert chosen["validation"] == pytest.approx(sums[best])
    assert set(doc["spec_is_chosen"]) == set(doc["chosen"])
    assert (folder / "bag_grid.png").exists() and "Chosen on validation" in (
        folder / "results.md").read_text()


def test_dropout_grid_picks_a_rate_per_direction_on_validation(tmp_path):
    report = runner.reproduce("dropout-grid", 1, quick=True, progress=False,
                              command="efa reproduce dropout-grid --quick")
    folder = runner.write_atomically(report, tmp_path / "dg", get("dropout-grid").plots)
    doc = json.loads((folder / "results.json").read_text())
    assert len(doc["rows"]) == 2 * 2  # directions × rates (one variant)
    for key, chosen in doc["chosen"].items():
        rows = {r["model"]: r["mean"] for r in doc["rows"] if r["setting"] == key}
        assert min(rows, key=rows.get) == f"dropout {chosen['dropout']:g}"
    assert (folder / "dropout_grid.png").exists()


def test_item_specs_hold_the_bag_settings_chosen_on_validation():
    """movielens.SPEC and instacart.SPEC carry what the committed bag grid chose (rerun
    `efa reproduce bag-grid --seeds 1` after changing either experiment's training)."""
    from pathlib import Path

    from experiments.efa_paper import instacart, movielens

    doc = json.loads((Path(__file__).parents[2] / "results/bag-grid/results.json").read_text())
    for name, spec in (("movielens-sequence", movielens.SPEC), ("instacart", instacart.SPEC)):
        for distinct, support in enumerate(("no distinct", "distinct")):
            chosen = doc["chosen"][f"{name}, {support}"]
            assert (spec.bag_l2[distinct], spec.bag_scale[distinct]) == (
                chosen["bag_l2"], chosen["bag_scale"]), (name, support)


def test_item_specs_hold_the_dropout_chosen_on_validation():
    from pathlib import Path

    from experiments.efa_paper import instacart, movielens

    path = Path(__file__).parents[2] / "results/dropout-grid/results.json"
    chosen = json.loads(path.read_text())["chosen"]
    for name, module in (("instacart", instacart), ("movielens-sequence", movielens)):
        for direction in ("unidirectional", "bidirectional"):
            assert module.SPEC.dropout[direction] == chosen[f"{name}, {direction}"]["dropout"]


def test_unigram_cross_entropy_is_the_entropy_of_the_counts():
    item = Category("item", 3)
    data = Sequences({"item": torch.tensor([[0, 0, 1, 2], [0, 1, 0, 0]])}, torch.tensor([4, 2]))
    # Predicted positions: 0 0 1 2 | 0 1 -> counts (3, 2, 1) of 6.
    model = Unigram.from_data(item, data, smoothing=0.0)
    p = np.array([3, 2, 1]) / 6
    assert -evaluate(model, data)["item"] == pytest.approx(-(p * np.log(p)).sum(), abs=1e-6)
    smoothed = Unigram.from_data(item, data, smoothing=1.0)
    q = np.array([4, 3, 2]) / 9
    assert smoothed.log_probs.exp().numpy() == pytest.approx(q, abs=1e-6)


def test_distinct_removes_context_items_and_keeps_a_distribution():
    item = Category("item", 4, distinct=True)
    data = Sequences({"item": torch.tensor([[0, 2, 1, 3], [3, 1, 0, 0]])}, torch.tensor([4, 2]))
    for direction in ("unidirectional", "bidirectional"):
        base = Unigram.from_data(item, data, direction=direction)
        probs = base.predict_mean(data)["item"]
        valid = data.valid()
        assert torch.allclose(probs[valid].sum(-1), torch.ones(6))
        # Sequence 0, position 2 (item 1): uni context {0, 2}; bi context {0, 2, 3}.
        seen = {0, 2} if direction == "unidirectional" else {0, 2, 3}
        assert all(float(probs[0, 2, k]) == 0 for k in seen)
        assert float(probs[0, 2, 1]) > 0
        assert math.isfinite(-evaluate(base, data)["item"])


def test_distinct_field_refuses_repeated_items():
    item = Category("item", 4, distinct=True)
    data = Sequences({"item": torch.tensor([[0, 2, 1, 2]])}, torch.tensor([4]))
    with pytest.raises(ValueError, match=r"sequence 0 has item 2 at positions \[1, 3\]"):
        Unigram.from_data(item, data).check(data)


def test_context_logit_converges_to_the_sklearn_solution():
    """The logit on (context counts, one-hot position), fitted by L-BFGS, is the penalised
    maximum-likelihood multinomial logistic regression scikit-learn finds on the same design."""
    from sklearn.linear_model import LogisticRegression

    item = Category("item", 5)
    g = torch.Generator().manual_seed(0)
    # Item k+1 tends to follow item k: a context signal the logit can learn.
    x = (torch.randint(0, 5, (64, 1), generator=g) + torch.arange(6)) % 5
    x = torch.where(torch.rand(64, 6, generator=g) < 0.3, torch.randint(0, 5, (64, 6)), x)
    data = Sequences({"item": x}, torch.full((64,), 6))
    for direction in ("unidirectional", "bidirectional"):
        model = ContextLogit(item, direction, max_len=6)
        assert model.natural_params(data)["item"].shape == (64, 6, 5)
        assert -evaluate(model, data)["item"] == pytest.approx(math.log(5), abs=1e-6)
        l2 = 1e-2
        fit = fit_convex(model, data, l2)
        assert fit.converged
        onehot = torch.nn.functional.one_hot(x, 5).double()
        counts = (onehot.sum(1, keepdim=True) - onehot if direction == "bidirectional"
                  else onehot.cumsum(1) - onehot)
        design = torch.cat([counts, torch.eye(6).double().expand(64, 6, 6)], -1)
        # sklearn's objective: C·Σ NLL + ½‖w‖² = n·C·(mean NLL + ½/(n·C)‖w‖²): C = 1/(n·l2).
        n = 64 * 6
        ref = LogisticRegression(C=1 / (n * l2), tol=1e-10, max_iter=10_000)
        ref.fit(design.reshape(n, -1).numpy(), x.reshape(-1).numpy())
        nll_ref = -np.log(ref.predict_proba(design.reshape(n, -1).numpy())[
            np.arange(n), x.reshape(-1).numpy()]).mean()
        assert -evaluate(model, data)["item"] == pytest.approx(nll_ref, abs=1e-6)


@pytest.mark.parametrize("distinct", [False, True])
@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
def test_context_logit_objective_is_its_loss_with_the_closed_form_gradient(
        direction, distinct, monkeypatch):
    """The solver's blocked objective (its own gradient, the design built once) equals the
    model's ordinary loss and autograd gradient in float64, across block boundaries, with
    ragged lengths, a hidden token and the distinct support; and passes gradcheck."""
    from efa.baselines import glm

    monkeypatch.setattr(glm._ChunkedSoftmaxNLL, "BLOCK", 7)
    g = torch.Generator().manual_seed(3)
    x = torch.stack([torch.randperm(6, generator=g)[:5] for _ in range(9)])
    data = Sequences({"item": x}, torch.tensor([5, 3, 4, 5, 2, 5, 1, 4, 5]),
                     observed={"item": torch.rand(9, 5, generator=g) > 0.1})
    model = ContextLogit(Category("item", 6, distinct=distinct), direction, max_len=5,
                         length=direction == "bidirectional").double()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.7, generator=g)
    params = list(model.parameters())
    reference = model.loss(data)
    expected = torch.autograd.grad(reference, params)
    loss = model.objective(data)
    value = loss()
    got = torch.autograd.grad(value, params)
    assert float(value) == pytest.approx(float(reference), abs=1e-12)
    for a, b in zip(got, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-12)

    weight, design = params[0].detach().clone(), torch.randn(4, 6, dtype=torch.float64,
                                                             generator=g)
    counts = torch.rand(10, 6, dtype=torch.float64, generator=g).round()
    y = torch.randint(0, 6, (10,), generator=g)
    seen = (counts > 0) & (torch.arange(6) != y[:, None]) if distinct else None
    group = torch.randint(0, 4, (10,), generator=g)
    assert torch.autograd.gradcheck(
        lambda w, d: glm._ChunkedSoftmaxNLL.apply(w, d, glm._sparse_blocks(counts, 4), group,
                                                   y, seen, model.fields[0]),
        (weight.requires_grad_(), design.requires_grad_()))


def test_per_job_keeps_small_penalties():
    from experiments.efa_paper import items

    rows = [{"protocol": "paper", "direction": "bidirectional", "model": "Logit", "seed": s,
             "l2": l2, "seconds": 45.934} for s, l2 in ((1, 1e-6), (0, 1e-5))]
    assert items.per_job(rows, "l2") == {"paper/bidirectional/Logit": [1e-5, 1e-6]}
    assert items.per_job(rows, "seconds") == {"paper/bidirectional/Logit": [45.93, 45.93]}

    from experiments.harness.report import Report

    for r, converged in zip(rows, (True, False), strict=True):
        r.update(iterations=100, converged=converged)
    report = Report("x", "efa reproduce x", [0, 1])
    items.convex_extras(report, rows, "logit")
    assert report.extra["logit_l2"] == {"paper/bidirectional/Logit": [1e-5, 1e-6]}
    assert "NOT converged" in report.notes[-1] and "paper/bidirectional/Logit" in report.notes[-1]
    rows[1]["converged"] = True
    items.convex_extras(report, rows, "logit")
    assert "every L-BFGS fit" in report.notes[-1] and "up to 100 iterations" in report.notes[-1]


@pytest.mark.slow
def test_select_l2_picks_the_best_validation_penalty():
    item = Category("item", 4)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 4, (40, 5), generator=g)
    train, val = Sequences({"item": x[:30]}, torch.full((30,), 5)), Sequences(
        {"item": x[30:]}, torch.full((10,), 5))
    model, info = select_l2(ContextLogit(item, "bidirectional", 5), train, val,
                            grid=(1.0, 1e-2, 1e-4), design_ratios=(1.0,))
    assert info["val_nll"][f"{info['l2']:g}/1"] == min(info["val_nll"].values())
    assert -evaluate(model, val)["item"] == pytest.approx(min(info["val_nll"].values()))


def test_rating_glm_without_context_learns_the_per_movie_rate():
    torch.manual_seed(0)
    movie = Category("movie", 2, target=False)
    rating = Value("rating", Poisson(shift=1))
    # Movie 0 always rated 1 (rate of y - 1 is 0+), movie 1 rated 1, 3 alternately (rate 1).
    x = torch.tensor([[0, 1, 0, 1]] * 8)
    y = torch.tensor([[1, 1, 1, 3], [1, 3, 1, 1]] * 4)
    data = Sequences({"movie": x, "rating": y}, torch.full((8,), 4))
    model = RatingGLM(movie, rating, 4, "bidirectional", max_len=4, context=False)
    fit(model, data, None, TrainConfig(lr=0.1, max_epochs=300, batch_size=8, progress=False))
    rate = model.item_effect.weight.detach().exp().squeeze()
    assert float(rate[1]) == pytest.approx(1.0, abs=0.05)
    assert float(rate[0]) < 0.05
    fit_convex(model, data, 0.0)  # the maximum likelihood: the per-movie mean of y − 1
    rate = model.item_effect.weight.detach().exp().squeeze()
    assert float(rate[1]) == pytest.approx(1.0, abs=1e-6)
    full = RatingGLM(movie, rating, 4, "unidirectional", max_len=4)
    assert full.natural_params(data)["rating"].shape == (8, 4, 1)


def test_co_purchase_scores_a_hand_made_embedding():
    # Items 0 and 1 point the same way, 2 and 3 the other way; S_ij = a_i·d_j + d_i·a_j.
    alpha = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.8]])
    delta = alpha.copy()
    top = co_purchase(alpha, delta, k=2)
    assert top.shape == (4, 2)
    assert top[0, 0] == 1 and top[1, 0] == 0 and top[2, 0] == 3 and top[3, 0] == 2
    assert all(i not in top[i] for i in range(4))  # the diagonal is excluded
    # Asymmetric α, δ: the score is symmetrised, so i's best partner can be j with δ_i·α_j.
    alpha = np.eye(3)
    delta = np.array([[0.0, 0.0, 5.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    assert co_purchase(alpha, delta, k=1)[0, 0] == 2 and co_purchase(alpha, delta, k=1)[2, 0] == 0
