"""Word analogies from models trained on real text: the Lee news corpus (gensim's
``lee_background.cor``, 300 documents, ≈ 58k tokens) and the Google analogy set.

Three models see the same training documents, vocabulary (words seen ``min_count`` times) and
embedding dimension, and at most the same number of passes over the data:

- efa's CBOW: ``CategoricalFM`` (bidirectional, full softmax, no negative sampling) predicting
  every word of a fixed window of S words from the other S − 1;
- a one-layer bidirectional attention MLM: ``efa.EFA`` in the form of the MoE paper's Eq. 1
  (one bare softmax head, no residual, no positions, no biases), trained by the exact masked
  pseudo-likelihood on the same windows;
- gensim's ``Word2Vec`` CBOW (window 5, negative sampling, its defaults otherwise).

Each is scored on the analogy questions whose four words are in the vocabulary (coverage is
reported) by 3CosAdd over the whole vocabulary with the context (token) embeddings, as the
paper scores BERT's input embeddings and word2vec's vectors. Then Proposition 13 on each model:
for the questions whose analogy holds in the center embeddings W, does it hold in the context
embeddings C (and in c̃ for attention)? And Proposition 9's correlation on real text.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from efa import analogy
from efa.baselines import CategoricalFM
from efa.core.config import EFAConfig
from efa.core.data import Sequences
from efa.core.fields import Category
from efa.core.model import EFA
from efa.datasets.text import lee_background, vocabulary, windows
from efa.embeddings import (
    attention_embeddings,
    attention_statistics,
    cbow_embeddings,
    cooccurrence,
    offset_residuals,
    prop9_correlations,
    prop13,
    quadruples,
)
from efa.training.scoring import evaluate
from efa.training.train import TrainConfig, fit, seed_everything
from experiments.harness.plots import figure, save
from experiments.harness.report import Report

CBOW, ATTENTION, W2V, RANDOM = ("efa CBOW", "efa attention", "gensim Word2Vec CBOW",
                                "random vectors")
MODELS = (CBOW, ATTENTION, W2V)
GROUPS = ("semantic", "syntactic", "overall")


def stable_hash(word: str) -> int:
    """A string hash that is the same in every process (Python's is salted): gensim seeds each
    word's initial vector with it, so this makes Word2Vec reproducible with workers=1."""
    return zlib.crc32(word.encode())


@dataclass(frozen=True)
class Spec:
    min_count: int = 3
    window: int = 10
    dim: int = 100
    validation_docs: float = 0.1
    max_docs: int | None = None
    w2v_window: int = 5
    w2v_epochs: int = 20
    # Learning rates picked from {3e-3, 1e-2} on the validation cross-entropy (seed 0).
    train: dict = field(default_factory=lambda: {
        CBOW: TrainConfig(lr=3e-3, batch_size=64, max_epochs=20, patience=3,
                          schedule="plateau", progress=False, min_delta=1e-6),
        ATTENTION: TrainConfig(lr=1e-2, batch_size=64, max_epochs=20, patience=3,
                               schedule="plateau", progress=False, min_delta=1e-6),
    })


SPEC = Spec()
QUICK = Spec(max_docs=30, min_count=2, dim=16, w2v_epochs=2, train={
    name: replace(cfg, max_epochs=2, patience=2) for name, cfg in SPEC.train.items()
})


def corpus(spec: Spec):
    """(train docs, validation docs, vocabulary): a fixed 10 % of the documents (seed 0) is the
    validation set; the vocabulary is counted on the training documents only."""
    docs = lee_background()[: spec.max_docs]
    perm = np.random.default_rng(0).permutation(len(docs))
    n_val = max(1, int(round(spec.validation_docs * len(docs))))
    val = [docs[k] for k in sorted(perm[:n_val])]
    train = [docs[k] for k in sorted(perm[n_val:])]
    return train, val, vocabulary(train, spec.min_count)


def to_sequences(x: np.ndarray) -> Sequences:
    return Sequences({"word": torch.as_tensor(x)}, torch.full((len(x),), x.shape[1]))


def jobs(spec: Spec, seeds: int) -> list[dict]:
    cost = {CBOW: 1.0, ATTENTION: 3.0, W2V: 0.5}
    return [{"seed": s, "model": m, "spec": spec, "cost": cost[m]}
            for s in range(seeds) for m in MODELS]


def _fit_word2vec(spec: Spec, train_docs, vocab, seed: int):
    from gensim.models import Word2Vec

    model = Word2Vec(train_docs, vector_size=spec.dim, window=spec.w2v_window,
                     min_count=spec.min_count, sg=0, hs=0, negative=5, epochs=spec.w2v_epochs,
                     workers=1, seed=seed, hashfxn=stable_hash)
    if model.wv.index_to_key != vocab:  # same words in the same rows as efa's models
        raise RuntimeError("gensim's vocabulary differs from efa's")
    return model.syn1neg.astype(np.float64), model.wv.vectors.astype(np.float64)


def task(job: dict) -> dict:
    t0 = time.perf_counter()
    spec, seed, name = job["spec"], job["seed"], job["model"]
    train_docs, val_docs, vocab = corpus(spec)
    x, tokens = windows(train_docs, vocab, spec.window)
    xv, _ = windows(val_docs, vocab, spec.window)
    seed_everything(seed)
    out: dict = {"seed": seed, "model": name, "vocabulary": len(vocab), "tokens": tokens,
                 "windows": len(x)}
    if name == W2V:
        W, C = _fit_word2vec(spec, train_docs, vocab, seed)
        out["epochs"] = spec.w2v_epochs
    else:
        V = len(vocab)
        if name == CBOW:
            model = CategoricalFM(Category("word", V), dim=spec.dim, pooling="sum")
        else:
            model = EFA(EFAConfig([Category("word", V, dim=spec.dim)], num_layers=1,
                                  num_heads=1, block="bare", bias=False, max_len=None))
        hist = fit(model, to_sequences(x), to_sequences(xv), replace(spec.train[name], seed=seed))
        out |= {"epochs": hist.best_epoch + 1, "epochs_run": hist.epochs_run,
                "val_ce": -evaluate(model, to_sequences(xv))["word"]}
        if name == CBOW:
            W, C = cbow_embeddings(model)
        else:
            e = attention_embeddings(model)
            W, C = e["W"], e["C"]
            st = attention_statistics(e["tau"], x, V)
            out |= {"asymmetry": st["asymmetry"], "zeta_cv": st["zeta_cv"],
                    "zeta_range": st["zeta_range"],
                    "tau_range": float(np.exp(np.ptp(e["log_tau"][:-1])))}
            out["C_tilde"] = C * st["scale"][:, None]
    out |= score(spec, vocab, W, C, out.pop("C_tilde", None), x, seed, name)
    out["seconds"] = time.perf_counter() - t0
    return out


def score(spec, vocab, W, C, C_tilde, x, seed, name) -> dict:
    """Analogy accuracy and cosine with C (and C̃), Prop 13 and Prop 9 on one model."""
    questions = analogy.load_questions()
    kept = analogy.restrict(questions, vocab)
    out: dict = {"coverage": analogy.coverage(questions, kept)}
    embeddings = {"C": C, "W": W}
    if C_tilde is not None:
        embeddings["C_tilde"] = C_tilde
    if name == CBOW:  # the chance level, from vectors that know nothing
        rng = np.random.default_rng(seed)
        embeddings["random"] = rng.normal(size=C.shape)
    answers = {}
    # A random word per question: the mean cosine it gets is the chance level of the metric
    # for each set of embeddings (trained ones share a common direction).
    decoys = np.random.default_rng(1000 + seed).choice(vocab, size=len(kept))
    for key, X in embeddings.items():
        answers[key] = analogy.answer(X, vocab, kept)
        answers[key]["cosine_random"] = analogy.cosines(X, vocab, kept, list(decoys))
        out[f"analogy_{key}"] = analogy.groups(analogy.summarise(answers[key]))
        for group in GROUPS:
            part = answers[key] if group == "overall" else \
                answers[key][answers[key].group == group]
            out[f"analogy_{key}"][group]["cosine_random"] = float(part.cosine_random.mean())
        unit = analogy.answer(X, vocab, kept, normalize=True)
        out[f"analogy_{key}_unit"] = analogy.groups(analogy.summarise(unit))
    quads = quadruples(kept, vocab)
    in_w = answers["W"].correct.to_numpy()
    out["prop13"] = prop13(W, C, quads, C_tilde=C_tilde)
    out["prop13"]["correct_in_W"] = int(in_w.sum())
    out["prop13"]["C_accuracy_where_W_correct"] = (
        float(answers["C"].correct[in_w].mean()) if in_w.any() else float("nan"))
    out["prop13"]["C_accuracy_where_W_wrong"] = float(answers["C"].correct[~in_w].mean())
    out["residuals"] = {"W": offset_residuals(W, quads).tolist(),
                        "C": offset_residuals(C, quads).tolist()}
    counts = cooccurrence(x, len(vocab))
    out["prop9"] = prop9_correlations(W, C, counts)
    if seed == 0:  # a sample of occurring pairs for the scatter plot
        s = W @ C.T
        i, j = np.nonzero(counts)
        pick = np.random.default_rng(0).choice(len(i), size=min(4000, len(i)), replace=False)
        logp = np.log(counts[i, j] / counts.sum(0)[j])
        out["scatter"] = {"log_p": logp[pick].tolist(), "wc": s[i[pick], j[pick]].tolist()}
    return out


def tables(results: list[dict], spec: Spec, seeds: int, command: str) -> Report:
    by = {(r["model"], r["seed"]): r for r in results}
    report = Report("analogy-lee", command, list(range(seeds)))
    rows = [(m, m, "C") for m in MODELS] + [(f"{ATTENTION} (c̃)", ATTENTION, "C_tilde"),
                                              (RANDOM, CBOW, "random")]
    for metric, key in (("analogy accuracy (3CosAdd, raw vectors)", "accuracy"),
                        ("mean cosine(x_b + x_c − x_a, x_d)", "cosine")):
        for group in GROUPS:
            for label, m, emb in rows:
                report.add(group, label, metric,
                           [by[m, s][f"analogy_{emb}"][group][key] for s in range(seeds)])
    for group in GROUPS:
        for label, m, emb in rows:
            report.add(group, label, "mean cosine(x_b + x_c − x_a, x_random word) (chance)",
                       [by[m, s][f"analogy_{emb}"][group]["cosine_random"]
                        for s in range(seeds)])
    for group in GROUPS:
        for label, m, emb in rows:
            report.add(group, label, "analogy accuracy (unit vectors, gensim's 3CosAdd)",
                       [by[m, s][f"analogy_{emb}_unit"][group]["accuracy"] for s in range(seeds)])
    for m in MODELS:
        for group in GROUPS:
            report.add(group, m, "analogy accuracy of the center embeddings W (3CosAdd, raw)",
                       [by[m, s]["analogy_W"][group]["accuracy"] for s in range(seeds)])
    prop13_metrics = (
        ("spearman_e_W_e_C", "Prop 13: Spearman corr(e_W, e_C) over the questions"),
        ("e_W_holding", "Prop 13: mean e_W, quarter of questions best in W"),
        ("e_C_holding", "Prop 13: mean e_C, quarter of questions best in W"),
        ("e_C_others", "Prop 13: mean e_C, the other questions"),
        ("correct_in_W", "Prop 13: questions answered correctly with W"),
        ("C_accuracy_where_W_correct", "Prop 13: accuracy with C where W is correct"),
        ("C_accuracy_where_W_wrong", "Prop 13: accuracy with C where W is wrong"),
    )
    for key, metric in prop13_metrics:
        for m in MODELS:
            values = [by[m, s]["prop13"][key] for s in range(seeds)]
            # An accuracy over no question (no seed's W answers any correctly) is undefined:
            # average over the seeds where it is defined and say how many those are.
            defined = [v for v in values if np.isfinite(v)]
            name = metric
            if len(defined) < len(values):
                if not defined:
                    continue
                name = f"{metric} ({len(defined)} of {len(values)} seeds have such questions)"
            report.add("Prop 13", m, name, defined)
    for key, metric in (("e_Ct_holding", "Prop 17: mean e_C̃, quarter of questions best in W"),
                        ("e_Ct_others", "Prop 17: mean e_C̃, the other questions"),
                        ("spearman_e_W_e_Ct", "Prop 17: Spearman corr(e_W, e_C̃)")):
        report.add("Prop 13", ATTENTION, metric,
                   [by[ATTENTION, s]["prop13"][key] for s in range(seeds)])
    for key, metric in (("spearman", "Prop 9: Spearman corr(wᵀc, p(w,c)/p(c))"),
                        ("pearson", "Prop 9: Pearson corr(wᵀc, log p(w,c)/p(c) + log|V|)")):
        for m in MODELS:
            report.add("Prop 9 (windows)", m, metric, [by[m, s]["prop9"][key]
                                                       for s in range(seeds)])
    for key, metric in (("asymmetry", "‖p̄ − p̄ᵀ‖/‖p̄‖ (0 = symmetric)"),
                        ("zeta_cv", "coefficient of variation of ζ_j (0 = constant)"),
                        ("zeta_range", "max ζ_j / min ζ_j"),
                        ("tau_range", "max τ_j / min τ_j over words")):
        report.add("Prop 14", ATTENTION, metric, [by[ATTENTION, s][key] for s in range(seeds)])
    for m in (CBOW, ATTENTION):
        report.add("training", m, "validation cross-entropy (nats)",
                   [by[m, s]["val_ce"] for s in range(seeds)])
        report.add("training", m, "epochs (best on validation)",
                   [by[m, s]["epochs"] for s in range(seeds)])
    first = by[CBOW, 0]
    cov = first["coverage"]
    report.extra["coverage"] = cov
    report.extra["corpus"] = {"vocabulary": first["vocabulary"], **first["tokens"],
                              "training_windows": first["windows"]}
    means = {label: {g: {"n": cov[g]["kept"],
                         **{k: float(np.mean([by[m, s][f"analogy_{emb}"][g][k]
                                              for s in range(seeds)]))
                            for k in ("accuracy", "cosine")}} for g in GROUPS}
             for label, m, emb in rows}
    report.sections.append(
        "## The paper's Table 3 layout (context embeddings; mean over seeds)\n\n"
        + analogy.paper_tables(means))
    report.figures["residuals"] = {m: by[m, 0]["residuals"] for m in MODELS}
    report.figures["scatter"] = {m: by[m, 0]["scatter"] for m in MODELS}
    c, a = spec.train[CBOW], spec.train[ATTENTION]
    report.notes += [
        f"Corpus: gensim's lee_background.cor, tokenised by gensim's simple_preprocess; a fixed "
        f"{spec.validation_docs:.0%} of the documents (seed 0) is the validation set. Vocabulary: "
        f"the {first['vocabulary']:,} words seen at least {spec.min_count} times in the "
        f"training documents ({first['tokens']['in_vocabulary']:,} of "
        f"{first['tokens']['tokens']:,} training tokens); other words are dropped (as word2vec "
        f"does); efa's models see consecutive windows of {spec.window} words "
        f"({first['windows']:,} training windows; a document's last partial window dropped).",
        f"Coverage: {cov['overall']['kept']:,} of {cov['overall']['total']:,} questions have "
        f"all four words in the vocabulary ({cov['semantic']['kept']} of "
        f"{cov['semantic']['total']:,} semantic, {cov['syntactic']['kept']} of "
        f"{cov['syntactic']['total']:,} syntactic); every model is scored on the same questions "
        "(one vocabulary). 3CosAdd ranks the whole vocabulary minus a, b, c; 'raw vectors' is "
        "the paper's offset x_b + x_c − x_a, 'unit vectors' gensim's (normalised first).",
        f"efa CBOW: CategoricalFM (pooling='sum', full softmax over the vocabulary), d = "
        f"{spec.dim}. efa attention: one bare softmax head, no residual/positions/biases, d = "
        f"{spec.dim}, exact masked pseudo-likelihood. Both: AdamW (learning rate {c.lr:g} for "
        f"CBOW, {a.lr:g} for attention, each picked from {{3e-3, 1e-2}} on the validation "
        f"cross-entropy of seed 0), batch {c.batch_size} windows, at most {c.max_epochs} "
        "epochs, the rate halved on a validation plateau, early stopping (patience "
        f"{c.patience}) on the validation log-likelihood with the best epoch kept.",
        f"gensim Word2Vec: CBOW (sg=0), d = {spec.dim}, window {spec.w2v_window}, negative "
        f"sampling (5), its default learning rate and frequent-word subsampling, "
        f"{spec.w2v_epochs} epochs (the efa models' maximum: the matched budget; it has no "
        "likelihood to stop on), one worker, seed s, a process-independent hash.",
        "Random vectors: N(0, I) embeddings of the same shape (chance level of the accuracy). "
        "The chance level of the mean cosine differs per model: 'x_random word' replaces the "
        "answer d by a random vocabulary word (the same words for every model).",
        "Prop 13: for each question a:b::c:d the quadruple (r, s, t, u) = (b, c, a, d) and the "
        "residual e_X = ‖x_r + x_s − x_t − x_u‖ / √(Σ‖x − μ‖²) (μ the mean embedding; ≈ 1 for "
        "unrelated words, 0 for an exact analogy), in the center embeddings W (CategoricalFM "
        "ρ; δW^OW^V for attention; word2vec's syn1neg) and the context embeddings C (α; the "
        "token table; word2vec's vectors); c̃_j = S ζ_j c_j (Prop 14).",
    ]
    return report


def plots(report: Report, out) -> None:
    out = Path(out)
    res = report.figures["residuals"]
    fig, axes = figure(1, len(res), figsize=(5 * len(res), 4.2), squeeze=False)
    for ax, (model, r) in zip(axes[0], res.items(), strict=True):
        w, c = np.array(r["W"]), np.array(r["C"])
        ax.scatter(w, c, s=8, alpha=0.5)
        lo, hi = min(w.min(), c.min()), max(w.max(), c.max())
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        ax.set_xlabel("e_W: analogy residual, center embeddings")
        ax.set_ylabel("e_C: analogy residual, context embeddings")
        ax.set_title(f"{model}, seed 0 ({len(w)} questions)", fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle("Prop 13 on the Lee corpus: an analogy that holds in W should hold in C",
                 fontsize=10)
    fig.tight_layout()
    save(fig, out / "prop13.png")

    sc = report.figures["scatter"]
    fig, axes = figure(1, len(sc), figsize=(5 * len(sc), 4.2), squeeze=False)
    for ax, (model, d) in zip(axes[0], sc.items(), strict=True):
        x, y = np.array(d["log_p"]), np.array(d["wc"])
        ax.scatter(x, y, s=4, alpha=0.3)
        ax.set_xlabel("log p(w_i | c_j) (window co-occurrence)")
        ax.set_ylabel("w_iᵀc_j")
        ax.set_title(f"{model}, seed 0, r = {np.corrcoef(x, y)[0, 1]:.2f} "
                     f"({len(x)} sampled pairs)", fontsize=9)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save(fig, out / "scatter.png")

    rows = [r for r in report.rows if r.metric == "analogy accuracy (3CosAdd, raw vectors)"]
    models = list(dict.fromkeys(r.model for r in rows))
    fig, axes = figure(1, 2, figsize=(12, 4))
    for ax, metric, title in ((axes[0], "analogy accuracy (3CosAdd, raw vectors)", "accuracy"),
                              (axes[1], "mean cosine(x_b + x_c − x_a, x_d)", "mean cosine")):
        for k, m in enumerate(models):
            for g, group in enumerate(GROUPS):
                r = next(r for r in report.rows if r.metric == metric and r.model == m
                         and r.setting == group)
                x = g + (k - (len(models) - 1) / 2) * 0.8 / len(models)
                ax.bar(x, r.mean, 0.8 / len(models), yerr=r.std, color=f"C{k}",
                       label=m if g == 0 else None)
        ax.set_xticks(range(len(GROUPS)), GROUPS)
        ax.set_title(f"Lee corpus, Google analogies: {title} (context embeddings)", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, out / "analogy.png")
