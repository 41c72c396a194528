"""The toy-corpus check of Proposition 9 (MoE paper, App. G.1 and I), and its attention version
(Prop 14).

Twelve words; 10,000 sentences of five words, each of one of three types chosen uniformly:
"I like s1 and s2" (s1, s2 iid with probabilities 4/11, 5/11, 1/11, 1/11), "s1 and s2 is a"
(subjects uniform, the adjective ∝ the sum of the two subjects' scores), "s is a1 and a2"
(subject uniform, adjectives iid ∝ its scores), with the paper's scores (fun, boring, easy,
difficult) per subject.

- CBOW without negative sampling, the whole sentence as context: efa's ``CategoricalFM``
  (Prop 1 of the EFA paper, bidirectional). Prop 9 says w_iᵀc_j ≈ log(p(w_i,c_j)/p(c_j)) +
  log|V|; the paper reports Spearman corr(w_iᵀc_j, p(w_i,c_j)/p(c_j)) = .74/.77/.77/.77 and
  Pearson corr(w_iᵀc_j, log(p(w_i,c_j)/p(c_j)) + log|V|) = .67/.71/.70/.71 at dimensions
  30/100/300/900 (one run, training not described).
- One-layer, one-head bidirectional attention in the form of the paper's Eq. 1 (no residual,
  no positions, no biases) trained by the exact masked pseudo-likelihood: τ, γ, p̄, c̃ and ζ
  estimated from the trained model (efa.embeddings), how far p̄ is from symmetric and ζ from
  constant, and how well Eq. 2 and w_iᵀc̃_j ≈ log(p̄(w_i,c_j)/p̄(c_j)) + log|V| hold.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from efa.baselines import CategoricalFM
from efa.core.config import EFAConfig
from efa.core.data import Sequences
from efa.core.fields import Category
from efa.core.model import EFA
from efa.embeddings import (
    attention_embeddings,
    attention_statistics,
    cbow_embeddings,
    cbow_targets,
    cooccurrence,
    correlation,
    prop9_correlations,
)
from efa.training.scoring import evaluate
from efa.training.train import TrainConfig, fit, seed_everything
from experiments.harness.papers import paper_numbers
from experiments.harness.plots import figure, save
from experiments.harness.report import Report

VOCAB = ("i", "like", "and", "is", "mathematics", "statistics", "sociology", "history",
         "fun", "boring", "easy", "difficult")
SUBJECTS, ADJECTIVES = 4, 8  # first ids of the subjects and of the adjectives
SCORES = np.array([[4, 2, 4, 2], [6, 0, 5, 1], [1, 5, 2, 4], [0, 6, 0, 6]], dtype=float)
TYPE1 = np.array([4, 5, 1, 1]) / 11
DIMS = (30, 100, 300, 900)
_NUMBERS = paper_numbers(__file__, "analogy-toy")
PAPER = {k: dict(zip(_NUMBERS["dims"], _NUMBERS[k], strict=True)) for k in ("spearman", "pearson")}
CBOW, ATTENTION = "CBOW (CategoricalFM)", "attention (1 layer, Eq. 1)"


def generate(n: int, seed: int) -> np.ndarray:
    """[n, 5] word ids of the paper's toy corpus (Appendix I)."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 3, n)
    out = np.empty((n, 5), dtype=np.int64)
    for k, t in enumerate(kind):
        if t == 0:  # I like s1 and s2
            s1, s2 = rng.choice(4, 2, p=TYPE1)
            out[k] = [0, 1, SUBJECTS + s1, 2, SUBJECTS + s2]
        elif t == 1:  # s1 and s2 is adj
            s1, s2 = rng.integers(0, 4, 2)
            p = SCORES[s1] + SCORES[s2]
            out[k] = [SUBJECTS + s1, 2, SUBJECTS + s2, 3, ADJECTIVES + rng.choice(4, p=p / p.sum())]
        else:  # s is adj1 and adj2
            s = rng.integers(0, 4)
            a1, a2 = rng.choice(4, 2, p=SCORES[s] / SCORES[s].sum())
            out[k] = [SUBJECTS + s, 3, ADJECTIVES + a1, 2, ADJECTIVES + a2]
    return out


def to_sequences(x: np.ndarray) -> Sequences:
    return Sequences({"word": torch.as_tensor(x)}, torch.full((len(x),), x.shape[1]))


def cbow(dim: int, pooling: str) -> CategoricalFM:
    return CategoricalFM(Category("word", len(VOCAB)), dim=dim, pooling=pooling)


def attention(dim: int, head_dim: int) -> EFA:
    """The paper's Eq. 1 model: one bare softmax head, no residual, positions or biases."""
    return EFA(EFAConfig([Category("word", len(VOCAB), dim=dim)], num_layers=1, num_heads=1,
                         head_dim=min(dim, head_dim), block="bare", bias=False, max_len=None,
                         direction="bidirectional"))


@dataclass(frozen=True)
class Spec:
    n_sentences: int = 10_000
    n_validation: int = 2_000
    dims: tuple[int, ...] = DIMS
    pooling: str = "sum"
    head_dim: int = 32  # d_w ≥ |V| = 12: W^LOV = δW^OW^V is not rank-limited
    figure_dim: int = 100
    # Training lengths of the "path" analysis: CBOW at figure_dim, seed 0, constant rate.
    path_epochs: tuple[int, ...] = (1, 2, 3, 5, 8, 13, 20, 30, 40)
    train: dict = field(default_factory=lambda: {
        name: TrainConfig(lr=1e-3, batch_size=128, max_epochs=30, patience=5,
                          schedule="plateau", progress=False, min_delta=1e-6)
        for name in (CBOW, ATTENTION)
    })


SPEC = Spec()
QUICK = Spec(n_sentences=400, n_validation=100, dims=(30,), figure_dim=30,
             path_epochs=(1, 2), train={
                 name: replace(cfg, max_epochs=2, patience=2) for name, cfg in SPEC.train.items()
             })


def jobs(spec: Spec, seeds: int) -> list[dict]:
    """Seed s draws the corpus with seed s (and a validation corpus with seed 10_000 + s) and
    initialises and shuffles with seed s; one more job traces CBOW's correlations along
    training (seed 0)."""
    fits = [{"seed": s, "dim": d, "model": m, "spec": spec,
             "cost": (2 if m == ATTENTION else 1) * (1 + d / 300)}
            for s in range(seeds) for d in spec.dims for m in (CBOW, ATTENTION)]
    return [*fits, {"seed": 0, "dim": spec.figure_dim, "model": "path", "spec": spec,
                    "cost": sum(spec.path_epochs) / 30}]


def path(spec: Spec) -> dict:
    """CBOW's correlations after 1, 2, 3, ... epochs at a constant learning rate (each a fit
    from the same seed, so each run continues the previous one's first epochs exactly)."""
    x = generate(spec.n_sentences, 0)
    train, val = to_sequences(x), to_sequences(generate(spec.n_validation, 10_000))
    counts = cooccurrence(x, len(VOCAB))
    out = {"epochs": list(spec.path_epochs), "spearman": [], "pearson": [], "val_ce": []}
    cfg = replace(spec.train[CBOW], schedule="constant", seed=0)
    for epochs in spec.path_epochs:
        seed_everything(0)
        model = cbow(spec.figure_dim, spec.pooling)
        fit(model, train, None, replace(cfg, max_epochs=epochs))
        r = prop9_correlations(*cbow_embeddings(model), counts)
        out["spearman"].append(r["spearman"])
        out["pearson"].append(r["pearson"])
        out["val_ce"].append(-evaluate(model, val)["word"])
    return out


def task(job: dict) -> dict:
    t0 = time.perf_counter()
    spec, seed, dim, name = job["spec"], job["seed"], job["dim"], job["model"]
    if name == "path":
        return {"model": "path", "path": path(spec), "seconds": time.perf_counter() - t0}
    x = generate(spec.n_sentences, seed)
    train, val = to_sequences(x), to_sequences(generate(spec.n_validation, 10_000 + seed))
    counts = cooccurrence(x, len(VOCAB))
    seed_everything(seed)
    model = cbow(dim, spec.pooling) if name == CBOW else attention(dim, spec.head_dim)
    hist = fit(model, train, val, replace(spec.train[name], seed=seed))
    out = {"seed": seed, "dim": dim, "model": name, "epochs": hist.epochs_run,
           "best_epoch": hist.best_epoch + 1, "val_ce": -evaluate(model, val)["word"]}
    if name == CBOW:
        W, C = cbow_embeddings(model)
    else:
        e = attention_embeddings(model)
        W, C = e["W"], e["C"]
        st = attention_statistics(e["tau"], x, len(VOCAB))
        s = W @ C.T
        tilde = s * st["scale"][None, :]  # w_iᵀc̃_j = S ζ_j w_iᵀc_j
        log_tau = e["log_tau"][:-1]
        out |= {
            "eq2": correlation(s, st["predicted"])["pearson"],
            "tilde_N": correlation(tilde, st["N"])["pearson"],
            "asymmetry": st["asymmetry"], "zeta_cv": st["zeta_cv"],
            "zeta_range": st["zeta_range"], "tau_range": float(math.exp(np.ptp(log_tau))),
            "zeta": st["zeta"].tolist(), "log_tau": e["log_tau"].tolist(),
        }
        if seed == 0 and dim == spec.figure_dim:
            out["scatter_tilde"] = {"x": _finite(st["N"]), "y": tilde.ravel().tolist()}
    out |= prop9_correlations(W, C, counts)
    if seed == 0 and dim == spec.figure_dim:
        _, m = cbow_targets(counts)  # log p(w_i | c_j) + log|V|
        out["scatter"] = {"log_p": _finite(m - math.log(len(VOCAB))),
                          "wc": (W @ C.T).ravel().tolist()}
    out["seconds"] = time.perf_counter() - t0
    return out


def _finite(a: np.ndarray) -> list:
    """A matrix as a flat JSON list, None where it is not finite (a pair that never occurs)."""
    return [float(v) if np.isfinite(v) else None for v in np.ravel(a)]


METRICS = (  # (key, metric name, paper numbers, models)
    ("spearman", "Spearman corr(wᵀc, p(w,c)/p(c))", PAPER["spearman"], (CBOW, ATTENTION)),
    ("pearson", "Pearson corr(wᵀc, log p(w,c)/p(c) + log|V|)", PAPER["pearson"],
     (CBOW, ATTENTION)),
    ("eq2", "Pearson corr(wᵀc, Eq. 2 of Prop 14)", None, (ATTENTION,)),
    ("tilde_N", "Pearson corr(wᵀc̃, log p̄(w,c)/p̄(c) + log|V|)", None, (ATTENTION,)),
    ("asymmetry", "‖p̄ − p̄ᵀ‖/‖p̄‖ (0 = symmetric)", None, (ATTENTION,)),
    ("zeta_cv", "coefficient of variation of ζ_j (0 = constant)", None, (ATTENTION,)),
    ("zeta_range", "max ζ_j / min ζ_j", None, (ATTENTION,)),
    ("tau_range", "max τ_j / min τ_j over words", None, (ATTENTION,)),
    ("val_ce", "validation cross-entropy (nats)", None, (CBOW, ATTENTION)),
)


def tables(results: list[dict], spec: Spec, seeds: int, command: str) -> Report:
    by = {(r["model"], r["dim"], r["seed"]): r for r in results if r["model"] != "path"}
    report = Report("analogy-toy", command, list(range(seeds)))
    for key, metric, paper, models in METRICS:
        for dim in spec.dims:
            for m in models:
                values = [by[m, dim, s][key] for s in range(seeds)]
                report.add(f"d={dim}", m, metric, values, paper.get(dim) if paper else None)
    # Entropy floor: the validation cross-entropy of the true conditional is not available in
    # closed form; the empirical one of the training corpus bounds what CBOW can reach.
    report.extra["epochs_run"] = {f"{m}/d={d}": [by[m, d, s]["epochs"] for s in range(seeds)]
                                  for m in (CBOW, ATTENTION) for d in spec.dims}
    report.extra["best_epoch"] = {f"{m}/d={d}": [by[m, d, s]["best_epoch"] for s in range(seeds)]
                                  for m in (CBOW, ATTENTION) for d in spec.dims}
    first = by[ATTENTION, spec.figure_dim, 0]
    report.extra["attention_seed0"] = {"zeta": first["zeta"], "log_tau": first["log_tau"],
                                       "words": [*VOCAB, "[MASK]"]}
    report.figures["correlations"] = {
        "dims": list(spec.dims),
        "paper": {k: [PAPER[k][d] for d in spec.dims] for k in ("spearman", "pearson")},
        **{f"{m}/{k}": [[by[m, d, s][k] for s in range(seeds)] for d in spec.dims]
           for m in (CBOW, ATTENTION) for k in ("spearman", "pearson")},
        **{f"{ATTENTION}/{k}": [[by[ATTENTION, d, s][k] for s in range(seeds)]
                                for d in spec.dims] for k in ("eq2", "tilde_N")},
    }
    report.figures["scatter"] = {"dim": spec.figure_dim, "words": list(VOCAB),
                                 CBOW: by[CBOW, spec.figure_dim, 0]["scatter"],
                                 ATTENTION: by[ATTENTION, spec.figure_dim, 0]["scatter"],
                                 "tilde": first["scatter_tilde"]}
    report.figures["path"] = {"dim": spec.figure_dim, **next(
        r["path"] for r in results if r["model"] == "path")}
    c, a = spec.train[CBOW], spec.train[ATTENTION]
    report.notes += [
        f"Corpus: {spec.n_sentences:,} sentences of 5 words from the paper's generator "
        f"(Appendix I), drawn with seed s; validation: {spec.n_validation:,} more sentences "
        "(seed 10,000 + s). p(w_i, c_j) counts word i at a position and word j at another "
        "position of the same sentence (symmetric); the Spearman correlation is over all 144 "
        "pairs, the Pearson one over the pairs that occur (log defined).",
        f"CBOW: efa's CategoricalFM (bidirectional, pooling='{spec.pooling}': logits = "
        "W Σ_{j≠i} c_{x_j}, a full softmax over the 12 words, no negative sampling, no bias); "
        f"AdamW lr {c.lr:g}, batch {c.batch_size}, at most {c.max_epochs} epochs, the rate "
        f"halved on a validation plateau, early stopping (patience {c.patience}) with the "
        "epoch of the best validation log-likelihood kept: the correlations of a converged "
        "CBOW (path.png shows them along training).",
        "Attention: efa.EFA with one bare softmax head (no residual, no positional table, no "
        f"biases, token dimension d, head dimension d_w = min(d, {spec.head_dim})), exact "
        "masked pseudo-likelihood (two-stream); W = δ W^O W^V and "
        "C = the token table, so the masked slot's logits are exactly Σ_j γ_j W c_{a_j} (tested). "
        f"AdamW lr {a.lr:g}, batch {a.batch_size}, the same schedule and selection. τ_j "
        "= exp(c_jᵀW^KQ c_[MASK]/√d); γ, p̄, ζ_j = Σγ²/Σγ, c̃_j = S ζ_j c_j (S = 5) over the "
        "training corpus with every position masked in turn (efa.embeddings).",
        "The paper does not describe its CBOW training (optimiser, epochs, initialisation). "
        "The correlations depend on how far training went: near initialisation, where the "
        "second-order expansion behind Prop 9 holds, they are higher; path.png traces them "
        f"along {max(spec.path_epochs)} epochs at a constant rate (d = {spec.figure_dim}, "
        "seed 0).",
    ]
    return report


def plots(report: Report, out) -> None:
    out = Path(out)
    fig_data = report.figures["correlations"]
    dims = fig_data["dims"]
    fig, axes = figure(1, 2, figsize=(11, 4))
    for ax, key, title in ((axes[0], "spearman", "Spearman corr(wᵀc, p(w,c)/p(c))"),
                           (axes[1], "pearson", "Pearson corr(wᵀc, log p(w,c)/p(c) + log|V|)")):
        for k, (model, color) in enumerate(((CBOW, "C0"), (ATTENTION, "C3"))):
            v = np.array(fig_data[f"{model}/{key}"])
            sd = v.std(1, ddof=1) if v.shape[1] > 1 else np.zeros(len(v))
            ax.errorbar(np.array(dims) * (1 + 0.04 * (k - 0.5)), v.mean(1), yerr=sd,
                        fmt="o-", color=color, capsize=3, label=model)
        ax.plot(dims, fig_data["paper"][key], "kx--", ms=8, mew=2, label="paper (CBOW)")
        ax.fill_between(dims, np.array(fig_data["paper"][key]) - 0.03,
                        np.array(fig_data["paper"][key]) + 0.03, color="0.85", label="± 0.03")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(dims, [str(d) for d in dims])
        ax.set_xlabel("embedding dimension")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Toy corpus (Prop 9): mean ± std over {len(report.seeds)} seeds", fontsize=10)
    fig.tight_layout()
    save(fig, out / "correlations.png")

    sc = report.figures["scatter"]
    fig, axes = figure(1, 3, figsize=(15, 4.4))
    panels = ((axes[0], sc[CBOW], "log p(w_i | c_j)", "w_iᵀc_j", f"{CBOW}"),
              (axes[1], sc[ATTENTION], "log p(w_i | c_j)", "w_iᵀc_j", f"{ATTENTION}"),
              (axes[2], {"log_p": sc["tilde"]["x"], "wc": sc["tilde"]["y"]},
               "log p̄(w_i | c_j) + log|V|", "w_iᵀc̃_j", "attention, transformed c̃ (Prop 14)"))
    for ax, d, xl, yl, title in panels:
        x, y = np.array(d["log_p"], dtype=float), np.array(d["wc"], dtype=float)
        ok = np.isfinite(x)
        ax.scatter(x[ok], y[ok], s=14, alpha=0.7)
        ax.scatter(np.full((~ok).sum(), np.nanmin(x[ok]) - 1), y[~ok], s=14, marker="|",
                   color="0.5", label="pair never occurs (log p = −∞)")
        if ok.sum() > 2:
            slope, icept = np.polyfit(x[ok], y[ok], 1)
            xs = np.linspace(x[ok].min(), x[ok].max(), 2)
            ax.plot(xs, slope * xs + icept, "k--", lw=1,
                    label=f"fit, r = {np.corrcoef(x[ok], y[ok])[0, 1]:.2f}")
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.set_title(f"{title}, d={sc['dim']}, seed 0", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save(fig, out / "scatter.png")

    pa = report.figures["path"]
    fig, ax = figure(figsize=(6.5, 4))
    ax.plot(pa["epochs"], pa["spearman"], "o-", color="C0", label="Spearman (Prop 9)")
    ax.plot(pa["epochs"], pa["pearson"], "s-", color="C1", label="Pearson (Prop 9)")
    dim = pa["dim"]
    if dim in PAPER["spearman"]:
        ax.axhline(PAPER["spearman"][dim], color="C0", ls=":", label=f"paper, d={dim}")
        ax.axhline(PAPER["pearson"][dim], color="C1", ls=":")
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(pa["epochs"], [str(e) for e in pa["epochs"]])
    ax.set_xlabel("epochs of training (constant learning rate)")
    ax.set_ylabel("correlation")
    twin = ax.twinx()
    twin.plot(pa["epochs"], pa["val_ce"], "k--", lw=1, label="validation CE")
    twin.set_ylabel("validation cross-entropy (nats)")
    ax.legend(fontsize=8, loc="upper center")
    twin.legend(fontsize=8, loc="upper right")
    ax.set_title(f"CBOW on the toy corpus, d={dim}, seed 0: correlations along training",
                 fontsize=9)
    fig.tight_layout()
    save(fig, out / "path.png")

    att = report.extra.get("attention_seed0")
    if att:
        words = att["words"]
        fig, axes = figure(1, 2, figsize=(12, 3.8))
        log_tau = np.array(att["log_tau"])
        axes[0].bar(range(len(words)), log_tau - log_tau.mean(), color="C3")
        axes[0].set_title("log τ_j − mean: what the masked slot pays to word j", fontsize=9)
        zeta = np.array(att["zeta"], dtype=float) * 5
        axes[1].bar(range(len(words) - 1), zeta, color="C2")
        axes[1].axhline(1.0, color="k", ls=":", lw=1, label="τ constant: S ζ_j = 1")
        axes[1].set_title("S ζ_j = c̃_j / c_j (Prop 14)", fontsize=9)
        axes[1].legend(fontsize=8)
        for ax, n in ((axes[0], len(words)), (axes[1], len(words) - 1)):
            ax.set_xticks(range(n), words[:n], rotation=45, ha="right", fontsize=8)
            ax.grid(axis="y", alpha=0.3)
        fig.suptitle(f"Attention on the toy corpus, d={report.figures['scatter']['dim']}, "
                     "seed 0", fontsize=10)
        fig.tight_layout()
        save(fig, out / "attention_tau_zeta.png")
