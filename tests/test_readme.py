"""README's and the user guide's Python examples run, and the generated tables (README's
headline table and the blocks of docs/reproductions.md, sequences.md and temperature.md) match
the committed results files."""

import re
from pathlib import Path

import pytest

from experiments.harness.summary import PAGES as GENERATED_PAGES
from experiments.harness.summary import generated_blocks

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
    """Every generated block of README and the pages beside it equals what `efa summary`
    writes from the committed results, and each block is on exactly one page."""
    pages = {page: (ROOT / page).read_text()
             for page in ("README.md", *map(str, GENERATED_PAGES))}
    for start, end, make in generated_blocks():
        holders = [page for page, text in pages.items() if start in text]
        assert len(holders) == 1, f"{start} is on {holders or 'no page'}"
        assert _block(pages[holders[0]], start, end) == make(ROOT / "results"), \
            f"run `efa summary` to regenerate {holders[0]}"
