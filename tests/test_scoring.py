"""Scoring in batches (efa.training.scoring): per-position log-likelihoods against the per-field
means."""

from __future__ import annotations

import pytest
import torch

import efa
from tests.helpers import make_model, mixed_data


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
