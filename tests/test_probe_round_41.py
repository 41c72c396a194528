"""Session 41's fixes of what earlier probe rounds left: each test fails on the code before
its fix."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import efa
from efa.training import checkpoint
from tests.helpers import killed_after_saves
from tests.test_probe_round_40_persistence import _items


def _item_model():
    torch.manual_seed(0)
    return efa.EFA(efa.EFAConfig([efa.Category("item", 50, dim=8)], max_len=6, num_layers=1,
                                 dropout=0.1))


def test_a_checkpoint_keeps_and_restores_the_accelerator_random_state(tmp_path, monkeypatch):
    # Only torch.get_rng_state (the CPU's) was saved: a GPU fit with dropout resumed with
    # other masks. No GPU here, so the CUDA generator is stood in for by a counter.
    device_rng = {"state": torch.arange(16, dtype=torch.uint8)}
    restored = []
    monkeypatch.setattr(checkpoint, "_cuda_device", lambda model: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_rng_state",
                        lambda device=None: device_rng["state"].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state",
                        lambda state, device=None: restored.append(state.clone()))
    data = _items()
    options = dict(max_epochs=3, seed=3, batch_size=8, progress=False, threads=1)

    def device_drew():  # the device's state moves on after each save
        device_rng["state"] = device_rng["state"] + 1

    killed_after_saves(monkeypatch, 2, lambda: efa.fit(_item_model(), data, None,
                                                       checkpoint_dir=tmp_path, **options),
                       device_drew)
    state = checkpoint.load(tmp_path)
    assert state is not None and "rng/cuda" in state[0]
    efa.fit(_item_model(), data, None, checkpoint_dir=tmp_path, **options)
    # the state written with the second save (the first changed it once) is the one restored
    assert len(restored) == 1
    assert torch.equal(restored[0], torch.arange(16, dtype=torch.uint8) + 1)


def test_a_malformed_accelerator_random_state_is_refused_before_anything_changes(tmp_path):
    model = _item_model()
    efa.fit(model, _items(), None, checkpoint_dir=tmp_path, max_epochs=1, progress=False,
            threads=1)
    path = tmp_path / checkpoint.FILE
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    tensors = load_file(path)
    tensors["rng/cuda"] = torch.zeros(3, dtype=torch.float32)
    save_file(tensors, path, metadata=meta)
    with pytest.raises(ValueError, match="rng/cuda"):
        efa.fit(_item_model(), _items(), None, checkpoint_dir=tmp_path, max_epochs=1,
                progress=False, threads=1)


def test_prop9_correlations_refuses_shapes_that_disagree():
    from efa.embeddings import cooccurrence, prop9_correlations

    counts = cooccurrence([[0, 1, 2], [2, 1, 0], [1, 1, 3]], 4)
    g = torch.Generator().manual_seed(0)
    W, C = torch.randn(4, 3, generator=g).numpy(), torch.randn(4, 3, generator=g).numpy()
    ok = prop9_correlations(W, C, counts)
    assert ok["pairs"] == 16 and ok["defined"] == int((counts > 0).sum())
    with pytest.raises(ValueError, match="W and C"):
        prop9_correlations(W, C[:, :2], counts)  # numpy broadcast or a matmul error before
    with pytest.raises(ValueError, match="W and C"):
        prop9_correlations(W[:3], C[:3], counts)


def test_attention_statistics_refuses_an_empty_corpus():
    from efa.embeddings import attention_statistics

    with pytest.raises(ValueError, match="empty"):  # NaN and ZeroDivisionError before
        attention_statistics([1.0, 2.0, 1.0, 0.5], torch.zeros(0, 3, dtype=torch.long).numpy(),
                             3)


def test_the_table_estimator_warns_of_float_columns_that_are_linear_functions_of_another():
    # A probe's °F copy of a °C column, with numeric="gaussian": each predicted the other to
    # the σ floor and the response's test log loss tripled, without a word.
    import warnings

    import numpy as np
    import pandas as pd

    from efa.tabular import AttentionTableClassifier

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"c": rng.normal(size=60), "b": rng.normal(size=60), "k": 3.0})
    y = (X["c"] + X["b"] > 0).astype(int).to_numpy()
    X["f"] = 1.8 * X["c"] + 32
    X.loc[5, "f"] = np.nan  # a missing cell does not hide the pair
    opts = dict(numeric="gaussian", max_epochs=1, random_state=0, missing="mask")
    with pytest.warns(UserWarning, match=r"'c' ~ 'f'.*numeric='quantile'"):
        AttentionTableClassifier(**opts).fit(X, y)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "float column")  # a constant column alone: no pair
        AttentionTableClassifier(**opts).fit(X.drop(columns="f"), y)
        AttentionTableClassifier(**{**opts, "numeric": "quantile"}).fit(X, y)
