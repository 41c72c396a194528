"""EFA's dropout in the item-sequence experiments, picked on validation: the grid behind
``movielens.SPEC.dropout`` and ``instacart.SPEC.dropout`` (one rate per direction).

For each data set, direction, EFA variant (+ distinct, + bag, + bag + distinct, with the
bag settings of the spec) and rate, the model is fitted with the experiment's own
architecture and training on the seeds asked for and scored on the validation split only (the
test split is loaded with the others but never scored). A direction's chosen rate minimises
the validation cross-entropy summed over the three variants, averaged over the seeds.
MovieLens uses the paper protocol. Run after ``bag-grid`` (coordinate-wise tuning: the bag
settings were chosen without dropout).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from experiments.efa_paper import items
from experiments.efa_paper.bag_grid import (
    best_on_validation,
    chosen_table,
    validation_fit,
    zoo_spec,
)
from experiments.harness.evaluate import table
from experiments.harness.report import Report

DIRECTIONS = ("unidirectional", "bidirectional")
VARIANTS = ("EFA" + items.DISTINCT, items.BAG, items.BAG + items.DISTINCT)


@dataclass(frozen=True)
class Spec:
    # Rates per data set: MovieLens chose the edge of each grid (0.5, then 0.7), so it goes on
    # to 0.9 (bidirectionally 0.7 is then interior).
    rates: dict = field(default_factory=lambda: {"movielens-sequence": (0.0, 0.1, 0.3, 0.5, 0.7,
                                                                        0.8, 0.9),
                                                 "instacart": (0.0, 0.1, 0.3, 0.5)})
    variants: tuple = VARIANTS
    quick: bool = False


SPEC = Spec()
QUICK = Spec(rates={"movielens-sequence": (0.0, 0.3)}, variants=VARIANTS[:1], quick=True)


def jobs(spec: Spec, seeds: int) -> list[dict]:
    return [{"dataset": d, "direction": r, "model": m, "dropout": p, "seed": k,
             "quick": spec.quick, "cost": 4.0 if d == "instacart" else 1.0}
            for d, grid in spec.rates.items() for r in DIRECTIONS for m in spec.variants
            for p in grid for k in range(seeds)]


def task(job: dict) -> dict:
    # A model has one direction: only that direction's rate is read.
    rate = job["dropout"]
    return validation_fit(job, job["model"], dropout=dict.fromkeys(DIRECTIONS, rate))


def choose(results: list[dict]) -> dict:
    """{(dataset, direction): (rate, summed validation CE)} over the variants."""
    return best_on_validation(results, ("dataset", "direction"), ("dropout",))


def tables(results: list[dict], spec: Spec, seeds: int, command: str) -> Report:
    report = Report("dropout-grid", command, list(range(seeds)))
    by = {(r["dataset"], r["direction"], r["model"], r["dropout"], r["seed"]): r
          for r in results}
    for d, grid in spec.rates.items():
        for r in DIRECTIONS:
            for m in spec.variants:
                for p in grid:
                    report.add(f"{d}, {r}", f"dropout {p:g}", f"validation CE, {m}",
                               [by[d, r, m, p, k]["val"] for k in range(seeds)])
    best = choose(results)
    rows = []
    for (d, r), (p, v) in best.items():
        have = zoo_spec(d, spec.quick).dropout[r]
        rows.append([d, r, f"{p:g}", f"{v:.4f}", f"{have:g}", "yes" if have == p else "NO"])
    report.sections.append(table(["data set", "direction", "dropout",
                                  "validation CE (sum over the variants)", "the spec's dropout",
                                  "spec = chosen"], rows, "Chosen on validation"))
    report.extra["chosen"] = {f"{d}, {r}": {"dropout": p, "validation": v}
                              for (d, r), (p, v) in best.items()}
    report.notes += [
        "EFA variants " + ", ".join(spec.variants) + " with each data set's own architecture, "
        "training and bag settings (movielens.SPEC, instacart.SPEC), fitted on the training "
        "split, scored on the validation split only. MovieLens: paper protocol.",
        "Chosen: the rate with the lowest validation cross-entropy summed over the variants "
        "(mean over seeds), per data set and direction.",
    ]
    return report


def headline(doc: dict) -> list[str]:
    """The README's table: the chosen rate per data set and direction."""
    return chosen_table(doc, "data set, direction", ("dropout",),
                        "validation CE (sum over the variants)")


def plots(report: Report, folder) -> None:
    """Validation CE against the dropout rate, one line per variant, one panel per data set
    and direction."""
    from pathlib import Path

    from experiments.harness.plots import line_panels

    panels: dict = {}
    for row in report.rows:
        label = row.metric.removeprefix("validation CE, ")
        panels.setdefault(row.setting, {}).setdefault(label, {})[float(row.model.split()[1])] = (
            row.mean)
    line_panels(panels, Path(folder) / "dropout_grid.png", "dropout", "validation CE (nats)")
