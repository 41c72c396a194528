"""Session 40's probe round: each test fails on the code before its fix."""

from __future__ import annotations

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
