"""The tabular peers (CatBoost, TabM, FT-Transformer) on tables they could misread: prediction
columns unlike the fit's, integer levels arriving as floats, missing numbers, unusable training
runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("catboost")
pytest.importorskip("tabm")
pytest.importorskip("rtdl_revisiting_models")

from efa.baselines.tabular_tuned import (  # noqa: E402  (after the skips)
    CatBoostTable,
    FTTransformerTable,
    TabMTable,
)

# Small enough to fit in a second each: the tests read the peers' plumbing, not their accuracy.
MAKERS = {"TabM": lambda **kw: TabMTable(k=2, d_block=16, max_epochs=3, patience=2, **kw),
          "FT-Transformer": lambda **kw: FTTransformerTable(n_blocks=1, max_epochs=2, patience=2,
                                                            **kw),
          "CatBoost": lambda **kw: CatBoostTable(max_iterations=20, **kw)}
TORCH = ["TabM", "FT-Transformer"]


def _table(n=100, seed=0):
    """A float column, an int-coded categorical one, a text one and a second float."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": rng.normal(size=n), "b": rng.integers(0, 3, size=n),
                      "s": rng.choice(["u", "v", "w"], size=n), "c": rng.normal(size=n) * 5})
    y = np.where(X.a + (X.b == 0) * 2.0 + (X.s == "u") + 0.1 * X.c > 0.5, "yes", "no")
    return X, y


@pytest.fixture(scope="module")
def fitted():
    torch.set_num_threads(1)
    X, y = _table()
    return X, {name: make().fit(X, y) for name, make in MAKERS.items()}


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_peer_refuses_prediction_columns_unlike_fits(fitted, name):
    X, models = fitted
    m = models[name]
    with pytest.raises(ValueError, match="the same labels in another order"):
        m.predict_proba(X[["c", "b", "s", "a"]])  # read by position, 'c' would stand for 'a'
    with pytest.raises(ValueError, match=r"unseen at fit: \['zz'\]; missing: \['a'\]"):
        m.predict_proba(X.rename(columns={"a": "zz"}))
    with pytest.raises(ValueError, match=r"unseen at fit: \['extra'\]"):
        m.predict_proba(X.assign(extra=1.0))
    with pytest.raises(ValueError, match=r"missing: \['c'\]"):
        m.predict_proba(X.drop(columns="c"))
    with pytest.raises(ValueError, match="X has 3 features, but .* is expecting 4"):
        m.predict_proba(X.drop(columns="c").to_numpy())
    # An array carries no labels: its columns are read by position, as fit's.
    np.testing.assert_array_equal(m.predict_proba(X.to_numpy()), m.predict_proba(X))


@pytest.mark.parametrize("name", list(MAKERS))
def test_an_int_level_arriving_as_a_float_is_the_same_level(fitted, name):
    X, models = fitted
    m = models[name]
    p = m.predict_proba(X)
    np.testing.assert_array_equal(m.predict_proba(X.assign(b=X.b.astype(float))), p)
    if name in TORCH:  # a value fit never saw is still the 'unknown' level, in any dtype
        unseen = m.predict_proba(X.assign(b=7))
        np.testing.assert_array_equal(m.predict_proba(X.assign(b=np.where(X.b == 1, 1.5, X.b))),
                                      np.where((X.b == 1).to_numpy()[:, None], unseen, p))


@pytest.mark.parametrize("name", TORCH)
def test_a_deep_peer_refuses_a_missing_number_at_prediction(fitted, name):
    X, models = fitted
    for value in (np.nan, np.inf):
        bad = X.copy()
        bad.loc[5, "c"] = value
        with pytest.raises(ValueError, match=f"column 'c' has {value} in row 5"):
            models[name].predict_proba(bad)


def test_catboost_keeps_its_documented_reading_of_a_missing_number(fitted):
    # CatBoost's nan_mode 'Min': a missing number reads as below every seen value; the wrapper
    # lets it through (the deep peers refuse it).
    X, models = fitted
    bad = X.copy()
    bad.loc[5, "c"] = np.nan
    p = models["CatBoost"].predict_proba(bad)
    assert np.isfinite(p).all() and np.allclose(p.sum(1), 1)
    assert "nan_mode" in CatBoostTable.__doc__


@pytest.mark.parametrize("name", TORCH)
def test_a_deep_peer_refuses_an_unusable_training_run_up_front(name, monkeypatch):
    torch.set_num_threads(1)
    X, y = _table(60)
    bad = X.copy()
    bad.loc[3, "a"] = np.nan
    with pytest.raises(ValueError, match="column 'a' has nan in row 3"):
        MAKERS[name]().fit(bad, y)
    with pytest.raises(ValueError, match="max_epochs must be an integer of at least 1, got 0"):
        MAKERS[name]().set_params(max_epochs=0).fit(X, y)
    # Weights that go NaN at the first step: no epoch ever scores, and fit says so.
    cross_entropy = torch.nn.functional.cross_entropy
    monkeypatch.setattr(torch.nn.functional, "cross_entropy",
                        lambda *a, **k: cross_entropy(*a, **k) * float("nan"))
    with pytest.raises(FloatingPointError, match="no epoch gave a finite validation log loss"):
        MAKERS[name]().fit(X, y)
