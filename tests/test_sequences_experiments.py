"""The sequence experiments (MovieLens sequences and ratings, Instacart): --quick runs against the
results contract, and the peers and Table-3 scoring against closed forms."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from efa import Category, Sequences, TrainConfig, Value, evaluate, fit
from efa.datasets import root
from efa.experiments import get
from efa.experiments.instacart import co_purchase
from efa.families import Poisson
from efa.peers import ContextLogit, Distinct, RatingGLM, Unigram

try:
    root.data_root()
    HAVE_DATA = True
except FileNotFoundError:
    HAVE_DATA = False

ROW_KEYS = {"setting", "model", "metric", "mean", "std", "values", "paper"}


@pytest.mark.skipif(not HAVE_DATA, reason="needs the real data (EFA_DATA)")
@pytest.mark.parametrize("name, seeds", [("movielens-sequence", 2), ("movielens-ratings", 1),
                                         ("instacart", 1)])
def test_quick_run_writes_the_results_contract(name, seeds, tmp_path):
    module = get(name)
    report = module.run(seeds=seeds, quick=True, progress=False, command=f"efa reproduce {name}")
    folder = report.write(tmp_path)
    module.write_plots(report, folder)
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
    if name == "instacart":
        assert set(doc["table3"]) and "Table 3" in (folder / "results.md").read_text()


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
    item = Category("item", 4)
    data = Sequences({"item": torch.tensor([[0, 2, 1, 3], [3, 1, 0, 0]])}, torch.tensor([4, 2]))
    base = Unigram.from_data(item, data)
    for direction in ("unidirectional", "bidirectional"):
        probs = Distinct(base, direction).predict_mean(data)["item"]
        assert torch.allclose(probs.sum(-1), torch.ones(2, 4))
        # Sequence 0, position 2 (item 1): uni context {0, 2}; bi context {0, 2, 3}.
        seen = {0, 2} if direction == "unidirectional" else {0, 2, 3}
        assert all(float(probs[0, 2, k]) == 0 for k in seen)
        assert float(probs[0, 2, 1]) > 0
        assert math.isfinite(-evaluate(Distinct(base, direction), data)["item"])


def test_context_logit_shapes_and_training_lowers_the_loss():
    torch.manual_seed(0)
    item = Category("item", 5)
    g = torch.Generator().manual_seed(0)
    # Item k+1 tends to follow item k: a context signal the logit can learn.
    x = torch.randint(0, 5, (64, 1), generator=g) + torch.arange(6)
    data = Sequences({"item": x % 5}, torch.full((64,), 6))
    for direction in ("unidirectional", "bidirectional"):
        model = ContextLogit(item, direction, max_len=6)
        assert model.natural_params(data)["item"].shape == (64, 6, 5)
        before = -evaluate(model, data)["item"]
        assert before == pytest.approx(math.log(5), abs=1e-6)  # starts uniform
        fit(model, data, None, TrainConfig(lr=0.1, max_epochs=20, batch_size=64, progress=False))
        assert -evaluate(model, data)["item"] < before - 0.3
        assert (model.design.length is None) == (direction == "unidirectional")


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
