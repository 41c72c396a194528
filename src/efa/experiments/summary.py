"""README tables generated from the committed ``results/*/results.json`` files: per experiment,
its headline metric (the first row's) as settings × models, paper numbers in brackets."""

from __future__ import annotations

import json
import re
from pathlib import Path

from efa.experiments.report import fmt

START, END = "<!-- results:start -->", "<!-- results:end -->"


def table(doc: dict) -> list[str]:
    metric = doc["rows"][0]["metric"]
    rows = [r for r in doc["rows"] if r["metric"] == metric]
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    cell = {(r["setting"], r["model"]): r for r in rows}
    lines = [f"| {metric} | " + " | ".join(models) + " |", "|---" * (len(models) + 1) + "|"]
    for s in settings:
        cells = []
        for m in models:
            r = cell.get((s, m))
            text = "" if r is None else fmt(r["mean"], r["std"])
            if r is not None and r["paper"] is not None:
                text += f" [{r['paper']:.3f}]"
            cells.append(text)
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return lines


def tables(results: Path) -> str:
    parts = []
    for path in sorted(Path(results).glob("*/results.json")):
        doc = json.loads(path.read_text())
        if "--quick" in doc["command"]:
            raise ValueError(
                f"{path} was made by `{doc['command']}`, a --quick run: not results to publish; "
                "rerun the full command"
            )
        parts += [
            f"**{doc['experiment']}** — `{doc['command']}` ({len(doc['seeds'])} seeds, "
            f"{doc['wall_seconds']:.0f} s; all metrics in `results/{path.parent.name}/results.md`)",
            "",
            *table(doc),
            "",
        ]
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
