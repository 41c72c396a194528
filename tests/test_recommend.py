"""Recommendations (efa.recommendation): the top k of the model's own conditional at the next
position, the same ranking that HR@k / NDCG@k score, seen items left out on request."""

import numpy as np
import pytest
import torch

import efa
from efa.recommendation import ranking_metrics, recommend


def _data(n=40, length=6, k=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, length + 1, (n,), generator=g)
    return efa.Sequences({"item": torch.randint(0, k, (n, length), generator=g)}, lengths)


@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
def test_the_next_items_ranking_is_the_one_hr_and_ndcg_score(direction):
    """Recommending for each sequence without its last item ranks that item exactly where
    ranking_metrics ranks it given the rest: the same HR@10 and NDCG@10."""
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 30)], max_len=8, direction=direction))
    data = _data()
    head = efa.Sequences(data.fields, data.lengths - 1)
    top = recommend(model, head, k=10, exclude_seen=False)
    assert len(top) == 10 * len(data) and (top["position"] == head.lengths.numpy().repeat(10)).all()
    last = data.fields["item"][torch.arange(len(data)), data.lengths - 1].numpy()
    ranks = [int(np.flatnonzero(g["item"].to_numpy() == last[s])[0]) + 1
             if last[s] in set(g["item"]) else None for s, g in top.groupby("sequence")]
    hr = np.mean([r is not None for r in ranks])
    ndcg = np.mean([1 / np.log2(r + 1) if r is not None else 0.0 for r in ranks])
    want = ranking_metrics(model, data, k=10)
    assert (hr, ndcg) == pytest.approx((want["HR@10"], want["NDCG@10"]), abs=1e-12)
    probs = top.groupby("sequence")["probability"]
    assert (probs.diff().dropna() <= 0).all() and (top["probability"] <= 1).all()


def test_seen_items_are_left_out_and_labels_given():
    torch.manual_seed(0)
    labels = [f"movie {i}" for i in range(30)]
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 30, labels=labels)], max_len=8,
                                  direction="unidirectional"))
    data = _data()
    top = recommend(model, data, k=5)
    for s, g in top.groupby("sequence"):
        seen = set(data.fields["item"][s, : data.lengths[s]].tolist())
        assert not seen & set(g["item"])
    assert (top["label"] == [labels[i] for i in top["item"]]).all()
    at = torch.zeros(len(data), 6, dtype=torch.bool)
    at[:, 0] = True  # any asked positions, e.g. the first
    assert set(recommend(model, data, k=3, at=at)["position"]) == {0}


def test_bad_requests_are_refused():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 30)], max_len=6))
    data = _data(length=6)
    with pytest.raises(ValueError, match="k must be an integer between 1 and the catalogue"):
        recommend(model, efa.Sequences(data.fields, data.lengths.clamp(max=5)), k=31)
    with pytest.raises(ValueError, match="already has the model's max_len"):
        recommend(model, data.__class__(data.fields, torch.full((40,), 6)))
    with pytest.raises(ValueError, match="only .* items are left"):
        crowded = efa.Sequences({"item": torch.arange(5).repeat(3, 1)}, torch.full((3,), 5))
        recommend(efa.EFA(efa.EFAConfig([efa.Category("item", 6)], max_len=8)), crowded, k=2)
    with pytest.raises(KeyError, match="no field"):
        recommend(model, data, field="nope")


def test_batches_give_the_same_table_and_context_fields_are_unknown_at_the_new_slot():
    """Scoring in batches of 7 sequences gives the table of one batch; a context-only category
    at the new slot is unknown (masked), not the padding's 0 read as observed; asked
    positions in the padding are refused."""
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("shop", 4, target=False),
                                   efa.Category("item", 30)], max_len=8,
                                  direction="unidirectional"))
    data = _data()
    data = efa.Sequences({**data.fields, "shop": data.fields["item"] % 4}, data.lengths)
    one = recommend(model, data, k=5)
    assert one.equals(recommend(model, data, k=5, batch_size=7))
    slot = torch.zeros(len(data), 7, dtype=torch.bool)
    slot[torch.arange(len(data)), data.lengths] = True
    wide = {k: torch.nn.functional.pad(v, (0, 1)) for k, v in data.fields.items()}
    masked = efa.Sequences(wide, data.lengths + 1,
                           {"shop": ~slot, "item": ~slot})
    assert one.equals(recommend(model, masked, k=5, at=slot))
    with pytest.raises(ValueError, match="which is padding"):
        recommend(model, data, k=5, at=~data.valid())
    with pytest.raises(ValueError, match="asks for no position"):
        recommend(model, data, k=5, at=torch.zeros_like(data.valid()))


def test_a_cut_off_beyond_the_catalogue_is_no_perfect_score():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 5, dim=4)], max_len=4,
                                  direction="unidirectional"))
    data = efa.Sequences.from_lists({"item": [[0, 1, 2], [3, 4]]})
    for k in (100, 6, 0, 2.5, True):
        with pytest.raises(ValueError, match="k must be an integer between 1 and the "
                                             "catalogue's 5 items"):
            ranking_metrics(model, data, k=k)
    assert ranking_metrics(model, data, k=5)["HR@5"] == 1.0  # the whole catalogue: every hit
    counts = efa.EFA(efa.EFAConfig([efa.Value("count", efa.core.families.Poisson(), dim=4)],
                                   max_len=4, direction="unidirectional"))
    with pytest.raises(ValueError, match="'count' is not a category"):
        ranking_metrics(counts, efa.Sequences.from_lists({"count": [[1, 2]]}))


def test_a_unidirectional_model_excludes_only_the_items_before_the_position():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 6, dim=4)], max_len=4,
                                  direction="unidirectional"))
    data = efa.Sequences.from_lists({"item": [[0, 1, 2, 3]]})
    at = torch.tensor([[False, True, False, False]])
    table = recommend(model, data, k=5, at=at)
    assert set(table["item"]) == {1, 2, 3, 4, 5}  # item 0 came before; 2 and 3 come after
    with pytest.raises(ValueError, match="exclude_seen must be True or False"):
        recommend(model, data, k=2, exclude_seen="no")
