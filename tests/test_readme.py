"""README's and the user guide's Python examples run, and the generated tables (README's
headline table, docs/reproductions.md, docs/sequences.md) match the committed results files."""

import re
from pathlib import Path

import pytest

from experiments.efa_paper import sequences_page
from experiments.harness.summary import (
    DEFAULTS_END,
    DEFAULTS_START,
    END,
    HEADLINE_END,
    HEADLINE_START,
    REPRODUCTIONS,
    SCALE_END,
    SCALE_START,
    SEQ_END,
    SEQ_START,
    SEQ_TARGETS_END,
    SEQ_TARGETS_START,
    START,
    defaults_tables,
    headline_table,
    scale_tables,
    tables,
)

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")
                              if "_build" not in p.parts)]


def _blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), flags=re.S)


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_bytes()) <= 12_000


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p)])
def test_examples_run(page, tmp_path, monkeypatch):
    """Every ```python block of the page, in order, in one namespace, twice in the same folder
    (an example can be run again)."""
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        namespace: dict = {}
        for code in _blocks(page):
            exec(compile(code, page, "exec"), namespace)
    if page == "README.md":
        assert (tmp_path / "my-efa-model" / "model.safetensors").exists()


def _block(text: str, start: str, end: str) -> str:
    return text[text.index(start) + len(start) : text.index(end)].strip()


def test_tables_are_generated_from_results():
    readme = (ROOT / "README.md").read_text()
    assert _block(readme, HEADLINE_START, HEADLINE_END) == headline_table(ROOT / "results"), \
        "run `efa summary` to regenerate README's headline table"
    page = (ROOT / REPRODUCTIONS).read_text()
    for start, end, make in ((START, END, tables), (SCALE_START, SCALE_END, scale_tables),
                             (DEFAULTS_START, DEFAULTS_END, defaults_tables)):
        assert _block(page, start, end) == make(ROOT / "results"), \
            f"run `efa summary` to regenerate {REPRODUCTIONS}"
    page = (ROOT / "docs" / "sequences.md").read_text()
    for start, end, make in ((SEQ_START, SEQ_END, sequences_page.results_tables),
                             (SEQ_TARGETS_START, SEQ_TARGETS_END, sequences_page.targets_table)):
        assert _block(page, start, end) == make(ROOT / "results"), \
            "run `efa summary` to regenerate docs/sequences.md"
