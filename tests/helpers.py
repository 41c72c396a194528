"""Shared test fixtures: small random mixed-type data and the naive per-copy EFA computation."""

from __future__ import annotations

import torch

from efa import EFA, Attribute, Category, EFAConfig, Sequences, Value
from efa.core.families import Gaussian, Poisson


def mixed_fields():
    return [
        Attribute("where", size=2, dim=3, hidden=5),
        Category("item", 7, dim=4),
        Value("count", Poisson(shift=1), dim=3, hidden=6, readout_hidden=(5,)),
        Value("temp", Gaussian(sigma=1.5), dim=2, hidden=4, readout="linear"),
    ]


def mixed_data(n=5, max_len=6, seed=0, dtype=torch.float64, missing=True) -> Sequences:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, max_len + 1, (n,), generator=g)
    lengths[0] = max_len
    data = Sequences(
        {
            "where": torch.randn(n, max_len, 2, generator=g, dtype=dtype),
            "item": torch.randint(0, 7, (n, max_len), generator=g),
            "count": torch.randint(1, 5, (n, max_len), generator=g),
            "temp": torch.randn(n, max_len, generator=g, dtype=dtype) * 3,
        },
        lengths,
        observed={"temp": torch.rand(n, max_len, generator=g) > (0.2 if missing else -1)},
    )
    return data


def two_rows() -> Sequences:
    """Two short sequences of an item and a value (lengths 3 and 2)."""
    return Sequences.from_lists({"item": [[0, 1, 2], [3, 4]], "y": [[1., 2., 3.], [4., 5.]]})


def two_row_fields():
    """The fields of ``two_rows``: an item and a Gaussian value with a fixed standardisation."""
    return [Category("item", 5, dim=4), Value("y", Gaussian(), dim=4, loc=3.0, scale=1.5)]


def equal_with_nan(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, NaN (padding) included."""
    return torch.equal(a.nan_to_num(-1.0), b.nan_to_num(-1.0))


def make_model(seed=0, dtype=torch.float64, fields=None, **kw) -> EFA:
    torch.manual_seed(seed)
    cfg = dict(num_layers=2, num_heads=2, head_dim=3, max_len=8)
    cfg.update(kw)
    return EFA(EFAConfig(fields or mixed_fields(), **cfg)).to(dtype)


def naive_natural_params(model: EFA, data: Sequences) -> dict[str, torch.Tensor]:
    """The definition: one masked copy of the sequence per predicted position, run in full."""
    out = {}
    allowed = model.allowed(data)
    target_names = [f.name for f in model.target_fields]
    for f in model.target_fields:
        pred = data.predicted(f.name)
        eta = torch.zeros(*pred.shape, f.family.num_natural, dtype=torch.float64)
        for b in range(len(data)):
            one = data[torch.tensor([b])]
            one = Sequences(
                {k: v[[b]] for k, v in data.fields.items()},
                data.lengths[[b]],
                {k: v[[b]] for k, v in data.observed.items()},
            )
            for i in range(data.max_len):
                if not pred[b, i]:
                    continue
                hidden = {k: ~v for k, v in one.observed.items()}
                for name in target_names[target_names.index(f.name) :]:
                    h = hidden.get(name, torch.zeros_like(one.valid())).clone()
                    h[0, i] = True
                    hidden[name] = h
                x = model.encode(one, hidden)
                for block in model.blocks:
                    x, _ = block(x, allowed[[b]])
                eta[b, i] = model.readouts[f.name](x[0, i])
                if getattr(f, "bag", False):  # + Σ over the copy's visible items of U[x_j]
                    for j in range(int(one.lengths[0])):
                        seen = j != i and (j < i or model.direction == "bidirectional")
                        if seen and one.observed.get(f.name, one.valid())[0, j]:
                            u = f.bag_table(model.bags[f.name])
                            eta[b, i] += u[int(one.fields[f.name][0, j])]
        out[f.name] = eta
    return out


def feeding_fields():
    """The mixed fields, with some feeding only part of the first attention layer (as the UNN
    note's x feeds queries/keys and y only values)."""
    where, item, count, temp = mixed_fields()
    where.feeds = ("q", "k", "skip")
    count.feeds = ("k", "v", "skip")
    temp.feeds = ("v",)
    return [where, item, count, temp]


def gradcheck_query_weight(model: EFA, data: Sequences, **options) -> bool:
    """gradcheck of the negative log-likelihood with respect to the first attention layer's
    query projection (float64 model)."""
    from torch.func import functional_call

    params = dict(model.named_parameters())
    name = "blocks.0.attn.q.weight"

    def loss(w):
        etas = functional_call(model, {**params, name: w}, (data,))
        total = 0
        for f in model.target_fields:
            m = data.predicted(f.name)
            total = total - f.family.log_prob(data.fields[f.name][m], etas[f.name][m]).sum()
        return total

    return torch.autograd.gradcheck(loss, (params[name].detach().clone().requires_grad_(),),
                                    **options)


def killed_after_saves(monkeypatch, saves: int, fit_call, on_save=None) -> None:
    """Run ``fit_call()`` as a process killed right after its ``saves``-th checkpoint (a
    KeyboardInterrupt out of ``checkpoint.save_state``); ``on_save()`` runs after each save.
    The real ``save_state`` is back in place afterwards, for the resumed fit."""
    import pytest

    from efa.training import checkpoint

    real, done = checkpoint.save_state, []

    def dying(*args):
        real(*args)
        done.append(1)
        if on_save is not None:
            on_save()
        if len(done) == saves:
            raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save_state", dying)
    with pytest.raises(KeyboardInterrupt):
        fit_call()
    monkeypatch.setattr(checkpoint, "save_state", real)


def item_rows(n=60, seed=0, length=6, minlen=2) -> Sequences:
    """``n`` sequences of one item field (5 items), lengths ``minlen`` to ``length``."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(minlen, length + 1, (n,), generator=g).tolist()
    return Sequences.from_lists({"item": [torch.randint(0, 5, (k,), generator=g).tolist()
                                          for k in lens]})


def one_item_config(**kw) -> EFAConfig:
    """A one-layer, one-head config for ``item_rows``."""
    return EFAConfig([Category("item", 5, dim=8)], max_len=6, num_layers=1, num_heads=1, **kw)


def item_value_model(family) -> EFA:
    """A unidirectional model of an item and a value ``y`` of ``family`` (seed 0)."""
    torch.manual_seed(0)
    return EFA(EFAConfig([Category("item", 5, dim=4), Value("y", family, dim=4)], max_len=6,
                         num_layers=1, num_heads=1, direction="unidirectional"))


def item_value_data(scale=1.0, offset=0.0) -> Sequences:
    """40 sequences of an item and ``y = offset + scale * (item + 1 + noise)``, float64."""
    g = torch.Generator().manual_seed(0)
    items = torch.randint(5, (40, 6), generator=g)
    y = offset + scale * (items + 1 + 0.1 * torch.randn(40, 6, generator=g, dtype=torch.float64))
    return Sequences.from_lists({"item": items.tolist(), "y": y.tolist()})


def count_teacher():
    """An attention teacher of an item and a Poisson count, and 30 sequences drawn from it."""
    from efa.generators import attention_teacher
    from efa.generators import sample as draw

    teacher = attention_teacher([Category("item", 6), Value("count", Poisson(shift=1))],
                                max_len=6, seed=1)
    return teacher, draw(teacher, 30, length=4, seed=0)
