"""The teacher generator: its conditionals define a proper joint distribution, the sampler draws
from it, the Bayes NLL is the teacher's own conditional NLL, and `efa reproduce teacher --quick`
writes the results contract."""

import itertools
import json
import math

import torch

from efa import Category, Sequences, Value
from efa.core.families import Bernoulli, Poisson
from efa.generators import attention_teacher, bayes_nll, sample, student_fields
from experiments import get
from experiments.harness import runner


def test_conditionals_form_the_joint_the_sampler_draws_from():
    teacher = attention_teacher([Category("x", 3), Value("y", Bernoulli())], max_len=2, seed=4,
                                strength=3.0)
    outcomes = list(itertools.product(range(3), range(2), range(3), range(2)))
    x = torch.tensor([[o[0], o[2]] for o in outcomes])
    y = torch.tensor([[o[1], o[3]] for o in outcomes])
    every = Sequences({"x": x, "y": y}, torch.full((len(outcomes),), 2))
    lls = teacher.position_log_likelihoods(every)
    joint = (lls["x"].sum(1) + lls["y"].sum(1)).exp()  # unidirectional: the chain rule
    assert abs(float(joint.sum()) - 1) < 1e-12
    draws = sample(teacher, 20_000, seed=1)
    f = draws.fields  # the index of (x0, y0, x1, y1) in `outcomes` (row-major)
    seen = ((f["x"][:, 0] * 2 + f["y"][:, 0]) * 3 + f["x"][:, 1]) * 2 + f["y"][:, 1]
    freq = torch.bincount(seen, minlength=len(outcomes)).double() / len(seen)
    se = (joint * (1 - joint) / len(seen)).sqrt()
    assert ((freq - joint).abs() <= 5 * se + 1e-4).all()
    # The Bayes NLL is the mean conditional NLL of the teacher on the data.
    nll = bayes_nll(teacher, draws)
    for name in ("x", "y"):
        want = -float(teacher.position_log_likelihoods(draws)[name].mean())
        assert math.isclose(nll[name], want, rel_tol=1e-9)


def test_teachers_are_seeded_and_students_get_default_fields():
    fields = [Category("item", 6), Value("count", Poisson())]
    a = attention_teacher(fields, max_len=4, seed=0)
    b = attention_teacher(fields, max_len=4, seed=0)
    c = attention_teacher(fields, max_len=4, seed=1)
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k])
    assert not torch.equal(a.state_dict()["pos.weight"], c.state_dict()["pos.weight"])
    d1, d2 = sample(a, 50, seed=3), sample(a, 50, seed=3)
    assert torch.equal(d1.fields["count"], d2.fields["count"])
    own = student_fields(a)
    assert [f.name for f in own] == ["item", "count"] and own[1].loc is None


def test_quick_teacher_run_writes_the_results_contract(tmp_path):
    report = runner.reproduce("teacher", 1, quick=True, progress=False,
                              command="efa reproduce teacher")
    folder = runner.write_atomically(report, tmp_path / "teacher", get("teacher").plots)
    doc = json.loads((folder / "results.json").read_text())
    excess = [r for r in doc["rows"] if r["metric"].startswith("excess")]
    assert {r["setting"] for r in excess} == {"item", "count"}
    assert all(math.isfinite(v) for r in doc["rows"] for v in r["values"])
    assert any("Target" in n for n in doc["notes"]) and list(folder.glob("*.png"))
