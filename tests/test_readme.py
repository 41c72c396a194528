"""README's and the user guide's Python examples run, and the generated tables (README's
headline table and every generated block of the docs, `summary.generated_blocks`) match
the committed results files."""

import re
from pathlib import Path

import pytest

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
    """Every generated block is on its page exactly once and equals what `efa summary` writes
    from the committed results."""
    for page, start, end, make in generated_blocks():
        text = (ROOT / page).read_text()
        assert text.count(start) == 1 and text.count(end) == 1, f"{page} lacks {start} ... {end}"
        assert _block(text, start, end) == make(ROOT / "results"), \
            f"run `efa summary` to regenerate {page}"
