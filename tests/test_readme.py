"""The README's Python example runs, and its results tables match the committed files."""

import re
from pathlib import Path

import pytest

from experiments.harness.summary import (
    DEFAULTS_END,
    DEFAULTS_START,
    END,
    SCALE_END,
    SCALE_START,
    START,
    defaults_tables,
    scale_tables,
    tables,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_readme_example_runs(tmp_path, monkeypatch):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # the example can be run again in the same folder
        for code in blocks:
            exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "my-efa-model" / "model.safetensors").exists()


def test_readme_tables_are_generated_from_results():
    text = (ROOT / "README.md").read_text()
    block = text[text.index(START) + len(START) : text.index(END)].strip()
    assert block == tables(ROOT / "results"), "run `efa summary` to regenerate the README tables"
    block = text[text.index(SCALE_START) + len(SCALE_START) : text.index(SCALE_END)].strip()
    assert block == scale_tables(ROOT / "results"), "run `efa summary` (the scaling tables)"
    block = text[text.index(DEFAULTS_START) + len(DEFAULTS_START):text.index(DEFAULTS_END)]
    assert block.strip() == defaults_tables(ROOT / "results"), "run `efa summary` (defaults)"
