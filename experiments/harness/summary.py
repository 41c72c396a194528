"""README tables generated from the committed ``results/*/results.json`` files: per experiment,
its headline metric (the first row's) as settings × models, paper numbers in brackets."""

from __future__ import annotations

import json
import re
from pathlib import Path

from experiments.harness.report import fmt

START, END = "<!-- results:start -->", "<!-- results:end -->"
SCALE_START, SCALE_END = "<!-- scale:start -->", "<!-- scale:end -->"
DEFAULTS_START, DEFAULTS_END = "<!-- defaults:start -->", "<!-- defaults:end -->"


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


def headline(doc: dict) -> list[str]:
    """The experiment's own ``headline(doc)`` table if it has one, else :func:`table`."""
    from experiments import EXPERIMENTS, get

    if doc["experiment"] in EXPERIMENTS:
        own = getattr(get(doc["experiment"]), "headline", None)
        if own is not None:
            return own(doc)
    return table(doc)


def _wall(doc: dict) -> str:
    wall = f"{doc['wall_seconds']:.0f} s"
    if doc.get("resumed_jobs"):
        done, total = doc["resumed_jobs"]
        wall += (f" for the last {total - done} of {total} jobs; the others were run by an "
                 "earlier invocation and resumed from its journal")
    return wall


def tables(results: Path) -> str:
    parts = []
    from experiments.harness.report import Report

    for path in sorted(Path(results).glob("*/results.json")):
        doc = json.loads(path.read_text())
        report = Report.from_json(doc, str(path))  # a file missing what a table needs: named
        doc = {**doc, "rows": [{**r, "mean": row.mean, "std": row.std}
                               for r, row in zip(doc["rows"], report.rows, strict=True)]}
        if "--quick" in doc["command"]:
            raise ValueError(
                f"{path} was made by `{doc['command']}`, a --quick run: not results to publish; "
                "rerun the full command"
            )
        parts += [
            f"**{doc['experiment']}** — `{doc['command']}` ({len(doc['seeds'])} "
            f"seed{'s' * (len(doc['seeds']) != 1)}, "
            f"{_wall(doc)}; all metrics in `results/{path.parent.name}/results.md`)",
            "",
            *headline(doc),
            "",
        ]
    return "\n".join(parts).strip() or "(no results yet)"


def scale_tables(results: Path) -> str:
    """The benchmarks of ``results/scale/`` (benchmarks/scale.py, time_to_quality.py): the CPU
    files (``throughput.json`` …), then the GPU ones (``throughput-cuda.json`` …) if present."""
    folder = Path(results) / "scale"
    parts = _scale_device(folder, "")
    cuda = _scale_device(folder, "-cuda")
    if cuda:
        gpu = next((json.loads(p.read_text()).get("environment", {}).get("gpu", {}).get("name")
                    for p in sorted(folder.glob("*-cuda.json"))), None)
        parts += ["", f"**On a GPU** ({gpu or 'CUDA'}; the same models, one process, step times "
                  "after `torch.cuda.synchronize()`, memory = peak CUDA allocation):", ""] + cuda
    return "\n".join(parts).strip() or "(no results yet)"


def _memory(row: dict) -> float:
    return row["peak_gpu_gib"] if "peak_gpu_gib" in row else row["peak_rss_gib"]


def _scale_device(folder: Path, suffix: str) -> list[str]:
    parts = []
    path = folder / f"throughput{suffix}.json"
    if path.exists():
        doc = json.loads(path.read_text())
        rows = [r for r in doc["rows"] if "error" not in r and r["batch"] == doc["batch"]]
        ds = sorted({r["D"] for r in rows})
        models = list(dict.fromkeys(r["model"] for r in rows))
        cell = {(r["model"], r["D"], r["I"]): r for r in rows}
        parts += [f"Predicted tokens per second (peak memory, GiB) — `{doc['command']}` "
                  f"(width {doc['width']}, {doc['layers']} layers, batch {doc['batch']}, "
                  f"{doc['threads']} thread):", "",
                  "| model | " + " | ".join(f"D={d:,} I={i}" for d in ds
                                            for i in sorted({r['I'] for r in rows if r['D'] == d}))
                  + " |", "|---" * (1 + len({(r['D'], r['I']) for r in rows})) + "|"]
        keys = sorted({(r["D"], r["I"]) for r in rows})
        for m in models:
            cells = []
            for d, i in keys:
                r = cell.get((m, d, i))
                cells.append(f"{r['tokens_per_second']:,.0f} ({_memory(r):.1f})" if r else "")
            parts.append(f"| {m} | " + " | ".join(cells) + " |")
        parts += ["", "| ratio (same run) | value |", "|---|---|"]
        parts += [f"| {k} | {v:.2f} |" for k, v in doc["ratios"].items()]
        parts += ["", "| fitted cost exponent | value |", "|---|---|"]
        parts += [f"| {k} | {v:.2f} |" for k, v in doc["exponents"].items()]
        big = [r for r in doc["rows"] if r["batch"] != doc["batch"]]
        for r in big:
            parts.append(f"\nMemory at D={r['D']:,}, I={r['I']}, batch {r['batch']}: {r['model']} "
                         + (f"peak {_memory(r):.2f} GiB" if "error" not in r
                            else f"failed: {r['error']}"))
    path = folder / f"targets{suffix}.json"
    if path.exists():  # the target cells, median of interleaved rounds
        doc = json.loads(path.read_text())
        rounds = min((r.get("rounds", 1) for r in doc["rows"] if "error" not in r), default=0)
        parts += ["", f"The target cells, median of {rounds} interleaved rounds — "
                  f"`{doc['command']}`:", "", "| ratio (same run) | value |", "|---|---|"]
        parts += [f"| {k} | {v:.2f} |" for k, v in doc["ratios"].items()]
    path = folder / f"time_to_quality{suffix}.json"
    if path.exists():
        doc = json.loads(path.read_text())
        curves = doc["curves"]
        times = [c["seconds"] for c in next(iter(curves.values()))][2::2]  # every other eval
        parts += ["", f"Time to quality — `{doc['command']}`: {doc['train_sequences']:,} teacher "
                  f"sequences (D={doc['D']:,}, I={doc['I']}); held-out masked NLL (nats) after "
                  "each model's first seconds of training (the teacher's own NLL, the floor, is "
                  f"{doc['teacher_nll']:.3f}):", "",
                  "| model | " + " | ".join(f"{t:.0f} s" for t in times) + " |",
                  "|---" * (1 + len(times)) + "|"]
        for name, curve in curves.items():
            parts.append(f"| {name} | " + " | ".join(f"{c['nll']:.3f}" for c in curve[2::2])
                         + " |")
    return parts


def defaults_tables(results: Path) -> str:
    """benchmarks/defaults.py's files (``results/defaults/{development,evaluation}.json``):
    per teacher, the excess test NLL of each field over the exact Bayes limit."""
    parts = []
    for role in ("development", "evaluation"):
        path = Path(results) / "defaults" / f"{role}.json"
        if not path.exists():
            continue
        doc = json.loads(path.read_text())
        s = doc["summary"]
        parts += [f"**{role.capitalize()} teachers** — `{doc['command']}`: median excess "
                  f"{s['median_excess']:.4f} nats, {s['share_within_0.01']:.0%} of (teacher, "
                  f"field) pairs within 0.01, worst {s['worst_excess']:.3f}, slowest fit "
                  f"{s['slowest_fit_seconds']:.0f} s ({s['teachers']} teachers).", "",
                  "| seed | direction | layers × heads | fields | sequences × length | "
                  "excess NLL per field (nats) | fit s | epochs (stopped by) |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in doc["rows"]:
            sp = r["spec"]
            fields = ", ".join([f"D={d}" for d in sp["categories"]] + list(sp["values"])
                               + ["attribute"] * sp["attributes"])
            excess = ", ".join(f"{k} {v:+.4f}" for k, v in r["excess"].items())
            parts.append(f"| {sp['seed']} | {sp['direction'][:3]} | {sp['num_layers']} × "
                         f"{sp['num_heads']} | {fields} | {sp['n_train']:,} × {sp['length']} | "
                         f"{excess} | {r['fit_seconds']:.0f} | {r['epochs']} ({r['stopped']}) |")
        parts.append("")
    return "\n".join(parts).strip() or "(no results yet)"


def _replace(text: str, start: str, end: str, body: str, readme) -> str:
    if start not in text or end not in text:
        raise ValueError(f"{readme} has no {start} ... {end} block")
    block = f"{start}\n{body}\n{end}"
    return re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)


def update_readme(readme: Path, results: Path) -> bool:
    """Rewrite the blocks between the results markers, and each results.md from its
    results.json (so each shows its environment); True if README changed."""
    from experiments.harness.report import Report

    if not Path(readme).is_file():
        raise FileNotFoundError(f"{readme} does not exist; nothing was rewritten")
    if not Path(results).is_dir():
        raise FileNotFoundError(f"results folder {results} does not exist; README is unchanged")
    if not any(Path(results).glob("*/results.json")):
        raise FileNotFoundError(f"results folder {results} holds no NAME/results.json; README "
                                "is unchanged")
    for path in sorted(Path(results).glob("*/results.json")):
        md = path.with_name("results.md")
        text = Report.read(path.parent).markdown()
        if not md.exists() or md.read_text() != text:
            md.write_text(text)
    text = Path(readme).read_text()
    new = _replace(text, START, END, tables(results), readme)
    if SCALE_START in new:
        new = _replace(new, SCALE_START, SCALE_END, scale_tables(results), readme)
    if DEFAULTS_START in new:
        new = _replace(new, DEFAULTS_START, DEFAULTS_END, defaults_tables(results), readme)
    if new != text:
        Path(readme).write_text(new)
    return new != text
