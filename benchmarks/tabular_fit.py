"""How long AttentionTableClassifier takes to fit a 10,000-row, 20-column table (issue 9:
under a minute on this 2-core machine), against the reference logistic regression on the
one-hot table in the same run.

The table: 20 categorical columns of 5 levels (pairs of columns correlated), a 4-class response
that depends on four of them; 10,000 training rows, 2,000 test rows. The estimator runs with its
defaults (the paper's post-LN backbone, early stopping on 15 % of the rows). Writes
``OUT/tabular-benchmark/benchmark.json`` and ``benchmark.md``.

    .venv/bin/python benchmarks/tabular_fit.py [--threads 1] [--out results]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from efa.baselines.tabular import class_metrics, reference_estimator
from efa.tabular import AttentionTableClassifier

BUDGET_SECONDS = 60.0


def make_table(n: int, columns: int = 20, levels: int = 5, seed: int = 0):
    rng = np.random.RandomState(seed)
    z = rng.normal(size=(n, columns // 2))
    raw = np.repeat(z, 2, axis=1) + 0.7 * rng.normal(size=(n, columns))
    cells = np.digitize(raw, np.quantile(raw, np.linspace(0, 1, levels + 1)[1:-1]))
    X = pd.DataFrame({f"c{j}": pd.Categorical(np.array(list("abcde"))[cells[:, j]])
                      for j in range(columns)})
    score = cells[:, 0] - cells[:, 3] + 0.5 * cells[:, 7] * (cells[:, 12] > 2) + rng.normal(
        size=n)
    y = np.digitize(score, np.quantile(score, [0.25, 0.5, 0.75]))
    return X, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--out", default="results")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    X, y = make_table(args.rows + 2000)
    xtr, ytr, xte, yte = X[: args.rows], y[: args.rows], X[args.rows :], y[args.rows :]

    t0 = time.perf_counter()
    est = AttentionTableClassifier(random_state=0).fit(xtr, ytr)
    efa_seconds = time.perf_counter() - t0
    efa_metrics = class_metrics(yte, est.predict_proba(xte), est.classes_)

    onehot = pd.get_dummies(X, drop_first=True).astype(float)
    t0 = time.perf_counter()
    lr = reference_estimator("LR", 0).fit(onehot[: args.rows], ytr)
    lr_seconds = time.perf_counter() - t0
    lr_metrics = class_metrics(yte, lr.predict_proba(onehot[args.rows :]), lr.classes_)

    doc = {
        "rows": args.rows, "columns": X.shape[1], "threads": args.threads,
        "efa_fit_seconds": round(efa_seconds, 2), "efa_epochs": est.n_iter_,
        "efa_seconds_per_epoch": round(efa_seconds / est.n_iter_, 3),
        "lr_fit_seconds": round(lr_seconds, 2),
        "ratio_efa_to_lr": round(efa_seconds / lr_seconds, 2),
        "budget_seconds": BUDGET_SECONDS, "within_budget": efa_seconds < BUDGET_SECONDS,
        "efa_test": efa_metrics, "lr_test": lr_metrics,
    }
    folder = Path(args.out) / "tabular-benchmark"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "benchmark.json").write_text(json.dumps(doc, indent=2) + "\n")
    (folder / "benchmark.md").write_text(
        "# Tabular estimator fit time\n\n"
        f"`python benchmarks/tabular_fit.py --threads {args.threads}`: "
        f"AttentionTableClassifier() on {args.rows:,} rows × {X.shape[1]} columns fits in "
        f"{efa_seconds:.1f} s ({est.n_iter_} epochs, {torch.get_num_threads()} torch thread(s); "
        f"budget {BUDGET_SECONDS:.0f} s), {efa_seconds / lr_seconds:.1f}× the reference "
        f"logistic regression on the one-hot table ({lr_seconds:.1f} s). Test accuracy / log "
        f"loss: efa {efa_metrics['accuracy']:.3f} / {efa_metrics['log loss']:.3f}, LR "
        f"{lr_metrics['accuracy']:.3f} / {lr_metrics['log loss']:.3f}.\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
