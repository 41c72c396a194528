"""docs/temperature.md's results and targets, generated from the committed
``results/temperature/results.json`` so that the page cannot fall out of step with it."""

from __future__ import annotations

import statistics
from pathlib import Path

from scipy import stats

from experiments.harness.evaluate import lower_on, paired, said_lower
from experiments.harness.report import fmt, published

MSE, NLL = "test MSE (°F²)", "test NLL (nats per prediction)"
COVER = {50: "50 % interval coverage (test)", 90: "90 % interval coverage (test)"}
CALIBRATED = ", level calibrated on validation"
AUC = "anomaly AUC (±10 °F at 2% of test values)"
SAME, GAUSS = "same day", "Gaussian conditional"
EFA_ROWS = [(SAME, "EFA ℓ=1"), (SAME, "EFA ℓ=2"), (SAME, "EFA ℓ=4"),
            ("1 day ahead", "EFA ℓ=4"), ("2 days ahead", "EFA ℓ=4")]
GAUSS_ROWS = [(SAME, GAUSS), ("1 day ahead", f"{GAUSS} + 1-day lag"),
              ("2 days ahead", f"{GAUSS} + 2-day lag")]


def _cells(doc: dict) -> dict[tuple[str, str, str], dict]:
    return {(r["setting"], r["model"], r["metric"]): r for r in doc["rows"]}


def _span(values: list[float], digits: int = 1, scale: float = 100.0) -> str:
    lo, hi = min(values) * scale, max(values) * scale
    return f"{lo:.{digits}f}" if f"{lo:.{digits}f}" == f"{hi:.{digits}f}" else \
        f"{lo:.{digits}f}–{hi:.{digits}f}"


def _cell(c: dict, key: tuple[str, str, str], digits: int = 3) -> str:
    r = c.get(key)
    return "—" if r is None else f"{r['mean']:.{digits}f}"


def results_block(results: Path) -> str:
    """The Results table (every model's test MSE beside the paper's, its likelihood, interval
    coverages and anomaly AUC), the validation numbers and the interval findings."""
    doc = published(results, "temperature")
    c = _cells(doc)
    rows = [(s, m) for s, m, metric in c if metric == MSE]
    out = [f"`{doc['command']}` ({len(doc['seeds'])} seeds, mean ± std over seeds; "
           f"{doc['wall_seconds']:,.0f} s wall, {doc['cpu_seconds']:,.0f} CPU-s; every row in "
           "`results/temperature/results.md`):",
           "", "| setting | model | test MSE (°F²) | paper | test NLL | 50 % cov. | 90 % cov. | "
           "50 / 90 % cov., level from validation | anomaly AUC |",
           "|---|---|---|---|---|---|---|---|---|"]
    for s, m in rows:
        mse = c[s, m, MSE]
        paper = "—" if mse["paper"] is None else f"{mse['paper']:.3f}"
        calibrated = "—" if (s, m, COVER[50] + CALIBRATED) not in c else (
            f"{_cell(c, (s, m, COVER[50] + CALIBRATED))} / "
            f"{_cell(c, (s, m, COVER[90] + CALIBRATED))}")
        spread = mse["std"] if len(set(mse["values"])) > 1 else float("nan")  # deterministic
        out.append(f"| {s} | {m} | {fmt(mse['mean'], spread)} | {paper} | "
                   f"{_cell(c, (s, m, NLL))} | {_cell(c, (s, m, COVER[50]))} | "
                   f"{_cell(c, (s, m, COVER[90]))} | {calibrated} | {_cell(c, (s, m, AUC))} |")
    val = {k: statistics.fmean(v) for k, v in doc["validation_mse"].items()}
    fm = doc["fm_curve"]
    k_val = fm["k_validation"]
    fm_val = fm["val_mean"][fm["k"].index(k_val)]
    shrink = doc["gaussian_shrinkage"]
    gauss_val = shrink[SAME]["val_mse"][str(shrink[SAME]["alpha"])]
    out += ["", "Validation MSE (mean over seeds): "
            + ", ".join(f"{k} {v:.2f}" for k, v in val.items())
            + f", FM k={k_val} {fm_val:.2f}, {GAUSS} {gauss_val:.2f} (α = "
            f"{shrink[SAME]['alpha']:g}; α on validation: "
            + ", ".join(f"{s} {v['alpha']:g}" for s, v in shrink.items()) + "). The FM's test "
            f"MSE by k, for k = {', '.join(map(str, fm['k']))}, is "
            + ", ".join(f"{statistics.fmean(t):.2f}" for t in fm["test"])
            + " (`fm_curve` in results.json)."]

    def covers(level: int, rows: list, suffix: str = "") -> list[float]:
        return [c[s, m, COVER[level] + suffix]["mean"] for s, m in rows
                if (s, m, COVER[level] + suffix) in c]

    deeper = [r for r in EFA_ROWS if r[1] != "EFA ℓ=1"]
    one = (SAME, "EFA ℓ=1")
    miss = {lvl: [(s, m, c[s, m, COVER[lvl]]["mean"]) for s, m in EFA_ROWS
                  if abs(c[s, m, COVER[lvl]]["mean"] * 100 - lvl) > 2] for lvl in (50, 90)}
    verdict = "; ".join(f"{m} {s} {v * 100:.1f} % is {lvl - v * 100:.1f} points short of "
                        f"nominal, outside the ±2 band" for lvl in (50, 90)
                        for s, m, v in miss[lvl]) or "every EFA row within ±2 points"
    lag_nll = [c[s, m, NLL]["mean"] - c[s, g, NLL]["mean"]
               for (s, m), (_, g) in zip(EFA_ROWS[3:], GAUSS_ROWS[1:], strict=True)]
    same_nll = [c[s, m, NLL]["mean"] for s, m in EFA_ROWS[:3]]
    out += [
        "", f"- **Intervals**: EFA's 50 % intervals cover {_span(covers(50, EFA_ROWS))} %, its "
        f"90 % intervals {_span(covers(90, deeper))} % at ℓ ≥ 2 and with lags and "
        f"{c[one + (COVER[90],)]['mean'] * 100:.1f} % at ℓ = 1 ({verdict}). The "
        f"{GAUSS}'s intervals are too wide ({_span(covers(50, GAUSS_ROWS), 0)} %, "
        f"{_span(covers(90, GAUSS_ROWS), 0)} %). With the level calibrated on the validation "
        f"days (`efa.conformal_level`): {c[one + (COVER[50] + CALIBRATED,)]['mean'] * 100:.1f} "
        f"/ {c[one + (COVER[90] + CALIBRATED,)]['mean'] * 100:.1f} % at ℓ = 1, "
        f"{_span(covers(50, deeper, CALIBRATED))} / {_span(covers(90, deeper, CALIBRATED))} % "
        "at ℓ ≥ 2 and with lags.",
        f"- **Likelihood**: with lags EFA's NLL is {_span([-d for d in lag_nll], 2, 1)} nats "
        f"below the {GAUSS}'s; same day, EFA ℓ = 1, 2, 4: "
        + ", ".join(f"{v:.3f}" for v in same_nll)
        + f" against {c[SAME, GAUSS, NLL]['mean']:.3f}.",
        f"- **Anomalies**: EFA's standardised residuals find the injected ±10 °F readings with "
        f"AUC {_span([c[s, m, AUC]['mean'] for s, m in EFA_ROWS], 3, 1)}, the {GAUSS}'s with "
        f"{_span([c[s, m, AUC]['mean'] for s, m in GAUSS_ROWS], 3, 1)}.",
    ]
    return "\n".join(out)


def targets_block(results: Path) -> str:
    """The Targets list, each number and verdict computed from the file."""
    doc = published(results, "temperature")
    c = _cells(doc)
    n = len(doc["seeds"])
    margins = [1 - c[s, m, MSE]["mean"] / c[s, m, MSE]["paper"] for s, m in EFA_ROWS]
    fm = doc["fm_curve"]
    fm_better = all(statistics.fmean(t) < p for t, p in zip(fm["test"], fm["paper_test"],
                                                             strict=True) if p is not None)
    gauss = c[SAME, GAUSS, MSE]["mean"]
    vs_gauss = []
    for s, m in EFA_ROWS[:3]:
        lower = lower_on(c[s, m, MSE]["values"], [gauss] * n)
        vs_gauss.append(f"{m.removeprefix('EFA ')} {c[s, m, MSE]['mean']:.2f} "
                        f"({said_lower(lower, n)})")
    lag = []
    for s in ("1 day ahead", "2 days ahead"):
        a, b = c[s, "EFA ℓ=4", MSE]["values"], c[SAME, "EFA ℓ=4", MSE]["values"]
        d = [x - y for x, y in zip(a, b, strict=True)]
        lag.append(f"{paired(a, b).mean:+.2f} °F² for {s} ({min(d):+.2f} to {max(d):+.2f} per "
                   f"seed; {said_lower(lower_on(a, b), n)})")
    d = doc["two_minus_one_day_ahead"]
    test = stats.ttest_1samp(d, 0.0)
    lagged_gauss = c["1 day ahead", f"{GAUSS} + 1-day lag", MSE]["mean"]
    two_gauss = c["2 days ahead", f"{GAUSS} + 2-day lag", MSE]["mean"]
    below = all(c[s, "EFA ℓ=4", MSE]["mean"] < c[s, g, MSE]["mean"]
                for s, g in (("1 day ahead", f"{GAUSS} + 1-day lag"),
                             ("2 days ahead", f"{GAUSS} + 2-day lag")))
    return "\n".join([
        ("- **Paper numbers.** Every EFA row beats its paper counterpart, by "
         if min(margins) > 0 else "- **Paper numbers.** Not every EFA row beats its paper "
         "counterpart: relative margins ")
        + f"{_span(margins, 0)} %"
        + (". The FM beats the paper's FM at every k." if fm_better else
           "; the FM does not beat the paper's at every k."),
        f"- **Same-day EFA vs the {GAUSS}** ({gauss:.2f}): " + "; ".join(vs_gauss) + ".",
        "- **Lagged vs same-day.** Lagged minus same-day ℓ = 4: " + " and ".join(lag)
        + f"; both are {'below' if below else 'not both below'} the {GAUSS} with the same lags "
        f"({lagged_gauss:.2f}, {two_gauss:.2f}).",
        f"- **Is 2 days ahead worse than 1 day ahead?** Paired over seeds, 2D − 1D = "
        f"{statistics.fmean(d):+.3f} ± {statistics.stdev(d):.3f} °F² (t-test p = "
        f"{test.pvalue:.2f}). The linear peer "
        + ("gets worse" if two_gauss > lagged_gauss else "does not get worse")
        + f" with 2 lags ({two_gauss:.2f} vs {lagged_gauss:.2f}).",
    ])


PAGE = Path("docs") / "temperature.md"
BLOCKS = {"temperature": results_block, "temperature-targets": targets_block}
