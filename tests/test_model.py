import itertools

import pytest
import torch
from torch.func import functional_call

from efa import EFA, Category, EFAConfig, Sequences
from tests.helpers import make_model, mixed_data, naive_natural_params


def _compare(model, data):
    fast = model.natural_params(data)
    slow = naive_natural_params(model, data)
    for name, eta in slow.items():
        m = data.predicted(name)
        assert m.any()
        torch.testing.assert_close(fast[name][m], eta[m], atol=1e-5, rtol=0)


CASES = list(
    itertools.product(
        ["unidirectional", "bidirectional"],
        [1, 2, 3],
        ["softmax", "linear"],
        ["bare", "residual", "post_ln", "pre_ln"],
    )
)


@pytest.mark.parametrize("direction,layers,attention,block", CASES)
def test_exact_masked_pseudo_likelihood(direction, layers, attention, block):
    model = make_model(
        num_layers=layers,
        direction=direction,
        attention=attention,
        block=block,
        scale="linear" if attention == "linear" else "sqrt",
    )
    _compare(model, mixed_data())


@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
def test_copies_mode_matches_definition_everywhere(direction):
    model = make_model(num_layers=2, direction=direction, mode="copies", block="post_ln")
    model.config.chunk = 7  # several chunks
    _compare(model, mixed_data())


def test_stream_and_copies_agree_for_unidirectional():
    data = mixed_data(n=4)
    a = make_model(direction="unidirectional", mode="stream")
    b = make_model(direction="unidirectional", mode="copies")
    for name, eta in a.natural_params(data).items():
        m = data.predicted(name)
        torch.testing.assert_close(eta[m], b.natural_params(data)[name][m])


def test_stream_refused_where_not_exact():
    with pytest.raises(ValueError, match="exact only"):
        make_model(num_layers=2, direction="bidirectional", mode="stream")


def test_unidirectional_ignores_the_future():
    model = make_model(direction="unidirectional", num_layers=3)
    data = mixed_data(n=1, missing=False)
    eta = model.natural_params(data)
    changed = Sequences({k: v.clone() for k, v in data.fields.items()}, data.lengths)
    changed.fields["item"][0, 4:] = (changed.fields["item"][0, 4:] + 1) % 7
    changed.fields["temp"][0, 4:] += 10
    eta2 = model.natural_params(changed)
    for name in eta:  # positions 0..3 do not see 4.. ; position 4 sees its own item only
        torch.testing.assert_close(eta[name][0, :4], eta2[name][0, :4])


def test_padding_does_not_leak():
    model = make_model(direction="bidirectional", num_layers=2)
    data = mixed_data(n=3, missing=False)
    data.lengths[1] = 3
    eta = model.natural_params(data)
    data.fields["temp"][1, 3:] = 1e3
    data.fields["item"][1, 3:] = 6
    eta2 = model.natural_params(data)
    for name in eta:
        torch.testing.assert_close(eta[name][1, :3], eta2[name][1, :3])


def test_attention_rows_are_distributions_and_causal():
    model = make_model(direction="unidirectional", num_layers=2)
    data = mixed_data(n=2, missing=False)
    w = model.attention(data, "item")
    assert w.shape == (2, 2, 2, data.max_len, data.max_len)
    valid = data.valid()
    rows = w[:, 0, :, : int(data.lengths[0])].sum(-1)
    torch.testing.assert_close(rows, torch.ones_like(rows))
    assert torch.all(w.triu(1) == 0)
    assert valid.shape[0] == 2


def test_copies_attention_matches_stream():
    data = mixed_data(n=2, missing=False)
    a = make_model(direction="unidirectional", mode="stream").attention(data, "count")
    b = make_model(direction="unidirectional", mode="copies").attention(data, "count")
    b_idx, i_idx = data.predicted("count").nonzero(as_tuple=True)
    torch.testing.assert_close(a[:, b_idx, :, i_idx], b[:, b_idx, :, i_idx])


@pytest.mark.parametrize(
    "direction,layers", [("bidirectional", 1), ("bidirectional", 2), ("unidirectional", 2)]
)
def test_gradcheck_loss_wrt_attention_weights(direction, layers):
    model = make_model(num_layers=layers, head_dim=2, direction=direction, block="post_ln")
    data = mixed_data(n=2, max_len=3, missing=False)
    params = dict(model.named_parameters())
    name = "blocks.0.attn.q.weight"

    def loss(w):
        etas = functional_call(model, {**params, name: w}, (data,))
        total = 0
        for f in model.targets:
            m = data.predicted(f.name)
            total = total - f.family.log_prob(data.fields[f.name][m], etas[f.name][m]).sum()
        return total

    assert torch.autograd.gradcheck(loss, (params[name].detach().clone().requires_grad_(),))


def test_category_only_model_runs_in_float32():
    torch.manual_seed(0)
    model = EFA(EFAConfig([Category("item", 5)], max_len=4, num_layers=1))
    data = Sequences.from_lists({"item": [[0, 1, 2], [3, 4]]})
    ll = model.log_likelihood(data)
    assert ll["item"][1] == 5
    assert torch.isfinite(ll["item"][0])
