"""EFA + bag's two settings, picked on validation: the grid behind ``movielens.SPEC`` and
``instacart.SPEC`` (``bag_l2`` and ``bag_scale``, without / with distinct).

For each data set, support (with or without distinct), direction and grid point, EFA + bag
is fitted with the experiment's own architecture and training settings on the seeds asked
for, and scored on the validation split only (the test split is loaded with the others but
never scored). A support's chosen point minimises the validation cross-entropy summed over
the two directions, averaged over the seeds (the specs use one value for both directions);
the report says whether each spec holds the chosen value. MovieLens uses the paper protocol
(its split does not depend on the seed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from efa.training.scoring import evaluate
from efa.training.train import fit, seed_everything
from experiments.efa_paper import items
from experiments.harness.evaluate import table
from experiments.harness.report import Report

DIRECTIONS = ("unidirectional", "bidirectional")
SUPPORTS = (False, True)  # distinct


@dataclass(frozen=True)
class Spec:
    # bag_l2 values per data set: four decades around each one's scale (Instacart has 30 times
    # MovieLens's training positions, so it needs far less shrinkage).
    l2: dict = field(default_factory=lambda: {"movielens-sequence": (1e-4, 1e-3, 1e-2, 1e-1),
                                              "instacart": (1e-6, 1e-5, 1e-4, 1e-3)})
    scales: tuple = (1.0, 10.0, 100.0)
    quick: bool = False


SPEC = Spec()
QUICK = Spec(l2={"movielens-sequence": (1e-3, 1e-2)}, scales=(10.0,), quick=True)


def experiment_of(dataset: str):
    """(the experiment's module, its number of items, its maximum length)."""
    from experiments.efa_paper import instacart, movielens

    if dataset == "instacart":
        return instacart, instacart.N_ITEMS, instacart.MAX_LEN
    return movielens, movielens.N_MOVIES, movielens.MAX_LEN


def zoo_spec(dataset: str, quick: bool):
    """The experiment's zoo spec (``QUICK`` or ``SPEC``)."""
    module, _, _ = experiment_of(dataset)
    return module.QUICK if quick else module.SPEC


def _train_val(dataset: str, spec_quick: bool, seed: int):
    module, _, _ = experiment_of(dataset)
    zoo = zoo_spec(dataset, spec_quick)
    splits = module.load() if dataset == "instacart" else module.load("paper", seed)
    return zoo, [items.subset(s, zoo.subset) for s in splits[:2]]


def support_name(distinct: bool) -> str:
    return "distinct" if distinct else "no distinct"


def jobs(spec: Spec, seeds: int) -> list[dict]:
    return [{"dataset": d, "direction": r, "distinct": b, "l2": l2, "scale": s, "seed": k,
             "quick": spec.quick, "cost": 4.0 if d == "instacart" else 2.0}
            for d, grid in spec.l2.items() for b in SUPPORTS for r in DIRECTIONS
            for l2 in grid for s in spec.scales for k in range(seeds)]


def validation_fit(job: dict, model: str, **settings) -> dict:
    """Fit ``model`` of ``job["dataset"]`` with the experiment's zoo spec changed by
    ``settings`` (seed ``job["seed"]``) and score it on the validation split only: the job's
    fields plus "val" (validation CE), "epochs" and "seconds". Shared by the settings grids."""
    t0 = time.perf_counter()
    zoo, (train, val) = _train_val(job["dataset"], job["quick"], job["seed"])
    _, n_items, max_len = experiment_of(job["dataset"])
    zoo = replace(zoo, **settings)
    seed_everything(job["seed"])
    net, base = items.categorical_model(model, job["direction"], n_items, max_len, zoo, train)
    hist = fit(net, train, val, replace(zoo.train[base], seed=job["seed"]))
    return {**{k: v for k, v in job.items() if k != "cost"},
            "val": -sum(evaluate(net, val).values()), "epochs": hist.best_epoch + 1,
            "seconds": time.perf_counter() - t0}


def task(job: dict) -> dict:
    # Without dropout, as when the grid was run (dropout-grid was tuned after it, with these
    # bag settings): the specs' later dropout must not change this grid's numbers.
    name = items.BAG + (items.DISTINCT if job["distinct"] else "")
    return validation_fit(job, name, bag_l2=(job["l2"],) * 2, bag_scale=(job["scale"],) * 2,
                          dropout=items.NO_DROPOUT)


def best_on_validation(results: list[dict], group: tuple, point: tuple) -> dict:
    """{group values: (*point values, summed validation CE)}: per group (e.g. data set and
    support), the grid point with the lowest validation CE summed over the group's other jobs
    (directions, variants) and averaged over the seeds."""
    total: dict = {}
    seeds = {r["seed"] for r in results}
    for r in results:
        key = (tuple(r[k] for k in group), tuple(r[k] for k in point))
        total[key] = total.get(key, 0.0) + r["val"] / len(seeds)
    best: dict = {}
    for (g, p), v in total.items():
        if g not in best or v < best[g][-1]:
            best[g] = (*p, v)
    return best


def choose(results: list[dict]) -> dict:
    """{(dataset, distinct): (l2, scale, summed validation CE)} over both directions."""
    return best_on_validation(results, ("dataset", "distinct"), ("l2", "scale"))


def tables(results: list[dict], spec: Spec, seeds: int, command: str) -> Report:
    report = Report("bag-grid", command, list(range(seeds)))
    by = {(r["dataset"], r["distinct"], r["direction"], r["l2"], r["scale"], r["seed"]): r
          for r in results}
    for d, grid in spec.l2.items():
        for b in SUPPORTS:
            for l2 in grid:
                for s in spec.scales:
                    for r in DIRECTIONS:
                        report.add(f"{d}, {support_name(b)}", f"bag_l2 {l2:g}, bag_scale {s:g}",
                                   f"validation CE, {r}",
                                   [by[d, b, r, l2, s, k]["val"] for k in range(seeds)])
    best = choose(results)
    rows, agree = [], {}
    for (d, b), (l2, s, v) in best.items():
        zoo = zoo_spec(d, spec.quick)
        have = (zoo.bag_l2[b], zoo.bag_scale[b])
        agree[f"{d}, {support_name(b)}"] = have == (l2, s)
        rows.append([d, support_name(b), f"{l2:g}", f"{s:g}", f"{v:.4f}",
                     f"{have[0]:g} / {have[1]:g}", "yes" if have == (l2, s) else "NO"])
    report.sections.append(table(["data set", "support", "bag_l2", "bag_scale",
                                  "validation CE (uni + bi)", "the spec's bag_l2 / bag_scale",
                                  "spec = chosen"], rows, "Chosen on validation"))
    report.extra["chosen"] = {f"{d}, {support_name(b)}": {"bag_l2": l2, "bag_scale": s,
                                                           "validation": v}
                              for (d, b), (l2, s, v) in best.items()}
    report.extra["spec_is_chosen"] = agree
    report.extra["epochs"] = {f"{r['dataset']}, {support_name(r['distinct'])}, "
                              f"{r['direction']}, {r['l2']:g}, {r['scale']:g}, seed {r['seed']}":
                              r["epochs"] for r in results}
    report.notes += [
        "EFA + bag (Category(bag=True)) with each data set's own architecture and training "
        "settings (movielens.SPEC, instacart.SPEC) without dropout, fitted on the training "
        "split, scored on the validation split only (the test split is never scored). "
        "MovieLens: paper protocol.",
        "Chosen: the grid point with the lowest validation cross-entropy summed over the two "
        "directions (mean over seeds), per data set and support.",
    ]
    return report


def chosen_table(doc: dict, first: str, settings: tuple[str, ...], validation: str) -> list[str]:
    """The README's table of a grid: one row per group of ``doc["chosen"]``, the chosen
    ``settings`` and their validation CE."""
    rows = [[k, *(f"{c[s]:g}" for s in settings), f"{c['validation']:.4f}"]
            for k, c in doc["chosen"].items()]
    return table([first, *settings, validation], rows).split("\n")


def headline(doc: dict) -> list[str]:
    """The README's table: the chosen point per data set and support."""
    return chosen_table(doc, "data set, support", ("bag_l2", "bag_scale"),
                        "validation CE (uni + bi)")


def plots(report: Report, folder) -> None:
    """Validation CE (summed over the directions, mean over seeds) against bag_l2, one line
    per bag_scale, one panel per data set and support."""
    from pathlib import Path

    from experiments.harness.plots import line_panels

    panels: dict = {}
    for row in report.rows:
        l2, scale = (float(part.split()[1]) for part in row.model.split(", "))
        line = panels.setdefault(row.setting, {}).setdefault(f"scale {scale:g}", {})
        line[l2] = line.get(l2, 0.0) + row.mean
    line_panels(panels, Path(folder) / "bag_grid.png", "bag_l2",
                "validation CE, uni + bi (nats)", log_x=True)
