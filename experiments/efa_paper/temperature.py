"""The U.S. city temperature experiment of the EFA paper (Sec 6.4, Figures 5-6).

October daily mean temperatures of 44 U.S. cities (one per state), train 2007-12, validation
2013-16, test 2017-19. One sequence is one day; each city is a token [g(lat, lon); λ₁(temp)]
with no position, and the masked city's temperature is a Gaussian given the other 43 cities
(same day) and, in the 1-/2-day-ahead variants, every city's temperature of the previous
day(s). Peers: the paper's Haversine k-NN factorisation model (Prop 2), climatology, and the
Gaussian conditional (kriging with a shrunk empirical covariance). Test MSE in °F².
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from efa.baselines import Climatology, select_shrinkage
from efa.baselines.gaussian import sequence_matrix
from efa.core import strategies
from efa.core.data import Sequences
from efa.datasets import temperature as tp
from efa.spatial import anomalies, knn_fm, site_means, sites_to_sequences, spatial_efa
from efa.training.calibration import conformal_level
from efa.training.predictive import predictive_frame
from efa.training.scoring import mean_squared_error
from efa.training.train import TrainConfig, fit, seed_everything
from experiments.harness.papers import by_key, paper_numbers
from experiments.harness.plots import figure, save
from experiments.harness.report import Report

NAME = "temp"
METRIC = "test MSE (°F²)"
NLL = "test NLL (nats per prediction)"
COVER = {0.5: "50 % interval coverage (test)", 0.9: "90 % interval coverage (test)"}
# The same intervals at the predictive's levels that hold 50 % / 90 % of validation values.
CONFORMAL = {level: f"{label}, level calibrated on validation" for level, label in COVER.items()}
SHIFT, SHARE = 10.0, 0.02  # the injected anomalies: ±10 °F at 2 % of the test values
AUC = f"anomaly AUC (±{SHIFT:g} °F at {SHARE:.0%} of test values)"
K_VALUES = (1, 2, 3, 4, 5, 10, 15, 20, 25, 30, 35, 40)
_NUMBERS = paper_numbers(__file__, "temperature")
PAPER = by_key(_NUMBERS["test_mse"], 2)
# The reference's FM curve (temperature/visualization.ipynb), test MSE by k.
PAPER_FM_CURVE = dict(zip(_NUMBERS["fm_curve_k"], _NUMBERS["fm_curve_test_mse"], strict=True))
SETTINGS = {0: "same day", 1: "1 day ahead", 2: "2 days ahead"}
ATTENTION_CITY = "Chicago"


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(progress=False, min_delta=1e-6, **kw)  # efa 0.2's stopping threshold


@dataclass(frozen=True)
class Spec:
    """Training recipe (chosen on validation; see docs/temperature.md)."""

    layers: tuple[int, ...] = (1, 2, 4)  # same-day depths
    lag_layers: int = 4  # depth of the 1-/2-day-ahead models (the paper's)
    lag_layout: str = "fields"  # past values as extra fields of each city's token
    center: bool = True  # per-city training-mean anomalies
    block: str = "pre_ln"
    attention: str | dict = "softmax"  # any EFAConfig.attention (experiments.cme.temperature_cme)
    per_row: int = 4  # scored cities per training row (Sequences.split_scored)
    val_targets: int = 11  # cities per validation day used for early stopping
    k_values: tuple[int, ...] = K_VALUES
    train: dict = field(default_factory=lambda: {
        # ℓ = 1: one-pass two-stream, cheap.
        "two_stream": _cfg(lr=3e-3, batch_size=16, max_epochs=100, patience=100,
                           schedule="cosine"),
        # ℓ > 1: masked copies, 16 rows × 4 cities = 64 copies per step.
        "copies": _cfg(lr=6e-3, batch_size=16, max_epochs=10, patience=10, schedule="cosine",
                       warmup_steps=50, eval_batch_size=64),
        # Fine-tuning the lagged models from the same-day one.
        "lagged": _cfg(lr=2e-3, batch_size=16, max_epochs=6, patience=6, schedule="cosine",
                       warmup_steps=50, eval_batch_size=64),
        "fm": _cfg(lr=1e-2, batch_size=32, max_epochs=200, patience=30, schedule="plateau"),
    })


SPEC = Spec()
QUICK = Spec(layers=(1,), lag_layers=1, k_values=(1, 5), train={
    "two_stream": replace(SPEC.train["two_stream"], max_epochs=3, patience=3),
    "copies": replace(SPEC.train["copies"], max_epochs=2, patience=2),
    "lagged": replace(SPEC.train["lagged"], max_epochs=1, patience=1),
    "fm": replace(SPEC.train["fm"], max_epochs=3),
})


# --------------------------------------------------------------------------- data


_CACHE: dict = {}


def load(lags: int = 0, layout: str = "fields", center: bool = True, root=None):
    """(train, val, test, cities) of the paper's set-up as Sequences (one per October day).

    ``center`` subtracts each city's 2007-12 mean from its (current and lagged) temperatures.
    """
    key = (lags, layout, center, root)
    if key in _CACHE:
        return _CACHE[key]
    temps = tp.read_city_temperatures(root)
    cities = tp.read_cities(root)
    frame = tp.paper_frame(temps, cities, lags=lags)
    data, _, times = sites_to_sequences(
        frame, site="city_idx", time="date", lat="lat", lon="lon", value="value", lags=lags,
        target="target", name=NAME, layout=layout, return_index=True,
    )
    year = torch.as_tensor(np.asarray(times.year))
    parts = [data[(year >= a) & (year <= b)] for a, b in tp.PAPER_YEARS.values()]
    if center:
        means = site_means(parts[0], NAME)
        parts = [anomalies(p, means, NAME) for p in parts]
    _CACHE[key] = (*parts, tp.city_table(frame))
    return _CACHE[key]


# --------------------------------------------------------------------------- fitting


def fit_efa(train, val, layers: int, seed: int, spec: Spec, base=None):
    """A spatial EFA fitted by the exact masked pseudo-likelihood (best validation epoch
    restored). With ``base`` (a fitted model on a subset of the fields, e.g. the same-day model
    for a lagged one) the model starts as ``base`` (``EFA.warm_start``) and is fine-tuned."""
    seed_everything(seed)
    model = spatial_efa(train, layers, name=NAME, block=spec.block, attention=spec.attention)
    if base is not None:
        model.warm_start(base)
    if one_pass(model):  # ℓ = 1: one pass per day predicts every city
        hist = fit(model, train, val, replace(spec.train["two_stream"], seed=seed))
    else:  # masked copies: one forward per (day, city)
        cfg = replace(spec.train["copies" if base is None else "lagged"], seed=seed)
        rows = train.split_scored(spec.per_row, seed=seed)
        hist = fit(model, rows, val.thin_scored(spec.val_targets, seed=12345), cfg)
    return model, hist


def one_pass(model) -> bool:
    """Whether one pass per day computes every city's masked copy: the two-stream form, or a
    one-layer model whose kernel's own form is the copy (CME attention: one factorisation per
    day, see efa.core.strategies.copies)."""
    return model.config.strategy == "two_stream" or (
        model.config.num_layers == 1 and strategies.own_is_copy(model.blocks[0]))


def fit_fm(train, val, k: int, seed: int, spec: Spec):
    seed_everything(seed)
    model = knn_fm(train, k, name=NAME)
    hist = fit(model, train, val, replace(spec.train["fm"], seed=seed))
    return model, hist


def _attention_row(model, test: Sequences, city: int) -> np.ndarray:
    """What the masked ``city`` pays to every token, averaged over layers, heads, test days."""
    at = torch.zeros(len(test), test.max_len, dtype=torch.bool)
    at[:, city] = True
    att = model.attention_weights(test, NAME, at=at)  # [L, B, H, I, I]
    return att[:, :, :, city, :].mean(dim=(0, 1, 2)).double().numpy()


# --------------------------------------------------------------------------- tasks


def _efa_result(model, hist, lags, layers, spec) -> dict:
    _, val, test, _ = load(lags, spec.lag_layout, spec.center)
    return {
        "lags": lags,
        "layers": layers,
        "val": mean_squared_error(model, val, NAME),
        "test": mean_squared_error(model, test, NAME),
        **probabilistic(model, test, val),
        "epochs": hist.epochs_run,
        "best_epoch": hist.best_epoch,
        "seconds": hist.seconds,
    }


def inject(test: Sequences) -> tuple[Sequences, np.ndarray]:
    """The test days with ±SHIFT °F added to SHARE of the observed values (a fixed draw, the
    same for every model and seed), and which values (in the order of ``predicted``)."""
    y = test.fields[NAME].clone()
    at = test.predicted(NAME)
    rng = np.random.default_rng(20171001)
    hit = rng.random(int(at.sum())) < SHARE
    sign = np.where(rng.random(int(at.sum())) < 0.5, -1.0, 1.0)
    y[at] += torch.as_tensor(hit * sign * SHIFT, dtype=y.dtype)
    return Sequences({**test.fields, NAME: y}, test.lengths, test.observed, test.scored), hit


def probabilistic(model, test: Sequences, val: Sequences | None = None) -> dict:
    """Test NLL (nats per prediction, the temperature's own density), the coverage of the
    50 % and 90 % central intervals of the model's predictive, with ``val`` also of its
    intervals at the levels that hold 50 % / 90 % of the validation values (split
    conformal), and how well its standardised residuals |y − mean| / sd find injected
    anomalies (ROC AUC)."""
    from sklearn.metrics import roc_auc_score

    frames = {level: predictive_frame(model, test, NAME, level=level) for level in COVER}
    out = {f"cover{level:g}": float(f["covered"].mean()) for level, f in frames.items()}
    for level in CONFORMAL if val is not None else ():
        q = conformal_level(model, val, NAME, level)
        out[f"conformal{level:g}"] = float(
            predictive_frame(model, test, NAME, level=q)["covered"].mean())
        out[f"conformal_q{level:g}"] = q
    out["nll"] = float(next(iter(frames.values()))["surprisal"].mean())
    shifted, hit = inject(test)
    residual = predictive_frame(model, shifted, NAME)["residual"].abs().to_numpy()
    out["auc"] = float(roc_auc_score(hit, residual))
    return out


def gaussian_probabilistic(gauss, test: Sequences) -> dict:
    """The same for the Gaussian conditional: its own conditional normal (variance 1 / P_ii)."""
    from scipy import stats
    from sklearn.metrics import roc_auc_score

    mean, sd = gauss.predict_mean_sd(test)
    y, m = sequence_matrix(test, NAME)
    z = np.abs(y[m] - mean[m]) / sd[m]
    shifted, hit = inject(test)
    ys, ms = sequence_matrix(shifted, NAME)
    mean_s, sd_s = gauss.predict_mean_sd(shifted)
    assert (ms == m).all()  # the same values, in the same (row-major) order as ``predicted``
    return {"nll": float(-stats.norm.logpdf(y[m], mean[m], sd[m]).mean()),
            "auc": float(roc_auc_score(hit, np.abs(ys[ms] - mean_s[ms]) / sd_s[ms]))} | {
        f"cover{level:g}": float((z <= stats.norm.ppf((1 + level) / 2)).mean())
        for level in COVER}


def task(job: dict) -> list[dict]:
    """One unit of work for one seed: a same-day EFA; or the same-day EFA of depth
    ``lag_layers`` followed by the 1- and 2-day-ahead models warm-started from it; or the FM
    k-curve."""
    spec, seed = job["spec"], job["seed"]
    t0 = time.perf_counter()
    if job["kind"] == "fm":
        train, val, test, _ = load(0, spec.lag_layout, spec.center)
        out = {"kind": "fm", "val": {}, "test": {}}
        for k in spec.k_values:
            model, _ = fit_fm(train, val, k, seed, spec)
            out["val"][k] = mean_squared_error(model, val, NAME)
            out["test"][k] = mean_squared_error(model, test, NAME)
        out["seconds"] = time.perf_counter() - t0
        return [{**out, "seed": seed}]
    train, val, test, cities = load(0, spec.lag_layout, spec.center)
    base, hist = fit_efa(train, val, job["layers"], seed, spec)
    results = [_efa_result(base, hist, 0, job["layers"], spec)]
    if job.get("attention"):
        city = int(cities.index[cities["city"] == ATTENTION_CITY][0])
        results[0]["attention"] = _attention_row(base, test, city).tolist()
    if job["kind"] == "chain":
        for lags in (1, 2):
            train, val, _, _ = load(lags, spec.lag_layout, spec.center)
            model, hist = fit_efa(train, val, job["layers"], seed, spec, base=base)
            results.append(_efa_result(model, hist, lags, job["layers"], spec))
    return [{**r, "kind": "efa", "seed": seed} for r in results]


def jobs(spec: Spec, seeds: int) -> list[dict]:
    """Every job (the runner orders them longest first so that the workers finish together)."""
    if spec.lag_layers not in spec.layers:
        raise ValueError("lag_layers must be one of the same-day depths (it warm-starts them)")
    deepest = max(spec.layers)
    out = []
    for seed in range(seeds):
        for layers in spec.layers:
            chain = layers == spec.lag_layers
            out.append({
                "kind": "chain" if chain else "efa", "layers": layers, "seed": seed,
                "attention": (seed, layers) == (0, deepest), "spec": spec,
                "cost": (layers if layers > 1 else 0.5) * (1.8 if chain else 1),
            })
        out.append({"kind": "fm", "seed": seed, "cost": 1.0, "spec": spec})
    return out


# --------------------------------------------------------------------------- the experiment


def tables(results: list[dict], spec: Spec, seeds: int, command: str) -> Report:
    """Every model for seeds 0..seeds-1 (initialisation and shuffling; the split is fixed)."""
    report = Report("temperature", command, list(range(seeds)))
    by = {}
    for r in results:
        key = ("fm",) if r["kind"] == "fm" else (r["lags"], r["layers"])
        by.setdefault(key, {})[r["seed"]] = r

    def per_seed(key, field="test"):
        return [by[key][s][field] for s in range(seeds)]

    efa_test = {}
    for layers in spec.layers:
        label = f"EFA ℓ={layers}"
        efa_test[0, layers] = per_seed((0, layers))
        report.add("same day", label, METRIC, efa_test[0, layers], PAPER.get(("same day", label)))
    for lags in (1, 2):
        setting = SETTINGS[lags]
        efa_test[lags] = per_seed((lags, spec.lag_layers))
        report.add(setting, f"EFA ℓ={spec.lag_layers}", METRIC, efa_test[lags],
                   PAPER[setting, "EFA"])

    # FM: best k on validation (mean validation MSE over seeds); also the test-picked k.
    fm = by[("fm",)]
    fm_val = {k: float(np.mean([fm[s]["val"][k] for s in range(seeds)])) for k in spec.k_values}
    fm_test = {k: [fm[s]["test"][k] for s in range(seeds)] for k in spec.k_values}
    k_val = min(fm_val, key=fm_val.get)
    k_test = min(fm_test, key=lambda k: np.mean(fm_test[k]))
    report.add("same day", f"FM (k={k_val}, picked on validation)", METRIC, fm_test[k_val],
               PAPER["same day", "FM"])
    report.add("same day", f"FM (k={k_test}, best on test as in the paper)", METRIC,
               fm_test[k_test], PAPER["same day", "FM"])

    # Deterministic peers.
    train, val, test, cities = load(0, spec.lag_layout, spec.center)
    clim = Climatology().fit(train, NAME)
    report.add("same day", "climatology (per-city mean)", METRIC, [clim.mse(test)] * seeds)
    shrinkage, gauss_prob = {}, {}
    for lags in (0, 1, 2):
        tr, va, te, _ = load(lags, spec.lag_layout, spec.center)
        gauss, curve = select_shrinkage(tr, va, NAME)
        shrinkage[SETTINGS[lags]] = {"alpha": gauss.alpha, "val_mse": curve}
        model = "Gaussian conditional" + ("" if lags == 0 else f" + {lags}-day lag")
        report.add(SETTINGS[lags], model, METRIC, [gauss.mse(te)] * seeds)
        gauss_prob[SETTINGS[lags], model] = gaussian_probabilistic(gauss, te)

    # The predictive distributions: test NLL and interval coverage (the FM and climatology
    # give a mean only).
    measured = all("nll" in r for r in results if r["kind"] == "efa")  # (older runs: MSE)
    conformal = all("conformal0.5" in r for r in results if r["kind"] == "efa")
    for what, key in ([(NLL, "nll")] + [(COVER[level], f"cover{level:g}") for level in COVER]
                      + [(CONFORMAL[level], f"conformal{level:g}") for level in CONFORMAL]
                      * conformal + [(AUC, "auc")]) * measured:
        for layers in spec.layers:
            report.add("same day", f"EFA ℓ={layers}", what, per_seed((0, layers), key))
        for lags in (1, 2):
            report.add(SETTINGS[lags], f"EFA ℓ={spec.lag_layers}", what,
                       per_seed((lags, spec.lag_layers), key))
        for (setting, model), values in gauss_prob.items():
            if key in values:  # the Gaussian conditional has no calibrated-level rows
                report.add(setting, model, what, [values[key]] * seeds)

    # Is 2 days ahead worse than 1 day ahead? Paired over seeds.
    diff = np.array(efa_test[2]) - np.array(efa_test[1])
    notes = _notes(spec, seeds, diff, k_val, k_test, shrinkage)
    report.notes += notes
    report.extra.update(
        {
            "fm_curve": {
                "k": list(spec.k_values),
                "test": [fm_test[k] for k in spec.k_values],
                "val_mean": [fm_val[k] for k in spec.k_values],
                "k_validation": k_val,
                "k_test": k_test,
                "paper_test": [PAPER_FM_CURVE.get(k) for k in spec.k_values],
            },
            "validation_mse": {
                f"{SETTINGS[key[0]]}, ℓ={key[1]}": per_seed(key, "val")
                for key in by if key != ("fm",)
            },
            "gaussian_shrinkage": shrinkage,
            "two_minus_one_day_ahead": diff.tolist(),
            "fit_seconds": {
                f"{'fm' if k == ('fm',) else f'{SETTINGS[k[0]]}, ℓ={k[1]}'}": [
                    round(by[k][s]["seconds"], 1) for s in range(seeds)
                ]
                for k in by
            },
            "epochs_run": {
                f"{SETTINGS[k[0]]}, ℓ={k[1]}": [by[k][s]["epochs"] for s in range(seeds)]
                for k in by if k != ("fm",)
            },
            "spec": {k: v for k, v in spec.__dict__.items() if k != "train"}
            | {"train": {k: c.__dict__ for k, c in spec.train.items()}},
        }
    )
    report.figures["cities"] = cities[["state", "city", "lat", "lon"]].to_dict(orient="list")
    report.figures["fm_curve"] = report.extra["fm_curve"]
    att = next((r for r in results if isinstance(r.get("attention"), list)), None)
    if att is not None:
        report.figures["attention"] = {
            "city": ATTENTION_CITY,
            "model": f"same day, EFA ℓ={att['layers']}, seed 0",
            "weights": att["attention"],
        }
    return report


def _notes(spec, seeds, diff, k_val, k_test, shrinkage) -> list[str]:
    from scipy import stats

    ts, cp, lg = (spec.train[k] for k in ("two_stream", "copies", "lagged"))

    notes = [
        "One sequence = one October day of the 44 cities (train 2007-12, validation 2013-16, "
        "test 2017-19: 8,184 / 5,456 / 4,092 predictions); MSE in °F² of the predicted mean.",
        f"EFA: per-city training-mean anomalies (center={spec.center}), standardised "
        "temperature and lat/lon, g and λ₁ = MLP(→128→32), token mix MLP(→64→32), "
        f"{spec.block} blocks with 2 heads × 16 and FFN 64, no positions, bidirectional; "
        "λ₂ = MLP(32→128→16→1): the Gaussian mean, with one σ learned with the network "
        "(the paper fixed σ = 1, so its likelihood meant nothing), scored by the test NLL and "
        "the coverage of its central intervals beside the MSE of its mean; the rows 'level "
        "calibrated on validation' ask the predictive for the central interval whose level "
        "holds 50 % / 90 % of the validation values (efa.conformal_level: split conformal; "
        "those days also chose the epoch). Exact masked pseudo-likelihood: ℓ=1 by the "
        f"one-pass two-stream form ({ts.max_epochs} epochs, lr {ts.lr:g}), ℓ>1 by "
        f"in-model masked copies ({cp.max_epochs} epochs of all 8,184 copies, {spec.per_row} "
        f"scored cities per row, {cp.batch_size} rows per step, AdamW lr {cp.lr:g}, cosine, "
        "best validation epoch restored).",
        f"Lagged variants: ℓ={spec.lag_layers}, layout '{spec.lag_layout}' (each city's "
        "previous-day temperature(s) as extra value fields of its own token, so I stays 44); "
        f"started from the same seed's same-day ℓ={spec.lag_layers} model with the lag inputs' "
        f"mixing weights at zero (EFA.warm_start), then {lg.max_epochs} epochs at lr "
        f"{lg.lr:g}.",
        f"FM: Prop 2 over the k nearest cities (Haversine), h = MLP(2→128→32), standardised "
        f"values, sum pooling; k picked on validation = {k_val}; best on test = {k_test}.",
        "Gaussian conditional: N(μ, (1−α)S + α tr(S)/p I) of the day's 44-vector (stacked with "
        "the previous day(s) for the lag rows) from training days; α on validation "
        + ", ".join(f"{s}: α={v['alpha']}" for s, v in shrinkage.items())
        + ". Deterministic peers: the same value for every seed.",
    ]
    if seeds > 1:
        p = stats.ttest_1samp(diff, 0.0).pvalue
        notes.append(
            f"2 days ahead − 1 day ahead (paired over seeds): {diff.mean():+.3f} ± "
            f"{diff.std(ddof=1):.3f} °F² (paired t-test p = {p:.3g})."
        )
    return notes


# --------------------------------------------------------------------------- plots


def plots(report: Report, out) -> None:
    out = Path(out)
    fm = report.figures.get("fm_curve")
    if fm:
        ks = np.array(fm["k"])
        test = np.array(fm["test"])
        paper = [(k, v) for k, v in zip(ks, fm["paper_test"], strict=True) if v is not None]
        lines = [r for r in report.rows
                 if r.model.startswith("EFA") or r.model.startswith("Gaussian")]
        fig, axes = figure(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [1, 1.3]})
        for panel, ax in enumerate(axes):
            ax.errorbar(ks, test.mean(1),
                        yerr=test.std(1, ddof=1) if test.shape[1] > 1 else None, marker="o",
                        color="C0", capsize=3, lw=2, label="FM (k nearest cities), this run")
            if paper:
                ax.plot(*zip(*paper, strict=True), "s--", color="0.55",
                        label="FM, paper (reference notebook)")
            ax.axvline(fm["k_validation"], color="C0", ls=":", lw=1,
                       label=f"k picked on validation ({fm['k_validation']})")
            efa_colors = iter(["C3", "C1", "C5", "C4", "C6", "C8"])
            gauss_styles = iter(["-", "--", ":"])
            for r in lines:
                if r.model.startswith("EFA"):
                    kw = dict(color=next(efa_colors, "C3"), ls="-", lw=1.6)
                else:
                    kw = dict(color="C2", ls=next(gauss_styles, "-."), lw=1.6)
                ax.axhline(r.mean, label=f"{r.model}, {r.setting}: {r.mean:.2f}", **kw)
            ax.set_xlabel("Number of neighbors (k)")
            ax.set_ylabel("Test mean squared error (°F²)")
            if panel == 0:
                top = max(test.mean(1).max(), max((v for _, v in paper), default=0))
                ax.set_ylim(0, top * 1.08)
                ax.set_title("FM test MSE vs k (paper's curve in grey)", fontsize=10)
            else:
                ours = [*test.mean(1), *(r.mean for r in lines)]
                ax.set_ylim(min(ours) * 0.9, max(ours) * 1.05)
                ax.set_title("Zoom on this run (mean ± std over seeds)", fontsize=10)
                ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.suptitle("U.S. cities, October daily temperatures: FM vs number of neighbours, "
                     "with EFA and Gaussian-conditional test MSE as horizontal lines", fontsize=11)
        fig.tight_layout()
        save(fig, out / "fm_vs_k.png", bbox_inches="tight")

    cities = report.figures.get("cities")
    att = report.figures.get("attention")
    if cities:
        c = pd.DataFrame(cities)
        fig, ax = figure(figsize=(11, 5.5))
        if att:
            w = np.array(att["weights"])
            me = int(np.flatnonzero(c["city"] == att["city"])[0])
            others = np.arange(len(c)) != me
            sc = ax.scatter(c["lon"][others], c["lat"][others], c=w[others], cmap="viridis",
                            s=120, edgecolors="k", linewidths=0.4)
            fig.colorbar(sc, ax=ax, shrink=0.7,
                         label=f"attention paid by masked {att['city']}")
            ax.scatter(c["lon"][me], c["lat"][me], marker="*", s=350, color="red",
                       edgecolors="k", label=f"{att['city']} (masked query)")
            ax.set_title(f"Attention of masked {att['city']} to the other cities "
                         f"({att['model']}; mean over layers, heads, test days)", fontsize=10)
            ax.legend(loc="lower left", fontsize=8)
        else:
            ax.scatter(c["lon"], c["lat"], color="red", s=60)
            ax.set_title("The 44 cities")
        for _, row in c.iterrows():
            ax.annotate(STATE_CODES.get(row["state"], row["state"][:2]), (row["lon"], row["lat"]),
                        xytext=(4, 4), textcoords="offset points", fontsize=8)
        ax.set_xlabel("longitude (°)")
        ax.set_ylabel("latitude (°)")
        ax.set_aspect(1 / np.cos(np.radians(38)))
        fig.tight_layout()
        save(fig, out / "city_map.png", bbox_inches="tight")


STATE_CODES = dict(
    zip(
        "Alabama Arizona Arkansas California Colorado Connecticut Delaware Florida Georgia Idaho "
        "Illinois Indiana Iowa Kansas Kentucky Louisiana Maine Maryland Massachusetts Michigan "
        "Minnesota Mississippi Missouri Montana Nebraska Nevada New_Hampshire New_Jersey "
        "New_Mexico New_York North_Carolina North_Dakota Ohio Oklahoma Oregon Pennsylvania "
        "Rhode_Island South_Carolina South_Dakota Tennessee Texas Utah Vermont Virginia "
        "Washington West_Virginia Wisconsin Wyoming".replace("_", "\0").split(),
        "AL AZ AR CA CO CT DE FL GA ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM "
        "NY NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY".split(),
        strict=True,
    )
)
STATE_CODES = {k.replace("\0", " "): v for k, v in STATE_CODES.items()}
