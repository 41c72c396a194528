"""One training contract: every model's loss takes the same arguments, and nothing steers a fit
from outside it (no attribute written onto the model, no module global; a context manager for
what a runner sets around many fits)."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pandas as pd
import pytest
import torch

import efa
from efa.core.conditional import ConditionalModel
from efa.training import train as train_mod


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _library_models():
    import importlib
    import pkgutil

    for module in pkgutil.walk_packages(efa.__path__, "efa."):  # every class is defined
        importlib.import_module(module.name)
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
    sampling = efa.core.softmax.Sampling(2, {"item": torch.zeros(9)},
                                         torch.Generator().manual_seed(0))
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


# Every trainable model class of the library, built small, with data of its own kind.
def _items(n=24, k=9, length=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return efa.Sequences({"item": torch.randint(0, k, (n, length), generator=g)},
                         torch.full((n,), length))


def _rated(n=24, k=9, length=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return efa.Sequences({"item": torch.randint(0, k, (n, length), generator=g),
                          "rating": torch.randint(1, 5, (n, length), generator=g)},
                         torch.full((n,), length))


def _sites(n=24, length=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return efa.Sequences({"coords": torch.rand(n, length, 2, generator=g, dtype=torch.float64),
                          "y": torch.randn(n, length, generator=g, dtype=torch.float64)},
                         torch.full((n,), length))


def _factories():
    from efa.baselines.cbow import CBOW
    from efa.baselines.fm import KNNFM, CategoricalFM, ValueFM
    from efa.baselines.glm import ContextLogit, RatingGLM
    from efa.baselines.recsys import BERT4Rec
    from efa.core.families import Gaussian, Poisson

    item = efa.Category("item", 9, dim=8)
    rating = efa.Value("rating", Poisson(shift=1), dim=8)
    return {
        "EFA": (lambda: _category_model(), _items),
        "CBOW": (lambda: CBOW(efa.Category("item", 9), dim=4), _items),
        "CategoricalFM": (lambda: CategoricalFM(item, dim=4), _items),
        "ValueFM": (lambda: ValueFM(item, rating, dim=4), _rated),
        "KNNFM": (lambda: KNNFM(efa.Attribute("coords", size=2),
                                efa.Value("y", Gaussian(1.0)), 2, dim=4, hidden=8), _sites),
        "ContextLogit": (lambda: ContextLogit(item, "bidirectional", max_len=6), _items),
        "RatingGLM": (lambda: RatingGLM(item, rating, 5, "bidirectional", max_len=6), _rated),
        "BERT4Rec": (lambda: BERT4Rec(efa.Category("item", 9), max_len=6, dim=8, layers=1,
                                      heads=2, inner=16), _items),
    }


OPTIONS = [{}, {"positions": 2}, {"sampled_softmax": 3}, {"schedule": "plateau"},
           {"schedule": "cosine", "warmup_steps": 2}, {"schedule": "constant"},
           {"grad_clip": 1.0}, {"batch_size": 7, "drop_last": True}, {"threads": 1},
           {"checkpoint": True}]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "defaults")
@pytest.mark.parametrize("name", list(_factories()))
def test_every_model_class_fits_one_epoch_with_every_option(name, options, tmp_path):
    """Each option either trains one finite epoch or is refused by name before training."""
    make, data = _factories()[name]
    model = make()
    options = dict(options)
    if options.pop("checkpoint", False):
        options["checkpoint_dir"] = str(tmp_path / "ckpt")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    refused = (model.own_objective and ({"positions", "sampled_softmax"} & set(options))) or (
        "sampled_softmax" in options and not isinstance(model, efa.EFA))
    if refused:
        with pytest.raises(ValueError, match="sampled softmax|sampled_softmax|positions"):
            efa.fit(model, data(), data(seed=1), max_epochs=1, progress=False, **options)
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
        return
    hist = efa.fit(model, data(), data(seed=1), max_epochs=1, progress=False, **options)
    assert hist.epochs_run == 1 and math.isfinite(hist.train_loss[0])
    assert math.isfinite(hist.val_loss[0])


def test_a_model_without_parameters_is_refused_by_name():
    from efa.baselines.glm import Unigram

    with pytest.raises(ValueError, match="Unigram has no parameters to train"):
        efa.fit(Unigram(efa.Category("item", 9), torch.ones(9)), _items(), None, max_epochs=1,
                progress=False)
    from efa.baselines.gp import GPOracle
    from efa.generators import NoteGP
    from efa.generators.gp import sample_note
    from efa.regression import regression_efa

    spec = NoteGP(length=6)
    data = sample_note(spec, 8, 0)
    oracle = GPOracle(spec, regression_efa(data, layers=1, heads=1, x_dim=4, y_dim=4,
                                           channel_dim=2, hidden=8, ffn=8,
                                           readout_hidden=8).fields)
    with pytest.raises(ValueError, match="GPOracle has no parameters to train"):
        efa.fit(oracle, data, None, max_epochs=1, progress=False)


def test_positions_on_a_model_with_its_own_objective_is_a_clear_error():
    import efa
    from efa.tabular import AttentionTableClassifier
    from efa.tabular.encoding import sequences

    rng = np.random.RandomState(0)
    X = pd.DataFrame({"a": rng.choice(["x", "y"], 40)})
    y = rng.randint(0, 2, 40)
    clf = AttentionTableClassifier(max_epochs=1, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="positions=m needs a model whose loss takes"):
        efa.fit(clf.model_, sequences(clf, X, y), positions=1, progress=False)
