"""What the hostile probes (tests/probes) found and what was fixed, by behaviour: no silent wrong
answer, settings refused by name, crashes that name what is wrong, altered files and tables
named. Each test fails on the code before its fix."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from efa import analogy

VOCAB = ["man", "woman", "king", "queen", "boy", "girl"]


QUESTIONS = pd.DataFrame({"category": ["c"] * 2, "group": ["semantic"] * 2,
                          "a": ["man", "boy"], "b": ["woman", "girl"], "c": ["king", "king"],
                          "d": ["queen", "queen"], "line": [1, 2]})


def _fm(**kw):
    from efa.baselines.fm import CategoricalFM
    from efa.core.fields import Category

    return CategoricalFM(Category("item", 6), **kw)


def _frame(**cols):
    return pd.DataFrame(cols)


def test_serious_silent_answers():
    """The fresh probe round's most serious silent answers (tests/probes/round3-summary.md)."""
    import torch

    from efa.core.families import NegativeBinomial, Poisson
    from efa.tabular import AttentionTableClassifier
    from efa.tabular.encoding import bin_edges

    # analogy-027/028: a common scale of 1e±200 does not change 3CosAdd
    x = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1], [1, 0, 0.1], [1, 1, 0.1]])
    for scale in (1.0, 1e200, 1e-200):
        assert analogy.answer(x * scale, VOCAB, QUESTIONS.iloc[:1])["correct"].all(), scale
    # tabular-080: edges of values near the float range stay finite and between the values
    edges = bin_edges(np.array([-1e308, 1e308, 1e308]), 10, "huge")
    assert np.isfinite(edges).all() and -1e308 < edges[0] < 1e308
    # tabular-087: a bare pd.Categorical keeps its order for an ordinal response
    X = pd.DataFrame({"a": ["x", "y", "z"] * 10})
    y = pd.Categorical(["lo", "mid", "hi"] * 10, categories=["lo", "mid", "hi"])
    est = AttentionTableClassifier(response="ordinal", max_epochs=1, random_state=0)
    assert list(est.fit(X, y).classes_) == ["lo", "mid", "hi"]
    # families-058 / generators-057: counts int64 cannot hold are an error, not negative
    for family in (Poisson(), NegativeBinomial(2)):
        with pytest.raises(ValueError, match="beyond what int64 holds"):
            family.sample(torch.full((3, 1), 100.0 if family.name == "poisson" else -1e-30))


@pytest.mark.parametrize("make, message", [
    (lambda: __import__("efa").Category("x", 5, distinct="False"), "distinct must be True or"),
    (lambda: __import__("efa").Category("x", 5, target="no"), "target must be True or False"),
    (lambda: __import__("efa").Category("x", 3, labels="abc"), "labels must be a list"),
    (lambda: __import__("efa").Value("y", __import__("efa").core.families.Gaussian(), hidden=0),
     "hidden must be a positive integer"),
    (lambda: __import__("efa").Value("y", __import__("efa").core.families.Gaussian(),
                                     readout_hidden=(0,)), "readout_hidden width"),
    (lambda: __import__("efa").Value("y", __import__("efa").core.families.Poisson(),
                                     encoder="table", num_values=-1), "num_values must be"),
    (lambda: __import__("efa").Attribute("c", size=1, loc=[float("nan")]), "loc must be finite"),
    (lambda: __import__("efa").core.families.Gaussian(float("inf")),
     "sigma must be > 0 and finite"),
    (lambda: __import__("efa").core.families.NegativeBinomial(float("inf")), "total_count must be"),
    (lambda: __import__("efa").core.families.HeteroscedasticGaussian(float("inf")), "min_scale"),
    (lambda: __import__("efa").TrainConfig(resume="False"), "resume must be True or False"),
    (lambda: __import__("efa").TrainConfig(progress="no"), "progress must be True or False"),
    (lambda: _fm(direction="bidirectonal"), "direction must be"),
    (lambda: _fm(dim=0), "dim must be a positive integer"),
    (lambda: __import__("efa.datasets.tabular", fromlist=["x"]).simulate(1, -1.0, 0.5, 1),
     "noise must be >= 0"),
    (lambda: __import__("efa.datasets.tabular", fromlist=["x"]).simulate(1, 0.0, 0.5, 1, n=0),
     "n must be an integer >= 1"),
    (lambda: __import__("efa.generators", fromlist=["x"]).NoteGP(noise=float("inf")),
     "noise must be >= 0 and finite"),
    (lambda: __import__("efa.generators", fromlist=["x"]).LinearGaussian(dim=True),
     "dim must be a positive integer"),
])
def test_invalid_settings_are_refused_by_name(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_silent_answers_in_data_reports_and_regression(tmp_path):
    import json

    import torch

    from efa.core.data import Sequences
    from efa.generators import LinearGaussian
    from efa.generators.gp import rbf
    from experiments.harness.report import Report

    data = Sequences.from_lists({"item": [[1, 2], [3]]})
    with pytest.raises(KeyError, match="no field 'nonexistent'"):
        data.predicted("nonexistent")
    with pytest.raises(ValueError, match="per_row must be a positive integer"):
        data.thin_scored(-1)
    with pytest.raises(ValueError, match="no answers to summarise"):
        analogy.summarise(analogy.answer(np.eye(6), VOCAB, QUESTIONS).iloc[:0])
    with pytest.raises(ValueError, match="non-empty list of numbers"):
        Report.from_json({"experiment": "synthetic", "command": "x", "seeds": [0], "rows": [
            {"setting": "s", "model": "m", "metric": "x", "values": [], "paper": None}]})
    with pytest.raises(ValueError, match="lengthscale must be positive"):
        rbf(torch.zeros(2), torch.zeros(2), 0.0, 1.0)
    with pytest.raises(ValueError, match="covariates must be finite"):
        LinearGaussian(dim=2).sample(2, 3, covariates=torch.full((2, 3, 2), float("nan")))
    from efa.regression import functions_to_sequences

    df = pd.DataFrame({"fn": [0, 0], "x": [1.0, 2.0], "y": [0.0, 1.0], "ch": [0, 1]})
    with pytest.raises(ValueError, match="channels must be distinct"):
        functions_to_sequences(df, "fn", "x", "y", "ch", channels=[0, 0, 1])
    import efa

    with pytest.raises(TypeError, match="not both"):
        efa.EFA(efa.EFAConfig([efa.Category("item", 4)]), num_layers=5)
    # efa replot on an unknown experiment writes nothing
    from typer.testing import CliRunner

    from efa.cli import app

    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({
        "experiment": "nope", "command": "x", "seeds": [0],
        "rows": [{"setting": "s", "model": "m", "metric": "x", "values": [1.0], "paper": None}]}))
    (folder / "results.md").write_text("mine")
    r = CliRunner().invoke(app, ["replot", str(folder)])
    assert r.exit_code == 2 and (folder / "results.md").read_text() == "mine"


def test_spatial_tables_refuse_what_they_would_misread():
    import torch

    from efa import geo, spatial

    df = pd.DataFrame({"site": np.repeat([0, 1], 3), "t": [0, 1, 2] * 2,
                       "lat": np.repeat([40.0, 41.0], 3), "lon": np.repeat([-70.0, -71.0], 3),
                       "v": np.arange(6.0), "flag": [True, False, True] * 2})
    kw = dict(site="site", time="t", lat="lat", lon="lon", value="v")
    with pytest.raises(ValueError, match="sites must be distinct"):
        spatial.sites_to_sequences(df, sites=[0, 0, 1], **kw)
    with pytest.raises(ValueError, match="must hold True/False only"):
        spatial.sites_to_sequences(df.assign(flag=df.flag.astype(str)), target="flag", **kw)
    with pytest.raises(ValueError, match="is missing in row 2"):
        spatial.sites_to_sequences(df.assign(t=df.t.where(df.index != 2)), **kw)
    data = spatial.sites_to_sequences(df, target="flag", **kw)
    assert len(data) == 2
    with pytest.raises(ValueError, match="one value per site"):
        spatial.anomalies(data, torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="site 1 has a missing or infinite coordinate"):
        geo.nearest_neighbours([40.0, np.nan, 42.0], [-70.0, -71.0, -72.0], 1)


def test_last_silent_answers(tmp_path):
    """The silent answers the probe round still found at session 16's start (round3-summary)."""
    import torch

    import efa
    from efa.core.data import Sequences
    from efa.core.kernels import Kernel, register_kernel
    from experiments.harness.report import Row

    # sequences-025: uint64 beyond int64 is refused, not wrapped to a negative id
    with pytest.raises(ValueError, match="sequence 0, position 1: value 9223372036854775813"):
        Sequences.from_lists({"x": [np.array([1, 2**63 + 5], dtype=np.uint64)]})
    # sequences-049: a cast to an integer dtype would truncate the real fields
    real = Sequences.from_lists({"y": [[1.5, 2.5]]})
    with pytest.raises(ValueError, match="only a floating-point dtype"):
        real.to(torch.int64)
    assert real.to(torch.float32).fields["y"].dtype == torch.float32
    # sequences-087: a row whose order is NaN has no position
    df = pd.DataFrame({"s": [0, 0, 0], "t": [1.0, np.nan, 2.0], "x": [10, 11, 12]})
    with pytest.raises(ValueError, match=r"column 't' .* missing in 1 rows \(first: row 1, s=0\)"):
        Sequences.from_frame(df, "s", {"x": "x"}, order="t")
    # model-068/069/072: non-finite numbers at asked/predicted positions are errors
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Value("y", efa.core.families.Gaussian())], num_layers=1))
    data = Sequences.from_lists({"y": [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]})
    assert torch.isfinite(efa.log_likelihoods(model, data)["y"]).all()
    with pytest.raises(FloatingPointError, match="log_likelihoods: non-finite .* field 'y' at "
                                                 "sequence 0, position 0"):
        efa.log_likelihoods(model, Sequences.from_lists({"y": [[1e30, 0.2, 0.3]]}))
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="predict_mean: non-finite predicted mean of "
                                                 "field 'y' at sequence 0, position 0"):
        model.predict_mean(data)
    with pytest.raises(FloatingPointError, match="field 'y' at sequence 0, position 0"):
        efa.log_likelihoods(model, data)
    # kernels-077: a built-in kernel's name cannot be taken by another class
    with pytest.raises(ValueError, match="'softmax' is already registered"):
        @register_kernel
        class Impostor(Kernel):
            name = "softmax"
    assert efa.core.kernels.KERNELS["softmax"].__name__ != "Impostor"
    # io-006: a config that is not JSON leaves the saved model whole
    saved = efa.EFA(efa.EFAConfig([efa.Category("item", 4)], num_layers=1))
    efa.save(saved, tmp_path / "m")
    before = (tmp_path / "m" / "model.safetensors").read_bytes()
    other = efa.EFA(efa.EFAConfig([efa.Category("item", 4)], num_layers=1))
    other.config.attention = {"kernel": "softmax", "odd": object()}  # not serialisable
    with pytest.raises(TypeError, match="cannot be written as JSON"):
        efa.save(other, tmp_path / "m", overwrite=True)
    assert (tmp_path / "m" / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json",
                                                                 "model.safetensors"]
    # spatial-026: means of the wrong length for the sites (2 for 4) are refused
    from efa import spatial

    sites = pd.DataFrame({"site": np.repeat(range(4), 3), "t": [0, 1, 2] * 4,
                          "lat": np.repeat([40.0, 41, 42, 43], 3),
                          "lon": np.repeat([-70.0, -71, -72, -73], 3), "v": np.arange(12.0)})
    grid = spatial.sites_to_sequences(sites, site="site", time="t", lat="lat", lon="lon",
                                      value="v", lags=1)
    with pytest.raises(ValueError, match="the data have 4 sites, means has shape \\(2,\\)"):
        spatial.anomalies(grid, torch.tensor([1.0, 2.0]))
    shifted = spatial.anomalies(grid, [1, 2, 3, 4])  # a list of ints is one mean per site
    seen = grid.observed["value"]
    assert torch.equal(shifted.fields["value"][seen],
                       (grid.fields["value"] - torch.tensor([1.0, 2, 3, 4]).repeat(2))[seen])
    # runner-030: a row with no values has no mean
    with pytest.raises(ValueError, match="at least one value"):
        Row("s", "m", "metric", [])


@pytest.mark.parametrize("call, error, message", [
    (lambda: __import__("efa").Sequences({"a": __import__("torch").zeros(1, 2)},
                                         __import__("torch").tensor([2]),
                                         observed={"a": [[True, True]]}),
     ValueError, r"observed\['a'\] must be a bool tensor"),
    (lambda: __import__("efa").Sequences.from_lists({"x": [[[1, 2], [3]]]}), ValueError,
     "field 'x', sequence 0: the items are not all vectors"),
    (lambda: __import__("efa").Sequences.from_lists({"x": [[1]]})["a"], IndexError,
     "select sequences with"),
    (lambda: __import__("efa").core.families.Categorical(None), ValueError,
     "num_categories must be a number"),
    (lambda: __import__("efa").core.families.Binomial(float("inf")), ValueError,
     "total_count must be an integer"),
    (lambda: __import__("efa").core.families.Poisson(shift=float("nan")), ValueError,
     "shift must be an integer"),
    (lambda: __import__("efa").Category("x", 5, feeds=5), ValueError, "feeds must be"),
    (lambda: __import__("efa").Category("x", 5, bag=True, bag_l2="big"), ValueError,
     "bag_l2 must be a number"),
    (lambda: __import__("efa").EFAConfig(["item"]), TypeError, "fields must be a list of efa"),
    (lambda: __import__("efa").EFA(__import__("efa").EFAConfig(
        [__import__("efa").Category("x", 4, dim=2)], num_heads=4)), ValueError,
     "smaller than num_heads=4"),
    (lambda: __import__("efa").seed_everything("a"), ValueError, "seed must be an integer"),
    (lambda: __import__("efa.geo", fromlist=["x"]).nearest_neighbours([0, 1, 2], [0, 1, 2], 1.5),
     ValueError, "k must be between"),
    (lambda: __import__("efa.embeddings", fromlist=["x"]).correlation([np.nan] * 3, [1, 2, 3]),
     ValueError, "at least 2 entries"),
    (lambda: __import__("efa.generators", fromlist=["x"]).attention_teacher(["item"], 4),
     TypeError, "fields must be a list of efa fields"),
    (lambda: __import__("efa.regression", fromlist=["x"]).functions_to_sequences(
        _frame(fn=[0, 0], x=pd.array(["a", "b"], dtype="string"), y=[0.0, 1.0]), "fn", "x", "y"),
     TypeError, "column 'x' must be numeric"),
    (lambda: __import__("efa.tabular", fromlist=["x"]).AttentionTableClassifier(
        num_heads=0).fit(pd.DataFrame({"a": [0, 1] * 5}), [0, 1] * 5), ValueError,
     "'num_heads' parameter of AttentionTableClassifier must be an int in the range"),
    (lambda: __import__("efa.tabular", fromlist=["x"]).AttentionTableClassifier(
        categorical="a").fit(pd.DataFrame({"a": [0, 1] * 5}), [0, 1] * 5), ValueError,
     "'categorical' parameter of AttentionTableClassifier must be an array-like or None"),
])
def test_crashes_name_what_is_wrong(call, error, message):
    """The probe round's bare KeyError/TypeError/ZeroDivisionError crashes, now named."""
    with pytest.raises(error, match=message):
        call()


def test_altered_files_and_tables_are_named(tmp_path):
    import json

    import torch
    from safetensors.torch import save_file

    from efa.core.data import Sequences
    from experiments.harness import journal
    from experiments.harness.report import Report

    path = tmp_path / "s.safetensors"
    save_file({"field/x": torch.zeros(1, 2, dtype=torch.long), "lengths": torch.tensor([2])},
              str(path), metadata={"efa": "sequences", "order": "{oops"})
    with pytest.raises(ValueError, match="'order' must be a JSON list of field names"):
        Sequences.load(path)
    save_file({"field/x": torch.zeros(1, 2, dtype=torch.long)}, str(path),
              metadata={"efa": "sequences", "order": json.dumps(["x"])})
    with pytest.raises(ValueError, match=r"lacks the tensors \['lengths'\]"):
        Sequences.load(path)
    # an altered journal entry is treated as absent: the job runs again
    (tmp_path / "j").mkdir()
    journal.save(tmp_path / "j", "k", {"a": (1, 2)})
    entry = journal.entry(tmp_path / "j", "k")
    entry.write_text(json.dumps({"__tuple__": 5}))
    assert journal.load(tmp_path / "j", "k") is None
    with pytest.raises(ValueError, match="rows must be a non-empty list"):
        Report.from_json({"experiment": "x", "command": "c", "seeds": [0], "rows": []})
    with pytest.raises(ValueError, match="seeds must be a list"):
        Report.from_json({"experiment": "x", "command": "c", "seeds": 3, "rows": []})
