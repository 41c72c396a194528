"""Tests of efa.datasets on the real data (read through data_root(); no skipping if absent)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from efa.datasets import data_root, require_file, resolve_file
from efa.datasets import instacart as ic
from efa.datasets import movielens as ml
from efa.datasets import temperature as tp

# --------------------------------------------------------------------------- fixtures
# Deliberately no skip markers: CI must fail loudly when the data root is missing.


@pytest.fixture(scope="module")
def root() -> Path:
    return data_root()


@pytest.fixture(scope="module")
def ratings(root: Path) -> pd.DataFrame:
    return ml.read_ratings(root)


@pytest.fixture(scope="module")
def sequences(ratings: pd.DataFrame) -> pd.DataFrame:
    return ml.preprocess_sequences(ratings)


@pytest.fixture(scope="module")
def exp2(ratings: pd.DataFrame) -> pd.DataFrame:
    return ml.preprocess_ratings(ratings)


@pytest.fixture(scope="module")
def baskets(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return ic.load_instacart(root)


@pytest.fixture(scope="module")
def temps(root: Path) -> pd.DataFrame:
    return tp.read_city_temperatures(root)


@pytest.fixture(scope="module")
def cities(root: Path) -> pd.DataFrame:
    return tp.read_cities(root / "temperature" / "cities.csv")  # an explicit file path works too


@pytest.fixture(scope="module")
def october(temps: pd.DataFrame, cities: pd.DataFrame) -> pd.DataFrame:
    return tp.paper_frame(temps, cities)


# --------------------------------------------------------------------------- data root


def test_data_root_resolution_order(tmp_path, monkeypatch):
    repo, shared = tmp_path / "work" / "repo", tmp_path / "work" / "shared" / "data"
    repo.mkdir(parents=True)
    shared.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("EFA_DATA", str(elsewhere))
    assert data_root(shared) == shared.resolve()  # override beats the environment
    assert data_root() == elsewhere.resolve()
    monkeypatch.delenv("EFA_DATA")
    monkeypatch.chdir(repo)
    assert data_root() == shared.resolve()  # cwd/../shared/data
    monkeypatch.chdir(elsewhere)  # the library does not look for a repository of its own
    with pytest.raises(FileNotFoundError):
        data_root()


def test_data_root_missing_names_paths_and_env_var(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="EFA_DATA") as err:
        data_root(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(err.value)

    monkeypatch.setenv("EFA_DATA", str(tmp_path / "also-nowhere"))
    with pytest.raises(FileNotFoundError, match="also-nowhere"):
        data_root()

    monkeypatch.delenv("EFA_DATA")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        data_root()
    message = str(err.value)
    assert "EFA_DATA" in message
    assert str(tmp_path / ".." / "shared" / "data") in message


def test_require_and_resolve_file(tmp_path, root):
    with pytest.raises(FileNotFoundError, match=r"u\.data.*MovieLens ratings"):
        require_file(tmp_path / "u.data", "MovieLens ratings")
    expected = root / "movielens-100k" / "u.data"
    assert resolve_file(root, "u.data", "movielens-100k", "x") == expected
    assert resolve_file(root / "movielens-100k", "u.data", "movielens-100k", "x") == expected
    assert resolve_file(expected, "u.data", "movielens-100k", "x") == expected
    with pytest.raises(FileNotFoundError, match="u.data"):
        ml.read_ratings(tmp_path)


# --------------------------------------------------------------------------- MovieLens


def test_read_movielens_files(ratings, root):
    assert ratings.shape == (100_000, 4)
    assert list(ratings.columns) == ["user_id", "movie_id", "rating", "timestamp"]
    assert all(dtype == np.int64 for dtype in ratings.dtypes)
    assert ratings["user_id"].nunique() == 943
    assert ratings["movie_id"].nunique() == 1682
    movies = ml.read_movies(root)
    assert len(movies) == 1682
    assert movies.loc[movies["movie_id"] == 1, "title"].item() == "Toy Story (1995)"


def _assert_summary(frame, users, rows, sparsity):
    s = ml.summary(frame)
    assert (s["n_users"], s["n_items"], s["n_rows"]) == (users, 50, rows)
    assert f"{s['sparsity']:.2%}" == sparsity


def test_experiment1_counts(sequences):
    _assert_summary(sequences, 902, 13_757, "69.50%")
    assert list(sequences.columns) == list(ml.OUTPUT_COLUMNS)
    assert sorted(sequences["item"].unique()) == list(range(1, 51))
    assert sequences["movie_id"].nunique() == 50
    assert sequences.groupby("user_id").size().max() == 44
    assert not sequences.duplicated(["user_id", "timestamp"]).any()
    # Sorted by (user, time), positions 0..n-1 per user, item = first-appearance order.
    assert sequences.equals(sequences.sort_values(["user_id", "timestamp"], ignore_index=True))
    assert (sequences["position"] == sequences.groupby("user_id").cumcount()).all()
    first_seen = sequences.drop_duplicates("movie_id")["item"].to_numpy()
    assert np.array_equal(first_seen, np.arange(1, 51))


def test_experiment1_matches_reference_notebook_rows(sequences):
    # The reference notebook printed the first and last five rows (item, rating) of its frame.
    head = sequences.head(5)
    assert head["user_id"].tolist() == [1] * 5
    assert head["item"].tolist() == [1, 2, 3, 4, 5]
    assert head["rating"].tolist() == [5] * 5
    tail = sequences.tail(5)
    assert tail["user_id"].tolist() == [943] * 5
    assert tail["item"].tolist() == [23, 13, 8, 41, 20]
    assert tail["rating"].tolist() == [4, 5, 4, 4, 3]


def test_top50_tie_breaking(ratings):
    top = ml.top_movies(ratings)
    assert 28 in top and 191 not in top  # both have 276 ratings at the cutoff
    assert 191 in ml.top_movies(ratings, tie_break="larger_id")
    _assert_summary(ml.preprocess_sequences(ratings, tie_break="larger_id"), 901, 13_757, "69.46%")

    kept = ratings[ratings["rating"] >= 3]
    top2 = ml.top_movies(kept)
    assert 276 in top2 and 357 not in top2  # both have 251 ratings >= 3
    _assert_summary(ml.preprocess_ratings(ratings, tie_break="larger_id"), 892, 12_439, "72.11%")


def test_reference_sample_table_matches_dataframe_sample():
    table = ml._reference_positions(30, 42)
    for k in range(1, 31):
        frame = pd.DataFrame({"a": np.arange(k)})
        assert table[k] == frame.sample(n=1, random_state=42)["a"].item()


def test_one_per_timestamp_matches_reference_groupby_sample(ratings):
    # The reference's groupby(...).apply(g.sample(n=1, random_state=42)), written as an
    # explicit loop (pandas-3 safe); only multi-row groups carry information.
    data = ratings[ratings["movie_id"].isin(ml.top_movies(ratings))]
    multi = data[data.duplicated(["user_id", "timestamp"], keep=False)]
    expected = pd.concat(
        group.sample(n=1, random_state=42)
        for _, group in multi.groupby(["user_id", "timestamp"], sort=False)
    )
    got = ml._one_per_timestamp(multi, "paper", 42)
    assert len(expected) > 100
    assert sorted(got.index) == sorted(expected.index)


def test_experiment2_counts(exp2):
    _assert_summary(exp2, 893, 12_465, "72.08%")
    assert set(exp2["rating"].unique()) == {1, 2, 3}
    assert sorted(exp2["item"].unique()) == list(range(1, 51))
    # Reference notebook's printout for user 2 (items and shifted ratings in time order).
    user2 = exp2[exp2["user_id"] == 2]
    assert user2["item"].tolist() == [30, 29, 31, 23, 4, 32, 33, 34, 35, 36, 37]
    assert user2["rating"].tolist() == [2, 1, 1, 2, 2, 3, 2, 2, 2, 3, 2]


def test_clean_preprocessing_keeps_counts_and_is_seeded(ratings, sequences):
    clean = ml.preprocess_sequences(ratings, protocol="clean", seed=0)
    _assert_summary(clean, 902, 13_757, "69.50%")
    assert clean.equals(ml.preprocess_sequences(ratings, protocol="clean", seed=0))
    with pytest.raises(ValueError, match="protocol"):
        ml.preprocess_sequences(ratings, protocol="other")


def _users(frame):
    return set(frame["user_id"].unique())


def test_paper_split_experiment1(sequences):
    s = ml.split_users(sequences, protocol="paper", seed=42)
    assert len(_users(s.train) | _users(s.val)) == 641
    assert len(s.train) + len(s.val) == 9_736
    assert (len(_users(s.test)), len(s.test)) == (219, 3_408)
    assert (len(s.train), len(s.val)) == (7_252, 2_484)
    assert (len(_users(s.train)), len(_users(s.val))) == (480, 161)
    unused = _users(sequences) - _users(s.train) - _users(s.val) - _users(s.test)
    assert len(unused) == 42
    assert all(u >= 902 for u in unused)  # the quirk: ids >= n_users can never be picked
    assert _users(s.train).isdisjoint(_users(s.val) | _users(s.test))
    assert all(frame["target"].all() for frame in s.as_dict().values())


def test_paper_split_experiment2_row_validation(exp2):
    s = ml.split_users(exp2, protocol="paper", seed=42, val_unit="row")
    assert (len(_users(s.train)), len(s.train)) == (631, 8_707)
    assert (len(_users(s.test)), len(s.test)) == (211, 3_038)
    assert s.train.drop(columns="target").equals(s.val.drop(columns="target"))
    assert (int(s.train["target"].sum()), int(s.val["target"].sum())) == (6_530, 2_177)
    assert not (s.train["target"] & s.val["target"]).any()


def test_clean_split(sequences):
    s = ml.split_users(sequences, protocol="clean", seed=7)
    n = sequences["user_id"].nunique()
    train, val, test = _users(s.train), _users(s.val), _users(s.test)
    assert train.isdisjoint(val) and train.isdisjoint(test) and val.isdisjoint(test)
    assert train | val | test == _users(sequences)  # nobody is dropped
    assert len(s.train) + len(s.val) + len(s.test) == len(sequences)
    assert len(test) == round(0.25 * n)
    assert len(val) == round(0.25 * (n - len(test)))
    assert abs(len(train) / n - 0.5625) < 0.005
    again = ml.split_users(sequences, protocol="clean", seed=7)
    assert again.test.equals(s.test)
    other = ml.split_users(sequences, protocol="clean", seed=8)
    assert _users(other.test) != test


def test_malformed_udata(tmp_path):
    def write(text):
        path = tmp_path / "u.data"
        path.write_text(text)
        return path

    good = "1\t2\t3\t881250949\n"
    with pytest.raises(ValueError, match=r"u\.data, line 2: expected 4 tab-separated fields"):
        ml.read_ratings(write(good + "1\t2\t3\n"))
    with pytest.raises(ValueError, match=r"line 3: column 'movie_id' is not an integer"):
        ml.read_ratings(write(good * 2 + "1\tabc\t3\t881250949\n"))
    with pytest.raises(ValueError, match=r"line 1: column 'rating' is not an integer"):
        ml.read_ratings(write("1\t2\t3.5\t881250949\n"))
    with pytest.raises(ValueError, match=r"line 2: rating 6 is outside 1\.\.5"):
        ml.read_ratings(write(good + "1\t2\t6\t881250949\n"))
    with pytest.raises(ValueError, match="empty"):
        ml.read_ratings(write(""))
    assert len(ml.read_ratings(write(good * 3))) == 3


# --------------------------------------------------------------------------- Instacart


def test_instacart_counts(baskets):
    train, test = baskets
    assert list(train.columns) == ["order_id", "product_id", "rank"]
    assert (train["order_id"].nunique(), len(train)) == (24_781, 275_345)
    assert (test["order_id"].nunique(), len(test)) == (1_433, 16_066)
    items = pd.concat([train["product_id"], test["product_id"]])
    assert sorted(items.unique()) == list(range(1, 64))
    sizes = train.groupby("order_id").size()
    assert (sizes.min(), sizes.max()) == (10, 24)
    assert test.groupby("order_id").size().between(10, 24).all()


def test_instacart_validation_split(baskets):
    train, _ = baskets
    fit, val = ic.split_validation(train)
    assert (fit["order_id"].nunique(), val["order_id"].nunique()) == (18_585, 6_196)
    assert set(fit["order_id"]).isdisjoint(val["order_id"])
    assert len(fit) + len(val) == len(train)


def test_item_names(root):
    names = ic.read_item_names(root)
    assert names["item"].tolist() == list(range(1, 64))
    assert names.loc[names["product_id"] == 24852, "product_name"].item() == "Banana"


def test_preprocess_kaggle_small_known_answer():
    cols = ["order_id", "product_id", "add_to_cart_order"]
    prior = pd.DataFrame(
        [(1, 300, 1), (1, 999, 2), (1, 100, 3), (1, 200, 4), (2, 300, 1), (2, 100, 2),
         (3, 200, 1), (3, 555, 2)],
        columns=cols,
    )  # fmt: skip
    train = pd.DataFrame(
        [(7, 999, 1), (7, 200, 2), (7, 300, 3), (7, 100, 4), (8, 100, 1), (8, 555, 3)],
        columns=cols,
    ).assign(reordered=0)
    # Counts: 100 -> 4, 200 -> 3, 300 -> 3, 999 -> 2, 555 -> 2; keep >= 3, baskets >= 2.
    got_train, got_test, item_map = ic.preprocess_kaggle(
        prior, train, min_item_count=3, min_basket=2
    )
    expected_train = pd.DataFrame(
        [(1, 1, 1), (1, 2, 2), (1, 3, 3), (2, 1, 1), (2, 2, 2)], columns=ic.BASKET_COLUMNS
    )
    expected_test = pd.DataFrame([(7, 3, 1), (7, 1, 2), (7, 2, 3)], columns=ic.BASKET_COLUMNS)
    pd.testing.assert_frame_equal(got_train, expected_train)
    pd.testing.assert_frame_equal(got_test, expected_test)
    assert item_map.values.tolist() == [[1, 300], [2, 100], [3, 200]]


def test_preprocess_kaggle_round_trip(baskets, root):
    """Fake raw Kaggle files built from the shipped output must give that output back."""
    train, test = baskets
    names = ic.read_item_names(root)
    to_product = names.set_index("item")["product_id"]
    rare = [1, 2, 3]  # not among the 63 products
    assert not set(rare) & set(names["product_id"])
    used = np.union1d(train["order_id"], test["order_id"])
    short_ids = np.setdiff1d(np.arange(1, 5_000), used)[:40]

    def raw_from(final, orders_with_rare, short_orders):
        raw = pd.DataFrame(
            {
                "order_id": final["order_id"],
                "product_id": to_product.loc[final["product_id"]].to_numpy(),
                # Gaps, so the dense rank has to close them up.
                "add_to_cart_order": 2 * final["rank"] + 1,
            }
        )
        extra = [
            pd.DataFrame(
                {
                    "order_id": np.repeat(orders_with_rare, 2),
                    "product_id": np.tile(rare[:2], len(orders_with_rare)),
                    "add_to_cart_order": np.tile([1, 4], len(orders_with_rare)),
                }
            )
        ]
        for order in short_orders:
            # 9 frequent items (in an order that would change the item numbering if kept)
            # plus a rare one: 10 rows, but too short once the rare item is gone.
            products = [*to_product.loc[range(63, 54, -1)], rare[2]]
            extra.append(
                pd.DataFrame(
                    {
                        "order_id": order,
                        "product_id": products,
                        "add_to_cart_order": np.arange(1, 11),
                    }
                )
            )
        raw = pd.concat([raw, *extra], ignore_index=True)
        raw = raw.sort_values(["order_id", "add_to_cart_order"], kind="stable", ignore_index=True)
        return raw.assign(reordered=1)

    train_orders = train["order_id"].unique()
    prior_raw = raw_from(train, train_orders[::200], short_ids[:30])
    test_raw = raw_from(test, test["order_id"].unique()[::50], short_ids[30:])
    counts = pd.concat([prior_raw["product_id"], test_raw["product_id"]]).value_counts()
    threshold = int(counts.drop(rare).min())
    assert counts.loc[rare].max() < threshold  # the rare products must fall out

    got_train, got_test, item_map = ic.preprocess_kaggle(
        prior_raw,
        test_raw,
        min_item_count=threshold,
        products=pd.read_csv(root / "instacart" / "products.csv"),
    )
    pd.testing.assert_frame_equal(got_train, train)
    pd.testing.assert_frame_equal(got_test, test)
    pd.testing.assert_frame_equal(item_map, names, check_dtype=False)


def test_malformed_basket_files(tmp_path):
    path = tmp_path / "baskets.csv"
    path.write_text("order_id,product_id\n1,2\n")
    with pytest.raises(ValueError, match=r"baskets\.csv: missing column\(s\) \['rank'\]"):
        ic.read_baskets(path)
    path.write_text("order_id,product_id,rank\n1,2,1\n1,x,2\n")
    with pytest.raises(ValueError, match=r"baskets\.csv, line 3: column 'product_id'"):
        ic.read_baskets(path)
    path.write_text("order_id,product_id,rank\n1,2,1\n1,3,2.5\n")
    with pytest.raises(ValueError, match="column 'rank' is not an integer"):
        ic.read_baskets(path)
    path.write_text("order_id,product_id,rank\n1,2,1\n1,3,3\n5,1,1\n")
    with pytest.raises(ValueError, match=r"baskets\.csv: order 1 has ranks \[1, 3\]"):
        ic.read_baskets(path)
    path.write_text("order_id,product_id,rank\n1,2,1\n1,3,1\n")
    with pytest.raises(ValueError, match="order 1 has ranks"):
        ic.read_baskets(path)
    path.write_text("order_id,product_id,rank\n1,2,2\n1,3,1\n")
    assert ic.read_baskets(path)["rank"].tolist() == [2, 1]


# --------------------------------------------------------------------------- temperatures


def test_read_temperatures(temps, cities):
    assert len(temps) == 429_157
    assert temps["date"].min() == pd.Timestamp("1995-01-01")
    assert temps["date"].max() == pd.Timestamp("2019-12-31")
    assert not (temps["value"] == -99).any()
    assert temps["value"].isna().sum() > 0
    assert len(cities) == 47 and list(cities.columns) == ["state", "city", "lat", "lon"]


def test_paper_frame_counts(october):
    assert october["city_idx"].nunique() == 44
    assert not october["value"].isna().any()
    assert october["target"].all()
    assert len(october) == 13 * 31 * 44
    assert {"Arizona", "Connecticut", "South Dakota", "Delaware"}.isdisjoint(october["state"])
    assert "Washington DC" in set(october["city"])
    assert set(october["date"].dt.month) == {10}
    # Deterministic city order: sorted by (state, city), the same block every day.
    table = tp.city_table(october)
    assert table[["state", "city"]].equals(
        table[["state", "city"]].sort_values(["state", "city"], ignore_index=True)
    )
    for _, day in october.groupby("date"):
        assert day["city_idx"].tolist() == list(range(44))

    splits = tp.split_years(october)
    assert (len(splits.train), len(splits.val), len(splits.test)) == (8_184, 5_456, 4_092)
    assert set(splits.train["year"]) == set(range(2007, 2013))
    assert set(splits.val["year"]) == set(range(2013, 2017))
    assert set(splits.test["year"]) == set(range(2017, 2020))


def test_paper_frame_keep_missing(temps, cities):
    kept = tp.paper_frame(temps, cities, missing="keep")
    assert kept["city_idx"].nunique() == 47
    assert len(kept) == 13 * 31 * 47
    gaps = kept[kept["value"].isna()]
    assert len(gaps) == 11
    assert set(gaps["state"]) == {"Arizona", "Connecticut", "South Dakota"}


def test_paper_frame_lags(temps, cities, october):
    lagged = tp.paper_frame(temps, cities, lags=2)
    assert lagged["city_idx"].nunique() == 44
    context = lagged[~lagged["target"]]
    assert set(context["date"].dt.strftime("%m-%d")) == {"09-29", "09-30"}
    assert len(context) == 2 * 13 * 44
    targets = lagged[lagged["target"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(targets, october)
    dates = set(lagged["date"])
    for lag in (1, 2):
        assert set(october["date"] - pd.Timedelta(days=lag)) <= dates


def test_kaggle_format_odd_rows(tmp_path):
    header = "Region,Country,State,City,Month,Day,Year,AvgTemperature\n"
    rows = [
        "North America,US,Ohio,Akron Canton,10,1,2010,50.5",
        "North America,US,Ohio,Akron Canton,10,1,2010,50.5",  # exact duplicate
        "North America,US,Ohio,Akron Canton,10,2,2010,-99",
        "North America,US,Ohio,Akron Canton,10,0,2010,51.0",  # day 0
        "North America,US,Ohio,Akron Canton,10,3,200,51.0",  # year 200
        "North America,US,Texas,Abilene,10,1,2010,70.0",
        "North America,US,Texas,Abilene,10,2,2010,71.0",
        "North America,US,Alaska,Anchorage,10,1,2010,30.0",
        "Europe,Germany,,Berlin,10,1,2010,40.0",
    ]
    path = tmp_path / "city_temperature.csv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write(header + "\n".join(rows) + "\n")
    temps = tp.read_city_temperatures(path)
    assert len(temps) == 7  # the day-0 and year-200 rows are dropped
    assert temps["value"].isna().sum() == 1
    cities_path = tmp_path / "cities.csv"
    cities_path.write_text(
        "State,City,Latitude,Longitude\nOhio,Akron Canton,40.9,-81.4\n"
        "Texas,Abilene,32.4,-99.7\nAlaska,Anchorage,61.2,-149.9\n"
    )
    cities = tp.read_cities(cities_path)
    kw = {"years": (2010, 2010)}
    kept = tp.paper_frame(temps, cities, missing="keep", **kw)
    assert kept["city"].unique().tolist() == ["Akron Canton", "Abilene"]  # Alaska excluded
    first_two = kept[kept["day"] <= 2].set_index(["city", "day"])["value"]
    assert first_two.loc[("Akron Canton", 1)] == 50.5
    assert np.isnan(first_two.loc[("Akron Canton", 2)])
    assert first_two.loc[("Abilene", 2)] == 71.0
    assert len(kept) == 2 * 31  # the absent days 3..31 are on the grid as NaN
    assert tp.paper_frame(temps, cities, **kw).empty  # so every city has gaps in October

    conflicting = pd.concat([temps, temps.iloc[[0]].assign(value=49.0)], ignore_index=True)
    with pytest.raises(ValueError, match="conflicting values for Ohio/Akron Canton"):
        tp.paper_frame(conflicting, cities, **kw)


def test_malformed_temperature_files(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("Country,State,City,Month,Day,Year\nUS,Ohio,Akron,10,1,2010\n")
    with pytest.raises(ValueError, match=r"t\.csv: missing column\(s\) \['AvgTemperature'\]"):
        tp.read_city_temperatures(path)
    path.write_text(
        "Country,State,City,Month,Day,Year,AvgTemperature\nUS,Ohio,Akron,10,1,2010,warm\n"
    )
    with pytest.raises(ValueError, match=r"t\.csv, line 2: column 'AvgTemperature'"):
        tp.read_city_temperatures(path)
    path.write_text("State,City,Latitude\nOhio,Akron,40\n")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['Longitude'\]"):
        tp.read_cities(path)
    with pytest.raises(FileNotFoundError, match="city_temperature"):
        tp.read_city_temperatures(tmp_path / "absent.csv")


def test_haversine():
    new_york, london = (40.7128, -74.0060), (51.5074, -0.1278)
    assert tp.haversine_km(*new_york, *london) == pytest.approx(5570, abs=10)
    rng = np.random.default_rng(0)
    lat1, lat2 = rng.uniform(-90, 90, (2, 100))
    lon1, lon2 = rng.uniform(-180, 180, (2, 100))
    d = tp.haversine_km(lat1, lon1, lat2, lon2)
    np.testing.assert_allclose(d, tp.haversine_km(lat2, lon2, lat1, lon1))
    np.testing.assert_allclose(tp.haversine_km(lat1, lon1, lat1, lon1), 0, atol=1e-9)
    assert (d >= 0).all() and (d <= np.pi * tp.EARTH_RADIUS_KM + 1e-6).all()


def test_nearest_neighbours(october):
    table = tp.city_table(october)
    lat, lon = table["lat"].to_numpy(), table["lon"].to_numpy()
    nn = tp.nearest_neighbours(lat, lon, 5)
    assert nn.shape == (44, 5)
    assert not (nn == np.arange(44)[:, None]).any()
    dist = tp.haversine_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    for i in range(44):
        others = np.delete(np.arange(44), i)
        best = others[np.argsort(dist[i, others], kind="stable")[:5]]
        assert nn[i].tolist() == best.tolist()
    assert tp.nearest_neighbours(lat, lon, 43).shape == (44, 43)
    with pytest.raises(ValueError, match="k must be"):
        tp.nearest_neighbours(lat, lon, 44)


def test_readme_promises_truncated_gzip_reader(tmp_path):
    from efa.datasets import temperature

    path = tmp_path / "t.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("Region,Country,State,City,Month,Day,Year,AvgTemperature\n" * 1000)
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(ValueError, match=r"t.csv.gz cannot be read \(EOFError"):
        temperature.read_city_temperatures(path)
