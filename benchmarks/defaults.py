"""efa's defaults on teachers they were never tuned on: per teacher and field, the excess test
NLL over the exact Bayes limit, with wall time, epochs and the sizes the defaults chose.

    python benchmarks/defaults.py --role development  # -> results/defaults/development.json
    python benchmarks/defaults.py --role evaluation   # -> results/defaults/evaluation.json
    python benchmarks/defaults.py --quick             # two small development teachers, printed
    python benchmarks/defaults.py --role development --seeds 107 108   # some teachers only

The teachers are :mod:`efa.generators.suite`'s (development seeds choose defaults, evaluation
seeds judge them and choose nothing). Each student is what a user would write, naming the
fields and the direction and nothing else:
``efa.fit(efa.EFA(efa.EFAConfig(fields, max_len=L, direction=d)), train, val)``, with the
machine's torch threads (2 on the reference machine), one fit at a time. A run writes its file
after every teacher and resumes from it (``--fresh`` starts over).

Targets (issue #34, evaluation teachers): median excess ≤ 0.005 nats, at least 90 % of
(teacher, field) pairs ≤ 0.01 nats, every fit ≤ 120 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # experiments.harness.provenance, from a checkout

import efa  # noqa: E402
from efa.generators import student_fields  # noqa: E402
from efa.generators.suite import TeacherSpec, suite  # noqa: E402

TARGETS = {"median_excess": 0.005, "pair_excess": 0.01, "pair_share": 0.9, "seconds": 120.0}


def run(spec: TeacherSpec) -> dict:
    t0 = time.perf_counter()
    teacher = spec.teacher()
    train, val, test = spec.data(teacher)
    bayes = spec.bayes_nll(teacher, test)
    data_seconds = time.perf_counter() - t0
    torch.manual_seed(spec.seed)
    config = efa.EFAConfig(student_fields(teacher), max_len=spec.length, direction=spec.direction)
    student = efa.EFA(config)
    cpu, wall = time.process_time(), time.perf_counter()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        hist = efa.fit(student, train, val, progress=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    nll = {k: -v for k, v in efa.evaluate(student, test).items()}
    return {"spec": asdict(spec), "bayes_nll": bayes, "nll": nll,
            "excess": {k: nll[k] - bayes[k] for k in bayes},
            "fit_seconds": wall, "fit_cpu_seconds": cpu, "epochs": hist.epochs_run,
            "best_epoch": hist.best_epoch + 1, "stopped": hist.stopped,
            "warnings": sorted({type(w.message).__name__ for w in said
                                if issubclass(w.category, UserWarning)}),
            "sizes": {"d_model": config.d_model, "num_layers": config.num_layers,
                      "num_heads": config.num_heads, "parameters": sum(
                          p.numel() for p in student.parameters())},
            "threads": hist.threads, "data_seconds": data_seconds}


def summarise(rows: list[dict]) -> dict:
    pairs = [v for r in rows for v in r["excess"].values()]
    if not pairs:
        return {}
    share = sum(v <= TARGETS["pair_excess"] for v in pairs) / len(pairs)
    slowest = max(r["fit_seconds"] for r in rows)
    median = statistics.median(pairs)
    return {"teachers": len(rows), "pairs": len(pairs), "median_excess": median,
            "share_within_0.01": share, "worst_excess": max(pairs), "slowest_fit_seconds": slowest,
            "targets_met": {"median": median <= TARGETS["median_excess"],
                            "share": share >= TARGETS["pair_share"],
                            "seconds": slowest <= TARGETS["seconds"]}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--role", choices=("development", "evaluation"), default="development")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--fresh", action="store_true", help="start over instead of resuming")
    p.add_argument("--seeds", type=int, nargs="+", help="only these teachers of the role")
    args = p.parse_args()
    specs = suite(args.role)
    if args.seeds:
        unknown = sorted(set(args.seeds) - {s.seed for s in specs})
        if unknown:
            p.error(f"seeds {unknown} are not {args.role} teachers")
        specs = [s for s in specs if s.seed in args.seeds]
    if args.quick:  # the same code path on two small teachers: printed, never written
        specs = [replace(s, n_train=300, length=min(s.length, 8)) for s in specs[:2]]
    command = "python benchmarks/defaults.py --role " + args.role + " --quick" * args.quick
    out = ROOT / "results" / "defaults" / f"{args.role}.json"
    rows: list[dict] = []
    if out.exists() and not args.fresh and not args.quick:
        rows = json.loads(out.read_text())["rows"]
    from experiments.harness.provenance import environment

    for spec in specs:
        if any(r["spec"]["seed"] == spec.seed for r in rows):
            continue
        rows.append(run(spec))
        print(json.dumps({k: rows[-1][k] for k in ("excess", "fit_seconds", "epochs")} |
                         {"seed": spec.seed}), flush=True)
        doc = {"command": command, "role": args.role, "targets": TARGETS,
               "summary": summarise(rows), "rows": rows,
               "environment": environment(torch.get_num_threads(), 0)}
        if not args.quick:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summarise(rows), indent=1))


if __name__ == "__main__":
    main()
