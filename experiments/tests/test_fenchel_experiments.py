"""The three reproductions of issue 11 (fenchel-toy, dual-gap, attention-kernels): their --quick
versions run the same code path and write the results contract (dual-gap and attention-kernels
read the real data under data_root())."""

from __future__ import annotations

import json
import math

import pytest

from experiments import get
from experiments.harness import runner


def _run(name, seeds, tmp_path):
    report = runner.reproduce(name, seeds, quick=True, progress=False,
                              command=f"efa reproduce {name} --quick")
    folder = runner.write_atomically(report, tmp_path / name, get(name).plots)
    doc = json.loads((folder / "results.json").read_text())
    assert doc["experiment"] == name and doc["rows"]
    assert all(math.isfinite(v) for row in doc["rows"] for v in row["values"])
    assert list(folder.glob("*.png"))
    return doc


@pytest.mark.slow
def test_fenchel_toy_quick(tmp_path):
    doc = _run("fenchel-toy", 2, tmp_path)
    for problem in [doc["figures"]["picture"], *doc["figures"]["random"]]:
        for r in problem:
            assert r["converged"] and r["kkt"] < 1e-9 and abs(r["gap"]) < 1e-9
            assert r["dev_second"] < r["dev_first"]
    # Eq. 17 gets better as α decreases (Figure 3's claim), on the fixed d = 2 problem.
    errors = [r["h_error_first"] for r in doc["figures"]["picture"]]
    assert errors == sorted(errors)


@pytest.mark.slow
def test_dual_gap_quick(tmp_path):
    doc = _run("dual-gap", 1, tmp_path)
    for mapping in ("paper", "keys"):
        stats = doc["newton"][mapping]
        assert stats["solves"] > 0 and stats["not_converged"] == 0
    assert {r["model"] for r in doc["figures"]["results"]} == set(get("dual-gap").QUICK.models)


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [1])
def test_attention_kernels_quick(tmp_path, seeds):
    doc = _run("attention-kernels", seeds, tmp_path)
    kernels = {r["model"] for r in doc["rows"]}
    assert kernels == set(get("attention-kernels").KERNELS)
    assert set(doc["comparisons"]) and "Kernels that beat softmax" in doc["notes"][0]


def test_item_models_take_an_attention_kernel():
    from efa import Sequences
    from experiments.efa_paper import items

    train = Sequences.from_lists({"item": [[0, 3, 1], [2, 4]]})
    spec = items.ZooSpec(dim=8, heads=2, head_dim=4)
    model, _ = items.categorical_model("EFA + distinct", "bidirectional", 5, 4, spec, train,
                                       attention={"kernel": "fenchel", "alpha": 2.0})
    assert model.config.attention == {"kernel": "fenchel", "alpha": 2.0}
    assert math.isfinite(float(model.loss(train)))
