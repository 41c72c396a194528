"""Session 40's probe round: each test fails on the code before its fix."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from efa.core.families import Ordinal
from efa.core.families.base import Family


def test_ordinal_log_probabilities_stay_at_or_below_zero_at_large_eta():
    # The natural form η s_y − logsumexp + b_y cancelled in float32: +1.84 at |η| ~ 1e8.
    torch.manual_seed(0)
    family = Ordinal(5)
    with torch.no_grad():
        family.raw_steps.copy_(torch.randn(4))
        family.base.copy_(3 * torch.randn(5))
    worst = max(family.log_prob(torch.arange(5), torch.full((5, 1), s * float(e))).max().item()
                for e in torch.logspace(0, 9, 100) for s in (1, -1))
    assert worst <= 0.0
    # and it is the same function: float64, against the natural form, broadcasting y
    family = family.double()
    eta = 3 * torch.randn(6, 3, 1, dtype=torch.float64)
    y = torch.randint(0, 5, (6, 3))
    torch.testing.assert_close(family.log_prob(y, eta), Family.log_prob(family, y, eta),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(family.log_prob(torch.arange(5), eta[:1, :1]),
                               Family.log_prob(family, torch.arange(5), eta[:1, :1]),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(family.log_prob(y, eta, base_measure=False),
                               Family.log_prob(family, y, eta, base_measure=False))


def _value_model(family):
    import efa
    torch.manual_seed(0)
    return efa.EFA(efa.EFAConfig([efa.Category("item", 5, dim=4), efa.Value("y", family, dim=4)],
                                 max_len=6, num_layers=1, num_heads=1,
                                 direction="unidirectional"))


def _value_data(scale=1.0, offset=0.0):
    import efa
    g = torch.Generator().manual_seed(0)
    items = torch.randint(5, (40, 6), generator=g)
    y = offset + scale * (items + 1 + 0.1 * torch.randn(40, 6, generator=g, dtype=torch.float64))
    return efa.Sequences.from_lists({"item": items.tolist(), "y": y.tolist()})


def test_a_learned_sigma_left_unset_starts_at_the_datas_scale_once():
    # It started at 1 in the data's units: values in the thousands got 2 % coverage.
    from efa.core.families import LearnedGaussian
    data = _value_data(scale=1e3)
    model = _value_model(LearnedGaussian())
    model.standardise(data)
    family = model.field("y").family
    assert family.init_sigma == pytest.approx(model.field("y").scale)
    assert float(family.sigma) == pytest.approx(model.field("y").scale, rel=1e-6)
    with torch.no_grad():
        family.log_sigma.fill_(0.0)  # as if learned: a second standardise keeps it
    model.standardise(data)
    assert float(family.sigma) == 1.0
    given = _value_model(LearnedGaussian(2.0))
    given.standardise(data)
    assert float(given.field("y").family.sigma) == pytest.approx(2.0)


def test_gamma_read_out_in_standardised_units_scales_the_rate():
    # Gamma ignored the standardisation: its rate stayed in the data's units (a mean capped
    # at alpha / floor; -7.4 nats where -1.9 was reachable at y ~ 1e5).
    from efa.core.families import Gamma
    family = Gamma()
    z = torch.randn(7, 2, dtype=torch.float64)
    y = torch.rand(7, dtype=torch.float64) + 0.1
    for scale in (1e-5, 1.0, 1e5):
        got = family.log_prob(scale * y, family.link_standardised(z, 3.0, scale))
        torch.testing.assert_close(got, family.log_prob(y, family.link(z)) - math.log(scale))


def test_fit_warns_of_a_fixed_sigma_far_from_the_data_and_of_float32_far_from_zero():
    from efa.core.families import Gaussian, HeteroscedasticGaussian
    with pytest.warns(UserWarning, match="fixed sigma 1"):
        _value_model(Gaussian()).standardise(_value_data(scale=1e3))
    with pytest.warns(UserWarning, match="resolve them to about 1"):
        _value_model(HeteroscedasticGaussian()).standardise(_value_data(offset=1e7))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _value_model(HeteroscedasticGaussian()).standardise(_value_data(scale=1e5))
        _value_model(HeteroscedasticGaussian()).double().standardise(_value_data(offset=1e7))


def test_predictive_distributions_carry_no_autograd_graph():
    from efa.core.families import HeteroscedasticGaussian
    model, data = _value_model(HeteroscedasticGaussian()), _value_data()
    assert not model.predictive(data, "y").mean.requires_grad
