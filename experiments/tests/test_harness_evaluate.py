"""The shared evaluators and the papers' numbers as data."""

import math

import numpy as np
import pytest

from experiments.harness.evaluate import (
    estimate,
    mean_std,
    paired,
    slope,
    slopes,
    standard_error,
    table,
    verdict,
)
from experiments.harness.papers import by_key, paper_numbers


def test_estimate_is_the_mean_and_its_standard_error():
    v = [1.0, 2.0, 4.0, 7.0]
    e = estimate(v)
    sd = math.sqrt(sum((x - 3.5) ** 2 for x in v) / 3)
    assert (e.mean, e.n) == (3.5, 4) and e.se == pytest.approx(sd / 2, rel=1e-15)
    mean, se = e
    assert (mean, se) == (e.mean, e.se)
    assert f"{e:+.2f}" == f"+3.50 ± {sd / 2:.2f}"
    assert e.above(3.5 - 2 * e.se - 1e-9) and not e.above(3.5 - 2 * e.se + 1e-9)
    assert e.below(3.5 + 2 * e.se + 1e-9) and not e.below(3.5 + 2 * e.se - 1e-9)
    one = estimate([5.0])
    assert math.isnan(one.se) and not one.above(-100) and not one.below(100)
    assert math.isnan(standard_error([])) and math.isnan(estimate([]).mean)


def test_paired_slope_verdict_and_mean_std():
    a, b = np.array([3.0, 5.0, 4.0]), np.array([1.0, 2.0, 2.5])
    d = paired(a, b)
    assert d.mean == pytest.approx((a - b).mean()) and d.se == standard_error(a - b)
    x = np.array([0.0, 1.0, 2.0, 3.0])
    assert slope(x, 2.5 * x - 1) == pytest.approx(2.5, abs=1e-12)
    assert slopes(x, [x, -x]) == pytest.approx([1.0, -1.0], abs=1e-12)
    assert (verdict(True), verdict(False)) == ("shown", "NOT shown")
    assert mean_std([1.0, 3.0], 2) == f"2.00 ± {math.sqrt(2):.2f}" and mean_std([2.0]) == \
        "2.0000 ± 0.0000"


def test_markdown_table():
    out = table(["a", "b"], [[1, "x"], [2.5, "y"]], "Title")
    assert out.split("\n") == ["## Title", "", "| a | b |", "|---|---|", "| 1 | x |",
                               "| 2.5 | y |"]
    with pytest.raises(ValueError, match="row 0 has 1 cells for 2 columns"):
        table(["a", "b"], [[1]])


def test_every_work_reads_its_paper_numbers():
    from experiments.efa_paper import synthetic
    from experiments.moe import tabular_simulation

    assert synthetic.PAPER["bidirectional", "EFA"] == 1.038
    assert tabular_simulation.PAPER_ACC[5, 0, 0.9][4] == 0.392
    assert len(tabular_simulation.PAPER_ACC) == 12 and tabular_simulation.PAPER_MODELS[-1] == "ATN"
    assert by_key({"u": {"FM": 1.0, "EFA": [1, 2]}}, 2) == {("u", "FM"): 1.0, ("u", "EFA"): (1, 2)}
    with pytest.raises(KeyError, match=r"has no table \[nope\]"):
        paper_numbers(synthetic.__file__, "nope")
