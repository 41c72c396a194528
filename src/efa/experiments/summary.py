"""README tables generated from the committed ``results/*/results.json`` files."""

from __future__ import annotations

import json
import re
from pathlib import Path

from efa.experiments.report import fmt

START, END = "<!-- results:start -->", "<!-- results:end -->"


def tables(results: Path) -> str:
    parts = []
    for path in sorted(Path(results).glob("*/results.json")):
        doc = json.loads(path.read_text())
        parts += [
            f"**{doc['experiment']}** — `{doc['command']}` ({len(doc['seeds'])} seeds, "
            f"{doc['wall_seconds']:.0f} s; details in `results/{path.parent.name}/results.md`)",
            "",
            "| setting | model | metric | mean ± std | paper |",
            "|---|---|---|---|---|",
        ]
        for r in doc["rows"]:
            paper = "—" if r["paper"] is None else f"{r['paper']:.3f}"
            parts.append(
                f"| {r['setting']} | {r['model']} | {r['metric']} | {fmt(r['mean'], r['std'])} "
                f"| {paper} |"
            )
        parts.append("")
    return "\n".join(parts).strip() or "(no results yet)"


def update_readme(readme: Path, results: Path) -> bool:
    """Rewrite the block between the results markers; True if the file changed."""
    text = Path(readme).read_text()
    if START not in text or END not in text:
        raise ValueError(f"{readme} has no {START} ... {END} block")
    block = f"{START}\n{tables(results)}\n{END}"
    new = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    if new != text:
        Path(readme).write_text(new)
    return new != text
