"""Tables generated from the committed ``results/*/results.json`` files: README's headline table
(each work's headline number beside the paper's and the best peer's) and, in
``docs/reproductions.md``, per experiment its headline metric (the first row's) as settings ×
models, paper numbers in brackets, with the scaling and defaults benchmarks."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path

from experiments.harness.report import fmt, published

START, END = "<!-- results:start -->", "<!-- results:end -->"
SCALE_START, SCALE_END = "<!-- scale:start -->", "<!-- scale:end -->"
DEFAULTS_START, DEFAULTS_END = "<!-- defaults:start -->", "<!-- defaults:end -->"
HEADLINE_START, HEADLINE_END = "<!-- headline:start -->", "<!-- headline:end -->"
REPRODUCTIONS = Path("docs") / "reproductions.md"  # beside README: the full tables
# The experiments' own pages with generated blocks: each module names its PAGE and its BLOCKS
# (marker name → the function of the results folder that writes the block's body).
PAGE_MODULES = ("experiments.efa_paper.sequences_page", "experiments.efa_paper.temperature_page",
                "experiments.fenchel.page", "experiments.moe.analogy_page",
                "experiments.cme.page", "experiments.regression.page")

# README's headline table: (work, experiment, setting, what is measured, efa's row, the peers
# compared, whether lower is better). The paper's number is the one stored on efa's row, or on
# the row named after "|" (the paper's own model) when efa's row is a new variant.
HEADLINES = [
    ("EFA", "synthetic", "bidirectional", "synthetic ratings: test MSE", "EFA",
     ("FM", "per-movie mean"), True),
    ("EFA", "movielens-sequence", "paper: bidirectional", "MovieLens next movie: test CE",
     "EFA + distinct", ("Unigram + distinct", "Logit + distinct", "FM + distinct",
                        "BERT4Rec + distinct"), True),
    ("EFA", "instacart", "bidirectional", "Instacart basket item: test CE",
     "EFA + bag + distinct|EFA + distinct", ("Unigram + distinct", "Logit + distinct", "FM",
                                             "BERT4Rec + distinct"), True),
    ("EFA", "temperature", "same day", "US temperatures, same day: test MSE (°F²)", "EFA ℓ=4",
     ("FM (k=4, picked on validation)", "Gaussian conditional"), True),
    ("CBOW experts", "car", "car", "car evaluations (levels as numbers): test accuracy",
     "efa (linear block, ordinal GLM, numbers)", ("LR (numbers)", "CatBoost (numbers)",
                                                  "TabM (numbers)", "FT-Transformer (numbers)",
                                                  "Ordered logit (numbers)"), False),
    ("CBOW experts", "auto-mpg", "auto-mpg", "auto-mpg (levels as numbers): test accuracy",
     "efa (linear block, ordinal GLM, numbers)", ("LR (numbers)", "CatBoost (numbers)",
                                                  "TabM (numbers)", "FT-Transformer (numbers)",
                                                  "Ordered logit (numbers)"), False),
    ("Fenchel duality", "attention-kernels", "temperature: same day ℓ=1",
     "temperatures ℓ=1: test log-likelihood", "generalized + context", ("softmax",), False),
    ("Exchangeability", "temperature-cme", "same day", "temperatures ℓ=1: test MSE (°F²)",
     "EFA cme ℓ=1", ("EFA softmax ℓ=1", "Gaussian conditional",
                     "GP on (lat, lon) (RBF, γ and λ on validation)"), True),
    ("In-context regression", "in-context-regression", "UNN data + noise sd 0.1",
     "GP functions: NLL per point", "EFA (GP attention)",
     ("TNP-D", "Nadaraya–Watson", "note's model (exact)", "GP fitted per sequence"), True),
]


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
        doc = published(results, path.parent.name)
        report = Report.from_json(doc, str(path))  # a file missing what a table needs: named
        doc = {**doc, "rows": [{**r, "mean": row.mean, "std": row.std}
                               for r, row in zip(doc["rows"], report.rows, strict=True)]}
        parts += [
            f"**{doc['experiment']}** — `{doc['command']}` ({len(doc['seeds'])} "
            f"seed{'s' * (len(doc['seeds']) != 1)}, "
            f"{_wall(doc)}; all metrics in `results/{path.parent.name}/results.md`)",
            "",
            *headline(doc),
            "",
            *_figures(path.parent),
        ]
    return "\n".join(parts).strip() or "(no results yet)"


def _figures(folder: Path) -> list[str]:
    """The experiment's plots, as Markdown images relative to ``docs/reproductions.md``."""
    pngs = sorted(folder.glob("*.png"))
    if not pngs:
        return []
    return [" ".join(f"![{p.stem}](../results/{folder.name}/{p.name})" for p in pngs), ""]


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
    from efa.generators.suite import suite

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
                  f"{s['slowest_fit_seconds']:.0f} s ({s['teachers']} of the "
                  f"{len(suite(role))} teachers"
                  + ("; the command resumes with the rest" if s["teachers"] < len(suite(role))
                     else "") + ").", "",
                  "| seed | direction | layers × heads | fields | sequences × length | "
                  "excess NLL per field (nats) | teacher's architecture, same fit | "
                  "causal student, masked (fit s) | fit s | epochs (stopped by) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        within = doc["targets"]["pair_excess"]  # the file's own target, 0.01 nats
        by_direction = []
        for d in ("unidirectional", "bidirectional"):
            pairs = [v for r in doc["rows"] if r["spec"]["direction"] == d
                     for v in r["excess"].values()]
            if pairs:
                by_direction.append(
                    f"{d} {statistics.median(pairs):.4f} ({sum(v <= within for v in pairs)} "
                    f"of {len(pairs)} pairs within {within:g})")
        parts[-4] += f" Median excess by direction: {'; '.join(by_direction)}."
        if "median_over_reference" in s:
            own = [v for r in doc["rows"] if "reference" in r
                   for v in r["reference"]["excess"].values()]
            parts[-4] += (f" Over the teacher's own architecture fitted the same way "
                          f"({s['reference_pairs']} pairs): median "
                          f"{s['median_over_reference']:+.4f}, worst "
                          f"{s['worst_over_reference']:+.4f} nats; that architecture itself "
                          f"is a median {statistics.median(own):.4f} above the limit, "
                          f"{sum(v <= within for v in own) / len(own):.0%} of its pairs within "
                          f"{within:g}.")
        if "causal_pairs" in s:
            parts[-4] += (f" Bidirectional teachers through a causal student's masked "
                          f"conditionals ({s['causal_pairs']} pairs): median "
                          f"{s['causal_median_excess']:.4f} against "
                          f"{s['bidirectional_median_excess_same_pairs']:.4f} for the "
                          f"bidirectional defaults, {s['causal_share_within_0.01']:.0%} within "
                          f"0.01, lower on {s['causal_better']} of {s['causal_pairs']}.")
        bidirectional = [r for r in doc["rows"] if r["spec"]["direction"] == "bidirectional"]
        if bidirectional and all("causal" in r for r in bidirectional):
            route = [v for r in doc["rows"]
                     for v in r.get("causal", r)["excess"].values()]
            parts[-4] += (f" With that route for the bidirectional teachers, all "
                          f"{len(route)} pairs: median {statistics.median(route):.4f}, "
                          f"{sum(v <= within for v in route) / len(route):.0%} within {within:g}.")
        cpu = doc["environment"]["cpu"]  # the file's first run; later entries name their own
        elsewhere = [f"{name} of {r['spec']['seed']} on {entry['cpu']}" for r in doc["rows"]
                     for name, entry in (("row", r), ("reference", r.get("reference", {})),
                                         ("causal", r.get("causal", {})))
                     if entry.get("cpu", cpu) != cpu]
        if elsewhere:
            parts[-4] += f" The rows ran on {cpu}, except: {'; '.join(elsewhere)}."
        for r in doc["rows"]:
            sp = r["spec"]
            fields = ", ".join([f"D={d}" for d in sp["categories"]] + list(sp["values"])
                               + ["attribute"] * sp["attributes"])
            excess = ", ".join(f"{k} {v:+.4f}" for k, v in r["excess"].items())
            ref = ", ".join(f"{k} {v:+.4f}" for k, v in r["reference"]["excess"].items()
                            ) if "reference" in r else ""
            causal = ", ".join(f"{k} {v:+.4f}" for k, v in r["causal"]["excess"].items()
                               ) + f" ({r['causal']['fit_seconds']:.0f})" if "causal" in r else ""
            parts.append(f"| {sp['seed']} | {sp['direction'][:3]} | {sp['num_layers']} × "
                         f"{sp['num_heads']} | {fields} | {sp['n_train']:,} × {sp['length']} | "
                         f"{excess} | {ref} | {causal} | {r['fit_seconds']:.0f} | {r['epochs']} "
                         f"({r['stopped']}) |")
        parts.append("")
        parts += _restarts_table(doc)
    return "\n".join(parts).strip() or "(no results yet)"


def _restarts_table(doc: dict) -> list[str]:
    """The rows run with ``--restarts K``: every draw's excess and the one validation kept."""
    rows = [r for r in doc["rows"] if "restarts" in r]
    if not rows:
        return []
    s = doc["summary"]
    k = rows[0]["restarts"]["restarts"]
    cpus = sorted({r["restarts"].get("cpu", doc["environment"]["cpu"]) for r in rows})
    # Draw 1 has the row's own seed; on another CPU rounding can carry it elsewhere.
    moved = [str(r["spec"]["seed"]) for r in rows if any(
        abs(r["restarts"]["draws"][0][name] - v) > 1e-3 for name, v in r["excess"].items())]
    where = (f"; draw 1 has the row's own seed, and ran on {', '.join(cpus)} while the rows "
             f"above ran on {doc['environment']['cpu']}" if cpus != [doc["environment"]["cpu"]]
             else "; draw 1 is the row's own fit")
    where += (f" (it differs from the row by more than 0.001 nats on {', '.join(moved)})"
              if moved else "")
    # Did validation keep the draw that is best on test, on each teacher's first field?
    first = [(x["excess"][name], [d[name] for d in x["draws"]])
             for x in (r["restarts"] for r in rows) for name in list(x["excess"])[:1]]
    best = sum(kept <= min(draws) for kept, draws in first)
    out = [f"{doc['role'].capitalize()} teachers from {k} initial draws each "
           f"(`--restarts {k}`, {{py:func}}`efa.fit_restarts`: the lowest validation loss kept; "
           f"{len(rows)} teachers, {s['restart_pairs']} pairs{where}): median excess of the "
           f"kept fit {s['restarts_median_excess']:.4f} against "
           f"{s['draws_mean_median_excess']:.4f} "
           f"for the mean of the draws (the expected single fit), lower on "
           f"{s['restarts_lower_than_draws_mean']} of {s['restart_pairs']}; on each teacher's "
           f"first field (its items) validation kept the draw best on test on {best} of "
           f"{len(first)}.", "",
           "| seed | excess NLL per field, draw by draw (nats) | kept draw | kept's excess | "
           "fit s (all draws) |", "|---|---|---|---|---|"]
    for r in rows:
        x = r["restarts"]
        draws = "; ".join(f"{name} " + " / ".join(f"{d[name]:+.4f}" for d in x["draws"])
                          for name in x["excess"])
        kept = ", ".join(f"{name} {v:+.4f}" for name, v in x["excess"].items())
        out.append(f"| {r['spec']['seed']} | {draws} | {x['kept'] + 1} | {kept} | "
                   f"{x['fit_seconds']:.0f} |")
    return [*out, ""]


def headline_table(results: Path) -> str:
    """README's table: per work, efa's headline number, the paper's and the best peer's."""
    from experiments.harness.report import Report

    lines = ["| work | data and metric | efa | paper | best peer |", "|---|---|---|---|---|"]
    for work, name, setting, what, efa_model, peers, lower in HEADLINES:
        doc = json.loads((Path(results) / name / "results.json").read_text())
        report = Report.from_json(doc, name)
        metric = doc["rows"][0]["metric"]
        cell = {r["model"]: row for r, row in zip(doc["rows"], report.rows, strict=True)
                if r["setting"] == setting and r["metric"] == metric}
        ours, _, paper_model = efa_model.partition("|")
        missing = [m for m in (ours, paper_model or ours, *peers) if m not in cell]
        if missing:
            raise ValueError(f"results/{name}: no {missing} row in setting {setting!r}")
        paper = cell[paper_model or ours].paper
        best = min(peers, key=lambda m: cell[m].mean if lower else -cell[m].mean)
        lines.append(f"| {work} | {what} | {fmt(cell[ours].mean, cell[ours].std)} | "
                     f"{'—' if paper is None else f'{paper:.3f}'} | "
                     f"{best}: {fmt(cell[best].mean, cell[best].std)} |")
    return "\n".join(lines)


def _replace(text: str, start: str, end: str, body: str, readme) -> str:
    if start not in text or end not in text:
        raise ValueError(f"{readme} has no {start} ... {end} block")
    block = f"{start}\n{body}\n{end}"
    return re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)


def generated_blocks() -> list[tuple[Path, str, str, Callable[[Path], str]]]:
    """Every generated block: (its page relative to README's folder, start marker, end marker,
    the function of the results folder that writes its body)."""
    import importlib

    out: list[tuple[Path, str, str, Callable[[Path], str]]] = [
        (Path("README.md"), HEADLINE_START, HEADLINE_END, headline_table),
        (REPRODUCTIONS, START, END, tables), (REPRODUCTIONS, SCALE_START, SCALE_END, scale_tables),
        (REPRODUCTIONS, DEFAULTS_START, DEFAULTS_END, defaults_tables)]
    for name in PAGE_MODULES:
        module = importlib.import_module(name)
        out += [(module.PAGE, f"<!-- {marker}:start -->", f"<!-- {marker}:end -->", make)
                for marker, make in module.BLOCKS.items()]
    return out


def update_readme(readme: Path, results: Path) -> bool:
    """Rewrite the generated blocks of README and of the pages beside it
    (:func:`generated_blocks`) and each results.md from its results.json (so each shows its
    environment); True if a page changed. Everything is computed before anything is written:
    a results file a table needs that is missing is named, with the command that makes it,
    and nothing is rewritten."""
    from experiments.harness.report import Report

    readme, results = Path(readme), Path(results)
    if readme.is_dir():
        raise IsADirectoryError(f"{readme} is a folder, not a README file (e.g. --readme "
                                f"{readme / 'README.md'}); nothing was rewritten")
    if not readme.is_file():
        raise FileNotFoundError(f"{readme} does not exist; nothing was rewritten")
    blocks = generated_blocks()
    if not any(start in readme.read_text() for _, start, _, _ in blocks):
        raise ValueError(f"{readme} holds no block to update: none of the generated blocks' "
                         f"markers (e.g. {HEADLINE_START} ... {HEADLINE_END}); nothing was "
                         "rewritten")
    if not results.is_dir():
        raise FileNotFoundError(f"results folder {results} does not exist; README is unchanged")
    if not any(results.glob("*/results.json")):
        raise FileNotFoundError(f"results folder {results} holds no NAME/results.json; README "
                                "is unchanged")
    writes: dict[Path, str] = {}
    try:
        for path in sorted(results.glob("*/results.json")):
            md = path.with_name("results.md")
            text = Report.read(path.parent).markdown()
            if not md.exists() or md.read_text() != text:
                writes[md] = text
        changed = False
        for page in dict.fromkeys(page for page, *_ in blocks):
            path = readme if page == Path("README.md") else readme.parent / page
            if not path.is_file():
                continue
            text = new = path.read_text()
            # README takes any block it holds (as before pages had their own); a page its own.
            for _, start, end, make in (b for b in blocks
                                        if page == Path("README.md") or b[0] == page):
                if start in new:  # a README of another folder may hold only some blocks
                    new = _replace(new, start, end, make(results), path)
            if new != text:
                writes[path] = new
                changed = True
    except FileNotFoundError as err:
        raise FileNotFoundError(_missing(err, readme.parent)) from None
    for path, text in writes.items():
        path.write_text(text)
    return changed


def _missing(err: FileNotFoundError, root: Path) -> str:
    """A results file a table needs is missing: name it and the command that makes it (an
    experiment's ``efa reproduce``, or the benchmark script that names it)."""
    from experiments import EXPERIMENTS

    if not err.filename:
        return f"{err}; nothing was rewritten"
    path = Path(err.filename)
    name = path.parent.name
    if path.name == "results.json" and name in EXPERIMENTS:
        how = f"`efa reproduce {name}`"
    else:
        scripts = [s for s in sorted((root / "benchmarks").glob("*.py"))
                   if f"{name}/{path.name}" in s.read_text()]
        how = (" or ".join(f"`python benchmarks/{s.name}`" for s in scripts)
               or "the command that writes it")
    return (f"{path} does not exist, and the generated tables need it: make it with {how}, "
            "then run `efa summary` again; nothing was rewritten")
