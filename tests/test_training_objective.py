"""The training objective: the sampled softmax fits the frequencies, bucketed batches weigh every
position alike, a data-parallel loss counts the penalty once, table encoders and padding codes
are checked."""

from __future__ import annotations

import pytest
import torch

import efa
from efa import EFA, Attribute, Category, EFAConfig, Sequences
from efa.core.families import Binomial
from efa.core.softmax import sampled_log_prob
from efa.training import distributed


def test_the_sampled_softmax_fits_the_frequencies_as_k_grows():
    # With the target's logit corrected and accidental hits removed, the fit tended to
    # log p/(1 - p): KL 0.0245 at k = 10 and 0.0648 at k = 1000 (worse with more negatives).
    d = 10
    n = 2000 / torch.arange(1, d + 1, dtype=torch.float64) ** 1.1
    n = (n / n.sum() * 2000).round()
    empirical = n / n.sum()
    q = (n + 1) / (n.sum() + d)
    y = torch.arange(d)
    h, w = torch.ones(d, 1, dtype=torch.float64), torch.zeros(d, 1, dtype=torch.float64)
    kl = {}
    for k in (10, 1000):
        gen = torch.Generator().manual_seed(0)
        b = torch.zeros(d, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.Adam([b], lr=0.05)
        for it in range(1500):
            if it == 1000:
                opt.param_groups[0]["lr"] = 0.003
            loss = -(sampled_log_prob(h, w, b, y, k, q.log(), gen) * n).sum() / n.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        p = b.detach().softmax(0)
        kl[k] = float((empirical * (empirical / p).log()).sum())
    assert kl[1000] < 1e-3 and kl[1000] < kl[10]


def test_bucketed_batches_weigh_every_position_the_same():
    # Each batch was divided by its own count: short sequences' positions weighed up to
    # L_max / L_min times more (-1.7776 against the pooled -1.3065).
    g = torch.Generator().manual_seed(0)
    lists = ([torch.randint(0, 2, (2,), generator=g).tolist() for _ in range(32)]
             + [torch.randint(2, 5, (30,), generator=g).tolist() for _ in range(32)])
    data = Sequences.from_lists({"item": lists, "a": [[[0.0]] * len(x) for x in lists]})
    c = torch.bincount(data.fields["item"][data.valid()], minlength=5).double()
    pooled = float((c / c.sum() * (c / c.sum()).log()).sum())
    torch.manual_seed(0)  # unconditional: the state cannot see the context, the MLE is pooled
    model = EFA(EFAConfig([Category("item", 5, dim=4, feeds=("q",), readout_bias=True),
                           Attribute("a", 1, dim=2, feeds=("k", "v"))],
                          num_layers=1, num_heads=1, max_len=None, block="bare"))
    efa.fit(model, data, None, lr=0.05, max_epochs=60, batch_size=8, bucket=16,
            progress=False, threads=1)
    assert efa.evaluate(model, data)["item"] == pytest.approx(pooled, abs=0.01)


def test_data_parallel_loss_counts_the_penalty_once():
    torch.manual_seed(0)
    model = EFA(EFAConfig([Category("c", 4, dim=4, bag=True, bag_l2=1.0)], num_layers=1,
                          max_len=5))
    with torch.no_grad():
        for p in model.parameters():  # the bag table starts at 0: give it a penalty
            p.copy_(torch.randn_like(p))
    data = Sequences({"c": torch.randint(0, 4, (3, 5))}, torch.tensor([5, 4, 3]))
    full = model.loss(data)
    penalty = model.penalty()
    assert float(penalty.detach()) > 0
    torch.testing.assert_close(distributed.Loss(model)(data, scale=2.0),
                               2 * (full - penalty) + penalty)


def test_a_table_encoder_must_hold_every_value_of_its_family():
    with pytest.raises(ValueError, match="num_values=6 leaves out values .* give num_values=11"):
        efa.Value("k", Binomial(10), encoder="table", num_values=6)


def test_padding_codes_outside_the_table_are_named():
    data = Sequences({"item": torch.tensor([[1, 2, 3], [4, -1, -1]])}, torch.tensor([3, 1]))
    model = EFA(EFAConfig([Category("item", 5, dim=4)], num_layers=1, num_heads=1, max_len=3))
    with pytest.raises(ValueError, match="code -1 at sequence 1, position 1, which is padding"):
        efa.evaluate(model, data)


def test_bucketing_with_drop_last_drops_random_sequences_not_the_shortest():
    from efa.training.steps import batches

    lengths = torch.arange(1, 101)  # sequence i has length i + 1
    gen = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(20):
        order = torch.randperm(100, generator=gen)
        for b in batches(order, lengths, 16, 100 // 16, bucket=50, gen=gen):
            assert len(b) == 16
            seen |= set(b.tolist())
    assert {0, 1, 2} <= seen  # before: the shortest ones never met a batch


def test_bucketing_without_drop_last_is_unchanged():
    from efa.training.steps import batches

    lengths = torch.randint(1, 30, (50,), generator=torch.Generator().manual_seed(1))
    order = torch.randperm(50, generator=torch.Generator().manual_seed(2))
    cut = batches(order, lengths, 8, 7, bucket=2, gen=torch.Generator().manual_seed(3))
    assert sorted(torch.cat(cut).tolist()) == list(range(50))
