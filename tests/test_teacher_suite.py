"""The teacher suite (efa.generators.suite): fixed, disjoint development and evaluation seeds,
and exact Bayes limits, the bidirectional one checked against the joint enumerated in full."""

import itertools

import pytest
import torch

import efa
from efa.core.families import Bernoulli
from efa.generators import attention_teacher
from efa.generators.suite import (
    DEVELOPMENT_SEEDS,
    EVALUATION_SEEDS,
    FAMILIES,
    draw,
    masked_bayes_nll,
    suite,
)


def test_seeds_are_fixed_disjoint_and_draw_the_documented_ranges():
    assert set(DEVELOPMENT_SEEDS).isdisjoint(EVALUATION_SEEDS)
    assert (len(DEVELOPMENT_SEEDS), len(EVALUATION_SEEDS)) == (20, 20)
    specs = suite("development") + suite("evaluation")
    assert suite("evaluation") == [draw(s) for s in EVALUATION_SEEDS]  # a function of the seed
    assert {s.role for s in suite("evaluation")} == {"evaluation"}
    for s in specs:
        assert s.direction == ("unidirectional" if s.seed % 2 == 0 else "bidirectional")
        assert 1 <= s.num_layers <= 2 and s.num_heads in (1, 2, 4) and s.attributes in (0, 1)
        assert 8 <= s.length <= 64 and 5000 <= s.n_train <= 50000
        assert all(10 <= d <= 2000 for d in s.categories) and set(s.values) <= set(FAMILIES)
        if s.direction == "bidirectional":  # finite supports only: the exact sum is possible
            assert max(s.categories) <= 50 and set(s.values) <= {"bernoulli"}
    with pytest.raises(ValueError, match="role must be"):
        suite("test")


def test_masked_bayes_nll_is_the_enumerated_joints_conditional():
    """A tiny causal teacher (3 items and a flag, 3 positions): every sequence's joint
    probability enumerated (216 sequences, summing to 1), p(x_i | rest) read off the table."""
    teacher = attention_teacher([efa.Category("item", 3), efa.Value("flag", Bernoulli())],
                                max_len=3, num_layers=2, seed=4)
    combos = list(itertools.product(range(3), range(2), repeat=3))
    x = torch.tensor([c[0::2] for c in combos])
    y = torch.tensor([c[1::2] for c in combos])
    table = efa.Sequences({"item": x, "flag": y}, torch.full((len(combos),), 3))
    lls = efa.log_likelihoods(teacher, table)
    joint = (lls["item"] + lls["flag"]).sum(1)
    assert float(torch.logsumexp(joint, 0)) == pytest.approx(0.0, abs=1e-12)
    index = {c: k for k, c in enumerate(combos)}
    data = efa.generators.sample(teacher, 7, seed=1)
    want = {"item": 0.0, "flag": 0.0}
    for n in range(7):
        seq = [int(v) for pair in zip(data.fields["item"][n], data.fields["flag"][n], strict=True)
               for v in pair]
        for i in range(3):
            for name, slot, size in (("item", 2 * i, 3), ("flag", 2 * i + 1, 2)):
                rows = []
                for v in range(size):
                    alt = list(seq)
                    alt[slot] = v
                    rows.append(joint[index[tuple(alt)]])
                want[name] -= float(joint[index[tuple(seq)]] - torch.logsumexp(
                    torch.stack(rows), 0)) / 21
    got = masked_bayes_nll(teacher, data)
    assert got == pytest.approx(want, abs=1e-10)
    with pytest.raises(ValueError, match="finite support"):
        masked_bayes_nll(attention_teacher([efa.Value("c", efa.core.families.Poisson())],
                                           max_len=2), data)


def test_a_spec_draws_the_same_teacher_and_data_every_time():
    spec = draw(101)
    t1, t2 = spec.teacher(), spec.teacher()
    assert all(torch.equal(a, b) for a, b in zip(t1.state_dict().values(),
                                                  t2.state_dict().values(), strict=True))
    small = type(spec)(**{**spec.__dict__, "n_train": 50, "length": 4})
    a, b = small.data(small.teacher()), small.data(small.teacher())
    assert all(torch.equal(p.fields[k], q.fields[k])
               for p, q in zip(a, b, strict=True) for k in p.fields)
    assert [len(d) for d in a] == [50, 1000, 500]


@pytest.mark.slow
def test_the_defaults_benchmark_runs_quick_and_writes_nothing():
    """benchmarks/defaults.py --quick --causal --restarts 2: the full code path on two small
    development teachers (the bidirectional one also through a causal student's masked
    conditionals; both also from two initial draws), printed, never written over the committed
    results."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = root / "results" / "defaults" / "development.json"
    before = out.read_bytes() if out.exists() else None
    run = subprocess.run([sys.executable, str(root / "benchmarks" / "defaults.py"), "--quick",
                          "--causal", "--restarts", "2"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads(run.stdout[run.stdout.index("{\n"):])
    assert summary["teachers"] == 2 and summary["pairs"] >= 2
    assert set(summary["targets_met"]) == {"median", "share", "seconds"}
    assert summary["causal_pairs"] == 1 and summary["causal_median_excess"] > -0.05
    assert summary["restart_pairs"] == summary["pairs"]
    assert (out.read_bytes() if out.exists() else None) == before


def test_unbounded_values_cannot_feed_an_explosion():
    """A two-layer teacher of counts feeding everything exploded on long sequences (a rate
    beyond int64 at seed 912's spec); in the suite such values feed queries and keys only, in
    concat blocks that leave them out of the state, so draws stay moderate."""
    spec = draw(912)
    assert spec.num_layers == 2 and set(spec.values) == {"poisson", "negative_binomial"}
    teacher = spec.teacher()
    assert teacher.config.block == "concat"
    assert all(f.feeds == ("q", "k") for f in teacher.fields if f.name in ("poisson0",
                                                                          "negative_binomial1"))
    data = efa.generators.sample(teacher, 300, seed=1)
    assert all(float(v.abs().max()) < 1000 for v in data.fields.values())
    loud = attention_teacher(spec.fields(), spec.length, num_layers=2, num_heads=4, seed=912)
    assert loud.config.block == "residual"  # the default keeps efa's teacher as it was


def test_the_masked_limit_is_exact_with_an_attribute_too():
    """The same check with a covariate that every position reads: per sequence, the joint of
    all 216 (item, flag) sequences under that sequence's own attributes."""
    teacher = attention_teacher([efa.Category("item", 3), efa.Value("flag", Bernoulli()),
                                 efa.Attribute("cov", size=2)], max_len=3, num_layers=2, seed=4)
    data = efa.generators.sample(teacher, 6, seed=1)
    combos = list(itertools.product(range(3), range(2), repeat=3))
    index = {c: k for k, c in enumerate(combos)}
    x = torch.tensor([c[0::2] for c in combos])
    y = torch.tensor([c[1::2] for c in combos])
    want = {"item": 0.0, "flag": 0.0}
    for n in range(6):
        cov = data.fields["cov"][n : n + 1].expand(len(combos), -1, -1)
        lls = efa.log_likelihoods(teacher, efa.Sequences({"item": x, "flag": y, "cov": cov},
                                                         torch.full((len(combos),), 3)))
        joint = (lls["item"] + lls["flag"]).sum(1)
        seq = [int(v) for pair in zip(data.fields["item"][n], data.fields["flag"][n],
                                      strict=True) for v in pair]
        for slot in range(6):
            name, size = ("item", 3) if slot % 2 == 0 else ("flag", 2)
            alts = [joint[index[tuple(seq[:slot] + [v] + seq[slot + 1:])]] for v in range(size)]
            want[name] -= float(joint[index[tuple(seq)]] - torch.logsumexp(torch.stack(alts), 0)
                                ) / 18
    assert masked_bayes_nll(teacher, data) == pytest.approx(want, abs=1e-10)


def test_a_teacher_spec_needs_an_integer_seed():
    from efa.generators.suite import draw

    assert draw(1) == draw(1)
    for seed in (True, 1.0, -1):
        with pytest.raises(ValueError, match="seed must be an integer >= 0"):
            draw(seed)
