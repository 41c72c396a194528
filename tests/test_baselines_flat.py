"""The MLP on the flattened sequence (efa.baselines.flat)."""

import pytest
import torch

import efa
from efa.baselines.flat import FlatMLP
from efa.generators import LinearGaussian


def test_flat_mlp_reads_the_context_in_order_and_its_own_covariates():
    gen = LinearGaussian(dim=2)
    data = gen.sample(4, 5, seed=0).sequences
    model = FlatMLP(gen.fields(dim=8, hidden=8), 5, hidden=6).double()
    assert model.net[0].in_features == 4 * (2 + 1) + 2
    at = {"y": torch.zeros(4, 5, dtype=torch.bool)}
    at["y"][1, 2] = True
    eta = model.natural_params_at(data.to(torch.float64), at)["y"]
    c, y = data.fields["c"].double(), data.fields["y"].double()
    others = [0, 1, 3, 4]
    x = torch.cat([c[1, others].flatten(), y[1, others], c[1, 2]])
    torch.testing.assert_close(eta, model.family.link(model.net(x[None])))
    assert efa.evaluate(model, data)["y"] == pytest.approx(efa.evaluate(model, data)["y"])


def test_flat_mlp_refusals():
    gen = LinearGaussian(dim=2)
    with pytest.raises(ValueError, match="field 'item' is a category"):
        FlatMLP([efa.Category("item", 3, target=False), *gen.fields()], 4)
    with pytest.raises(ValueError, match="fixed length of at least 2"):
        FlatMLP(gen.fields(), 1)
    model = FlatMLP(gen.fields(), 4)
    with pytest.raises(ValueError, match="needs sequences of length 4"):
        efa.evaluate(model, gen.sample(3, 5, seed=0).sequences)
