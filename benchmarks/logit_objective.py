"""How fast the converged logit's solver objective is on Instacart, against whole-array autograd.

``fit_convex`` evaluates ``ContextLogit.objective`` (loss + gradient, float64, the full training
set) thousands of times per penalty. This times one evaluation of it — blocked rows, sparse
context counts, closed-form gradient (``_ChunkedSoftmaxNLL``) — against the plain formulation
in the same run: dense counts [P, K] @ Wᵀ + the design effects, ``log_softmax``, autograd
(efa ≤ session 6). Both at the same random weights, for the four Instacart logits (direction ×
distinct); rounds interleaved, median per evaluation. Writes ``OUT/logit-objective/
benchmark.json`` and ``benchmark.md``.

    .venv/bin/python benchmarks/logit_objective.py [--threads 1] [--rounds 5] [--out results]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from efa.baselines import ContextLogit
from efa.core.fields import Category
from experiments.efa_paper import instacart


def dense_objective(model: ContextLogit, data):
    """The whole-array formulation: every [P, K] intermediate materialised, autograd."""
    f = model.fields[0]
    at = data.predicted(f.name)
    present = data.valid() & data.observed.get(f.name, data.valid())
    x = torch.where(present, data.fields[f.name], 0)
    onehot = F.one_hot(x, f.num_categories).double() * present[..., None]
    counts = (onehot.sum(1, keepdim=True) - onehot if model.direction == "bidirectional"
              else onehot.cumsum(1) - onehot)[at]
    pos = at.nonzero()[:, 1]
    length = data.lengths[:, None].expand_as(at)[at]
    y = data.fields[f.name][at]
    seen = counts > 0 if f.distinct else None

    def loss():
        eta = model.weight(counts) + model.design.intercept + model.design.pos.weight[pos]
        if model.design.length is not None:
            eta = eta + model.design.length.weight[length]
        if seen is not None:
            eta = f.restrict(eta, seen)
        return -torch.log_softmax(eta, -1).gather(1, y[:, None]).mean()

    return loss


def seconds(model, loss) -> tuple[float, float]:
    model.zero_grad()
    t0 = time.perf_counter()
    value = loss()
    value.backward()
    return time.perf_counter() - t0, float(value.detach())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="results")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    train, _, _ = instacart.load()
    items = instacart.N_ITEMS
    rows = []
    for direction in ("unidirectional", "bidirectional"):
        for distinct in (False, True):
            model = ContextLogit(Category("item", items, distinct=distinct), direction,
                                 instacart.MAX_LEN, length=direction == "bidirectional").double()
            torch.manual_seed(0)
            for p in model.parameters():
                torch.nn.init.normal_(p, std=0.1)
            blocked, dense = model.objective(train), dense_objective(model, train)
            times, values = {"blocked": [], "dense": []}, {}
            for _ in range(args.rounds):
                for name, loss in (("blocked", blocked), ("dense", dense)):
                    t, values[name] = seconds(model, loss)
                    times[name].append(t)
            b, d = statistics.median(times["blocked"]), statistics.median(times["dense"])
            rows.append({"direction": direction, "distinct": distinct,
                         "blocked_seconds": round(b, 4), "dense_seconds": round(d, 4),
                         "speedup": round(d / b, 2),
                         "loss_difference": abs(values["blocked"] - values["dense"])})
    doc = {"positions": int(train.predicted("item").sum()), "items": items,
           "threads": args.threads, "rounds": args.rounds, "rows": rows}
    folder = Path(args.out) / "logit-objective"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "benchmark.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = [
        "# Converged logit: one solver evaluation (loss + gradient, float64) on Instacart", "",
        f"`python benchmarks/logit_objective.py --threads {args.threads} --rounds "
        f"{args.rounds}`: {doc['positions']:,} training positions × {items} items; median "
        "seconds per evaluation over interleaved rounds.", "",
        "| direction | distinct | blocked, sparse (efa) | dense autograd | speed-up | "
        "|loss difference| |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['direction']} | {r['distinct']} | {r['blocked_seconds']:.3f} | "
              f"{r['dense_seconds']:.3f} | {r['speedup']:.2f}× | {r['loss_difference']:.1e} |"
              for r in rows]
    (folder / "benchmark.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
