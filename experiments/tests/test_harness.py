"""The experiments' harness: results made by another command are kept, SIGTERM stops the workers,
journals resume interrupted runs (never unpickled), summary and replot name what is missing."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import efa
from efa.training import checkpoint as checkpoint_mod
from tests.helpers import make_model, mixed_data


def _efa(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "efa.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, cwd=kw.get("cwd"),
                          timeout=300)


def _square(job):
    if job.get("fail"):
        raise RuntimeError("interrupted")
    return {"x": job["x"], "y": job["x"] ** 2}


class _Planted:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


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
def test_results_made_by_another_command_are_kept(tmp_path):
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
def test_sigterm_stops_the_workers(tmp_path):
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


@pytest.mark.slow
def test_an_interrupted_run_resumes_from_its_journal(tmp_path):
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


def test_a_pickle_in_a_journal_is_refused_not_loaded(tmp_path):
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


def test_a_resumed_run_says_its_wall_time_covers_only_the_jobs_it_ran():
    from experiments.harness.summary import _wall

    doc = {"wall_seconds": 3113.4}
    assert _wall(doc) == "3113 s"
    assert _wall({**doc, "resumed_jobs": [58, 78]}).startswith("3113 s for the last 20 of 78 jobs")


@pytest.mark.slow
def test_a_job_killed_mid_fit_resumes_from_its_own_checkpoint(tmp_path, monkeypatch):
    from efa.training import train as train_mod
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


def test_only_runs_some_jobs_into_the_journal_and_the_full_run_finishes(tmp_path, monkeypatch,
                                                                      request):
    from typer.testing import CliRunner

    from efa.cli import app
    from experiments import EXPERIMENTS
    from experiments.harness import runner

    EXPERIMENTS.register(("tests.toy_experiment", "squares"), name="toy")
    request.addfinalizer(lambda: EXPERIMENTS.unregister("toy"))
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


def test_summary_refuses_a_missing_or_empty_results_folder(tmp_path):
    from typer.testing import CliRunner

    from efa.cli import app

    readme = tmp_path / "README.md"
    text = "x\n<!-- results:start -->\nkept\n<!-- results:end -->\n"
    readme.write_text(text)
    (tmp_path / "empty").mkdir()
    for folder in (tmp_path / "nowhere", tmp_path / "empty"):
        r = CliRunner().invoke(app, ["summary", "--readme", str(readme), "--results",
                                     str(folder)])
        assert r.exit_code != 0 and "README is unchanged" in r.output, r.output
        assert readme.read_text() == text


def test_replot_names_what_an_incomplete_results_file_lacks(tmp_path):

    from typer.testing import CliRunner

    from efa.cli import app

    folder = tmp_path / "r"
    folder.mkdir()
    for doc, message in (({"experiment": "synthetic", "command": "x", "seeds": [0]},
                          r"incomplete: it has no \['rows'\]"),
                         ({"experiment": "synthetic", "command": "x", "seeds": [0],
                           "rows": [{"setting": "a"}]}, "row 0 has no"),
                         ([1], "must hold a JSON object")):
        (folder / "results.json").write_text(json.dumps(doc))
        r = CliRunner().invoke(app, ["replot", str(folder)])
        assert r.exit_code == 2 and "efa: error" in r.output, r.output
        assert __import__("re").search(message, r.output), r.output


def test_the_sequences_page_says_missed_when_the_files_say_so(tmp_path):
    """docs/sequences.md's targets are computed, not typed: an EFA row made worse than the
    paper's, or a peer made better than EFA on every seed, turns the status."""
    from experiments.efa_paper import sequences_page

    results = Path(__file__).resolve().parents[2] / "results"
    for name in ("movielens-sequence", "movielens-ratings", "instacart"):
        (tmp_path / name).mkdir()
        for file in ("results.json", "benchmark.json"):
            if (results / name / file).exists():
                (tmp_path / name / file).write_text((results / name / file).read_text())
    assert "| EFA better than the paper's EFA on every row | met" in \
        sequences_page.targets_table(tmp_path)
    path = tmp_path / "instacart" / "results.json"
    doc = json.loads(path.read_text())
    for row in doc["rows"]:
        if row["model"] == "EFA + distinct" and row["metric"] == "test CE":
            row["values"] = [v + 0.5 for v in row["values"]]
            row["mean"] += 0.5
    path.write_text(json.dumps(doc))
    table = sequences_page.targets_table(tmp_path)
    assert "| EFA better than the paper's EFA on every row | **missed**" in table
    assert "Logit + distinct on uni Instacart (+0." in table
    assert "EFA lower on 0 of 5" in sequences_page.results_tables(tmp_path)


def test_the_temperature_page_follows_the_file(tmp_path):
    """docs/temperature.md's targets are computed: a seed on which EFA ℓ=2 is made worse than
    the Gaussian conditional shows up in the count."""
    from experiments.efa_paper import temperature_page

    source = Path(__file__).resolve().parents[2] / "results" / "temperature" / "results.json"
    (tmp_path / "temperature").mkdir()
    doc = json.loads(source.read_text())
    mse = next(r["values"] for r in doc["rows"]
               if r["model"] == "EFA ℓ=2" and r["metric"] == "test MSE (°F²)")
    assert f"ℓ=2 {sum(mse) / len(mse):.2f} (lower on every seed)" in \
        temperature_page.targets_block(source.parents[1])
    for row in doc["rows"]:
        if row["model"] == "EFA ℓ=2" and row["metric"] == "test MSE (°F²)":
            row["values"][0] = 99.0
    (tmp_path / "temperature" / "results.json").write_text(json.dumps(doc))
    assert "(lower on 4 of 5 seeds)" in temperature_page.targets_block(tmp_path)
