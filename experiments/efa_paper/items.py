"""What the item-sequence experiments (MovieLens sequences and ratings, Instacart) share: a
long frame → ``Sequences``, the categorical model zoo (unigram, logit, FM, SASRec, BERT4Rec,
EFA, EFA + bag; each also "+ distinct"), fitting and scoring (test CE, HR@10 / NDCG@10 of the
last item, per-position log-likelihoods for paired comparisons), and the rows of their
tables."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch

from efa.baselines import CategoricalFM, ContextLogit, Unigram, select_l2
from efa.baselines.convex import DESIGN_RATIOS, L2_GRID
from efa.baselines.recsys import RECBOLE, BERT4Rec, SASRec, ranking_metrics
from efa.core.config import EFAConfig
from efa.core.data import Sequences
from efa.core.fields import Category
from efa.core.model import EFA
from efa.training.calibration import calibration
from efa.training.scoring import evaluate, log_likelihoods
from efa.training.train import TrainConfig, fit
from experiments.harness.evaluate import standard_error, table

DISTINCT = " + distinct"
BAG = "EFA + bag"
HR, NDCG = "HR@10 (last item, full ranking)", "NDCG@10 (last item, full ranking)"
ECE = "ECE of the item probabilities (test, 15 bins of top-1 probability)"


QUICK_CONVEX = {"l2_grid": (1e-2, 1e-3), "design_ratios": (1.0,)}


# EFA without dropout: the item experiments' settings before dropout was tuned (results made
# with them pin it, e.g. the bag and attention-kernel grids).
NO_DROPOUT = {"unidirectional": 0.0, "bidirectional": 0.0}


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
    train: dict = field(default_factory=dict)  # base name ("EFA", "FM", ...) -> TrainConfig
    l2_grid: tuple[float, ...] = L2_GRID  # the convex peers' penalty search (select_l2)
    design_ratios: tuple[float, ...] = DESIGN_RATIOS
    subset: int | None = None  # quick: keep this many sequences per split
    # EFA + bag (Category(bag=True)): the prior on the bag table and its step scale, without /
    # with distinct (picked on validation by `efa reproduce bag-grid`).
    bag_l2: tuple[float, float] = (1e-3, 1e-2)
    bag_scale: tuple[float, float] = (10.0, 10.0)
    # EFA's dropout per direction (picked on validation by `efa reproduce dropout-grid`).
    dropout: dict = field(default_factory=lambda: dict(NO_DROPOUT))
    recsys: dict = field(default_factory=dict)  # "SASRec" / "BERT4Rec" -> model options
    # Early stopping on this many validation positions per sequence (a fixed random subset), for
    # models that pay one forward pass per scored position (BERT4Rec's masked copies).
    stop_positions: dict = field(default_factory=dict)


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
                      train: Sequences, attention: str | dict = "softmax"):
    """(model called ``name``, e.g. "EFA + distinct", the base name whose settings apply);
    ``attention``: the EFA's attention kernel (efa.core.kernels)."""
    base = name.removesuffix(DISTINCT)
    distinct = name.endswith(DISTINCT)
    item = Category("item", num_items, dim=spec.dim, distinct=distinct)
    if base == "Unigram":
        model = Unigram.from_data(item, train, direction=direction)
    elif base == "Logit":
        model = ContextLogit(item, direction, max_len,
                             length=spec.logit_length and direction == "bidirectional")
    elif base == "FM":
        # The reference FM: sum of the context embeddings, an intercept unidirectionally.
        model = CategoricalFM(item, spec.fm_dim, direction, pooling="sum")
    elif base == "SASRec":
        if direction != "unidirectional":
            raise ValueError("SASRec is causal: unidirectional only")
        model = SASRec(item, max_len, **spec.recsys.get(base, {}))
    elif base == "BERT4Rec":
        model = BERT4Rec(item, max_len, direction, **spec.recsys.get(base, {}))
    elif base in ("EFA", BAG):
        if base == BAG:
            item = Category("item", num_items, dim=spec.dim, distinct=distinct, bag=True,
                            bag_l2=spec.bag_l2[distinct],
                            bag_scale=spec.bag_scale[distinct])
        model = EFA(EFAConfig(
            [item], max_len=max_len if spec.positions else None,
            num_layers=spec.layers[direction], num_heads=spec.heads, head_dim=spec.head_dim,
            direction=direction, block="residual", attention=attention,
            dropout=spec.dropout[direction],
        ))
    else:
        raise ValueError(f"unknown model {name!r}")
    return model, base


def fit_and_score(model, base: str, train, val, test, spec, seed: int,
                  keep_lls: bool = True) -> dict:
    """Fit (closed form, L-BFGS with L2 on validation, or AdamW with early stopping on
    validation) and score: validation and test cross-entropy, HR@10 / NDCG@10 of the last test
    item, and (``keep_lls``) the per-position test log-likelihoods, for paired comparisons."""
    out = {"epochs": 0}
    if base in ("Logit", "GLM", "Per-movie mean"):
        _, info = select_l2(model, train, val, spec.l2_grid, spec.design_ratios)
        out["l2"], out["design_ratio"] = info["l2"], info["design_ratio"]
        out["iterations"] = sum(f["iterations"] for f in info["fits"])
        out["converged"] = all(f["converged"] for f in info["fits"])
    elif base != "Unigram":
        stop = spec.stop_positions.get(base)
        watch = val if stop is None else val.thin_scored(stop, seed=12345)
        hist = fit(model, train, watch, replace(spec.train[base], seed=seed))
        out["epochs"] = hist.best_epoch + 1
    out["val"] = -sum(evaluate(model, val).values())
    out["test"] = -sum(evaluate(model, test).values())
    if model.target_fields[0].kind == "category":
        ranks = ranking_metrics(model, test, k=10)
        out["hr10"], out["ndcg10"] = ranks["HR@10"], ranks["NDCG@10"]
        out["ece"] = calibration(model, test, model.target_fields[0].name, bins=15).ece
        if keep_lls:
            name = model.target_fields[0].name
            lls = log_likelihoods(model, test)[name]
            out["lls"] = lls[test.predicted(name)].tolist()
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
    for what, key in ((metric, "test"), (HR, "hr10"), (NDCG, "ndcg10"), (ECE, "ece")):
        for p in protocols:
            for d in directions:
                for m in models:
                    if (p, d, m, 0) not in by or key not in by[p, d, m, 0]:
                        continue
                    values = [by[p, d, m, s][key] for s in range(seeds)]
                    base = m.removesuffix(DISTINCT)
                    # The paper's numbers belong to its protocol; clean rows have a different
                    # split. "FM + distinct" is not the paper's FM: no paper number beside it.
                    ref = (paper.get((d, base)) if key == "test" and p == "paper"
                           and m != "FM" + DISTINCT else None)
                    report.add(f"{p}: {d}", m, what, values, ref)


def paired(results, protocols, directions, models, seeds) -> tuple[str, dict]:
    """Paired per-position differences, on the same test positions, between each EFA variant
    and the best peer of its likelihood class (same direction, same support: with or without
    distinct; best = lowest mean test CE). Per seed: the mean of ll_EFA − ll_peer over test
    positions (nats; > 0: EFA better) and its standard error over positions; over seeds: the
    mean and std of those means. Returns (a markdown section, the numbers)."""
    by = {(r["protocol"], r["direction"], r["model"], r["seed"]): r for r in results}
    efas = [m for m in models if m.startswith("EFA")]
    peers = [m for m in models if not m.startswith("EFA")]
    lines = ["## Paired differences: EFA against its best peer (same test positions)", "",
             "Δ = mean over test positions of log p_EFA − log p_peer (nats; > 0: EFA better), "
             "per seed; ± is the std over seeds of the per-seed means, SE the standard error "
             "over positions within a seed (worst seed). Best peer: lowest mean test CE among "
             "the non-EFA models of the same direction and support.", ""]
    rows, numbers = [], {}
    for p in protocols:
        for d in directions:
            for e in efas:
                if (p, d, e, 0) not in by or "lls" not in by[p, d, e, 0]:
                    continue
                same = [m for m in peers if m.endswith(DISTINCT) == e.endswith(DISTINCT)
                        and (p, d, m, 0) in by and "lls" in by[p, d, m, 0]]
                if not same:
                    continue
                best = min(same, key=lambda m: np.mean([by[p, d, m, s]["test"]
                                                         for s in range(seeds)]))
                deltas, ses = [], []
                for s in range(seeds):
                    diff = (np.asarray(by[p, d, e, s]["lls"])
                            - np.asarray(by[p, d, best, s]["lls"]))
                    deltas.append(float(diff.mean()))
                    ses.append(standard_error(diff))
                wins = sum(dl > 2 * se for dl, se in zip(deltas, ses, strict=True))
                numbers[f"{p}: {d} / {e}"] = {"peer": best, "delta": deltas, "se": ses}
                sd = float(np.std(deltas, ddof=1)) if seeds > 1 else 0.0
                rows.append([f"{p}: {d}", e, best, f"{np.mean(deltas):+.4f} ± {sd:.4f}",
                             f"{max(ses):.4f}", f"{wins} of {seeds}"])
    lines.append(table(["setting", "EFA model", "best peer", "Δ mean ± std over seeds",
                        "per-seed SE (max)", "seeds with Δ > 2 SE"], rows))
    return "\n".join(lines), numbers


def per_job(results, what: str) -> dict:
    """``what`` (best epoch, seconds, chosen penalty, ...) per protocol/direction/model, one
    entry per seed; floats to 4 significant digits (a penalty of 1e-5 must not become 0.0)."""
    out: dict[str, list] = {}
    for r in sorted(results, key=lambda r: r["seed"]):
        if what not in r:
            continue
        key = "/".join(str(r[k]) for k in ("protocol", "variant", "direction", "model") if k in r)
        v = r[what]
        out.setdefault(key, []).append(float(f"{v:.4g}") if isinstance(v, float) else v)
    return out


def convex_extras(report, results, name: str) -> None:
    """The convex peers' chosen penalties, L-BFGS iterations and convergence per job into
    ``report.extra[name + "_l2" / "_iterations" / "_converged"]``, and a note saying whether
    every fit along every penalty path converged (``fit_convex``)."""
    for what in ("l2", "iterations", "converged"):
        report.extra[f"{name}_{what}"] = per_job(results, what)
    flags = report.extra[f"{name}_converged"]
    if not flags:
        return
    missed = [key for key, v in flags.items() if not all(v)]
    # (deterministic jobs are replicated over the seeds: a maximum, not a sum)
    most = max(max(v) for v in report.extra[f"{name}_iterations"].values())
    report.notes.append(
        f"Convex peers ({name}): every L-BFGS fit of every penalty path converged "
        f"(`fit_convex`'s gradient test; up to {most:,} iterations per path)." if not missed else
        f"Convex peers ({name}): NOT converged within the iteration cap on {', '.join(missed)}"
        " (reported as fitted).")


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


def new_model_notes(spec: ZooSpec) -> list[str]:
    """What the peers and EFA variants added for issue 15 are, and how they were tuned."""
    rec = {k: {**RECBOLE[k], **spec.recsys.get(k, {})} for k in ("SASRec", "BERT4Rec")}
    return [
        "EFA + bag: EFA with Category(bag=True), the bag-of-context term Σ_{j in c(i)} U[x_j] "
        "(a learned K × K table) added to the logits, so that the model class contains the "
        "multinomial logit on context counts (tests/test_special_cases.py); Gaussian prior "
        f"(L2) {spec.bag_l2[0]:g} and step scale {spec.bag_scale[0]:g} without distinct, "
        f"{spec.bag_l2[1]:g} and {spec.bag_scale[1]:g} with it (picked on validation: "
        "results/bag-grid).",
        "SASRec / BERT4Rec: RecBole's published defaults (properties/model/SASRec.yaml, "
        "BERT4Rec.yaml) on torch.nn.TransformerEncoder: "
        + "; ".join(f"{k} {v['layers']} layers × {v['heads']} heads, {v['dim']}-d, inner "
                    f"{v['inner']}, dropout {v['dropout']}" for k, v in rec.items())
        + f", BERT4Rec mask ratio {rec['BERT4Rec']['mask_ratio']}; full-softmax cross-entropy "
        "(SASRec at every position given the previous ones; BERT4Rec by the cloze task). "
        "Scored like every model: "
        "SASRec by its causal conditionals, BERT4Rec by one masked copy per position "
        "(bidirectional, its exact pseudo-likelihood) or the history + [MASK] "
        "(unidirectional, RecBole's next-item prediction).",
        f"{HR} / {NDCG}: the last item of every test sequence ranked against all items by the "
        "model's conditional given the rest of the sequence (its earlier items); ties count "
        "against the model; '+ distinct' models rank only items not in the history.",
    ]


def target_notes(report, settings: list[str], metric: str = "test CE") -> list[str]:
    """Plain statements of issue 15's targets per setting, met or missed, with the numbers:
    EFA + bag below the converged logit; EFA + bag + distinct below EFA + distinct (the model
    of the results before the bag, unchanged); the best EFA of each support below SASRec and
    BERT4Rec of the same support."""
    cell = {(r.setting, r.model): r for r in report.rows if r.metric == metric}
    lines = []

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    for s in settings:
        parts = []
        bag, logit = cell.get((s, BAG)), cell.get((s, "Logit"))
        if bag and logit:
            parts.append(f"EFA + bag {bag.mean:.3f} vs converged Logit {logit.mean:.3f}: "
                         f"{verdict(bag.mean < logit.mean)}")
        bagd, before = cell.get((s, BAG + DISTINCT)), cell.get((s, "EFA" + DISTINCT))
        if bagd and before:
            parts.append(f"EFA + bag + distinct {bagd.mean:.3f} vs EFA + distinct (no bag) "
                         f"{before.mean:.3f}: {verdict(bagd.mean < before.mean)}")
        for support in ("", DISTINCT):
            efa = [cell[s, m] for m in ("EFA" + support, BAG + support) if (s, m) in cell]
            for peer in ("SASRec", "BERT4Rec"):
                r = cell.get((s, peer + support))
                if efa and r:
                    best = min(efa, key=lambda x: x.mean)
                    parts.append(f"{best.model} {best.mean:.3f} vs {r.model} {r.mean:.3f}: "
                                 f"{verdict(best.mean < r.mean)}")
        if parts:
            lines.append(f"Targets, {s}: " + "; ".join(parts) + ".")
    return lines
