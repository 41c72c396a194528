"""What the item-sequence experiments (MovieLens sequences and ratings, Instacart) share: a
long frame → ``Sequences``, the categorical model zoo (unigram, logit, FM, EFA; each also
"+ distinct"), fitting and scoring, and the rows of their tables."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd
import torch

from efa.baselines import CategoricalFM, ContextLogit, Unigram, select_l2
from efa.baselines.glm import DESIGN_RATIOS, L2_GRID
from efa.data import Sequences
from efa.fields import Category
from efa.model import EFA, EFAConfig
from efa.train import TrainConfig, evaluate, fit

DISTINCT = " + distinct"


def paper_numbers(fm: tuple[float, float], efa: tuple[float, float]) -> dict:
    """A paper's single-run test CE of its FM and EFA, (unidirectional, bidirectional)."""
    return {(d, m): v for m, pair in (("FM", fm), ("EFA", efa))
            for d, v in zip(("unidirectional", "bidirectional"), pair, strict=True)}
QUICK_CONVEX = {"l2_grid": (1e-2, 1e-3), "design_ratios": (1.0,)}


@dataclass(frozen=True)
class ZooSpec:
    """Sizes of the categorical models and the training settings of each (by base name; the
    logit is fitted to convergence by L-BFGS with its L2 penalty picked on validation)."""

    dim: int = 64  # EFA token width
    heads: int = 4
    head_dim: int = 16
    layers: dict = field(default_factory=lambda: {"unidirectional": 2, "bidirectional": 1})
    positions: bool = True
    fm_dim: int = 32
    logit_length: bool = False
    train: dict = field(default_factory=dict)  # "EFA" / "FM" -> TrainConfig
    l2_grid: tuple[float, ...] = L2_GRID  # the convex peers' penalty search (select_l2)
    design_ratios: tuple[float, ...] = DESIGN_RATIOS
    subset: int | None = None  # quick: keep this many sequences per split


def to_sequences(frame: pd.DataFrame, key: str, item: str, name: str = "item",
                 values: tuple[str, ...] = ()) -> Sequences:
    """One sequence per ``key`` (sorted keys, rows in frame order); the 1-based ``item`` column
    becomes the 0-based field ``name``, ``values`` are copied; a ``target`` column that is not
    all True marks the scored positions (context rows stay in the sequence)."""
    groups = frame.groupby(key, sort=True)
    fields = {name: [(g[item].to_numpy() - 1).tolist() for _, g in groups]}
    for v in values:
        fields[v] = [g[v].to_numpy().tolist() for _, g in groups]
    scored = None
    if "target" in frame and not frame["target"].all():
        scored = [g["target"].to_numpy() for _, g in groups]
    return Sequences.from_lists(fields, scored=scored)


def subset(data: Sequences, n: int | None) -> Sequences:
    return data if n is None else data[torch.arange(min(n, len(data)))]


def categorical_model(name: str, direction: str, num_items: int, max_len: int, spec: ZooSpec,
                      train: Sequences):
    """(model called ``name``, e.g. "EFA + distinct", the base name whose settings apply)."""
    base = name.removesuffix(DISTINCT)
    item = Category("item", num_items, dim=spec.dim, distinct=name.endswith(DISTINCT))
    if base == "Unigram":
        model = Unigram.from_data(item, train, direction=direction)
    elif base == "Logit":
        model = ContextLogit(item, direction, max_len,
                             length=spec.logit_length and direction == "bidirectional")
    elif base == "FM":
        # The reference FM: sum of the context embeddings, an intercept unidirectionally.
        model = CategoricalFM(item, spec.fm_dim, direction, pooling="sum")
    else:
        model = EFA(EFAConfig(
            [item], max_len=max_len if spec.positions else None,
            num_layers=spec.layers[direction], num_heads=spec.heads, head_dim=spec.head_dim,
            direction=direction, block="residual",
        ))
    return model, base


def fit_and_score(model, base: str, train, val, test, spec, seed: int) -> dict:
    """Fit (closed form, L-BFGS with L2 on validation, or AdamW with early stopping on
    validation) and score: validation and test cross-entropy."""
    out = {"epochs": 0}
    if base in ("Logit", "GLM", "Per-movie mean"):
        _, info = select_l2(model, train, val, spec.l2_grid, spec.design_ratios)
        out["l2"], out["design_ratio"] = info["l2"], info["design_ratio"]
        out["iterations"] = sum(f["iterations"] for f in info["fits"])
        out["converged"] = all(f["converged"] for f in info["fits"])
    elif base != "Unigram":
        hist = fit(model, train, val, replace(spec.train[base], seed=seed))
        out["epochs"] = hist.best_epoch + 1
    out["val"] = -sum(evaluate(model, val).values())
    out["test"] = -sum(evaluate(model, test).values())
    return out


DETERMINISTIC = ("Unigram", "Logit", "GLM", "Per-movie mean")


def deterministic(model: str, protocol: str) -> bool:
    """Closed-form and convex peers on a split that does not change with the seed: fitted once
    (seed 0) and reported for every seed."""
    return protocol == "paper" and model.removesuffix(DISTINCT) in DETERMINISTIC


def replicate(results: list[dict], seeds: int) -> list[dict]:
    """Copy the seed-0 result of every deterministic job to the other seeds."""
    out = list(results)
    for r in results:
        if r["seed"] == 0 and deterministic(r["model"], r.get("protocol", "paper")):
            out += [{**r, "seed": s, "seconds": 0.0} for s in range(1, seeds)]
    return out


def add_rows(report, results, protocols, directions, models, paper, seeds, metric="test CE"):
    by = {(r["protocol"], r["direction"], r["model"], r["seed"]): r for r in results}
    for p in protocols:
        for d in directions:
            for m in models:
                if (p, d, m, 0) not in by:
                    continue
                values = [by[p, d, m, s]["test"] for s in range(seeds)]
                base = m.removesuffix(DISTINCT)
                # The paper's numbers belong to its protocol; clean rows have a different split.
                # "FM + distinct" is not the paper's FM: no paper number beside it.
                ref = paper.get((d, base)) if p == "paper" and m != "FM" + DISTINCT else None
                report.add(f"{p}: {d}", m, metric, values, ref)


def per_job(results, what: str) -> dict:
    """``what`` (best epoch, seconds, ...) per protocol/direction/model, one entry per seed."""
    out: dict[str, list] = {}
    for r in sorted(results, key=lambda r: r["seed"]):
        if what not in r:
            continue
        key = "/".join(str(r[k]) for k in ("protocol", "variant", "direction", "model") if k in r)
        v = r[what]
        out.setdefault(key, []).append(round(v, 1) if isinstance(v, float) else v)
    return out


def train_note(spec: ZooSpec) -> str:
    return "; ".join(
        f"{name}: AdamW lr {c.lr:g}, weight decay {c.weight_decay:g}, batch {c.batch_size}, "
        f"≤ {c.max_epochs} epochs, {c.schedule} schedule, patience {c.patience}"
        for name, c in spec.train.items()
    ) + ("; early stopping on validation CE with the best epoch restored. Logit: full-batch "
         "L-BFGS in float64 to a gradient max-norm ≤ 1e-7, L2 penalty on the weights picked on "
         "validation from 1e-7 … 1e-2 (efa.baselines.select_l2).")


def adam(lr, weight_decay, batch_size, max_epochs, patience, schedule="plateau") -> TrainConfig:
    # min_delta: the early-stopping threshold these results were made with (efa 0.2's).
    return TrainConfig(lr=lr, weight_decay=weight_decay, batch_size=batch_size,
                       max_epochs=max_epochs, patience=patience, schedule=schedule,
                       min_delta=1e-6, progress=False)
