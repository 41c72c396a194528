"""The small defects session 38's probes left: each refused with a clear error now."""

from __future__ import annotations

import pytest
import torch

import efa


def test_the_mixture_identity_refuses_a_field_that_feeds_only_the_skip_path():
    from efa import moe

    torch.manual_seed(0)
    fields = [efa.Category("a", 5, dim=4), efa.Category("b", 4, dim=4, feeds=("skip",))]
    model = efa.EFA(efa.EFAConfig(fields, num_layers=1, num_heads=2, block="residual_linear",
                                  bias=False, out_proj=True, max_len=6))
    data = efa.Sequences({"a": torch.zeros(2, 6, dtype=torch.long),
                          "b": torch.ones(2, 6, dtype=torch.long)}, torch.tensor([6, 4]))
    with pytest.raises(ValueError, match=r"every field to feed .*'b': \('skip',\)"):
        moe.mixture(model, data)
    with pytest.raises(ValueError, match="every field to feed"):
        moe.CBOWMoE.tied(model)
