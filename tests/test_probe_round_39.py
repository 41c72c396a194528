"""The small defects session 38's probes left: each refused with a clear error now."""

from __future__ import annotations

import numpy as np
import pandas as pd
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


# --------------------------------------------------------------------------- training controls

def _items(n=60, seed=0, length=6, minlen=2):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(minlen, length + 1, (n,), generator=g).tolist()
    return efa.Sequences.from_lists({"item": [torch.randint(0, 5, (k,), generator=g).tolist()
                                              for k in lens]})


def _config(**kw):
    return efa.EFAConfig([efa.Category("item", 5, dim=8)], max_len=6, num_layers=1,
                         num_heads=1, **kw)


def test_restarts_with_dropout_repeat_whatever_the_callers_random_state():
    train, val = _items(60, 0), _items(20, 1)
    runs = []
    for noise in (1, 2):
        torch.manual_seed(noise)  # the caller's state before the call
        r = efa.fit_restarts(lambda: efa.EFA(_config(dropout=0.3)), train, val, restarts=2,
                             seed=0, max_epochs=2, progress=False)
        runs.append([h.best_val for h in r.histories])
    assert runs[0] == runs[1]


def test_restarts_leave_the_callers_random_state_as_it_was():
    train, val = _items(40, 0), _items(10, 1)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    efa.fit_restarts(lambda: efa.EFA(_config(dropout=0.3)), train, val, restarts=2, seed=0,
                     max_epochs=1, progress=False)
    assert torch.equal(torch.get_rng_state(), before)


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


def test_numpy_numbers_are_taken_as_settings():
    cfg = efa.TrainConfig(seed=np.int64(3), lr=np.float32(1e-3), batch_size=np.int64(16),
                          max_epochs=np.int32(2), time_limit=np.int64(30))
    assert type(cfg.seed) is int and type(cfg.lr) is float and type(cfg.batch_size) is int
    assert type(cfg.max_epochs) is int and type(cfg.time_limit) is int
    torch.manual_seed(0)
    efa.fit(efa.EFA(_config()), _items(), None, seed=np.int64(3), max_epochs=np.int64(1),
            progress=False)


def test_a_half_precision_model_is_refused_with_the_way_to_train_it():
    with pytest.raises(ValueError, match="autocast='fp16'"):
        efa.fit(efa.EFA(_config()).half(), _items(), None, max_epochs=1, progress=False)


def test_the_warnings_count_the_best_epoch_as_the_history_does():
    torch.manual_seed(0)
    ones = efa.Sequences.from_lists({"item": [[1, 1, 1, 1]] * 40})  # quickly learnt
    with pytest.warns(efa.training.settings.StillImproving,
                      match=r"epoch 2 counted from 1, best_epoch=1"):
        h = efa.fit(efa.EFA(_config()), ones, ones[:10], max_epochs=2, lr=0.01, progress=False)
    assert h.best_epoch == 1


# --------------------------------------------------------------------------- Sequences

def test_split_scored_keeps_its_masks_when_the_longest_row_is_not_picked():
    t = efa.Sequences({"x": torch.tensor([[1, 2, 0, 0], [3, 0, 0, 0]])}, torch.tensor([2, 1]))
    rows = t.split_scored(1)
    assert len(rows) == 3 and int(rows.scored.sum()) == 3
    u = efa.Sequences.from_lists({"x": [[1, 2, 3], [4, 5]]}, scored=[[0, 0, 0], [1, 1]])
    rows = u.split_scored(1)
    assert rows.fields["x"].tolist() == [[4, 5], [4, 5]] and int(rows.scored.sum()) == 2
    with pytest.raises(ValueError, match="no position is scored"):
        efa.Sequences.from_lists({"x": [[1, 2]]}, scored=[[0, 0]]).split_scored(1)


def test_padding_wider_than_the_table_is_named_as_padding():
    model = efa.EFA(_config())
    wide = efa.Sequences({"item": torch.zeros(2, 9, dtype=torch.long)}, torch.tensor([6, 3]))
    with pytest.raises(ValueError, match=r"padded to width 9.*longest sequence has length 6"):
        efa.evaluate(model, wide)
    efa.evaluate(model, wide[:])  # trimmed, it is accepted


def test_from_frame_keeps_large_integers_exact():
    df = pd.DataFrame({"u": [0, 0], "x": np.array([2**53 + 1, 3], dtype=np.int64)})
    assert efa.Sequences.from_frame(df, "u", {"x": "x"}).fields["x"].tolist() == [[2**53 + 1, 3]]
    big = pd.DataFrame({"u": [0], "x": np.array([2**63 + 5], dtype=np.uint64)})
    with pytest.raises(ValueError, match="does not fit int64"):
        efa.Sequences.from_frame(big, "u", {"x": "x"})


@pytest.mark.parametrize("index", [
    torch.tensor([0, 2], dtype=torch.uint8), np.array([0, 2], dtype=np.uint16),
    np.array([0, 2], dtype=np.int8), torch.tensor([0, 2], dtype=torch.int32)])
def test_any_integer_index_type_selects_the_same_sequences(index):
    s = efa.Sequences.from_lists({"x": [[1, 2, 3], [4], [5, 6]]})
    assert s[index].fields["x"].tolist() == [[1, 2, 3], [5, 6, 0]]


def test_a_reversed_slice_selects_in_reverse():
    s = efa.Sequences.from_lists({"x": [[1, 2, 3], [4], [5, 6]]})
    assert s[::-1].lengths.tolist() == [2, 1, 3]


def test_a_device_index_without_an_accelerator_is_a_value_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU 0")
    with pytest.raises(ValueError, match="does not exist"):
        efa.Sequences.from_lists({"x": [[1, 2]]}).to(0)
