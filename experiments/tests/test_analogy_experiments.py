"""The toy corpus of the MoE paper's Appendix I, and the --quick versions of `efa reproduce
analogy-toy` and `efa reproduce analogy-lee` (the same code paths as the full runs)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from efa.cli import app
from experiments.moe import analogy_toy


def test_toy_corpus_follows_appendix_i():
    x = analogy_toy.generate(6000, seed=0)
    words = np.array(analogy_toy.VOCAB)
    first = words[x[:, 0]]
    kind1 = first == "i"
    kind2 = x[:, 1] == 2  # "s1 and s2 is adj"
    kind3 = x[:, 1] == 3  # "s is adj1 and adj2"
    assert (kind1 | kind2 | kind3).all() and not (kind1 & kind2).any()
    for k in (kind1, kind2, kind3):
        assert abs(k.mean() - 1 / 3) < 0.03
    assert (words[x[kind1, 1]] == "like").all() and (words[x[kind1, 3]] == "and").all()
    # Type 1 subjects: probabilities 4/11, 5/11, 1/11, 1/11.
    subj = np.concatenate([x[kind1, 2], x[kind1, 4]]) - analogy_toy.SUBJECTS
    np.testing.assert_allclose(np.bincount(subj, minlength=4) / len(subj),
                               analogy_toy.TYPE1, atol=0.02)
    # Type 3: "history is ..." never takes fun or easy (scores 0), "statistics" never boring.
    hist = kind3 & (words[x[:, 0]] == "history")
    assert not np.isin(words[x[hist][:, [2, 4]]], ["fun", "easy"]).any()
    stats = kind3 & (words[x[:, 0]] == "statistics")
    assert not (words[x[stats][:, [2, 4]]] == "boring").any()
    # Type 2: the adjective ∝ the sum of the two subjects' scores.
    hh = kind2 & (x[:, 0] == 7) & (x[:, 2] == 7)  # history and history: boring or difficult
    assert np.isin(words[x[hh, 4]], ["boring", "difficult"]).all()
    np.testing.assert_array_equal(analogy_toy.generate(10, 3), analogy_toy.generate(10, 3))


def _run(tmp_path, name):
    result = CliRunner().invoke(app, ["reproduce", name, "--seeds", "1", "--quick", "--out",
                                      str(tmp_path), "--no-progress"])
    assert result.exit_code == 0, result.output
    folder = tmp_path / name
    doc = json.loads((folder / "results.json").read_text())
    assert doc["experiment"] == name and doc["seeds"] == [0]
    assert doc["command"] == f"efa reproduce {name} --seeds 1 --out {tmp_path} --quick"
    for row in doc["rows"]:
        assert {"setting", "model", "metric", "mean", "std", "values", "paper"} <= set(row)
    return folder, doc


@pytest.mark.slow
def test_quick_toy_writes_the_results_contract(tmp_path):
    folder, doc = _run(tmp_path, "analogy-toy")
    rows = {(r["setting"], r["model"], r["metric"]): r for r in doc["rows"]}
    spearman = rows["d=30", analogy_toy.CBOW, "Spearman corr(wᵀc, p(w,c)/p(c))"]
    assert spearman["paper"] == 0.74 and -1 <= spearman["mean"] <= 1
    asym = rows["d=30", analogy_toy.ATTENTION, "‖p̄ − p̄ᵀ‖/‖p̄‖ (0 = symmetric)"]
    assert 0 < asym["mean"] < 1
    assert (folder / "correlations.png").exists() and (folder / "scatter.png").exists()
    assert "Spearman" in (folder / "results.md").read_text()


@pytest.mark.slow
def test_quick_lee_writes_the_results_contract(tmp_path):
    folder, doc = _run(tmp_path, "analogy-lee")
    cov = doc["coverage"]
    assert 0 < cov["overall"]["kept"] < cov["overall"]["total"] == 19_544
    models = {r["model"] for r in doc["rows"]}
    assert {"efa CBOW", "efa attention", "gensim Word2Vec CBOW", "random vectors"} <= models
    md = (folder / "results.md").read_text()
    assert "| Accuracy | efa CBOW | efa attention | gensim Word2Vec CBOW" in md
    for png in ("prop13.png", "scatter.png", "analogy.png"):
        assert (folder / png).exists()
