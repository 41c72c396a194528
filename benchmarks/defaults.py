"""efa's defaults on teachers they were never tuned on: per teacher and field, the excess test
NLL over the exact Bayes limit, with wall time, epochs and the sizes the defaults chose.

    python benchmarks/defaults.py --role development  # -> results/defaults/development.json
    python benchmarks/defaults.py --role evaluation   # -> results/defaults/evaluation.json
    python benchmarks/defaults.py --quick             # two small development teachers, printed
    python benchmarks/defaults.py --role development --seeds 107 108   # some teachers only
    python benchmarks/defaults.py --role development --reference  # + the teacher's architecture
    python benchmarks/defaults.py --role development --causal  # + a causal student, masked
    python benchmarks/defaults.py --role development --restarts 3  # + best of 3 initial draws

``--reference`` also fits, for every teacher of the file that lacks it, the teacher's own
architecture from fresh weights with the same ``fit`` defaults. For a unidirectional teacher
that is the exact model class, so its excess over Bayes is what one fit of the right class
reaches from this much data: estimation error plus what that fit's optimisation left, which
is small on most teachers but not on all (docs/reproductions.md, "Defaults on unseen
teachers"). A
bidirectional teacher's conditionals are those of a causal joint, which the same architecture
made bidirectional need not contain: there the reference is a same-size student, not the class.

``--causal`` also fits, for every bidirectional teacher of the file that lacks it, the student
with ``direction="unidirectional"`` (everything else as the defaults' student) and scores its
masked conditionals p(x_i | x_-i) by renormalising its joint over the field's support
(:func:`efa.masked_log_likelihoods`), the way the Bayes limit itself is computed. Causal models
hold the teacher's joint (the teacher is one), so this route's class reaches the bidirectional
Bayes limit, which a bidirectional student's class need not.

``--restarts K`` also fits, for every teacher of the file that lacks it, the defaults' student
from K initial draws with :func:`efa.fit_restarts` (torch seeds ``seed``, ``seed + 1``, ...; the
first is the row's own fit where run on the same machine), the lowest validation loss kept;
every draw's test excess is stored beside the kept one's, to show the spread.

The teachers are :mod:`efa.generators.suite`'s (development seeds choose defaults, evaluation
seeds judge them and choose nothing). Each student is what a user would write, naming the
fields and the direction and nothing else:
``efa.fit(efa.EFA(efa.EFAConfig(fields, max_len=L, direction=d)), train, val)`` (in float64,
``model.double()``, where the check says a value leaves its support in float32), with the
machine's torch threads (2 on the reference machine), one fit at a time. A run writes its file
after every teacher and resumes from it (``--fresh`` starts over).

Targets (issue #34, evaluation teachers): median excess ≤ 0.005 nats, at least 90 % of
(teacher, field) pairs ≤ 0.01 nats, every fit ≤ 120 s.
"""

from __future__ import annotations

import argparse
import copy
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
from experiments.harness.provenance import cpu_model  # noqa: E402

TARGETS = {"median_excess": 0.005, "pair_excess": 0.01, "pair_share": 0.9, "seconds": 120.0}


def draw(spec: TeacherSpec) -> dict:
    """The teacher, its training / validation / test data and the test data's Bayes NLL."""
    t0 = time.perf_counter()
    teacher = spec.teacher()
    train, val, test = spec.data(teacher)
    return {"teacher": teacher, "train": train, "val": val, "test": test,
            "bayes": spec.bayes_nll(teacher, test), "seconds": time.perf_counter() - t0}


def checked(model: efa.EFA, drawn: dict) -> efa.EFA:
    """``model``, in float64 where a value leaves its support in float32 (the check tells the
    user model.double()); anything else wrong with the data is refused here as well."""
    splits = [drawn[k] for k in ("train", "val", "test")]
    try:
        for data in splits:
            model.check(data)
    except ValueError:
        model.double()
        for data in splits:
            model.check(data)
    return model


def run(spec: TeacherSpec, drawn: dict) -> dict:
    teacher, train, val, test, bayes = (drawn[k] for k in ("teacher", "train", "val", "test",
                                                           "bayes"))
    torch.manual_seed(spec.seed)
    config = efa.EFAConfig(student_fields(teacher), max_len=spec.length, direction=spec.direction)
    student = checked(efa.EFA(config), drawn)
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
            "threads": hist.threads, "data_seconds": drawn["seconds"],
            "dtype": str(next(student.parameters()).dtype).removeprefix("torch."),
            "cpu": cpu_model()}


def reference(spec: TeacherSpec, drawn: dict) -> dict:
    """The teacher's own architecture, fresh weights, fitted like the student."""
    teacher, train, val, test, bayes = (drawn[k] for k in ("teacher", "train", "val", "test",
                                                           "bayes"))
    torch.manual_seed(spec.seed)
    model = checked(efa.EFA(replace(copy.deepcopy(teacher.config), direction=spec.direction)),
                    drawn)
    wall = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hist = efa.fit(model, train, val, progress=False)
    wall = time.perf_counter() - wall
    nll = {k: -v for k, v in efa.evaluate(model, test).items()}
    return {"excess": {k: nll[k] - bayes[k] for k in bayes}, "fit_seconds": wall,
            "epochs": hist.epochs_run,
            "parameters": sum(p.numel() for p in model.parameters()), "cpu": cpu_model()}


def causal(spec: TeacherSpec, drawn: dict) -> dict:
    """A unidirectional student fitted with the defaults, scored by its masked conditionals."""
    teacher, train, val, test, bayes = (drawn[k] for k in ("teacher", "train", "val", "test",
                                                           "bayes"))
    torch.manual_seed(spec.seed)
    student = checked(efa.EFA(efa.EFAConfig(student_fields(teacher), max_len=spec.length,
                                            direction="unidirectional")), drawn)
    wall = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hist = efa.fit(student, train, val, progress=False)
    wall = time.perf_counter() - wall
    scoring = time.perf_counter()
    nll = {k: -v for k, v in efa.masked_evaluate(student, test).items()}
    return {"excess": {k: nll[k] - bayes[k] for k in bayes}, "fit_seconds": wall,
            "scoring_seconds": time.perf_counter() - scoring, "epochs": hist.epochs_run,
            "cpu": cpu_model()}


def restarted(spec: TeacherSpec, drawn: dict, restarts: int) -> dict:
    """The defaults' student fitted from ``restarts`` initial draws by :func:`efa.fit_restarts`
    (the lowest validation loss kept); every draw's test excess is recorded beside the kept
    one's to show the spread, and chooses nothing."""
    teacher, train, val, test, bayes = (drawn[k] for k in ("teacher", "train", "val", "test",
                                                           "bayes"))
    config = efa.EFAConfig(student_fields(teacher), max_len=spec.length, direction=spec.direction)
    models: list[efa.EFA] = []

    def build() -> efa.EFA:
        models.append(checked(efa.EFA(config), drawn))
        return models[-1]

    wall = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = efa.fit_restarts(build, train, val, restarts=restarts, seed=spec.seed,
                                  progress=False)
    wall = time.perf_counter() - wall
    draws = [{name: -v - bayes[name] for name, v in efa.evaluate(m, test).items()}
             for m in models]
    return {"restarts": restarts, "seeds": result.seeds, "kept": result.best,
            "excess": draws[result.best], "draws": draws,
            "best_val": [h.best_val for h in result.histories], "fit_seconds": wall,
            "epochs": [h.epochs_run for h in result.histories], "cpu": cpu_model()}


def summarise(rows: list[dict]) -> dict:
    pairs = [v for r in rows for v in r["excess"].values()]
    if not pairs:
        return {}
    share = sum(v <= TARGETS["pair_excess"] for v in pairs) / len(pairs)
    slowest = max(r["fit_seconds"] for r in rows)
    median = statistics.median(pairs)
    gaps = [v - r["reference"]["excess"][k] for r in rows if "reference" in r
            for k, v in r["excess"].items()]
    against = {} if not gaps else {
        "reference_pairs": len(gaps), "median_over_reference": statistics.median(gaps),
        "worst_over_reference": max(gaps)}
    routes = [(v, r["causal"]["excess"][k]) for r in rows if "causal" in r
              for k, v in r["excess"].items()]
    if routes:
        against |= {"causal_pairs": len(routes),
                    "causal_median_excess": statistics.median(c for _, c in routes),
                    "causal_share_within_0.01": sum(c <= TARGETS["pair_excess"]
                                                    for _, c in routes) / len(routes),
                    "bidirectional_median_excess_same_pairs": statistics.median(
                        b for b, _ in routes),
                    "causal_better": sum(c < b for b, c in routes)}
    kept = [(statistics.mean(d[k] for d in r["restarts"]["draws"]), v)
            for r in rows if "restarts" in r for k, v in r["restarts"]["excess"].items()]
    if kept:
        against |= {"restart_pairs": len(kept),
                    "restarts_median_excess": statistics.median(v for _, v in kept),
                    "draws_mean_median_excess": statistics.median(m for m, _ in kept),
                    "restarts_lower_than_draws_mean": sum(v < m for m, v in kept)}
    return {"teachers": len(rows), "pairs": len(pairs), "median_excess": median,
            "share_within_0.01": share, "worst_excess": max(pairs), "slowest_fit_seconds": slowest,
            "targets_met": {"median": median <= TARGETS["median_excess"],
                            "share": share >= TARGETS["pair_share"],
                            "seconds": slowest <= TARGETS["seconds"]}} | against


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--role", choices=("development", "evaluation"), default="development")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--fresh", action="store_true", help="start over instead of resuming")
    p.add_argument("--seeds", type=int, nargs="+", help="only these teachers of the role")
    p.add_argument("--reference", action="store_true",
                   help="also fit the teacher's own architecture (where a row lacks it)")
    p.add_argument("--causal", action="store_true",
                   help="also fit a causal student to each bidirectional teacher and score its "
                        "masked conditionals (where a row lacks it)")
    p.add_argument("--restarts", type=int, metavar="K",
                   help="also fit the defaults' student from K initial draws with "
                        "efa.fit_restarts (where a row lacks it)")
    args = p.parse_args()
    if args.restarts is not None and args.restarts < 2:
        p.error("--restarts needs K >= 2 (one draw is the row itself)")
    specs = suite(args.role)
    if args.seeds:
        unknown = sorted(set(args.seeds) - {s.seed for s in specs})
        if unknown:
            p.error(f"seeds {unknown} are not {args.role} teachers")
        specs = [s for s in specs if s.seed in args.seeds]
    if args.quick:  # the same code path on two small teachers: printed, never written
        specs = [replace(s, n_train=300, length=min(s.length, 8)) for s in specs[:2]]
    out = ROOT / "results" / "defaults" / f"{args.role}.json"
    from experiments.harness.provenance import environment

    rows: list[dict] = []
    # The machine of the file's first run; an entry added later on another machine names its
    # own CPU ("cpu"), since fit times and the last digits depend on it.
    machine = environment(torch.get_num_threads(), 0)
    if out.exists() and not args.fresh and not args.quick:
        stored = json.loads(out.read_text())
        rows, machine = stored["rows"], stored.get("environment", machine)

    for spec in specs:
        row = next((r for r in rows if r["spec"]["seed"] == spec.seed), None)
        wants_causal = args.causal and spec.direction == "bidirectional"
        if row is not None and (not args.reference or "reference" in row) and (
                not wants_causal or "causal" in row) and (
                args.restarts is None or "restarts" in row):
            continue
        drawn = draw(spec)  # once per teacher, for every fit it needs
        if row is None:
            row = run(spec, drawn)
            rows.append(row)
        if args.reference and "reference" not in row:
            row["reference"] = reference(spec, drawn)
        if wants_causal and "causal" not in row:
            row["causal"] = causal(spec, drawn)
        if args.restarts is not None and "restarts" not in row:
            row["restarts"] = restarted(spec, drawn, args.restarts)
        print(json.dumps({k: row[k] for k in ("excess", "fit_seconds", "epochs")} |
                         {"seed": spec.seed, "reference": row.get("reference", {}).get("excess"),
                          "causal": row.get("causal", {}).get("excess"),
                          "restarts": row.get("restarts", {}).get("draws")}), flush=True)
        # the command that regenerates the whole file: the columns any of its rows hold
        command = ("python benchmarks/defaults.py --role " + args.role + " --quick" * args.quick
                   + " --reference" * any("reference" in r for r in rows)
                   + " --causal" * any("causal" in r for r in rows)
                   + "".join(sorted({f" --restarts {r['restarts']['restarts']}"
                                     for r in rows if "restarts" in r})))
        doc = {"command": command, "role": args.role, "targets": TARGETS,
               "summary": summarise(rows), "rows": rows,
               "environment": machine}
        if not args.quick:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summarise(rows), indent=1))


if __name__ == "__main__":
    main()
