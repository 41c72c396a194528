"""Regressions for the hardening issue ("No silent wrong answers"): each test failed on efa
0.1 and names the finding it covers (#1 … #23)."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import efa
from efa import checkpoint as checkpoint_mod
from efa import spatial
from efa.families import Gaussian, Poisson
from tests.helpers import make_model, mixed_data

ROOT = Path(__file__).resolve().parents[1]


def _data(n=20, seed=0):
    return mixed_data(n=n, seed=seed, dtype=torch.float32)


def _model(seed=0, **kw):
    return make_model(seed=seed, dtype=torch.float32, num_layers=1, **kw)


# --------------------------------------------------------------------------- silent wrong results


def test_01_checkpoint_is_tied_to_model_and_data(tmp_path):
    efa.fit(_model(), _data(), None, max_epochs=1, progress=False, checkpoint_dir=str(tmp_path))
    with pytest.raises(ValueError, match="another data"):
        efa.fit(_model(), _data(seed=7), None, max_epochs=1, progress=False,
                checkpoint_dir=str(tmp_path))
    with pytest.raises(ValueError, match="another model"):
        efa.fit(_model(num_heads=1), _data(), None, max_epochs=1, progress=False,
                checkpoint_dir=str(tmp_path))
    # The explicit way to start over.
    hist = efa.fit(_model(), _data(seed=7), None, max_epochs=1, progress=False,
                   checkpoint_dir=str(tmp_path), resume=False)
    assert hist.epochs_run == 1


def test_02_no_predicted_positions_is_never_a_perfect_score():
    data = _data()
    none = data.with_scored(torch.zeros_like(data.valid()))
    with pytest.raises(ValueError, match="no predicted position"):
        efa.fit(_model(), data, none, max_epochs=1, progress=False)
    with pytest.warns(UserWarning, match="no predicted position"):
        scores = efa.evaluate(_model(), none)
    assert all(np.isnan(v) for v in scores.values())


def test_03_mask_shapes_must_match_exactly():
    items = [[0, 1, 2], [1, 2]]
    with pytest.raises(ValueError, match=r"observed\['item'\], sequence 1: 1 entries for a "
                                         r"sequence of length 2"):
        efa.Sequences.from_lists({"item": items}, observed={"item": [[True] * 3, [True]]})
    with pytest.raises(ValueError, match="sequence 0: 4 entries"):
        efa.Sequences.from_lists({"item": items}, observed={"item": [[True] * 4, [True] * 2]})
    with pytest.raises(ValueError, match="field 'y' has 1 sequences, field 'item' has 2"):
        efa.Sequences.from_lists({"item": items, "y": [[1.0, 2.0, 3.0]]})


def test_04_non_finite_padding_and_overflow_are_refused():
    data = _data()
    short = int(data.lengths.argmin())
    n = int(data.lengths[short])
    temp = data.fields["temp"].clone()
    temp[short, n] = float("nan")  # padding
    bad = efa.Sequences({**data.fields, "temp": temp}, data.lengths, data.observed)
    with pytest.raises(ValueError, match=f"sequence {short}, position {n}, which is padding"):
        efa.evaluate(_model(), bad)
    big = data.fields["temp"].double().clone()
    big[0, 0] = 1e39  # finite in float64, inf in the model's float32
    huge = efa.Sequences({**data.fields, "temp": big}, data.lengths,
                         {"temp": torch.ones_like(data.valid())})
    with pytest.raises(ValueError, match="sequence 0, position 0 does not fit the model's "
                                         "torch.float32"):
        efa.evaluate(_model(), huge)
    # A model whose log-likelihood overflows is stopped with the place it overflowed.
    model = _model()
    with torch.no_grad():
        model.readouts["count"].net[-1].weight.fill_(1e30)
    with pytest.raises(FloatingPointError, match="field 'count' at sequence 0, position 0"):
        efa.evaluate(model, data)


def test_05_constant_coordinates_and_zero_scales(recwarn):
    with pytest.raises(ValueError, match="scale.0. = 0.0 must be positive"):
        efa.Attribute("tau", size=2, scale=[0.0, 1.0])
    with pytest.raises(ValueError, match="scale must be a positive finite number"):
        efa.Value("y", Gaussian(), scale=0.0)
    df = pd.DataFrame({"site": [0, 1, 2] * 4, "time": np.repeat(range(4), 3),
                       "lat": 40.0, "lon": [1.0, 2.0, 3.0] * 4, "y": np.arange(12.0)})
    data = spatial.frame_to_sequences(df, site="site", time="time", lat="lat", lon="lon",
                                      value="y")
    with pytest.warns(UserWarning, match=r"coordinate 0 \(lat\) is constant"):
        model = spatial.spatial_efa(data, num_layers=1)
    assert torch.isfinite(model.predict_mean(data)["value"]).all()
    single = spatial.frame_to_sequences(df[df.site == 0], site="site", time="time", lat="lat",
                                        lon="lon", value="y")
    with pytest.warns(UserWarning, match="constant"):
        model = spatial.spatial_efa(single, num_layers=1)
    assert torch.isfinite(model.predict_mean(single)["value"]).all()


def test_06_frame_rows_without_a_key_and_cut_files(tmp_path):
    df = pd.DataFrame({"user": [1.0, np.nan, 2.0], "item": [0, 1, 2]})
    with pytest.raises(ValueError, match="'user' .* missing in 1 rows"):
        efa.Sequences.from_frame(df, by="user", fields={"item": "item"})
    from efa.datasets import movielens

    src = (efa.datasets.root.data_root() / "movielens-100k" / "u.data").read_text()
    cut = tmp_path / "u.data"
    cut.write_text("\n".join(src.splitlines()[:50_000]) + "\n")
    with pytest.warns(UserWarning, match="50,000 data rows; the official MovieLens-100K"):
        movielens.read_ratings(cut)


def test_07_failed_fit_leaves_usable_weights():
    """A run that blows up in its second epoch hands back the best weights so far."""
    data, val = _data(), _data(seed=1)
    reference = _model()
    with pytest.warns(efa.train.StillImproving):
        efa.fit(reference, data, val, max_epochs=1, batch_size=10, progress=False)
    calls = []

    class Diverging(type(reference)):
        def loss(self, batch, check=False):
            calls.append(1)
            out = super().loss(batch, check)
            return out * float("nan") if len(calls) == 3 else out  # epoch 1, first batch

    model = _model()
    model.__class__ = Diverging
    with pytest.raises(FloatingPointError, match="at epoch 1"):
        efa.fit(model, data, val, max_epochs=3, batch_size=10, progress=False)
    assert not model.training
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, reference.state_dict()[k])


# --------------------------------------------------------------------------- messages


def test_08_float_held_integers_are_located_and_explained():
    counts = torch.tensor([[1.0, 2.0, 3.0], [4.0, 2.5, 1.0]])
    data = efa.Sequences({"c": counts}, torch.tensor([3, 3]))
    model = efa.EFA(efa.EFAConfig([efa.Value("c", Poisson(), dim=4)], num_layers=1))
    with pytest.raises(ValueError, match=r"2.5 at sequence 1, position 1 is not a whole number"
                                         r".*nullable 'Int64'"):
        model.check(data)
    whole = efa.Sequences({"c": counts.round()}, torch.tensor([3, 3]))
    with pytest.raises(ValueError, match=r"integer tensor, got dtype torch.float32 .*\.long\(\)"):
        model.check(whole)
    # Support errors name the (sequence, position), not a flat index.
    neg = efa.Sequences({"c": torch.tensor([[1, 2, 3], [4, -1, 1]])}, torch.tensor([3, 3]))
    with pytest.raises(ValueError, match=r"first: -1 at sequence 1, position 1"):
        model.check(neg)


def test_09_library_errors_become_efa_errors(tmp_path):
    df = pd.DataFrame({"user": [1, 1, 2], "genre": ["a", "b", "a"], "y": [1.0, 2.0, 3.0]})
    with pytest.raises(TypeError, match="'genre' holds .* values .e.g. 'a'., not numbers.*astype"):
        efa.Sequences.from_frame(df, by="user", fields={"genre": "genre"})
    df["genre"] = df["genre"].astype("category")
    data = efa.Sequences.from_frame(df, by="user", fields={"genre": "genre", "y": "y"})
    assert data.fields["genre"].tolist() == [[0, 1], [0, 0]]
    with pytest.raises(ValueError, match="the selection is empty"):
        data[torch.arange(0)]
    assert len(data[1]) == 1 and data[-1].fields["y"].tolist() == [[3.0]]
    with pytest.raises(IndexError, match="sequence 5 is out of range"):
        data[5]
    model = _model()
    d = _data()
    with pytest.raises(ValueError, match="'item' is a category"):
        efa.mean_squared_error(model, d, "item")
    with pytest.raises(KeyError, match="no field 'nosuch'"):
        efa.mean_squared_error(model, d, "nosuch")
    with pytest.raises(KeyError, match="no field 'nosuch'"):
        model.attention_weights(d, "nosuch")
    with pytest.raises(TypeError, match="max_epochs=30"):
        efa.fit(model, d, d, 30)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        efa.evaluate(model, d, batch_size=0)
    with pytest.raises(ValueError, match="max_epochs must be an integer"):
        efa.TrainConfig(max_epochs=2.5)
    assert efa.Category("x", np.int64(5)).num_categories == 5
    path = efa.save(model, tmp_path / "m")
    weights = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    with pytest.raises(ValueError, match="model.safetensors is not readable"):
        efa.load(path)
    (path / "config.json").write_text((path / "config.json").read_text()[:40])
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        efa.load(path)
    ckpt = tmp_path / "ckpt"
    efa.fit(_model(), d, None, max_epochs=1, progress=False, checkpoint_dir=str(ckpt))
    blob = (ckpt / "checkpoint.safetensors").read_bytes()
    (ckpt / "checkpoint.safetensors").write_bytes(blob[:100])
    with pytest.raises(ValueError, match="checkpoint.safetensors is not a readable efa"):
        efa.fit(_model(), d, None, max_epochs=2, progress=False, checkpoint_dir=str(ckpt))


def _efa(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "efa.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, cwd=kw.get("cwd"),
                          timeout=300)


@pytest.mark.slow
def test_10_cli_errors_are_one_line_and_checked_first(tmp_path):
    root = tmp_path / "data"
    (root / "temperature").mkdir(parents=True)
    src = efa.datasets.root.data_root() / "temperature"
    blob = (src / "city_temperature_us47.csv.gz").read_bytes()
    (root / "temperature" / "city_temperature_us47.csv.gz").write_bytes(blob[: len(blob) // 3])
    (root / "temperature" / "cities.csv").write_bytes((src / "cities.csv").read_bytes())
    r = _efa("reproduce", "temperature", "--quick", "--seeds", "1", "--out", str(tmp_path),
             "--no-progress", env={"EFA_DATA": str(root)})
    assert r.returncode == 2
    assert "city_temperature_us47.csv.gz cannot be read" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    t0 = time.perf_counter()
    r = _efa("reproduce", "synthetic", "--quick", "--out", "/dev/null/nope")
    assert r.returncode == 2 and "not a folder" in r.stderr
    assert time.perf_counter() - t0 < 30  # refused before any work


@pytest.mark.slow
def test_11_results_made_by_another_command_are_kept(tmp_path):
    first = _efa("reproduce", "synthetic", "--quick", "--seeds", "1", "--out", str(tmp_path),
                 "--no-progress")
    assert first.returncode == 0, first.stderr
    folder = tmp_path / "synthetic"
    (folder / "mine.txt").write_text("a user's file")
    before = (folder / "results.json").read_text()
    other = _efa("reproduce", "synthetic", "--quick", "--seeds", "2", "--out", str(tmp_path),
                 "--no-progress")
    assert other.returncode == 2 and "--force" in other.stderr
    assert (folder / "results.json").read_text() == before
    from experiments.harness.summary import tables

    with pytest.raises(ValueError, match="a --quick run"):
        tables(tmp_path)


@pytest.mark.slow
def test_12_sigterm_stops_the_workers(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "efa.cli", "reproduce", "synthetic", "--seeds", "2", "--out",
         str(tmp_path), "--no-progress", "--workers", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children = []
    for _ in range(600):
        time.sleep(0.1)
        out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
        children = [int(p) for p in out.stdout.split()]
        if len(children) >= 2:
            break
    assert children, "the runner started no workers"
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    deadline = time.time() + 30
    alive = children
    while alive and time.time() < deadline:
        time.sleep(0.2)
        alive = [p for p in children if Path(f"/proc/{p}").exists()
                 and "Z" not in Path(f"/proc/{p}/stat").read_text().split()[2]]
    assert not alive, f"workers {alive} survived SIGTERM to the runner"


def test_13_save_keeps_foreign_files_and_follows_the_umask(tmp_path):
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


def test_15_version_and_fast_listing():
    r = _efa("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"efa {efa.__version__}"
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, efa.cli; efa.cli.app(['list'], standalone_mode=False);"
         " print('torch' in sys.modules, 'matplotlib' in sys.modules)"],
        capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip().splitlines()[-1] == "False False", probe.stdout + probe.stderr
    assert "synthetic" in probe.stdout


def test_16_no_progress_bar_in_logs(capfd):
    efa.fit(_model(), _data(), None, max_epochs=2, progress=True)
    assert "fit:" not in capfd.readouterr().err  # stderr is not a terminal here


def test_17_thread_count_is_recorded(tmp_path):
    model = _model()
    hist = efa.fit(model, _data(), None, max_epochs=1, progress=False, threads=1)
    assert hist.threads == 1 and not hasattr(model, "train_threads_")  # nothing on the model
    path = efa.save(model, tmp_path / "m", history=hist)
    assert json.loads((path / "config.json").read_text())["train_threads"] == 1
    assert efa.storage.metadata(path)["train_threads"] == 1


def test_19_default_dtype_float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        data = efa.Sequences.from_lists({"movie": [[0, 1, 2], [2, 1]],
                                         "rating": [[1, 2, 3], [2, 3]]})
        model = efa.EFA(efa.EFAConfig([efa.Category("movie", 3, dim=4),
                                       efa.Value("rating", Poisson(shift=1), dim=4)],
                                      num_layers=1, max_len=3))
        efa.fit(model, data, None, max_epochs=1, progress=False)
        assert all(np.isfinite(v) for v in efa.evaluate(model, data).values())
        model.float()
        assert all(np.isfinite(v) for v in efa.evaluate(model, data).values())
    finally:
        torch.set_default_dtype(old)


def test_20_missing_value_sentinels():
    df = pd.DataFrame({"site": [0, 1] * 3, "time": np.repeat(range(3), 2), "lat": [1.0, 2.0] * 3,
                       "lon": [3.0, 4.0] * 3, "t": [50.0, -99.0, 51.0, 52.0, 49.0, 50.0]})
    kw = dict(site="site", time="time", lat="lat", lon="lon", value="t")
    with pytest.warns(UserWarning, match="1 values equal to -99.*missing=-99"):
        spatial.frame_to_sequences(df, **kw)
    data = spatial.frame_to_sequences(df, missing=-99, **kw)
    assert not data.observed["value"][0, 1] and data.observed["value"].sum() == 5


def test_21_per_position_log_likelihoods():
    model, data = _model(), _data()
    lls = efa.log_likelihoods(model, data)
    means = efa.evaluate(model, data)
    for name, lp in lls.items():
        m = data.predicted(name)
        assert torch.isnan(lp[~m]).all() and torch.isfinite(lp[m]).all()
        assert float(lp[m].mean()) == pytest.approx(means[name], abs=1e-5)


def test_22_threads_setting():
    before = torch.get_num_threads()
    seen = []

    class Spy(type(_model())):
        def loss(self, data, check=False):
            seen.append(torch.get_num_threads())
            return super().loss(data, check)

    model = _model()
    model.__class__ = Spy
    efa.fit(model, _data(), None, max_epochs=1, progress=False, threads=2)
    assert set(seen) == {2} and torch.get_num_threads() == before


class _Payload:
    def __reduce__(self):
        return (Path.touch, (Path(os.environ["EFA_TEST_PWNED"]),))


def test_23_checkpoints_are_not_pickles(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("EFA_TEST_PWNED", str(marker))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    with open(folder / "checkpoint.pt", "wb") as f:
        pickle.dump({"model": _Payload()}, f)
    with pytest.raises(ValueError, match="pickled checkpoint .* not loaded"):
        efa.fit(_model(), _data(), None, max_epochs=1, progress=False, checkpoint_dir=str(folder))
    assert not marker.exists()
    efa.fit(_model(), _data(), None, max_epochs=1, progress=False, checkpoint_dir=str(folder),
            resume=False)
    assert (folder / "checkpoint.safetensors").exists() and not marker.exists()


def test_readme_promises_truncated_gzip_reader(tmp_path):
    from efa.datasets import temperature

    path = tmp_path / "t.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("Region,Country,State,City,Month,Day,Year,AvgTemperature\n" * 1000)
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(ValueError, match=r"t.csv.gz cannot be read \(EOFError"):
        temperature.read_city_temperatures(path)


def _square(job):
    if job.get("fail"):
        raise RuntimeError("interrupted")
    return {"x": job["x"], "y": job["x"] ** 2}


@pytest.mark.slow
def test_22_an_interrupted_run_resumes_from_its_journal(tmp_path):
    from experiments.harness import runner

    journal = tmp_path / ".exp.jobs"
    jobs = [{"x": i, "cost": i} for i in range(4)] + [{"x": 9, "fail": True, "cost": -1.0}]
    with pytest.raises(RuntimeError, match="interrupted"):  # the cheapest job runs last
        runner.run_jobs(_square, jobs, workers=1, journal=journal)
    assert len(list(journal.glob("*.json"))) == 4  # JSON: the results round-trip
    calls = []

    def counting(job):
        calls.append(job["x"])
        return _square({**job, "fail": False})

    out = runner.run_jobs(counting, jobs, workers=1, journal=journal)
    assert calls == [9]  # only the missing job ran
    assert [r["y"] for r in out] == [0, 1, 4, 9, 81]  # in job order
    parallel = runner.run_jobs(_square, jobs[:4], workers=2, journal=tmp_path / "j2")
    assert parallel == out[:4] and len(list((tmp_path / "j2").glob("*.json"))) == 4
    # in worker processes, a job that fails first does not cost the others their results
    first = [{**jobs[4], "cost": 9.0}, *jobs[:4]]
    with pytest.raises(RuntimeError, match="interrupted"):
        runner.run_jobs(_square, first, workers=2, journal=tmp_path / "j4")
    assert len(list((tmp_path / "j4").glob("*.json"))) == 4
    assert runner.job_key(jobs[0]) == runner.job_key(dict(reversed(list(jobs[0].items()))))
    # what plain JSON would change (a tuple, a NaN, an array) is tagged, and read back exactly
    odd = [{"x": 1.5, "cost": 1}]
    kept = runner.run_jobs(lambda j: {"pair": (1, 2), "nan": float("nan"), "a": np.arange(3.0),
                                      (1, "b"): [np.int64(2)]}, odd, workers=1,
                           journal=tmp_path / "j3")
    assert sorted(p.suffix for p in (tmp_path / "j3").iterdir()) == [".json", ".safetensors"]
    again = runner.run_jobs(_square, odd, workers=1, journal=tmp_path / "j3")  # not rerun
    assert again[0] is not kept[0] and again[0]["pair"] == (1, 2)
    assert np.isnan(again[0]["nan"]) and again[0][1, "b"] == [2]
    np.testing.assert_array_equal(again[0]["a"], np.arange(3.0))


def test_32_1_a_pickle_in_a_journal_is_refused_not_loaded(tmp_path):
    """A planted KEY.pkl (the key is a public hash of the job) would run code if unpickled."""
    from experiments.harness import runner

    jobs = [{"x": 3, "cost": 1}]
    journal = tmp_path / "j"
    journal.mkdir()
    marker = tmp_path / "ran"
    (journal / f"{runner.job_key(jobs[0])}.pkl").write_bytes(
        pickle.dumps(_Planted(str(marker))))
    with pytest.raises(ValueError, match="never loads pickles"):
        runner.run_jobs(_square, jobs, workers=1, journal=journal)
    assert not marker.exists()


class _Planted:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_22_a_resumed_run_says_its_wall_time_covers_only_the_jobs_it_ran():
    from experiments.harness.summary import _wall

    doc = {"wall_seconds": 3113.4}
    assert _wall(doc) == "3113 s"
    assert _wall({**doc, "resumed_jobs": [58, 78]}).startswith("3113 s for the last 20 of 78 jobs")


def _two_fits(job):
    """A job with two fits in it (the second warm from the first), scored at the end."""
    model = make_model(seed=job["seed"], dtype=torch.float32, num_layers=1)
    train, val = (mixed_data(n=40, seed=k, dtype=torch.float32) for k in (0, 1))
    first = efa.fit(model, train, val, max_epochs=3, patience=3, seed=job["seed"],
                    progress=False)
    second = efa.fit(model, train, val, max_epochs=4, patience=4, lr=1e-3, seed=1,
                     progress=False)
    return {"seed": job["seed"], "val": first.val_loss + second.val_loss,
            "test": efa.evaluate(model, mixed_data(n=20, seed=2, dtype=torch.float32))}


@pytest.mark.slow
def test_22_a_job_killed_mid_fit_resumes_from_its_own_checkpoint(tmp_path, monkeypatch):
    from efa import train as train_mod
    from experiments.harness import runner

    monkeypatch.setattr(train_mod, "JOB_SAVE_SECONDS", 0.0)  # save every epoch, as a long fit
    jobs = [{"seed": 3}]
    clean = runner.run_jobs(_two_fits, jobs, workers=1, journal=tmp_path / "clean")
    journal = tmp_path / ".exp.jobs"
    real_save, calls = checkpoint_mod.save_state, []

    def dying_save(*args, **kwargs):  # killed after the second fit's second epoch
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real_save(*args, **kwargs)

    monkeypatch.setattr(checkpoint_mod, "save_state", dying_save)
    with pytest.raises(KeyboardInterrupt):
        runner.run_jobs(_two_fits, jobs, workers=1, journal=journal)
    key = runner.job_key(jobs[0])
    assert sorted(p.name for p in (journal / f"{key}.fits").iterdir()) == ["fit0", "fit1"]
    assert train_mod._CONTEXT.get() is None  # reset after the job, also on a kill
    saved = []
    monkeypatch.setattr(checkpoint_mod, "save_state",
                        lambda *a, **k: saved.append(1) or real_save(*a, **k))
    resumed = runner.run_jobs(_two_fits, jobs, workers=1, journal=journal)
    assert resumed == clean  # the same numbers as a run never killed
    # the first fit was complete and the second had one epoch saved: 3 epochs ran, not 3 + 4
    assert len(saved) == 3
    assert not (journal / f"{key}.fits").exists() and (journal / f"{key}.json").exists()
    # a job's checkpoint written for other settings (other code) is not an error: refit
    stale = tmp_path / "stale"
    efa.fit(make_model(seed=3, dtype=torch.float32, num_layers=1),
            mixed_data(n=40, seed=0, dtype=torch.float32), None, max_epochs=1, lr=0.5,
            progress=False, checkpoint_dir=str(stale / f"{key}.fits" / "fit0"))
    assert runner.run_jobs(_two_fits, jobs, workers=1, journal=stale) == clean
    # nothing is checkpointed outside a journal (--quick runs) or after the job
    runner.run_jobs(_two_fits, jobs, workers=1)
    assert train_mod._CONTEXT.get() is None


def test_22_only_runs_some_jobs_into_the_journal_and_the_full_run_finishes(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from efa.cli import app
    from experiments import EXPERIMENTS
    from experiments.harness import runner

    monkeypatch.setitem(EXPERIMENTS, "toy", ("tests.toy_experiment", "squares"))
    from tests import toy_experiment as toy

    picked = runner.select(toy.jobs(None, 2), ["model=Log*", "x=2"])
    assert [(j["model"], j["x"]) for j in picked] == [("Logit", 2), ("Logit", 2)]
    with pytest.raises(ValueError, match="KEY=PATTERN"):
        runner.select(toy.jobs(None, 1), ["model"])
    with pytest.raises(ValueError, match="no key 'modle'"):
        runner.select(toy.jobs(None, 1), ["modle=Logit"])
    with pytest.raises(ValueError, match="matches none"):
        runner.select(toy.jobs(None, 1), ["model=SASRec"])

    journal = tmp_path / ".toy.jobs"
    done, total = runner.run_only("toy", 2, ["model=Logit"], journal, workers=1,
                                  progress=False)
    assert (done, total) == (4, 8) and not (tmp_path / "toy").exists()  # no results yet
    ran = []
    monkeypatch.setattr(toy, "task", lambda job: ran.append(job) or {**job, "y": job["x"] ** 2})
    out = runner.run_jobs(toy.task, toy.jobs(None, 2), journal=journal)
    assert {j["model"] for j in ran} == {"EFA"} and len(ran) == 4  # only the rest ran
    assert [r["y"] for r in out] == [1, 1, 4, 4, 1, 1, 4, 4]
    result = CliRunner().invoke(app, ["reproduce", "toy", "--seeds", "1", "--only", "x=1",
                                      "--workers", "1", "--out", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    assert "2 of 4 jobs are in" in result.output and not (tmp_path / "cli" / "toy").exists()
    result = CliRunner().invoke(app, ["reproduce", "synthetic", "--quick", "--only",
                                      "model=EFA", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "cannot go with --quick" in result.output
