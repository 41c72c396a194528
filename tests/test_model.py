import itertools

import numpy as np
import pytest
import torch

import efa
from efa import EFA, KERNELS, Category, EFAConfig, Kernel, Sequences, register_kernel
from efa.core.families import Poisson
from tests.helpers import (
    feeding_fields,
    gradcheck_query_weight,
    make_model,
    mixed_data,
    mixed_fields,
    naive_natural_params,
)


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
        ["bare", "residual", "post_ln", "pre_ln", "residual_linear"],
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
    a = make_model(direction="unidirectional", mode="two_stream")
    b = make_model(direction="unidirectional", mode="copies")
    for name, eta in a.natural_params(data).items():
        m = data.predicted(name)
        torch.testing.assert_close(eta[m], b.natural_params(data)[name][m])


@pytest.mark.parametrize("direction,layers", [("unidirectional", 2), ("bidirectional", 1)])
def test_auto_uses_copies_for_one_position_per_sequence(direction, layers, monkeypatch):
    """``mode='auto'`` computes a few asked positions (e.g. the next item) as copies: the same
    numbers as the two streams, and the two streams are not run."""
    from efa.core import strategies

    data = mixed_data(n=4)
    model = make_model(direction=direction, num_layers=layers).double().eval()
    dense = model.natural_params(data)
    at = torch.zeros_like(data.valid())
    at[torch.arange(len(data)), data.lengths - 1] = True  # the last position of each
    monkeypatch.setitem(strategies.STRATEGIES, "two_stream", None)  # fails if called
    sparse = model.natural_params_at(data, {"item": at})["item"]
    torch.testing.assert_close(sparse, dense["item"][at], atol=1e-12, rtol=0)


def test_stream_refused_where_not_exact():
    with pytest.raises(ValueError, match="exact only"):
        make_model(num_layers=2, direction="bidirectional", mode="two_stream")


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
    w = model.attention_weights(data, "item")
    assert w.shape == (2, 2, 2, data.max_len, data.max_len)
    for b in range(2):
        n = int(data.lengths[b])
        rows = w[:, b, :, :n].sum(-1)
        torch.testing.assert_close(rows, torch.ones_like(rows))
        assert torch.all(w[:, b, :, n:] == 0)  # padding rows are not asked
        assert torch.all(w[:, b, :, :, n:] == 0)  # and no weight goes to padding
    assert torch.all(w.triu(1) == 0)


def test_copies_attention_matches_stream():
    data = mixed_data(n=2, missing=False)
    a = make_model(direction="unidirectional", mode="two_stream").attention_weights(data, "count")
    b = make_model(direction="unidirectional", mode="copies").attention_weights(data, "count")
    b_idx, i_idx = data.predicted("count").nonzero(as_tuple=True)
    torch.testing.assert_close(a[:, b_idx, :, i_idx], b[:, b_idx, :, i_idx])


@pytest.mark.parametrize(
    "direction,layers", [("bidirectional", 1), ("bidirectional", 2), ("unidirectional", 2)]
)
def test_gradcheck_loss_wrt_attention_weights(direction, layers):
    model = make_model(num_layers=layers, head_dim=2, direction=direction, block="post_ln")
    assert gradcheck_query_weight(model, mixed_data(n=2, max_len=3, missing=False))


def test_category_only_model_runs_in_float32():
    torch.manual_seed(0)
    model = EFA(EFAConfig([Category("item", 5)], max_len=4, num_layers=1))
    data = Sequences.from_lists({"item": [[0, 1, 2], [3, 4]]})
    ll = model.log_likelihood_sums(data)
    assert ll["item"][1] == 5
    assert torch.isfinite(ll["item"][0])


class Uniform(Kernel):
    """A toy kernel defined here: equal weight on every allowed key."""

    name = "uniform_test"

    def scores(self, q, k):
        return q.new_zeros(*q.shape[:-1], k.shape[-2])

    def weights(self, s, allowed, q_pos, k_pos):
        a = allowed.to(s.dtype).expand_as(s)
        return a / a.sum(-1, keepdim=True)


class Joint(Uniform):
    """The same weights, declared as depending on the whole context (like kernel ridge)."""

    name = "joint_test"
    row_local = False


@pytest.fixture
def toy_kernels():
    for cls in (Uniform, Joint):
        register_kernel(cls)  # the one registry line a new kernel needs
    yield
    for cls in (Uniform, Joint):
        KERNELS.unregister(cls.name)


@pytest.mark.parametrize("direction,layers", list(itertools.product(
    ["unidirectional", "bidirectional"], [1, 2])))
@pytest.mark.parametrize("mode", ["auto", "two_stream", "copies"])
def test_a_new_kernel_is_one_class_and_exact_in_every_mode(toy_kernels, direction, layers, mode):
    exact_two_stream = layers == 1 or direction == "unidirectional"
    if mode == "two_stream" and not exact_two_stream:
        with pytest.raises(ValueError, match="exact only"):
            make_model(num_layers=layers, direction=direction, attention="uniform_test",
                       mode=mode)
        return
    model = make_model(num_layers=layers, direction=direction, attention="uniform_test",
                       mode=mode, block="post_ln")
    _compare(model, mixed_data())
    rows = model.attention_weights(mixed_data(missing=False), "item")
    n = int(mixed_data().lengths[0])
    expected = 1 / torch.arange(1, n + 1) if direction == "unidirectional" else torch.full(
        (n,), 1 / n)
    torch.testing.assert_close(rows[-1, 0, 0, :n].max(-1).values, expected.double())
    # Saved configs name the kernel and rebuild it.
    assert EFAConfig.from_dict(model.config.to_dict()).attention == "uniform_test"


def test_kernels_that_see_the_whole_context_use_the_copies(toy_kernels):
    model = make_model(num_layers=1, attention="joint_test")
    assert model.config.strategy == "copies"
    _compare(model, mixed_data())
    with pytest.raises(ValueError, match="row-local"):
        make_model(num_layers=1, attention="joint_test", mode="two_stream")


def test_unknown_kernel_and_options_are_refused():
    with pytest.raises(ValueError, match="unknown attention kernel 'nosuch'; expected one of"):
        make_model(attention="nosuch")
    with pytest.raises(ValueError, match="takes no options"):
        make_model(attention={"kernel": "softmax", "alpha": 2})


def test_predictions_at_missing_values_agree_between_strategies():
    """predict_mean imputes a missing value (a position outside the likelihood mask) the same
    way in both exact strategies (efa 0.1 returned 0 there in copies mode)."""
    data = mixed_data(n=4)
    missing = data.valid() & ~data.observed["temp"]
    assert missing.any()
    a = make_model(num_layers=1, direction="bidirectional", mode="two_stream")
    b = make_model(num_layers=1, direction="bidirectional", mode="copies")
    ma, mb = a.predict_mean(data)["temp"], b.predict_mean(data)["temp"]
    assert torch.isfinite(ma[missing]).all() and (ma[missing] != 0).all()
    torch.testing.assert_close(ma[missing], mb[missing])
    # Any query mask: only the asked positions are computed, the rest is NaN.
    at = torch.zeros_like(missing)
    at[0, 1] = True
    only = b.predict_mean(data, at=at)["temp"]
    assert torch.isfinite(only[0, 1]) and torch.isnan(only[~at]).all()
    torch.testing.assert_close(only[0, 1], mb[0, 1])


# -- fields feeding part of the attention, concatenating blocks, leave-one-out attention ----


@pytest.mark.parametrize("direction,layers,mode", [
    (d, n, m) for d in ("unidirectional", "bidirectional") for n in (1, 2)
    for m in ("auto", "two_stream", "copies") if not (m == "two_stream" and d == "bidirectional"
                                                      and n == 2)])
@pytest.mark.parametrize("attend_self", [True, False])
def test_feeds_concat_and_leave_one_out_are_exact_in_every_mode(direction, layers, mode,
                                                                 attend_self):
    """The UNN note's kind of model (fields feeding only q/k or v, the token concatenated with
    the attended value, a query that does not see its own token) against the naive copies."""
    model = make_model(fields=feeding_fields(), num_layers=layers, direction=direction,
                       mode=mode, block="concat", attend_self=attend_self, scale="none",
                       bias=False, out_proj=False, num_heads=1, head_dim=4)
    _compare(model, mixed_data())
    # The first layer reads only the fed columns: where 0:3, item 3:7, count 7:10, temp 10:12.
    attn = model.blocks[0].attn
    assert attn.q.in_features == 7 and attn.k.in_features == 10 and attn.v.in_features == 9
    assert model.blocks[0].d_out == 10 + 4  # skip (where, item, count) ⊕ one head of 4


@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
@pytest.mark.parametrize("block", ["bare", "residual", "pre_ln"])
def test_leave_one_out_and_feeds_with_standard_blocks(direction, block):
    fields = feeding_fields()
    if block != "bare":  # residual blocks add the attention to the whole token
        for f in fields:
            f.feeds = tuple(dict.fromkeys([*f.feeds, "skip"]))
    model = make_model(fields=fields, num_layers=2, direction=direction, block=block,
                       attend_self=False)
    _compare(model, mixed_data())


def test_leave_one_out_sees_no_own_token_except_with_an_empty_context():
    model = make_model(direction="unidirectional", attend_self=False)
    data = mixed_data(n=2, missing=False)
    a = model.allowed(data)[:, 0]
    n = int(data.lengths[1])
    assert a[1, 0, 0] and a[1, 0].sum() == 1  # the first position: its own token alone
    assert not torch.diagonal(a[1, 1:n, 1:n]).any()
    assert (a[1, 1:n, :n] == torch.ones(n, n, dtype=torch.bool).tril(-1)[1:]).all()
    w = model.attention_weights(data, "temp")
    assert torch.all(torch.diagonal(w[:, :, :, 1:, 1:], dim1=-2, dim2=-1) == 0)
    # The masked value never reaches a prediction: changing y_i leaves η_i unchanged.
    changed = Sequences({k: v.clone() for k, v in data.fields.items()}, data.lengths)
    changed.fields["temp"][0, 3] += 5.0
    torch.testing.assert_close(model.natural_params(data)["temp"][0, :4],
                               model.natural_params(changed)["temp"][0, :4])


def test_feeds_are_checked_and_saved(tmp_path):
    import efa
    from efa import Attribute, Value
    from efa.core.families import HeteroscedasticGaussian

    with pytest.raises(ValueError, match="subset of"):
        Attribute("x", feeds=("q", "query"))
    with pytest.raises(ValueError, match="non-empty"):
        Attribute("x", feeds=())
    with pytest.raises(ValueError, match="must feed 'skip'"):
        make_model(fields=feeding_fields(), block="residual")
    with pytest.raises(ValueError, match="mix='none'"):
        make_model(fields=feeding_fields(), block="concat", mix="linear", d_model=8)
    with pytest.raises(ValueError, match="no field feeds 'q'"):
        make_model(fields=[Attribute("x", feeds=("k", "skip")),
                           Value("y", HeteroscedasticGaussian(), feeds=("v",))], block="concat")
    with pytest.raises(ValueError, match="readout_activation"):
        Value("y", HeteroscedasticGaussian(), readout_activation="tanh")
    model = make_model(fields=feeding_fields(), block="concat", attend_self=False, scale="none",
                       dtype=torch.float32)
    efa.save(model, tmp_path / "m")
    back = efa.load(tmp_path / "m")
    assert [f.feeds for f in back.fields] == [f.feeds for f in model.fields]
    assert back.config.attend_self is False and back.config.scale == "none"
    data = mixed_data(dtype=torch.float32)
    for name, eta in model.natural_params(data).items():
        m = data.predicted(name)
        torch.testing.assert_close(eta[m], back.natural_params(data)[name][m])


@pytest.mark.parametrize("direction,layers", list(itertools.product(
    ["unidirectional", "bidirectional"], [1, 2])))
@pytest.mark.parametrize("mode", ["two_stream", "copies"])
def test_bag_of_context_term_is_exact_in_every_mode(direction, layers, mode):
    """Category(bag=True) adds Σ_{j in c(i)} U[x_j] to the logits; checked against the naive
    per-copy loop (with a missing item, so that hidden items stay out of the bag)."""
    if mode == "two_stream" and layers > 1 and direction == "bidirectional":
        return
    fields = mixed_fields()
    fields[1] = Category("item", 7, dim=4, bag=True)
    model = make_model(fields=fields, num_layers=layers, direction=direction, mode=mode)
    with torch.no_grad():
        model.bags["item"].normal_()
    data = mixed_data()
    data.observed["item"] = torch.ones_like(data.valid())
    data.observed["item"][0, 2] = False
    _compare(model, data)


def test_bag_is_off_by_default_and_changes_nothing_else():
    plain = make_model()
    fields = mixed_fields()
    fields[1] = Category("item", 7, dim=4, bag=True)
    bagged = make_model(fields=fields)
    assert not hasattr(plain, "bags") and "bag" not in plain.config.to_dict()["fields"][1]
    extra = set(bagged.state_dict()) - set(plain.state_dict())
    assert extra == {"bags.item"}
    for k, v in plain.state_dict().items():  # same initialisation, bag at zero
        assert torch.equal(v, bagged.state_dict()[k])
    data = mixed_data()
    for name, eta in plain.natural_params(data).items():
        torch.testing.assert_close(eta, bagged.natural_params(data)[name], equal_nan=True)
    with pytest.raises(ValueError, match="needs target=True"):
        Category("item", 7, target=False, bag=True)


def test_bag_prior_is_an_l2_penalty_in_the_training_loss():
    fields = mixed_fields()
    fields[1] = Category("item", 7, dim=4, bag=True, bag_l2=0.3, bag_scale=2.0)
    model = make_model(fields=fields)
    with torch.no_grad():
        model.bags["item"].normal_()
    data = mixed_data()
    nll = -sum(s / n for s, n in model.log_likelihood_sums(data).values())
    u = 2.0 * model.bags["item"]
    torch.testing.assert_close(model.loss(data), nll + 0.15 * u.pow(2).sum())
    assert make_model().penalty() is None
    loaded = EFAConfig.from_dict(model.config.to_dict()).fields[1]
    assert (loaded.bag, loaded.bag_l2, loaded.bag_scale) == (True, 0.3, 2.0)


def test_two_stream_computes_the_content_stream_once_for_all_fields(monkeypatch):
    """The content stream does not depend on the target field: one batch's fields share it.
    Loss and gradients (float64) equal those of one content stream per field, and the blocks
    run L query passes per field plus L − 1 content passes, not (2L − 1) per field."""
    from efa.core import strategies

    data = mixed_data(n=4)
    model = make_model(num_layers=3, direction="unidirectional", mode="two_stream")
    shared = model.loss(data)
    grads = torch.autograd.grad(shared, list(model.parameters()), allow_unused=True)
    calls = []
    for block in model.blocks:
        block.register_forward_hook(lambda *a: calls.append(1))
    model.loss(data)
    n_fields = len(model.target_fields)
    assert len(calls) == 3 * n_fields + 2
    run = strategies.two_stream
    monkeypatch.setitem(strategies.STRATEGIES, "two_stream",
                        lambda *a, stream=None, **k: run(*a, **k))  # a fresh stream per field
    alone = model.loss(data)
    torch.testing.assert_close(alone, shared, rtol=1e-12, atol=0)
    for g, h in zip(grads, torch.autograd.grad(alone, list(model.parameters()),
                                               allow_unused=True), strict=True):
        if g is not None:
            torch.testing.assert_close(g, h, rtol=1e-10, atol=1e-12)


def test_a_field_hidden_everywhere_is_its_mask_vector_without_running_the_encoder():
    """hidden_for marks the target fields of the query stream with True: encode then uses the
    [MASK] vector without running the field's encoder. Tokens, loss and gradients (float64)
    equal those of the explicit all-True mask bit for bit. The last target field ("temp") is
    hidden in every query stream: its encoder runs once per batch (the content stream), not
    four times."""
    data = mixed_data(n=4)
    model = make_model(num_layers=2, direction="unidirectional", mode="two_stream")
    plain = model.hidden_for

    def tensors(d, target):
        return {k: torch.ones_like(d.valid()) if v is True else v
                for k, v in plain(d, target).items()}

    hidden = model.hidden_for(data, "item")
    assert any(v is True for v in hidden.values())
    assert torch.equal(model.encode(data, hidden), model.encode(data, tensors(data, "item")))
    params = list(model.parameters())
    fast = model.loss(data)
    grads = torch.autograd.grad(fast, params, allow_unused=True)
    calls = []
    model.encoders["temp"].register_forward_hook(lambda *a: calls.append(1))
    model.loss(data)
    assert len(calls) == 1
    model.hidden_for = tensors
    slow = model.loss(data)
    assert torch.equal(fast, slow)  # the same numbers, bit for bit
    for g, h in zip(grads, torch.autograd.grad(slow, params, allow_unused=True), strict=True):
        assert (g is None and h is None) or torch.equal(g, h)


def test_default_dtype_float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        data = efa.Sequences.from_lists({"movie": [[0, 1, 2], [2, 1]],
                                         "rating": [[1, 2, 3], [2, 3]]})
        model = efa.EFA(efa.EFAConfig([efa.Category("movie", 3, dim=4),
                                       efa.Value("rating", Poisson(shift=1), dim=4)],
                                      num_layers=1, max_len=3))
        efa.fit(model, data, None, max_epochs=1, progress=False)
        assert all(np.isfinite(v) for v in efa.evaluate(model, data).values())
        model.float()
        assert all(np.isfinite(v) for v in efa.evaluate(model, data).values())
    finally:
        torch.set_default_dtype(old)
