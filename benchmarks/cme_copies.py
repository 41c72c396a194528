"""CME attention in copies mode: the block update (one factorisation per sequence, the
kernel's own form) against one fresh solve per masked copy, for a one-layer model.

For sets of I tokens (the temperature experiment's shape: I = 44 cities, 2 heads × 16) and k
asked positions per sequence, times the forward + backward pass of the masked
pseudo-likelihood both ways and prints the ratio fresh / update. The crossover sets
``efa.core.strategies.OWN_FORM_MIN_ASKED``. One torch thread; both ways in the same run; the
two agree to float32 rounding (checked here, and exactly in float64 by tests/test_cme.py).

    .venv/bin/python benchmarks/cme_copies.py [--sizes 20 44 100] [--out results/exchangeability]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from efa.core import strategies
from efa.core.config import EFAConfig
from efa.core.data import Sequences
from efa.core.families import Gaussian
from efa.core.fields import Attribute, Value
from efa.core.model import EFA


def model(size: int) -> EFA:
    torch.manual_seed(0)
    fields = [Attribute("coords", size=2, dim=16, hidden=32),
              Value("value", Gaussian(1.0), dim=16, hidden=32)]
    return EFA(EFAConfig(fields, num_layers=1, num_heads=2, head_dim=16, d_model=32, mix="mlp",
                         attention={"kernel": "cme"}, block="pre_ln"))


def data(n: int, size: int, asked: int) -> Sequences:
    g = torch.Generator().manual_seed(1)
    scored = torch.zeros(n, size, dtype=torch.bool)
    for b in range(n):
        scored[b, torch.randperm(size, generator=g)[:asked]] = True
    return Sequences({"coords": torch.randn(n, size, 2, generator=g),
                      "value": torch.randn(n, size, generator=g)},
                     torch.full((n,), size), scored=scored)


def timed(m: EFA, d: Sequences, update: bool, repeats: int) -> tuple[float, torch.Tensor]:
    old = strategies.OWN_FORM_MIN_ASKED
    strategies.OWN_FORM_MIN_ASKED = 0 if update else 10**9
    try:
        best = float("inf")
        for _ in range(repeats):
            m.zero_grad()
            t0 = time.perf_counter()
            loss = m.loss(d)
            loss.backward()
            best = min(best, time.perf_counter() - t0)
        return best, loss.detach()
    finally:
        strategies.OWN_FORM_MIN_ASKED = old


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 44, 100])
    parser.add_argument("--tokens", type=int, default=4400, help="sequences × I per batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for size in args.sizes:
        m = model(size)
        n = max(1, args.tokens // size)
        for asked in sorted({1, 2, 4, max(1, size // 8), max(1, size // 4), size // 2, size}):
            d = data(n, size, asked)
            fresh, lf = timed(m, d, False, args.repeats)
            update, lu = timed(m, d, True, args.repeats)
            rows.append({"I": size, "sequences": n, "asked": asked, "fresh_s": fresh,
                         "update_s": update, "fresh_over_update": fresh / update,
                         "loss_diff": abs(float(lf - lu))})
            print(f"I={size:4d} asked={asked:4d} ({asked / size:5.2f} of I): fresh {fresh:.3f} s, "
                  f"update {update:.3f} s, ratio {fresh / update:5.2f}, |Δloss| "
                  f"{abs(float(lf - lu)):.1e}", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "benchmark_cme_copies.json").write_text(json.dumps(
            {"command": "benchmarks/cme_copies.py", "threads": 1, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
