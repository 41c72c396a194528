"""Bad input to the table estimator and its metrics is refused by name (column, row, value),
and valid input of every kind keeps its meaning: column labels, label dtypes, an empty
validation split, ties and invalid probabilities in the peers' metrics."""

import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from efa.baselines.tabular import class_metrics, row_log_loss
from efa.tabular import AttentionTableClassifier

FAST = dict(max_epochs=1, embedding_dim=4, num_heads=2, random_state=0)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def mixed(n=60, seed=0):
    """A categorical column and a float one; y depends on the first."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": np.array(list("xyz"))[np.arange(n) % 3], "b": rng.normal(size=n)})
    return X, (X.a == "x").astype(int)


def fit_quietly(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one-epoch fits' training-history warnings
        return est.fit(X, y)


def test_integer_column_labels_are_matched_not_read_by_position():
    rng = np.random.default_rng(0)
    X = pd.DataFrame({0: rng.normal(size=80), 1: 10 * rng.normal(size=80)})
    y = (X[0] > 0).astype(int)
    est = fit_quietly(AttentionTableClassifier(**FAST), X, y)
    proba = est.predict_proba(X)
    np.testing.assert_array_equal(est.predict_proba(X.to_numpy()), proba)  # by position
    with pytest.raises(ValueError, match=r"same labels in another order: \[1, 0\] where fit "
                                         r"had \[0, 1\]"):
        est.predict(X[[1, 0]])
    with pytest.raises(ValueError, match=r"unseen at fit: \[5, 6\]; missing: \[0, 1\]"):
        est.predict(X.rename(columns={0: 5, 1: 6}))
    # as string names are, by scikit-learn's check
    named = fit_quietly(AttentionTableClassifier(**FAST), X.rename(columns=str), y)
    with pytest.raises(ValueError, match="same order"):
        named.predict(X.rename(columns=str)[["1", "0"]])


@pytest.mark.parametrize("labels, dtype", [
    ([None, None] + [1, 0] * 29, np.int64),
    ([None, None] + [True, False] * 29, np.bool_),
    (pd.array([pd.NA, pd.NA] + [True, False] * 29, dtype="boolean"), np.bool_),
    (pd.array([pd.NA, pd.NA] + [1, 0] * 29, dtype="Int64"), np.int64),
    (pd.Series(pd.array([pd.NA, pd.NA] + [1, 0] * 29, dtype="Int64")), np.int64),
])
def test_unlabelled_rows_among_int_or_bool_labels_keep_the_labels_dtype(labels, dtype):
    X, _ = mixed()
    est = fit_quietly(AttentionTableClassifier(**FAST), X, labels)
    assert est.classes_.dtype == dtype and len(est.classes_) == 2
    assert est.predict(X).dtype == dtype


def test_labels_of_mixed_types_are_refused_by_their_types():
    X, _ = mixed()
    with pytest.raises(ValueError, match=r"y mixes labels of the types \['bool', 'int'\]"):
        AttentionTableClassifier(**FAST).fit(X, [None, True] + [1, 0] * 29)


@pytest.mark.parametrize("missing", ["error", "mask"])
def test_a_non_number_in_a_numeric_column_names_column_row_and_value(missing):
    X, y = mixed()
    est = fit_quietly(AttentionTableClassifier(missing=missing, **FAST), X, y)
    bad = X.astype({"b": object})
    bad.loc[3, "b"] = "oops"
    with pytest.raises(ValueError, match=r"column 'b' has the value 'oops' \(row 3\) where a "
                                         "number was expected"):
        est.predict_proba(bad)
    # at fit, a column the estimator is told is numeric
    with pytest.raises(ValueError, match=r"column 'b' has the value 'oops' \(row 3\)"):
        AttentionTableClassifier(missing=missing, categorical=["a"], **FAST).fit(bad, y)


def test_a_missing_cell_is_called_missing():
    X, y = mixed()
    est = fit_quietly(AttentionTableClassifier(**FAST), X, y)
    hole = X.copy()
    hole.loc[5, "b"] = np.nan
    with pytest.raises(ValueError, match=r"column 'b' has NaN \(a missing value\) in 1 row\(s\) "
                                         r"\(first: row 5\); pass missing='mask'"):
        est.predict(hole)


@pytest.mark.parametrize("kw", [dict(missing="error"), dict(missing="mask"),
                                dict(missing="mask", handle_unknown="unk")])
def test_inf_in_a_numeric_column_is_refused_in_every_mode(kw):
    X, y = mixed()
    est = fit_quietly(AttentionTableClassifier(**kw, **FAST), X, y)
    inf = X.copy()
    inf.loc[7, "b"] = -np.inf
    with pytest.raises(ValueError, match=r"column 'b' has inf in 1 row\(s\) \(first: row 7\)"):
        est.predict_proba(inf)
    with pytest.raises(ValueError, match=r"column 'b' has inf in 1 row\(s\) \(first: row 7\)"):
        AttentionTableClassifier(**kw, **FAST).fit(inf, y)
    # NaN, the missing cell, is still read as missing where the mode allows it
    if kw["missing"] == "mask":
        hole = X.copy()
        hole.loc[7, "b"] = np.nan
        assert np.isfinite(est.predict_proba(hole)).all()


@pytest.mark.parametrize("calibration", ["temperature", "soften"])
def test_calibration_on_an_empty_validation_split_is_refused(calibration):
    X, y = mixed()
    for rows, fraction in ((slice(None), 0.01), (slice(0, 3), 0.15)):
        est = AttentionTableClassifier(calibration=calibration, validation_fraction=fraction,
                                       **FAST)
        with pytest.raises(ValueError, match=f"calibration='{calibration}' chooses the "
                                             "temperature on the validation split, but the "
                                             "validation split .* has no row"):
            est.fit(X.iloc[rows], y.iloc[rows])


def test_an_empty_validation_split_is_warned_of_and_otherwise_trains():
    X, y = mixed()
    for rows, fraction in ((slice(None), 0.01), (slice(0, 3), 0.15)):
        with pytest.warns(UserWarning, match="has no row.*so early stopping .* and "
                                             "calibration='auto' .* are skipped"):
            est = AttentionTableClassifier(validation_fraction=fraction, **FAST).fit(
                X.iloc[rows], y.iloc[rows])
        assert est.temperature_ == 1.0 and est.history_.stopped == "max_epochs"
    with pytest.warns(UserWarning, match="so early stopping .* is skipped"):
        AttentionTableClassifier(validation_fraction=0.01, calibration=None, **FAST).fit(X, y)
    with warnings.catch_warnings():  # without early stopping nothing is held out, or missed
        warnings.simplefilter("error", UserWarning)
        AttentionTableClassifier(early_stopping=False, calibration=None, **FAST).fit(
            X.iloc[:3], y.iloc[:3])


def test_a_bool_among_integer_levels_is_a_value_fit_never_saw():
    X = pd.DataFrame({"c": np.array([0, 1, 2] * 20, dtype=object)})
    y = (X.c == 0).astype(int)
    est = fit_quietly(AttentionTableClassifier(**FAST), X, y)
    bad = X.copy()
    bad.loc[4, "c"] = True
    with pytest.raises(ValueError, match=r"column 'c' has the value True \(row 4\) that fit "
                                         "never saw"):
        est.predict(bad)
    flags = pd.DataFrame({"c": [True, False] * 30})
    est = fit_quietly(AttentionTableClassifier(**FAST), flags, (flags.c).astype(int))
    with pytest.raises(ValueError, match=r"column 'c' has the value 1 \(row 0\) that fit never"):
        est.predict(pd.DataFrame({"c": np.array([1, False] * 30, dtype=object)}))


def test_class_metrics_count_a_tie_of_k_classes_as_one_kth_of_a_hit():
    y = np.array(["a"] * 4)
    assert class_metrics(y, np.full((4, 2), 0.5), ["a", "b"])["accuracy"] == 0.5
    proba = np.array([[1 / 3] * 3, [0.5, 0.5, 0.0], [0.2, 0.8, 0.0], [0.6, 0.4, 0.0]])
    assert class_metrics(y, proba, ["a", "b", "c"])["accuracy"] == pytest.approx(
        (1 / 3 + 1 / 2 + 0 + 1) / 4)
    # equal vote shares summed in another order differ in the last bit: still a tie
    near = np.array([[0.4, np.nextafter(0.4, 1.0), 0.0]])
    near[0, 2] = 1 - near[0, :2].sum()
    assert near[0, 0] != near[0, 1]
    assert class_metrics(np.array(["b"]), near, ["a", "b", "c"])["accuracy"] == 0.5


@pytest.mark.parametrize("proba, match", [
    (np.zeros((4, 2)), r"row 0 is not a probability vector: \[0.0, 0.0\]"),
    (np.full((4, 2), np.nan), "row 0 is not a probability vector"),
    (np.full((4, 2), 1.5), "finite entries in \\[0, 1\\] summing to 1; 4 such row"),
    (np.array([[1.2, -0.2]] * 4), "row 0 is not a probability vector"),
    (np.full((4, 3), 1 / 3), r"proba has shape \(4, 3\); expected \(4, 2\)"),
    (np.full((3, 2), 0.5), r"proba has shape \(3, 2\); expected \(4, 2\)"),
])
def test_class_metrics_refuse_what_is_not_a_probability_per_label(proba, match):
    y = np.array(["a"] * 4)
    with pytest.raises(ValueError, match=match):
        class_metrics(y, proba, ["a", "b"])
    with pytest.raises(ValueError, match=match):
        row_log_loss(y, proba, ["a", "b"])


def test_class_metrics_refuse_a_label_that_is_not_a_class():
    y = np.array(["a", "b", "z", "a"])
    with pytest.raises(ValueError, match=r"label 'z' \(row 2\) that is not among the classes"):
        class_metrics(y, np.full((4, 2), 0.5), ["a", "b"])
    with pytest.raises(ValueError, match=r"label 'z' \(row 2\)"):
        row_log_loss(y, np.full((4, 2), 0.5), ["a", "b"])
    # float32 rounding in a row's sum is not an error
    p = np.array([[0.3, 0.7]] * 4, dtype=np.float32)
    assert class_metrics(np.array(["b"] * 4), p, ["a", "b"])["accuracy"] == 1.0


def test_impute_fills_missing_cells_only():
    import warnings

    from efa import AttentionTableClassifier

    rng = np.random.RandomState(0)
    X = pd.DataFrame({"a": rng.choice(["x", "y"], 40), "b": rng.choice(["u", "v"], 40)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = AttentionTableClassifier(handle_unknown="unk", missing="mask", max_epochs=2,
                                     random_state=0).fit(X, rng.choice(["A", "B"], 40))
    out = m.impute(pd.DataFrame({"a": ["NEW", None], "b": [None, "u"]}))
    assert out["a"].tolist()[0] == "NEW"  # a level fit never saw is the user's, not missing
    assert out.notna().all().all()


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


def test_the_collinear_warning_sees_pairs_past_sparse_columns_and_at_any_scale():
    # Candidates were looked for on the rows complete in every float column: one sparse
    # column (or NaNs staggered over three) hid an exact copy; 1e-200 · c had no r at all.
    import warnings

    import numpy as np
    import pandas as pd

    from efa.tabular.fitting import warn_collinear

    rng = np.random.default_rng(0)
    c, b = rng.normal(size=60), rng.normal(size=60)
    tables = {
        "sparse": pd.DataFrame({"c": c, "b": b, "f": 1.8 * c + 32,
                                "s": np.where(np.arange(60) < 2, 1.0, np.nan)}),
        "staggered": pd.DataFrame({"c": np.where(np.arange(60) % 3 == 0, np.nan, c),
                                   "f": np.where(np.arange(60) % 3 == 1, np.nan, 2 * c),
                                   "b": np.where(np.arange(60) % 3 == 2, np.nan, b)}),
        "tiny": pd.DataFrame({"c": c, "b": b, "f": 1e-200 * c}),
        "huge": pd.DataFrame({"c": c, "b": b, "f": 1e200 * c}),
    }
    for table in tables.values():
        with pytest.warns(UserWarning, match="'c' ~ 'f'"):
            warn_collinear(table)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither a pair nor a RuntimeWarning
        warn_collinear(pd.DataFrame({"c": c, "b": b, "f": c + 0.01 * b}))
