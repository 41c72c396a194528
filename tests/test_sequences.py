"""efa.Sequences: selecting, splitting, reading frames and naming padding."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import efa
from tests.helpers import one_item_config


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
    model = efa.EFA(one_item_config())
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
