"""The `efa` command: one-line errors checked before any work, version and fast listing, training
settings files."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import efa


def _efa(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "efa.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, cwd=kw.get("cwd"),
                          timeout=300)


@pytest.mark.slow
def test_cli_errors_are_one_line_and_checked_first(tmp_path):
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


def test_version_and_fast_listing():
    r = _efa("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"efa {efa.__version__}"
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, efa.cli; efa.cli.app(['list'], standalone_mode=False);"
         " print('torch' in sys.modules, 'matplotlib' in sys.modules)"],
        capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip().splitlines()[-1] == "False False", probe.stdout + probe.stderr
    assert "synthetic" in probe.stdout


def test_train_config_must_be_a_json_object(tmp_path):
    from typer.testing import CliRunner

    from efa.cli import app

    config = tmp_path / "c.json"
    config.write_text("[1, 2]")
    r = CliRunner().invoke(app, ["train", str(tmp_path / "d"), "--model", str(tmp_path / "m"),
                                 "--out", str(tmp_path / "o"), "--config", str(config)])
    assert r.exit_code == 2 and "must hold a JSON object of TrainConfig fields" in r.output
