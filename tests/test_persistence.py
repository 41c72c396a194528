"""Persistence, resumption and warm starts: a resumed fit equals the uninterrupted one, a
checkpoint of another start or a config that disagrees with its weights is refused, a warm start
carries the base's standardisation, old module paths still import, later events are coded
with the training vocabularies."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import efa
from efa.core.families import Gaussian, LearnedGaussian
from efa.training import checkpoint
from tests.helpers import killed_after_saves


def _items(n=40):
    g = torch.Generator().manual_seed(0)
    return efa.Sequences({"item": torch.randint(0, 50, (n, 6), generator=g)},
                         torch.full((n,), 6))


def _item_model():
    torch.manual_seed(0)
    return efa.EFA(efa.EFAConfig([efa.Category("item", 50, dim=8)], max_len=6, num_layers=1))


def test_a_resumed_sampled_softmax_fit_equals_the_uninterrupted_one(tmp_path, monkeypatch):
    # The negatives' generator was re-seeded at every start: epochs 3-4 differed.
    data = _items()
    options = dict(max_epochs=4, seed=3, sampled_softmax=5, batch_size=8, progress=False,
                   threads=1)
    whole = _item_model()
    want = efa.fit(whole, data, None, **options)
    killed_after_saves(monkeypatch, 2, lambda: efa.fit(_item_model(), data, None,
                                                       checkpoint_dir=tmp_path, **options))
    resumed = _item_model()
    got = efa.fit(resumed, data, None, checkpoint_dir=tmp_path, **options)
    assert got.train_loss == want.train_loss
    for a, b in zip(whole.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def _value_data():
    g = torch.Generator().manual_seed(0)
    return efa.Sequences({"item": torch.randint(0, 7, (40, 6), generator=g),
                          "y": torch.randn(40, 6, generator=g) * 3 + 5}, torch.full((40,), 6))


def _value_model():
    torch.manual_seed(0)
    return efa.EFA(efa.EFAConfig([efa.Category("item", 7, dim=4),
                                  efa.Value("y", Gaussian(3.0), dim=4)],
                                 max_len=6, num_layers=1))


def test_monitor_and_a_torch_device_resume(tmp_path):
    # The settings' fingerprint held a tuple (a list once read back: never equal) and a
    # torch.device (not JSON: the first save crashed).
    data = _value_data()
    options = dict(max_epochs=2, monitor=("y",), device=torch.device("cpu"),
                   checkpoint_dir=tmp_path, progress=False, threads=1)
    efa.fit(_value_model(), data, data, **options)
    again = efa.fit(_value_model(), data, data, **options)
    assert again.epochs_run == 2  # resumed at its end: nothing more to train


def test_a_checkpoint_of_another_start_names_a_refitted_model(tmp_path):
    data = _value_data()
    model = _value_model()
    efa.fit(model, data, data, max_epochs=2, checkpoint_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="a model already fitted since"):
        efa.fit(model, data, data, max_epochs=2, checkpoint_dir=tmp_path, progress=False)


def test_load_refuses_a_config_whose_standardisation_disagrees_with_the_weights(tmp_path):
    model = _value_model()
    efa.fit(model, _value_data(), None, max_epochs=1, progress=False)
    efa.save(model, tmp_path, overwrite=True)
    config = json.loads((tmp_path / "config.json").read_text())
    config["config"]["fields"][1]["loc"] += 1
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="field 'y': loc is"):
        efa.load(tmp_path)


def _warm(extra, **options):
    fields = [efa.Category("item", 7, dim=4), efa.Value("temp", LearnedGaussian(), dim=4)]
    if extra:
        fields.append(efa.Value("lag", Gaussian(), dim=3, target=False, loc=0.0, scale=1.0))
    return efa.EFAConfig(fields, max_len=6, mix="linear", d_model=8,
                         **({"num_layers": 1} | options))


def test_warm_start_carries_base_standardisation_and_refuses_what_it_cannot_copy():
    g = torch.Generator().manual_seed(0)
    item = torch.randint(0, 7, (40, 6), generator=g)
    temp = torch.randn(40, 6, generator=g, dtype=torch.float64) * 5 + 20
    lag = torch.randn(40, 6, generator=g, dtype=torch.float64)
    small = efa.Sequences({"item": item, "temp": temp}, torch.full((40,), 6))
    big = efa.Sequences({"item": item, "temp": temp, "lag": lag}, torch.full((40,), 6))
    torch.manual_seed(0)
    base = efa.EFA(_warm(False)).double()
    efa.fit(base, small, None, max_epochs=3, progress=False, threads=1)
    torch.manual_seed(1)
    model = efa.EFA(_warm(True)).double().warm_start(base)
    # exactly at base: the read-out's standardisation too (it was loc 0, scale 1: -10.1 nats
    # for -3.1), and fit's standardisation keeps it and the learned σ
    want = efa.evaluate(base, small)["temp"]
    assert efa.evaluate(model, big)["temp"] == pytest.approx(want, abs=1e-12)
    sigma = float(base.field("temp").family.sigma)
    model.standardise(big)
    assert float(model.field("temp").family.sigma) == sigma
    assert efa.evaluate(model, big)["temp"] == pytest.approx(want, abs=1e-12)
    for options, match in (({"num_layers": 2}, "num_layers=2 here, 1 in base"),
                           ({"attention": "linear"}, "attention='linear' here")):
        with pytest.raises(ValueError, match=match):
            efa.EFA(_warm(True, **options)).double().warm_start(base)
    other = _warm(True)
    other.fields[1] = efa.Value("temp", Gaussian(5.0), dim=4)
    with pytest.raises(ValueError, match="field 'temp' differs from base's in \\['family'\\]"):
        efa.EFA(other).double().warm_start(base)


def test_the_split_families_module_still_imports_under_its_old_paths():
    # efa.families.discrete went to efa.core.families.discrete, which the split removed;
    # Gamma left continuous.py in session 39.
    import importlib
    import sys

    from efa.core import families

    for old in ("efa.families.discrete", "efa.core.families.discrete"):
        sys.modules.pop(old, None)
        with pytest.warns(FutureWarning, match=f"the module {old} moved to efa.core.families"):
            module = importlib.import_module(old)
        assert module.Poisson is families.Poisson
    from efa.core.families.continuous import Gamma
    assert Gamma is families.Gamma


def test_later_events_are_coded_with_the_training_vocabularies():
    # Each call built its own vocabulary: a test table's "Alien" got code 0, "Heat"'s.
    import pandas as pd
    train = efa.Sequences.from_events(pd.DataFrame(
        {"user": [1, 1, 2, 2], "day": [1, 2, 1, 2], "movie": ["Heat", "Up", "Up", "Heat"]}),
        "user", "day", {"movie": "movie"})
    later = efa.Sequences.from_events(pd.DataFrame(
        {"user": [3, 3], "day": [1, 2], "movie": ["Up", "Heat"]}), "user", "day",
        {"movie": "movie"}, categories=train.vocabularies)
    assert later.vocabularies == train.vocabularies
    assert later.data.fields["movie"].tolist() == [[1, 0]]
    with pytest.raises(ValueError, match="'Alien' at row 0 is not in the vocabulary"):
        efa.Sequences.from_events(pd.DataFrame(
            {"user": [3, 3], "day": [1, 2], "movie": ["Alien", "Up"]}), "user", "day",
            {"movie": "movie"}, categories=train.vocabularies)


def _dropout_item_model():
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

    killed_after_saves(monkeypatch, 2, lambda: efa.fit(_dropout_item_model(), data, None,
                                                       checkpoint_dir=tmp_path, **options),
                       device_drew)
    state = checkpoint.load(tmp_path)
    assert state is not None and "rng/cuda" in state[0]
    efa.fit(_dropout_item_model(), data, None, checkpoint_dir=tmp_path, **options)
    # the state written with the second save (the first changed it once) is the one restored
    assert len(restored) == 1
    assert torch.equal(restored[0], torch.arange(16, dtype=torch.uint8) + 1)


def test_a_malformed_accelerator_random_state_is_refused_before_anything_changes(tmp_path):
    model = _dropout_item_model()
    efa.fit(model, _items(), None, checkpoint_dir=tmp_path, max_epochs=1, progress=False,
            threads=1)
    path = tmp_path / checkpoint.FILE
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    tensors = load_file(path)
    tensors["rng/cuda"] = torch.zeros(3, dtype=torch.float32)
    save_file(tensors, path, metadata=meta)
    with pytest.raises(ValueError, match="rng/cuda"):
        efa.fit(_dropout_item_model(), _items(), None, checkpoint_dir=tmp_path, max_epochs=1,
                progress=False, threads=1)
