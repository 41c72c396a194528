import json

import numpy as np
import pytest
from typer.testing import CliRunner

from efa.cli import app
from experiments.efa_paper import synthetic


def test_dgp_reproduces_the_reference_data():
    orders, ratings, means = synthetic.generate(n_users=3)
    # First user printed by the reference notebooks (np.random.seed(42)).
    np.testing.assert_array_equal(orders[0], [2, 5, 3, 1, 4])
    np.testing.assert_allclose(
        ratings[0], [5.47386083, 4.36845012, 2.08317316, 2.87585282, 0.98903711], atol=1e-8
    )
    np.testing.assert_array_equal(means[0], [5, 3, 3, 3, 3])


def test_dgp_rules():
    r = synthetic.rating_means
    np.testing.assert_array_equal(r(np.array([1, 2, 3, 4, 5])), [3, 1, 3, 1, 5])
    np.testing.assert_array_equal(r(np.array([2, 1, 4, 3, 5])), [5, 3, 3, 1, 5])
    np.testing.assert_array_equal(r(np.array([5, 4, 2, 1, 3])), [3, 3, 5, 3, 3])


def test_validation_split_is_by_user():
    tr, va, te = synthetic.split(10_000, 7_500)
    assert len(tr) == 5_625 and len(va) == 1_875 and len(te) == 2_500
    assert not set(tr) & set(va) and te.min() == 7_500


@pytest.mark.slow
def test_quick_reproduce_writes_the_results_contract(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "reproduce",
            "synthetic",
            "--seeds",
            "2",
            "--quick",
            "--out",
            str(tmp_path),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    folder = tmp_path / "synthetic"
    doc = json.loads((folder / "results.json").read_text())
    assert doc["experiment"] == "synthetic" and doc["seeds"] == [0, 1]
    assert "efa reproduce synthetic --seeds 2" in doc["command"] and doc["wall_seconds"] > 0
    for row in doc["rows"]:
        assert {"setting", "model", "metric", "mean", "std", "values", "paper"} <= set(row)
        assert np.isclose(row["mean"], np.mean(row["values"]))
    models = {(r["setting"], r["model"]) for r in doc["rows"]}
    for d in ("unidirectional", "bidirectional"):
        assert {(d, "EFA"), (d, "FM"), (d, "Bayes-optimal (DGP mean)")} <= models
    oracle = [r for r in doc["rows"] if r["model"].startswith("Bayes")][0]
    assert 0.8 < oracle["mean"] < 1.2  # computed from the DGP, close to σ² = 1
    table = [line for line in (folder / "results.md").read_text().splitlines()
             if line.startswith("| ")]
    for model in ("EFA", "FM", "Bayes-optimal (DGP mean)"):  # a cell of the results table
        assert any(f" {model} |" in line or f"| {model} " in line for line in table), model
    assert (folder / "synthetic_mse.png").exists() and (folder / "attention.png").exists()


def test_unknown_experiment_is_explained():
    result = CliRunner().invoke(app, ["reproduce", "nope"])
    assert result.exit_code != 0 and "unknown experiment" in result.output
