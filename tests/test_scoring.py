"""Scoring in batches (efa.training.scoring): per-position log-likelihoods against the per-field
means; scoring and fitting options are checked before anything changes."""

from __future__ import annotations

import pytest
import torch

import efa
from efa.core.families import Gaussian
from tests.helpers import equal_with_nan, make_model, mixed_data, two_row_fields, two_rows


def _data(n=20, seed=0):
    return mixed_data(n=n, seed=seed, dtype=torch.float32)


def _model(seed=0, **kw):
    return make_model(seed=seed, dtype=torch.float32, num_layers=1, **kw)


def test_per_position_log_likelihoods():
    model, data = _model(), _data()
    lls = efa.log_likelihoods(model, data)
    means = efa.evaluate(model, data)
    for name, lp in lls.items():
        m = data.predicted(name)
        assert torch.isnan(lp[~m]).all() and torch.isfinite(lp[m]).all()
        assert float(lp[m].mean()) == pytest.approx(means[name], abs=1e-5)





def test_scoring_and_fitting_options_are_checked_before_anything_changes():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig(two_row_fields(), max_len=3))
    for v in ("no", None, 1):
        with pytest.raises(ValueError, match="base_measure must be True or False"):
            efa.evaluate(model, two_rows(), base_measure=v)
    with pytest.raises(ValueError, match="names no field"):
        efa.evaluate(model, two_rows(), fields=())
    unset = efa.EFA(efa.EFAConfig([efa.Category("item", 5, dim=4),
                                   efa.Value("y", Gaussian(), dim=4)], max_len=3))
    before = unset.predict_mean(two_rows())["y"]
    with pytest.raises(ValueError, match="seed must be below 2\\*\\*63"):
        efa.fit(unset, two_rows(), two_rows(), seed=2**70, progress=False)
    with pytest.raises(ValueError):
        efa.fit(unset, two_rows(), two_rows(), device="cuda:99", progress=False)
    assert equal_with_nan(unset.predict_mean(two_rows())["y"], before)  # not standardised
