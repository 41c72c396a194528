"""efa.save / efa.load and Sequences.save: nothing the user has is overwritten, only what load can
rebuild is written, training threads recorded."""

from __future__ import annotations

import json
import os
import stat

import pandas as pd
import pytest
import torch

import efa
from tests.helpers import make_model, mixed_data, two_row_fields, two_rows


def _data(n=20, seed=0):
    return mixed_data(n=n, seed=seed, dtype=torch.float32)


def _model(seed=0, **kw):
    return make_model(seed=seed, dtype=torch.float32, num_layers=1, **kw)


def test_save_keeps_foreign_files_and_follows_the_umask(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"mine": true}')
    with pytest.raises(FileExistsError, match="config.json"):
        efa.save(_model(), folder)
    assert json.loads((folder / "config.json").read_text()) == {"mine": True}
    old = os.umask(0o022)
    try:
        path = efa.save(_model(), tmp_path / "n")
    finally:
        os.umask(old)
    for name in ("config.json", "model.safetensors"):
        assert stat.S_IMODE((path / name).stat().st_mode) == 0o644


def test_thread_count_is_recorded(tmp_path):
    model = _model()
    hist = efa.fit(model, _data(), None, max_epochs=1, progress=False, threads=1)
    assert hist.threads == 1 and not hasattr(model, "train_threads_")  # nothing on the model
    path = efa.save(model, tmp_path / "m", history=hist)
    assert json.loads((path / "config.json").read_text())["train_threads"] == 1
    assert efa.training.storage.metadata(path)["train_threads"] == 1


def test_sequences_save_refuses_an_existing_file(tmp_path):
    from efa.core.data import Sequences

    data = Sequences.from_lists({"item": [[1, 2], [3]]})
    path = tmp_path / "weights.safetensors"
    path.write_bytes(b"precious")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        data.save(path)
    assert path.read_bytes() == b"precious"
    data.save(path, overwrite=True)
    assert Sequences.load(path).fields["item"].tolist() == data.fields["item"].tolist()


def test_save_refuses_what_load_cannot_rebuild(tmp_path):
    import efa
    from efa.tabular import AttentionTableClassifier

    X = pd.DataFrame({"a": ["x", "y"] * 10})
    clf = AttentionTableClassifier(max_epochs=1, random_state=0).fit(X, [0, 1] * 10)
    with pytest.raises(TypeError, match="got TableEFA.*AttentionTableClassifier itself"):
        efa.save(clf.model_, tmp_path / "m")
    assert not (tmp_path / "m").exists()




def test_save_and_load_keep_the_dtype_and_refuse_weights_that_are_not_finite(tmp_path):
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig(two_row_fields(), max_len=3)).double().eval()
    efa.save(model, tmp_path / "m")
    back = efa.load(tmp_path / "m")
    assert next(back.parameters()).dtype == torch.float64
    assert efa.evaluate(back, two_rows()) == efa.evaluate(model, two_rows())
    state = load_file(str(tmp_path / "m" / "model.safetensors"))
    key = next(k for k, v in state.items() if v.is_floating_point())
    save_file({**state, key: torch.full_like(state[key], float("nan"))},
              str(tmp_path / "m" / "model.safetensors"))
    with pytest.raises(ValueError, match=f"tensor '{key}' holds NaN or inf"):
        efa.load(tmp_path / "m")
    save_file({**state, key: state[key].bool()}, str(tmp_path / "m" / "model.safetensors"))
    with pytest.raises(ValueError, match=f"tensor '{key}' is torch.bool"):
        efa.load(tmp_path / "m")
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    with pytest.raises(ValueError, match="holds NaN or inf"):
        efa.save(model, tmp_path / "nan")
    assert not (tmp_path / "nan").exists()
