"""MovieLens-100K movie sequences (EFA paper Sec 6.2.1, Table 1 right): EFA vs FM and peers.

Predict the masked movie of a user's time-ordered list, unidirectionally and bidirectionally.

Two protocols (docs/sequences.md): ``paper`` reproduces the reference notebook's data (902
users) and its user split, quirk included (seed 42 for every run; seeds vary initialisation and
shuffling); ``clean`` splits users properly (56.25/18.75/25 %) and draws the one-movie-per-
timestamp choice and the split from the run's seed.

A user rates a movie at most once, so the masked movie is never one of its context movies.
"+ distinct" models put that in the likelihood (``efa.peers.Distinct``); the paper's models
spread probability over already-rated movies. Both are reported, for every model.

This module also holds the small machinery the Instacart and ratings experiments share:
frame -> Sequences, the categorical model zoo, the worker pool and the CE plot.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from functools import lru_cache

import pandas as pd
import torch

from efa.baselines import CategoricalFM
from efa.data import Sequences
from efa.datasets import movielens as ml
from efa.experiments.report import Report
from efa.fields import Category
from efa.model import EFA, EFAConfig
from efa.peers import ContextLogit, Distinct, Unigram
from efa.train import TrainConfig, evaluate, fit, seed_everything

DIRECTIONS = ("unidirectional", "bidirectional")
PROTOCOLS = ("paper", "clean")
MODELS = (
    "Unigram",
    "Unigram + distinct",
    "Logit",
    "Logit + distinct",
    "FM",
    "FM + distinct",
    "EFA",
    "EFA + distinct",
)
# The EFA without the distinct support is an ablation: run on the paper protocol only (time).
SKIP = {("clean", "EFA")}
N_MOVIES, MAX_LEN = 50, 44
PAPER = {
    ("unidirectional", "FM"): 3.534,
    ("bidirectional", "FM"): 3.566,
    ("unidirectional", "EFA"): 3.444,
    ("bidirectional", "EFA"): 3.483,
}


@dataclass(frozen=True)
class Spec:
    """Model sizes and training settings, chosen on validation (docs/sequences.md)."""

    dim: int = 64  # EFA token width (64 beat the paper's 32 on validation)
    heads: int = 4
    head_dim: int = 16
    # Bidirectional multi-layer EFA needs one masked copy per position; one layer is exact in
    # one pass and was as good on validation.
    layers: dict = field(default_factory=lambda: {"unidirectional": 2, "bidirectional": 1})
    positions: bool = True
    fm_dim: int = 32
    lr: dict = field(default_factory=lambda: {"EFA": 3e-3, "FM": 3e-3, "Logit": 1e-2})
    weight_decay: dict = field(default_factory=lambda: {"EFA": 0.01, "FM": 0.0, "Logit": 0.01})
    logit_length: bool = False  # the one-hot length overfits on 480 users (validation)
    batch_size: int = 64
    max_epochs: int = 60
    patience: int = 5
    schedule: str = "plateau"
    subset: int | None = None  # quick: keep this many sequences per split


QUICK = Spec(dim=16, heads=2, head_dim=8, max_epochs=2, patience=2, subset=40)


# --------------------------------------------------------------------------- data


def to_sequences(frame: pd.DataFrame, key: str, item: str, name: str = "item",
                 values: tuple[str, ...] = ()) -> Sequences:
    """One sequence per ``key`` (sorted keys, rows in frame order); the 1-based ``item`` column
    becomes the 0-based field ``name``, ``values`` are copied; a ``target`` column that is not
    all True marks the predicted positions (context rows stay in the sequence)."""
    groups = frame.groupby(key, sort=True)
    fields = {name: [(g[item].to_numpy() - 1).tolist() for _, g in groups]}
    for v in values:
        fields[v] = [g[v].to_numpy().tolist() for _, g in groups]
    targets = None
    if "target" in frame and not frame["target"].all():
        targets = [g["target"].to_numpy() for _, g in groups]
    return Sequences.from_lists(fields, targets=targets)


def subset(data: Sequences, n: int | None) -> Sequences:
    return data if n is None else data[torch.arange(min(n, len(data)))]


@lru_cache(maxsize=1)
def _ratings() -> pd.DataFrame:
    return ml.read_ratings()


def load(protocol: str, seed: int) -> tuple[Sequences, Sequences, Sequences]:
    """(train, val, test). Paper: the reference's data and split whatever the run seed."""
    return _load(protocol, 42 if protocol == "paper" else seed)


@lru_cache(maxsize=2)
def _load(protocol: str, data_seed: int):
    frame = ml.preprocess_sequences(_ratings(), protocol, data_seed)
    splits = ml.split_users(frame, protocol, data_seed, val_unit="user")
    return tuple(to_sequences(f, "user_id", "item")
                 for f in (splits.train, splits.val, splits.test))


# --------------------------------------------------------------------------- models


def categorical_model(name: str, direction: str, num_items: int, max_len: int, spec: Spec,
                      train: Sequences):
    """(model called ``name`` (see MODELS), the base name whose training settings apply)."""
    base = name.removesuffix(" + distinct")
    item = Category("item", num_items, dim=spec.dim)
    if base == "Unigram":
        model = Unigram.from_data(item, train)
    elif base == "Logit":
        model = ContextLogit(item, direction, max_len)
        if not spec.logit_length:
            model.design.length = None
    elif base == "FM":
        # The reference FM: sum of the context embeddings, an intercept unidirectionally.
        model = CategoricalFM(item, spec.fm_dim, direction, pooling="sum")
    else:
        model = EFA(EFAConfig(
            [item], max_len=max_len if spec.positions else None,
            num_layers=spec.layers[direction], num_heads=spec.heads, head_dim=spec.head_dim,
            direction=direction, block="residual",
        ))
    if name.endswith(" + distinct"):
        model = Distinct(model, direction)
    return model, base


def fit_and_score(model, base: str, train, val, test, spec: Spec, seed: int) -> dict:
    """Train (unless closed form) with early stopping on validation; test CE and epochs."""
    out = {"epochs": 0}
    if base != "Unigram":
        cfg = TrainConfig(lr=spec.lr[base], weight_decay=spec.weight_decay[base],
                          batch_size=spec.batch_size, max_epochs=spec.max_epochs,
                          patience=spec.patience, schedule=spec.schedule, seed=seed,
                          progress=False)
        hist = fit(model, train, val, cfg)
        out["epochs"] = hist.best_epoch + 1
    out["val"] = -sum(evaluate(model, val).values())
    out["test"] = -sum(evaluate(model, test).values())
    return out


# --------------------------------------------------------------------------- workers


def run_jobs(task, jobs: list[dict], workers: int, progress: bool) -> list[dict]:
    """Run ``task(job)`` for every job, longest (``cost``) first, in single-threaded worker
    processes: these models are too small for intra-op threads to pay on 2 cores."""
    jobs = sorted(jobs, key=lambda j: -j.get("cost", 1.0))
    if workers <= 1:
        return [_announce(task(j), progress) for j in jobs]
    ctx = mp.get_context("spawn")  # fork after torch's thread pools start is unsafe
    with cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=torch.set_num_threads,
                                initargs=(1,)) as pool:
        return [_announce(r, progress) for r in pool.map(task, jobs)]


def _announce(result: dict, progress: bool) -> dict:
    if progress:
        keys = ("protocol", "variant", "direction", "model", "seed")
        what = " ".join(str(result[k]) for k in keys if k in result)
        print(f"  {what}: {result['seconds']:.1f} s", flush=True)
    return result


def workers_note(workers: int) -> str:
    threads = 1 if workers > 1 else torch.get_num_threads()
    return (f"Ran on {workers} worker process(es) × {threads} torch thread(s) each "
            "(EFA_WORKERS overrides the number of workers).")


def default_workers(quick: bool) -> int:
    env = os.environ.get("EFA_WORKERS")
    if env:
        return max(1, int(env))
    return 1 if quick else max(1, min(2, os.cpu_count() or 1))


def _task(job: dict) -> dict:
    t0 = time.perf_counter()
    spec: Spec = job["spec"]
    train, val, test = (subset(s, spec.subset) for s in load(job["protocol"], job["seed"]))
    seed_everything(job["seed"])
    model, base = categorical_model(job["model"], job["direction"], N_MOVIES, MAX_LEN, spec, train)
    out = fit_and_score(model, base, train, val, test, spec, job["seed"])
    out["seconds"] = time.perf_counter() - t0
    return {**{k: v for k, v in job.items() if k != "spec"}, **out}


# --------------------------------------------------------------------------- the experiment


def run(seeds: int = 5, quick: bool = False, progress: bool = True, command: str = "",
        workers: int | None = None) -> Report:
    t0 = time.perf_counter()
    spec = QUICK if quick else Spec()
    workers = workers or default_workers(quick)
    cost = {"EFA": 4.0, "FM": 1.0, "Logit": 0.5, "Unigram": 0.0}
    jobs = [
        {"protocol": p, "direction": d, "model": m, "seed": s, "spec": spec,
         "cost": cost[m.removesuffix(" + distinct")] * (2 if d == "unidirectional" else 1)}
        for p in PROTOCOLS for d in DIRECTIONS for m in MODELS for s in range(seeds)
        if (p, m) not in SKIP
    ]
    results = run_jobs(_task, jobs, workers, progress)
    report = Report("movielens-sequence", command, list(range(seeds)))
    add_rows(report, results, PROTOCOLS, DIRECTIONS, MODELS, PAPER, seeds)
    tr, va, te = load("paper", 42)
    report.notes += [
        f"Data (paper protocol): {int(tr.lengths.sum() + va.lengths.sum() + te.lengths.sum())} "
        f"ratings of {N_MOVIES} movies by {len(tr) + len(va) + len(te)} of the 902 users "
        f"(train {len(tr)} / val {len(va)} / test {len(te)} users; the reference's user-split "
        "quirk leaves 42 users unused). Clean protocol: all 902 users, 56.25/18.75/25 %, split "
        "and timestamp de-duplication drawn from the run seed.",
        "Metric: test cross-entropy, nats per masked movie (mean NLL over every position of "
        "every test user). Paper column: Table 1 (single runs), on paper-protocol rows only "
        "(the clean split has other test users). 'EFA' without distinct is an ablation, run on "
        "the paper protocol only.",
        "+ distinct: the masked movie cannot be a movie already in its context (a user rates a "
        "movie once), p(x_i = k | c) ∝ exp(η_k)·1[k ∉ c] (efa.peers.Distinct).",
        f"EFA: {spec.layers['unidirectional']} (uni) / {spec.layers['bidirectional']} (bi) "
        f"residual softmax attention layers, {spec.heads} heads × {spec.head_dim}, "
        f"{spec.dim}-d movie embedding + learned positions. FM: the reference's (sum of "
        f"{spec.fm_dim}-d context embeddings, intercept unidirectionally). Logit: multinomial "
        "logit on context-movie counts + one-hot masked position (the one-hot length lost on "
        "validation). AdamW (learning rate / weight decay: "
        + ", ".join(f"{k} {spec.lr[k]:g} / {spec.weight_decay[k]:g}" for k in spec.lr)
        + f"), batch {spec.batch_size}, ≤ {spec.max_epochs} epochs, plateau schedule, early "
        f"stopping (patience {spec.patience}) on validation CE with the best epoch restored.",
    ]
    report.notes.append(workers_note(workers))
    report.extra["best_epoch"] = per_job(results, "epochs")
    report.extra["seconds"] = per_job(results, "seconds")
    report.extra["workers"] = workers
    report.wall_seconds = time.perf_counter() - t0
    return report


def add_rows(report, results, protocols, directions, models, paper, seeds, metric="test CE"):
    by = {(r["protocol"], r["direction"], r["model"], r["seed"]): r for r in results}
    for p in protocols:
        for d in directions:
            for m in models:
                if (p, d, m, 0) not in by:
                    continue
                values = [by[p, d, m, s]["test"] for s in range(seeds)]
                base = m.removesuffix(" + distinct")
                # The paper's numbers belong to its protocol; clean rows have a different split.
                # "FM + distinct" is not the paper's FM: no paper number beside it.
                ref = paper.get((d, base)) if p == "paper" and m != "FM + distinct" else None
                report.add(f"{p}: {d}", m, metric, values, ref)


def per_job(results, what: str) -> dict:
    """``what`` (best epoch, seconds) per protocol/direction/model, one entry per seed."""
    out: dict[str, list] = {}
    for r in sorted(results, key=lambda r: r["seed"]):
        key = "/".join(str(r[k]) for k in ("protocol", "variant", "direction", "model") if k in r)
        out.setdefault(key, []).append(round(r[what], 1))
    return out


# --------------------------------------------------------------------------- plots


def ce_plot(report: Report, metric: str, path, title: str, xlabel: str) -> None:
    """One panel per setting: a dot (mean) with a bar (± std over seeds) per model, and the
    paper's number as a black cross. Dots rather than bars: the axis does not start at 0."""
    import matplotlib.pyplot as plt  # after efa.experiments.report has chosen the Agg backend

    rows = [r for r in report.rows if r.metric == metric]
    settings = list(dict.fromkeys(r.setting for r in rows))
    models = list(dict.fromkeys(r.model for r in rows))
    cols = min(2, len(settings))
    nrows = -(-len(settings) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.2 * cols, 0.42 * len(models) * nrows + 1.4),
                             squeeze=False)
    for ax, setting in zip(axes.flat, settings, strict=False):
        mine = [r for r in rows if r.setting == setting]  # own x range: v1 and v2 differ
        values = [v for r in mine for v in (r.mean - r.std, r.mean + r.std, r.paper)
                  if v is not None]
        lo, hi = min(values), max(values)
        for k, m in enumerate(models):
            r = next((r for r in rows if r.setting == setting and r.model == m), None)
            if r is None:
                ax.text(lo, k, "  (not run)", va="center", fontsize=7, color="0.5")
                continue
            color = "C3" if m.startswith("EFA") else ("C0" if m.startswith("FM") else "0.35")
            ax.errorbar(r.mean, k, xerr=r.std, fmt="o", color=color, ms=6, capsize=3)
            ax.annotate(f"{r.mean:.3f}", (r.mean, k), xytext=(0, 6), textcoords="offset points",
                        ha="center", fontsize=7)
            if r.paper is not None:
                ax.plot(r.paper, k, "kx", ms=8, mew=2)
        ax.set_yticks(range(len(models)), models, fontsize=8)
        ax.set_ylim(len(models) - 0.4, -0.7)
        pad = 0.08 * (hi - lo) + 1e-3
        ax.set_xlim(lo - pad, hi + pad)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(setting, fontsize=10)
        ax.set_xlabel(xlabel)
    for ax in list(axes.flat)[len(settings):]:
        ax.axis("off")
    fig.suptitle(f"{title}\n(dots: mean ± std over {len(report.seeds)} seeds; crosses: the "
                 "paper's single run)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_plots(report: Report, out) -> None:
    ce_plot(report, "test CE", out / "movielens_sequence_ce.png",
            "MovieLens: predict the masked movie (lower is better)", "test cross-entropy (nats)")
