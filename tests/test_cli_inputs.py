"""The command line and the data loaders refuse what they cannot use, naming it: fractions
outside (0, 1), replot --tables on a fresh folder and on one written before the runs kept what
the tables need, temperature years outside the data and overlapping year splits, an empty
--out, `efa summary`'s README and missing-file errors, what `efa train` says it kept, a number
of movies below 1, and loader errors that name the file and line (or refuse the path)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import efa
from efa.cli import app
from efa.datasets import instacart as ic
from efa.datasets import movielens as ml
from efa.datasets import temperature as tp
from efa.datasets.root import data_root, resolve_file
from efa.training.settings import History

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- 1. fractions


def _users(n: int = 40) -> pd.DataFrame:
    return pd.DataFrame({"user_id": np.repeat(np.arange(1, n + 1), 3), "item": 1,
                         "position": np.tile([0, 1, 2], n)})


@pytest.mark.parametrize("kw, name", [
    ({"test_frac": -0.25}, "test_frac"), ({"test_frac": 1.5}, "test_frac"),
    ({"test_frac": 1.0}, "test_frac"), ({"test_frac": math.nan}, "test_frac"),
    ({"val_frac": -0.5}, "val_frac"), ({"val_frac": 1}, "val_frac"),
    ({"val_frac": 0}, "val_frac"), ({"val_frac": True}, "val_frac"),
    ({"val_frac": "0.25"}, "val_frac")])
@pytest.mark.parametrize("protocol", ["clean", "paper"])
def test_split_users_refuses_fractions_outside_zero_one(kw, name, protocol):
    with pytest.raises(ValueError, match=rf"{name} must .*got {kw[name]!r}"):
        ml.split_users(_users(), protocol, **kw)


def test_split_users_valid_fractions_are_unchanged():
    frame = _users()
    default = ml.split_users(frame, "clean")
    for frac in (0.25, np.float64(0.25)):
        same = ml.split_users(frame, "clean", val_frac=frac, test_frac=frac)
        for a, b in zip(default.as_dict().values(), same.as_dict().values(), strict=True):
            pd.testing.assert_frame_equal(a, b)
    # 40 users: round(0.25 * 40) = 10 test, round(0.25 * 30) = 8 validation, 22 train
    assert [s.user_id.nunique() for s in default.as_dict().values()] == [22, 8, 10]


@pytest.mark.parametrize("frac", [1, 2, 0, -0.1, 1.0, True, None])
def test_instacart_split_validation_refuses_a_count_or_a_share_outside_zero_one(frac):
    baskets = pd.DataFrame({"order_id": np.repeat(np.arange(1, 9), 2), "product_id": 1,
                            "rank": np.tile([1, 2], 8)})
    with pytest.raises(ValueError, match=rf"frac must .*got {frac!r}"):
        ic.split_validation(baskets, frac=frac)
    train, val = ic.split_validation(baskets, frac=0.25)
    assert (train.order_id.nunique(), val.order_id.nunique()) == (6, 2)


# --------------------------------------------------------------------------- 2. replot --tables


def _quick(name: str, out: Path) -> Path:
    r = CliRunner().invoke(app, ["reproduce", name, "--quick", "--seeds", "1", "--out",
                                 str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    return out / name


@pytest.mark.slow
@pytest.mark.parametrize("name, stored, dropped", [
    ("in-context-regression", ("nll_by_context", "pit"), ("nll_by_context", "pit")),
    ("tabular-simulation-defaults", (), ("log loss minus LR [95 % CI]",))])
def test_replot_tables_on_a_fresh_folder_and_an_older_one(tmp_path, name, stored, dropped):
    folder = _quick(name, tmp_path)
    before = json.loads((folder / "results.json").read_text())
    run_keys = {k for r in before["runs"] for k in r} | {
        k for r in before["runs"] for m in r.get("models", {}).values() for k in m}
    assert set(stored) <= run_keys
    r = CliRunner().invoke(app, ["replot", str(folder), "--tables"])
    assert r.exit_code == 0, r.output
    after = json.loads((folder / "results.json").read_text())
    assert after == before  # the tables, figures (bands kept) and runs come out the same

    # a results.json written before the runs kept these fields: a clear error, no change
    old = tmp_path / "old" / name
    shutil.copytree(folder, old)
    for run in before["runs"]:
        for holder in [run, *run.get("models", {}).values()]:
            for key in dropped:
                holder.pop(key, None)
    (old / "results.json").write_text(json.dumps(before))
    r = CliRunner().invoke(app, ["replot", str(old), "--tables"])
    assert r.exit_code == 2 and "rerun the experiment" in r.output, r.output
    assert "KeyError" not in r.output
    assert json.loads((old / "results.json").read_text()) == before


# --------------------------------------------------------------------------- 3. temperature


def _temperatures(years=(2018, 2019)) -> tuple[pd.DataFrame, pd.DataFrame]:
    dates = pd.DatetimeIndex([d for y in years for d in pd.date_range(f"{y}-10-01",
                                                                       f"{y}-10-31")])
    temps = pd.concat([pd.DataFrame({"country": "US", "state": s, "city": c, "date": dates,
                                     "value": 50.0})
                       for s, c in (("Ohio", "Akron"), ("Texas", "Abilene"))],
                      ignore_index=True)
    cities = pd.DataFrame({"state": ["Ohio", "Texas"], "city": ["Akron", "Abilene"],
                           "lat": [41.0, 32.4], "lon": [-81.5, -99.7]})
    return temps, cities


def test_paper_frame_refuses_years_outside_the_data():
    temps, cities = _temperatures()
    assert len(tp.paper_frame(temps, cities, years=(2018, 2019))) == 2 * 2 * 31
    for years, absent in (((2019, 2020), "2020"), ((2016, 2017), "2016-2017"),
                          ((2017, 2019), "2017")):
        with pytest.raises(ValueError, match=rf"no day of months \[10\] in {absent} .*"
                                             r"years with data in these months: 2018-2019"):
            tp.paper_frame(temps, cities, years=years)
    with pytest.raises(ValueError, match="months"):
        tp.paper_frame(temps, cities, months=(3,), years=(2018, 2019))


def test_split_years_refuses_overlapping_ranges():
    frame = pd.DataFrame({"year": np.arange(2007, 2020)})
    with pytest.raises(ValueError, match=r"train years \(2007, 2014\) and the val years "
                                         r"\(2013, 2016\) overlap"):
        tp.split_years(frame, train=(2007, 2014), val=(2013, 2016))
    with pytest.raises(ValueError, match="val years .* and the test years .* overlap"):
        tp.split_years(frame, val=(2013, 2017))
    with pytest.raises(ValueError, match="first <= last"):
        tp.split_years(frame, test=(2019, 2017))
    parts = tp.split_years(frame)
    assert [len(p) for p in parts.as_dict().values()] == [6, 4, 3]


# --------------------------------------------------------------------------- 4. empty --out


@pytest.mark.parametrize("out", ["", "   "])
def test_reproduce_refuses_an_empty_out(tmp_path, monkeypatch, out):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["reproduce", "synthetic", "--quick", "--out", out,
                                 "--no-progress"])
    assert r.exit_code == 2 and "--out is empty" in r.output, r.output
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- 5. efa summary


def _summary(readme: Path, results: Path):
    return CliRunner().invoke(app, ["summary", "--readme", str(readme), "--results",
                                    str(results)])


def test_summary_names_a_folder_a_readme_without_blocks_and_a_missing_results_file(tmp_path):
    results = tmp_path / "results"
    (results / "synthetic").mkdir(parents=True)
    (results / "synthetic" / "results.json").write_text(
        (ROOT / "results" / "synthetic" / "results.json").read_text())
    (results / "synthetic" / "results.md").write_text("stale\n")
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- headline:start -->\nold\n<!-- headline:end -->\n")

    r = _summary(tmp_path, results)
    assert r.exit_code == 2 and "is a folder, not a README file" in r.output, r.output
    assert "does not exist" not in r.output

    plain = tmp_path / "plain.md"
    plain.write_text("no generated block\n")
    r = _summary(plain, results)
    assert r.exit_code == 2 and "holds no block to update" in r.output, r.output
    assert "up to date" not in r.output

    r = _summary(readme, results)  # the headline table needs every experiment's results
    assert r.exit_code == 2, r.output
    assert "movielens-sequence/results.json does not exist" in r.output
    assert "efa reproduce movielens-sequence" in r.output and "Traceback" not in r.output
    assert (results / "synthetic" / "results.md").read_text() == "stale\n"  # nothing rewritten
    assert "old" in readme.read_text()


# --------------------------------------------------------------------------- 6. efa train


def _saved_model_and_data(tmp_path: Path) -> tuple[Path, Path]:

    model = efa.EFA(efa.EFAConfig([efa.Category("item", 4)], num_layers=1, max_len=4))
    efa.save(model, tmp_path / "m")
    efa.Sequences.from_lists({"item": [[0, 1, 2], [3, 1], [2, 2, 1]]}).save(tmp_path / "d")
    return tmp_path / "m", tmp_path / "d"


def test_train_says_which_weights_it_kept(tmp_path):
    model, data = _saved_model_and_data(tmp_path)
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"max_epochs": 1, "progress": False}))
    r = CliRunner().invoke(app, ["train", str(data), "--model", str(model), "--out",
                                 str(tmp_path / "o"), "--config", str(config)])
    assert r.exit_code == 0, r.output
    assert "trained 1 epoch; no validation data: the last weights are kept" in r.output
    assert "best 0" not in r.output and "1 epochs" not in r.output

    from efa.cli import _trained

    start = History(best_epoch=-1, epochs_run=3, start_val=1.0, best_val=1.0)
    assert _trained(start, True) == ("trained 3 epochs; no epoch improved on the starting "
                                     "weights' validation loss: the starting weights are kept")
    best = History(best_epoch=1, epochs_run=3)
    assert _trained(best, True) == "trained 3 epochs; kept epoch 2, the best on the validation data"


@pytest.mark.parametrize("out", ["", " "])
def test_train_refuses_an_empty_out(tmp_path, monkeypatch, out):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["train", "d", "--model", "m", "--out", out, "--force"])
    assert r.exit_code == 2 and "--out is empty" in r.output, r.output


# --------------------------------------------------------------------------- 7. movie counts


def test_a_number_of_movies_below_one_is_refused():
    ratings = pd.DataFrame({"user_id": [1, 1, 2, 2, 3], "movie_id": [10, 20, 10, 30, 10],
                            "rating": [5, 4, 3, 4, 5], "timestamp": [1, 2, 3, 4, 5]})
    assert ml.top_movies(ratings, 1).tolist() == [10]
    assert ml.top_movies(ratings, np.int64(2)).tolist() == [10, 20]
    for n in (-1, 0, 1.5, True, "2"):
        with pytest.raises(ValueError, match=rf"n must be an integer >= 1 .*got {n!r}"):
            ml.top_movies(ratings, n)
    for preprocess in (ml.preprocess_sequences, ml.preprocess_ratings):
        with pytest.raises(ValueError, match=r"n_movies must be an integer >= 1 .*got -1"):
            preprocess(ratings, n_movies=-1)


# --------------------------------------------------------------------------- 8. loaders


def test_basket_ids_that_are_not_int64_name_file_and_line(tmp_path):
    path = tmp_path / "b.csv"
    for cell, message in (("inf", r"line 3: column 'product_id' is not an integer: inf"),
                          ("1e30", r"line 3: column 'product_id' value 1e\+30 is out of range"),
                          ("18446744073709551615", r"line 3: column 'product_id' value "
                                                   r"18446744073709551615 is out of range")):
        path.write_text(f"order_id,product_id,rank\n1,3,1\n1,{cell},2\n")
        with pytest.raises(ValueError, match=rf"b\.csv, {message}"):
            ic.read_baskets(path)


def test_movielens_ids_beyond_int64_name_file_and_line(tmp_path):
    data = tmp_path / "ratings.data"
    data.write_text("1\t2\t3\t881250949\n99999999999999999999\t2\t3\t881250949\n")
    with pytest.raises(ValueError, match=r"ratings\.data, line 2: column 'user_id' value "
                                         r"99999999999999999999 is out of range"):
        ml.read_ratings(data)
    item = tmp_path / "u.item"
    item.write_text("1|Toy Story (1995)\n99999999999999999999|Big\n")
    with pytest.raises(ValueError, match=r"u\.item, line 2: column 'movie_id' .* out of range"):
        ml.read_movies(item)


def test_load_instacart_refuses_a_file(tmp_path):
    path = tmp_path / "data_train_final.csv"
    path.write_text("order_id,product_id,rank\n1,3,1\n")
    with pytest.raises(NotADirectoryError, match="is a file; load_instacart reads"):
        ic.load_instacart(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ic.load_instacart(tmp_path / "nowhere")


def test_an_empty_data_root_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where "" would point
    for empty in ("", "  "):
        with pytest.raises(ValueError, match="data root argument is empty"):
            data_root(empty)
        with pytest.raises(ValueError, match="is empty"):
            resolve_file(empty, "u.data", "movielens-100k", "MovieLens-100K ratings")
        monkeypatch.setenv("EFA_DATA", empty)
        with pytest.raises(ValueError, match="environment variable EFA_DATA is empty"):
            data_root()
        with pytest.raises(ValueError, match="EFA_DATA is empty"):
            ml.read_ratings()
    monkeypatch.setenv("EFA_DATA", str(tmp_path))
    assert data_root() == tmp_path.resolve()


def test_a_damaged_auto_mpg_file_is_refused_by_line(tmp_path):
    from efa.datasets.root import data_root
    from efa.datasets.tabular import auto_mpg

    lines = (data_root() / "tabular" / "auto-mpg.csv").read_text().splitlines(True)
    blank = list(lines)
    blank[1] = blank[1][blank[1].index(","):]  # the first row's mpg left empty
    (tmp_path / "a.csv").write_text("".join(blank))
    with pytest.raises(ValueError, match="line 2: column 'mpg' holds nan where a number"):
        auto_mpg(tmp_path / "a.csv")
