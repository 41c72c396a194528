"""Prediction throughput (points per second) of the in-context regression models against the
exact GP, at context size 100, one torch thread.

Task: B functions of the UNN note's noisy data, each with C = 100 context points; predict y at
T = 100 new points per function (mean and sd), each from the context alone. Measured:

- the note's model, the improved EFA and EFA with GP attention (``efa.regression.predict``:
  one pass for all targets)
  and TNP-D (one pass), architectures of ``efa reproduce in-context-regression`` (throughput
  does not depend on the weights' values, so the models are not trained here);
- the exact GP with the true kernel (the oracle): batched Cholesky in torch, float64;
- scikit-learn's ``GaussianProcessRegressor`` with that kernel fixed (``optimizer=None``), one
  function at a time (the usual library call);
- the GP fitted per function by marginal likelihood (scikit-learn, as the peer of the
  reproduction: L-BFGS-B from a warm start and one random restart), one function at a time.

Also the causal task of the reproduction (every point of a 101-point sequence from the points
before it): efa's one pass against the oracle's one Cholesky.

Writes OUT/in-context-regression/benchmark.json and the speed section of its results.md.

    .venv/bin/python benchmarks/in_context_regression_speed.py [--out results]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import numpy as np
import torch

from efa.baselines.gp import GPOracle, note_kernel
from efa.baselines.tnp import TNPD
from efa.core.data import Sequences
from efa.generators.gp import NOISY, sample_note
from efa.regression import causal_predictive, gp_attention, note_efa, predict, regression_efa

C, T = 100, 100


def rate(fn, points: int, min_seconds: float = 2.0, repeats: int = 3) -> float:
    """Best points per second over ``repeats`` timings of at least ``min_seconds`` each."""
    fn()  # warm-up
    best = 0.0
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= min_seconds:
                break
        best = max(best, n * points / dt)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--batch", type=int, default=64, help="functions per call")
    parser.add_argument("--min-seconds", type=float, default=2.0)
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)  # NumPy/SciPy (the scikit-learn GPs) on one BLAS thread too
    torch.manual_seed(0)
    gp = NOISY
    b = args.batch
    data = sample_note(type(gp)(**{**gp.__dict__, "length": C + T}), b, 0)
    ctx = Sequences({k: v[:, :C] for k, v in data.fields.items()}, torch.full((b,), C))
    tgt = Sequences({"x": data.fields["x"][:, C:], "channel": data.fields["channel"][:, C:]},
                    torch.full((b,), T))
    train = sample_note(gp, 64, 1)
    models = {"note's model": note_efa(train), "EFA (pre-LN blocks)": regression_efa(train),
              "EFA (GP attention)": gp_attention(train)}
    fields = regression_efa(train, layers=1).fields
    tnpd = TNPD(train, fields).eval()
    oracle = GPOracle(gp, fields)
    pts = b * T
    result: dict = {"context": C, "targets_per_function": T, "functions_per_call": b,
                    "threads": 1, "points_per_second": {}}
    rates = result["points_per_second"]
    with torch.no_grad():
        for name, model in models.items():
            model.eval()
            rates[name] = rate(lambda m=model: predict(m, ctx, tgt), pts, args.min_seconds)
        xc, xt = tnpd._x(ctx, (slice(None), slice(None))), tnpd._x(tgt, (slice(None),
                                                                       slice(None)))
        rates["TNP-D"] = rate(lambda: tnpd.sets(xc, ctx.fields["y"], xt), pts, args.min_seconds)
        xq, kq = tgt.fields["x"][..., 0].double(), tgt.fields["channel"]
        rates["exact GP, true kernel (torch, batched)"] = rate(
            lambda: oracle.predict(ctx, xq, kq), pts, args.min_seconds)

    from sklearn.gaussian_process import GaussianProcessRegressor

    X = np.stack([data.fields["x"][..., 0].double().numpy(),
                  data.fields["channel"].double().numpy()], -1)
    Y = data.fields["y"].double().numpy()
    true = note_kernel(gp.variance, gp.lengthscale, gp.offset_var, gp.noise**2 + gp.jitter)

    def sklearn_gp(optimizer, functions):
        for f in range(functions):
            kw = {"optimizer": None} if optimizer is None else {"n_restarts_optimizer": 1,
                                                                "random_state": f}
            gpr = GaussianProcessRegressor(true if optimizer is None else note_kernel(), **kw)
            gpr.fit(X[f, :C], Y[f, :C])
            gpr.predict(X[f, C:], return_std=True)

    rates["exact GP, true kernel (scikit-learn, per function)"] = rate(
        lambda: sklearn_gp(None, 8), 8 * T, args.min_seconds)
    rates["GP fitted per function (scikit-learn)"] = rate(
        lambda: sklearn_gp("fit", 2), 2 * T, args.min_seconds, repeats=1)

    # The causal task: every point of a 101-point sequence from the points before it.
    seq = Sequences({k: v[:, : C + 1] for k, v in data.fields.items()}, torch.full((b,), C + 1))
    causal = {}
    with torch.no_grad():
        for name, model in models.items():
            causal[name] = rate(lambda m=model: causal_predictive(m, seq), b * C,
                                args.min_seconds)
        causal["exact GP, true kernel (torch, batched)"] = rate(
            lambda: oracle.predict_mean_sd(seq), b * C, args.min_seconds)
    result["causal_points_per_second"] = causal
    ref = rates["exact GP, true kernel (torch, batched)"]
    result["ratio_to_exact_gp_torch"] = {k: v / ref for k, v in rates.items()}
    ref2 = rates["exact GP, true kernel (scikit-learn, per function)"]
    result["ratio_to_exact_gp_sklearn"] = {k: v / ref2 for k, v in rates.items()}
    ref3 = rates["GP fitted per function (scikit-learn)"]
    result["ratio_to_fitted_gp"] = {k: v / ref3 for k, v in rates.items()}
    result["load_average"] = [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    result["command"] = "python benchmarks/in_context_regression_speed.py"
    folder = args.out / "in-context-regression"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "benchmark.json").write_text(json.dumps(result, indent=2) + "\n")
    _update_results_md(folder, result)
    print(section(result))


def section(result: dict) -> str:
    lines = ["## Speed: prediction throughput at context size 100 (one torch thread)", "",
             f"`{result['command']}`: {result['functions_per_call']} functions per call, "
             f"{result['targets_per_function']} targets each, every target from the "
             f"{result['context']} context points alone; load average "
             f"{result['load_average']} while measured.", "",
             "| model | points/s | × exact GP (torch) | × exact GP (scikit-learn) | "
             "× fitted GP |", "|---|---|---|---|---|"]
    for name, v in result["points_per_second"].items():
        lines.append(f"| {name} | {v:,.0f} | {result['ratio_to_exact_gp_torch'][name]:.2f} | "
                     f"{result['ratio_to_exact_gp_sklearn'][name]:.2f} | "
                     f"{result['ratio_to_fitted_gp'][name]:.1f} |")
    lines += ["", "Causal task (each of 100 points from the points before it), points/s: "
              + "; ".join(f"{k} {v:,.0f}" for k, v in result["causal_points_per_second"].items())]
    return "\n".join(lines) + "\n"


def _update_results_md(folder: Path, result: dict) -> None:
    md = folder / "results.md"
    if not md.exists():
        return
    head = "## Speed: prediction throughput"
    text = md.read_text()
    body = section(result).rstrip("\n")
    if head in text:
        text = re.sub(re.escape(head) + r".*?(?=\n## |\Z)", lambda _: body, text, flags=re.S)
        md.write_text(text.rstrip("\n") + "\n")
    else:
        md.write_text(text.rstrip("\n") + "\n\n" + body + "\n")


if __name__ == "__main__":
    main()
