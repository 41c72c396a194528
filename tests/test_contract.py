"""One training contract: every model's loss takes the same arguments, and nothing steers a fit
from outside it (no attribute written onto the model, no module global; a context manager for
what a runner sets around many fits)."""

from __future__ import annotations

import inspect

import pytest
import torch

import efa
from efa import train as train_mod
from efa.conditional import ConditionalModel


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _library_models():
    import efa.baselines  # noqa: F401  (defines the peers)
    import efa.tabular  # noqa: F401

    return [c for c in {ConditionalModel, *_subclasses(ConditionalModel)}
            if c.__module__.startswith("efa.")]


def test_every_model_takes_the_same_loss_arguments():
    models = _library_models()
    assert len(models) >= 8
    for cls in models:
        params = list(inspect.signature(cls.loss).parameters)
        assert params[:6] == ["self", "data", "check", "weights", "counts", "sampling"], cls


def _category_data(n=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    return efa.Sequences({"item": torch.randint(0, 9, (n, 6), generator=g)},
                         torch.full((n,), 6))


def _category_model():
    torch.manual_seed(0)
    return efa.EFA(efa.EFAConfig([efa.Category("item", 9, dim=8)], num_layers=1, num_heads=2,
                                 max_len=6))


def _attributes(model):
    return {name: set(vars(m)) for name, m in model.named_modules()}


def test_fit_writes_nothing_onto_the_model_or_into_a_module():
    model, data = _category_model(), _category_data()
    before, globals_before = _attributes(model), set(vars(train_mod))
    hist = efa.fit(model, data, None, max_epochs=1, progress=False, threads=1,
                   sampled_softmax=3, positions=2)
    assert _attributes(model) == before
    assert set(vars(train_mod)) == globals_before
    assert hist.threads == 1 and hist.epochs_run == 1


def test_sampled_softmax_goes_through_the_loss_and_changes_it():
    model, data = _category_model(), _category_data()
    model.train()
    exact = model.loss(data)
    sampling = efa.vocab.Sampling(2, {"item": torch.zeros(9)}, torch.Generator().manual_seed(0))
    sampled = model.loss(data, sampling=sampling)
    assert torch.isfinite(sampled) and not torch.equal(exact, sampled)
    model.eval()  # scoring is always exact
    assert torch.equal(model.loss(data, sampling=sampling), model.loss(data))


def test_fit_context_sets_device_and_job_checkpoints_for_the_fits_inside(tmp_path, monkeypatch):
    monkeypatch.setattr(train_mod, "JOB_SAVE_SECONDS", 0.0)  # a job's fits save on a timer
    data = _category_data()
    with train_mod.fit_context(device="cpu", checkpoints=tmp_path / "job"):
        for _ in range(2):
            efa.fit(_category_model(), data, None, max_epochs=1, progress=False)
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == ["fit0", "fit1"]
    assert train_mod._CONTEXT.get() is None
    efa.fit(_category_model(), data, None, max_epochs=1, progress=False)  # outside: no files
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == ["fit0", "fit1"]


def test_a_model_with_its_own_objective_refuses_the_generic_options_by_name():
    from efa.baselines.recsys import BERT4Rec

    model = BERT4Rec(efa.Category("item", 9), max_len=6, dim=8, layers=1, heads=2, inner=16)
    data = _category_data()
    for option in ({"positions": 2}, {"sampled_softmax": 3}):
        name = next(iter(option))
        with pytest.raises(ValueError, match=f"{name}.* computes its own objective"):
            efa.fit(model, data, None, max_epochs=1, progress=False, **option)
    model.train()
    with pytest.raises(ValueError, match="takes no weights"):
        model.loss(data, weights=torch.ones(len(data)))
