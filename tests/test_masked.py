"""A causal model's masked conditionals (efa.masked_log_likelihoods): exact against the joint
enumerated in full (float64), the same with padding and missing values as sequence by
sequence, and refused where they are not defined."""

import itertools
import warnings

import pytest
import torch

import efa
from efa.core.families import Bernoulli, Binomial, Poisson


def causal(fields, length=3, seed=0):
    torch.manual_seed(seed)
    return efa.EFA(efa.EFAConfig(fields, max_len=length, direction="unidirectional")).double()


def test_masked_conditionals_are_the_enumerated_joints():
    """Every sequence of 3 positions of (item of 3, binomial of 2 trials): the joint of each
    enumerated, p(x_i | rest) read off the table, against the function on the same table."""
    model = causal([efa.Category("item", 3, dim=8), efa.Value("n", Binomial(2), dim=4)])
    combos = list(itertools.product(range(3), range(3), repeat=3))
    data = efa.Sequences({"item": torch.tensor([c[0::2] for c in combos]),
                          "n": torch.tensor([c[1::2] for c in combos])},
                         torch.full((len(combos),), 3))
    lls = efa.log_likelihoods(model, data)
    joint = (lls["item"] + lls["n"]).sum(1)
    assert float(torch.logsumexp(joint, 0)) == pytest.approx(0.0, abs=1e-12)  # a distribution
    index = {c: k for k, c in enumerate(combos)}
    got = efa.masked_log_likelihoods(model, data, batch_size=50)
    for k, c in enumerate(combos):
        for i in range(3):
            for name, slot in (("item", 2 * i), ("n", 2 * i + 1)):
                alts = [joint[index[c[:slot] + (v,) + c[slot + 1:]]] for v in range(3)]
                want = joint[k] - torch.logsumexp(torch.stack(alts), 0)
                assert float(got[name][k, i]) == pytest.approx(float(want), abs=1e-12)


def test_padding_and_missing_values_score_as_each_sequence_alone():
    model = causal([efa.Category("item", 4, dim=8), efa.Value("flag", Bernoulli(), dim=4)],
                   length=5, seed=1)
    data = efa.generators.sample(model, 9, seed=2)
    lengths = torch.tensor([5, 1, 3, 4, 2, 5, 3, 1, 4])
    observed = {"flag": torch.rand(9, 5, generator=torch.Generator().manual_seed(3)) > 0.3}
    ragged = efa.Sequences(data.fields, lengths, observed=observed)
    got = efa.masked_log_likelihoods(model, ragged, batch_size=7)  # batches of one sequence
    for n in range(9):
        m = int(lengths[n])
        alone = efa.Sequences({k: v[n:n + 1, :m] for k, v in data.fields.items()},
                              torch.tensor([m]),
                              observed={"flag": observed["flag"][n:n + 1, :m]})
        own = efa.masked_log_likelihoods(model, alone)
        for name in ("item", "flag"):
            predicted = ragged.predicted(name)[n]
            assert torch.isnan(got[name][n, ~predicted]).all()  # padding and missing: NaN
            assert torch.allclose(got[name][n, :m], own[name][0], atol=1e-12, equal_nan=True)
    means = efa.masked_evaluate(model, ragged)
    assert means == pytest.approx({k: float(v.nanmean()) for k, v in got.items()})
    assert all(v < 0 for v in means.values())


def test_a_scored_mask_chooses_what_is_reported_not_the_joints_factors():
    """``scored`` picks the positions to report; every observed value stays a factor of the
    joint that is renormalised (a probe found the first position's conditional moved when the
    later positions were unscored)."""
    model = causal([efa.Category("item", 5, dim=8)], length=4, seed=3)
    data = efa.Sequences.from_lists({"item": [[3, 1, 4, 2], [0, 2, 1, 3]]})
    full = efa.masked_log_likelihoods(model, data)["item"]
    scored = torch.tensor([[True, False, False, False], [False, True, False, True]])
    part = efa.masked_log_likelihoods(model, data.with_scored(scored))["item"]
    assert torch.isnan(part[~scored]).all()
    assert torch.allclose(part[scored], full[scored], atol=1e-12)


def test_requests_the_renormalisation_cannot_answer_are_refused():
    model = causal([efa.Category("item", 3), efa.Value("count", Poisson())])
    data = efa.generators.sample(model, 4, seed=1)
    with pytest.raises(ValueError, match="'count' \\(Poisson\\) has no finite support"):
        efa.masked_log_likelihoods(model, data)
    assert set(efa.masked_evaluate(model, data, fields=("item",))) == {"item"}
    with pytest.raises(ValueError, match="\\['colour'\\] are not target fields"):
        efa.masked_log_likelihoods(model, data, fields=("colour",))
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        efa.masked_log_likelihoods(model, data, fields=("item",), batch_size=0)
    bidirectional = efa.EFA(efa.EFAConfig([efa.Category("item", 3)], max_len=3))
    with pytest.raises(ValueError, match="unidirectional \\(causal\\) model.*efa.evaluate"):
        efa.masked_log_likelihoods(bidirectional,
                                   efa.Sequences({"item": data.fields["item"]}, data.lengths))


def test_a_field_with_nothing_to_predict_is_nan_with_a_warning_never_a_score():
    model = causal([efa.Category("item", 3), efa.Value("flag", Bernoulli())], seed=2)
    data = efa.generators.sample(model, 4, seed=1)
    hidden = efa.Sequences(data.fields, data.lengths,
                           observed={"flag": torch.zeros(4, 3, dtype=torch.bool)})
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        means = efa.masked_evaluate(model, hidden)
    assert means["flag"] != means["flag"] and means["item"] < 0
    assert any("'flag' has no predicted position" in str(w.message) for w in said)


def test_distinct_items_renormalise_over_the_items_left():
    """With `distinct=True` a sequence cannot repeat an item, so at each position the masked
    conditional is spread over the items that no other position holds: every ordered choice of
    3 of 4 items enumerated, the alternatives at position i read off that table."""
    model = causal([efa.Category("item", 4, dim=8, distinct=True)], seed=3)
    combos = list(itertools.permutations(range(4), 3))
    data = efa.Sequences({"item": torch.tensor(combos)}, torch.full((len(combos),), 3))
    joint = efa.log_likelihoods(model, data)["item"].sum(1)
    assert float(torch.logsumexp(joint, 0)) == pytest.approx(0.0, abs=1e-12)
    index = {c: k for k, c in enumerate(combos)}
    got = efa.masked_log_likelihoods(model, data)["item"]
    for k, c in enumerate(combos):
        for i in range(3):
            alts = [joint[index[c[:i] + (v,) + c[i + 1:]]] for v in range(4)
                    if v not in c[:i] + c[i + 1:]]
            want = joint[k] - torch.logsumexp(torch.stack(alts), 0)
            assert float(got[k, i]) == pytest.approx(float(want), abs=1e-12)


def test_the_support_is_what_the_familys_torch_distribution_enumerates():
    from efa.core.families import Gaussian, Ordinal
    from efa.training.masked import finite_support

    assert finite_support(efa.Category("item", 5)).tolist() == [0, 1, 2, 3, 4]
    assert finite_support(efa.Value("grade", Ordinal(4))).tolist() == [0, 1, 2, 3]
    assert finite_support(efa.Value("n", Binomial(3))).tolist() == [0, 1, 2, 3]
    assert finite_support(efa.Value("flag", Bernoulli())).tolist() == [0, 1]
    for family in (Poisson(), Poisson(shift=1), Gaussian()):  # unbounded or continuous
        assert finite_support(efa.Value("v", family)) is None
