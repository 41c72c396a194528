"""Table 1 of Wibisono & Wang (UAI 2023): classifying a binned response from five binned
features under covariate shift (``efa reproduce tabular-simulation``).

12 settings (n_c, noise, corr) × the authors' 20 data-set seeds, drawn by the reference
generator from the authors' random stream, the same on every machine
(:func:`efa.datasets.tabular.simulate`: the authors' coefficients and noises; not their
covariates, which depended on their CPU's BLAS kernel). On every data set: the estimator
(:class:`efa.tabular.AttentionTableClassifier`; also with an ordinal response and a GLM term
fitted first), the reference logistic regression, CatBoost, the ordered logit; TabM on the
first ``tabm_seeds`` data sets of every setting; and the estimator, LR, CatBoost, the ordered
logit and TabM with the bins read as numbers (``… numbers`` rows). The reference RF / GB / MLP
grids are too costly for 240 data sets: their cells are the authors' per-seed CSV values on
their data (labelled "quoted"), and ``efa reproduce tabular-simulation-grids`` reruns them on
one data set per setting, read back here from its committed results file. Every comparison
with the authors' numbers is statistical: a mean over 20 data sets against theirs, with
standard errors.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from experiments.harness.evaluate import standard_error, table
from experiments.harness.papers import paper_numbers
from experiments.harness.report import Report

REFERENCE = Path(__file__).parent / "reference" / "attention_uai_simulation.csv"
GRIDS = Path(__file__).resolve().parents[2] / "results" / "tabular-simulation-grids"

# Table 1 of the paper (accuracy, MSE), (n_c, noise, corr) → one value per model.
_NUMBERS = paper_numbers(__file__, "tabular-simulation")
PAPER_MODELS = tuple(_NUMBERS["models"])
PAPER_ACC = {tuple(r["setting"]): tuple(r["accuracy"]) for r in _NUMBERS["table_1"]}
PAPER_MSE = {tuple(r["setting"]): tuple(r["class_mse"]) for r in _NUMBERS["table_1"]}
EFA_NAME = "efa (linear block)"
# The estimator with an ordered response and a GLM term fitted first (init="glm"): the
# response is a binned linear function of the features, so the ordinal GLM is the
# well-specified part and the attention is trained on top of it from there. Chosen on
# development data sets (seeds 1–2 of every setting, not among the reported 20; docs/moe.md).
GLM_NAME = "efa (linear block, ordinal GLM)"
# stop_on="joint": the committed results' setting (the estimator's default with a GLM term
# is "response" since efa 0.3). glm_solver="lbfgs": the GLM stage fitted to convergence, chosen
# on the development data sets (seeds 1–2; docs/moe.md, Session 22), unpenalised (glm_C=inf,
# the committed runs' stage; the default "auto" has a better log loss and a lower accuracy on
# those data sets, docs/moe.md, Session 24).
GLM_OPTIONS = dict(response="ordinal", additive=True, init="glm", stop_on="joint",
                   glm_solver="lbfgs", glm_C=math.inf)
# The GLM-first row with the GLM stage's ridge penalty chosen on the validation split
# (glm_C="auto", the estimator's default since efa's session 24), beside the pinned row.
GLM_RIDGE = "efa (linear block, ordinal GLM, ridge)"
RIDGE_OPTIONS = {**GLM_OPTIONS, "glm_C": "auto"}
# The same models reading each bin as its index (a float column: efa's Gaussian value field,
# standardised numeric features for the peers): the bins are ordered, and under the shift an
# additive reading of ordered numbers extrapolates where one-hot levels cannot. Chosen on 5
# development data sets per setting whose seeds are not among the 20 reported (docs/moe.md).


def numbers_name(model: str) -> str:
    """The row name of ``model`` run on ordered levels read as numbers."""
    return model[:-1] + ", numbers)" if model.endswith(")") else model + " (numbers)"


EFA_NUMBERS = numbers_name(EFA_NAME)


@lru_cache(maxsize=1)
def authors_values() -> dict:
    """{((n_c, noise, corr), seed): {column: value}} from the authors' 12 per-seed CSVs
    (repository yixinw-lab/attention-uai, tabular-experiment/tabular-simulation/*.csv)."""
    import pandas as pd

    ref = pd.read_csv(REFERENCE)
    out = {}
    for row in ref.to_dict("records"):
        key = ((int(row.pop("n_c")), float(row.pop("noise")), float(row.pop("corr"))),
               int(row.pop("seed")))
        out[key] = row
    return out


def setting_name(s) -> str:
    n_c, noise, corr = s
    return f"({n_c},{noise:g},{corr:g})"


@dataclass(frozen=True)
class Spec:
    n: int = 2000
    settings: tuple = tuple(PAPER_ACC)
    variant: str = "code"  # "paper": the paper's text (sign flip on train only, bins per split)
    tabm_seeds: int = 5
    # The estimator: the theory-exact linear block over a shared vocabulary of the 10 bins (the
    # paper's model has one embedding table for all columns), Adam 1e-2, batches of 128 rows,
    # early stopping on the joint pseudo-likelihood of 15 % of the training rows (patience 20);
    # probabilities as trained (no temperature: the estimator's default since efa's session 25).
    estimator: dict = field(default_factory=lambda: dict(
        backbone="linear", shared_vocabulary=True, lr=1e-2, batch_size=128, patience=20,
        max_epochs=150, calibration=None))
    # CatBoost: CTRs of single columns only (max_ctr_complexity=1): 3× faster on these 10-class
    # tables and as accurate on a pilot data set; the time budget needs it.
    catboost: dict = field(default_factory=lambda: dict(max_ctr_complexity=1))
    tabm: dict = field(default_factory=dict)
    numbers: bool = True  # also run every model on the bins read as numbers
    glm: dict | None = field(default_factory=lambda: dict(GLM_OPTIONS))  # GLM_NAME's options
    glm_ridge: dict | None = field(default_factory=lambda: dict(RIDGE_OPTIONS))  # GLM_RIDGE's
    # The proportional-odds model (statsmodels, to convergence): y is a binned linear function
    # of the features, so this is the well-specified plain peer (docs/moe.md §3).
    ordered_logit: bool = True


SPEC = Spec()
QUICK = Spec(n=300, settings=((5, 0, 0.9), (1, 0.5, 0.1)), tabm_seeds=1,
             estimator={**SPEC.estimator, "max_epochs": 3},
             catboost={"max_iterations": 20, "max_ctr_complexity": 1}, tabm={"max_epochs": 2})


def jobs(spec: Spec, seeds: int) -> list[dict]:
    from efa.datasets.tabular import SIMULATION_SEEDS

    if seeds > len(SIMULATION_SEEDS):
        raise ValueError(f"the simulation has {len(SIMULATION_SEEDS)} data sets per setting")
    return [{"setting": list(s), "index": k, "seed": SIMULATION_SEEDS[k], "spec": spec,
             "tabm": k < spec.tabm_seeds, "cost": 2.0 if k < spec.tabm_seeds else 1.0}
            for s in spec.settings for k in range(seeds)]


def task(job: dict) -> dict:
    from efa.baselines.tabular import OrderedLogit, class_metrics, numeric_lr, reference_peers
    from efa.baselines.tabular_tuned import CatBoostTable, TabMTable
    from efa.datasets.tabular import as_numbers, simulate
    from efa.tabular import AttentionTableClassifier

    spec, seed = job["spec"], job["seed"]
    train, test = simulate(*job["setting"], seed, n=spec.n, variant=spec.variant)
    xtr, ytr, xte, yte = train.drop(columns="y"), train.y, test.drop(columns="y"), test.y
    as_read = {False: (xtr, xte), True: (as_numbers(xtr), as_numbers(xte))}
    out = {k: job[k] for k in ("setting", "index", "seed")}
    out["models"] = {}

    def run(name, make, numbers=False):
        t0 = time.perf_counter()
        a, b = as_read[numbers]
        est = make().fit(a, ytr)
        res = class_metrics(yte, est.predict_proba(b), est.classes_)
        res["train accuracy"] = class_metrics(ytr, est.predict_proba(a),
                                              est.classes_)["accuracy"]
        res["seconds"] = time.perf_counter() - t0
        if hasattr(est, "glm_history_"):  # the GLM stage: iterations and why it ended
            res["glm stage"] = {"iterations": est.glm_history_.epochs_run,
                                "stopped": est.glm_history_.stopped}
        out["models"][numbers_name(name) if numbers else name] = res

    run(EFA_NAME, lambda: AttentionTableClassifier(random_state=seed, **spec.estimator))
    if spec.glm is not None:
        run(GLM_NAME, lambda: AttentionTableClassifier(random_state=seed,
                                                       **{**spec.estimator, **spec.glm}))
    if spec.glm_ridge is not None:
        run(GLM_RIDGE, lambda: AttentionTableClassifier(random_state=seed,
                                                        **{**spec.estimator, **spec.glm_ridge}))
    lr = reference_peers(train, test, seed, names=("LR",))["LR"]
    out["models"]["LR"] = {k: lr[k] for k in ("accuracy", "class MSE", "log loss",
                                              "train accuracy", "seconds")}
    run("CatBoost", lambda: CatBoostTable(random_state=seed, **spec.catboost))
    if spec.ordered_logit:
        run("Ordered logit", OrderedLogit)
    if job["tabm"]:
        run("TabM", lambda: TabMTable(random_state=seed, **spec.tabm))
    if spec.numbers:
        run(EFA_NAME, lambda: AttentionTableClassifier(random_state=seed, numeric="gaussian",
                                                    **spec.estimator), numbers=True)
        run("LR", lambda: numeric_lr(seed), numbers=True)
        run("CatBoost", lambda: CatBoostTable(random_state=seed, **spec.catboost), numbers=True)
        if spec.ordered_logit:
            run("Ordered logit", OrderedLogit, numbers=True)
        if job["tabm"]:
            run("TabM", lambda: TabMTable(random_state=seed, **spec.tabm), numbers=True)
    out["seconds"] = sum(m["seconds"] for m in out["models"].values())
    return out


def _grid_runs() -> list[dict]:
    path = GRIDS / "results.json"
    if not path.exists():
        return []
    return json.loads(path.read_text()).get("runs", [])


def tables(results: list[dict], spec: Spec, seeds: int, command: str) -> Report:
    from efa.datasets.tabular import SIMULATION_SEEDS

    full = spec.n == 2000 and spec.variant == "code"
    ref = authors_values()
    used = list(SIMULATION_SEEDS[:seeds])
    report = Report("tabular-simulation", command, used)
    by = {}
    for r in results:
        by.setdefault(tuple(r["setting"]), []).append(r)
    ours = [EFA_NAME, "LR", "CatBoost", "Ordered logit", "TabM"]
    ours += [numbers_name(m) for m in ours]
    ours[1:1] = [GLM_NAME, GLM_RIDGE]
    summary = {}  # (setting, model) -> (acc values, mse values)
    for s in spec.settings:
        rs = sorted(by[tuple(s)], key=lambda r: r["index"])
        name = setting_name(s)
        acc_paper = dict(zip(PAPER_MODELS, PAPER_ACC.get(tuple(s), (None,) * 5), strict=True))
        mse_paper = dict(zip(PAPER_MODELS, PAPER_MSE.get(tuple(s), (None,) * 5), strict=True))
        for model in ours:
            mine = [r["models"][model] for r in rs if model in r["models"]]
            if not mine:
                continue
            paper_key = "LR" if model == "LR" else None
            acc = [m["accuracy"] for m in mine]
            mse = [m["class MSE"] for m in mine]
            report.add(name, model, "test accuracy", acc,
                       acc_paper[paper_key] if paper_key and full else None)
            report.add(name, model, "test class MSE", mse,
                       mse_paper[paper_key] if paper_key and full else None)
            report.add(name, model, "test log loss", [m["log loss"] for m in mine])
            summary[s, model] = (acc, mse)
        if full:
            for model in ("RF", "GB", "MLP", "ATN"):
                key = "at" if model == "ATN" else model.lower()
                vals = [ref[tuple(s), sd] for sd in used]
                acc = [v[f"acc_test_{key}"] for v in vals]
                mse = [v[f"mse_test_{key}"] for v in vals]
                label = f"{model} (quoted)"
                report.add(name, label, "test accuracy", acc, acc_paper[model])
                report.add(name, label, "test class MSE", mse, mse_paper[model])
                summary[s, label] = (acc, mse)
    report.extra["runs"] = results
    _paper_layout(report, spec, summary, used, full)
    _against_ordered_logit(report, spec, summary)
    if full:
        _claims(report, spec, summary, used)
    est = spec.estimator
    report.notes += [
        f"Data: the authors' generator and random stream (RandomState(seed); seeds "
        f"{used[:3]}…, the authors' np.random.seed(2023); randint(10000, size=20)), n = "
        f"{spec.n} train and test rows, 10 pooled quantile bins, drawn the same on every "
        "machine: the coefficients and noises are the authors' draws, the covariates the same "
        "normals times the closed-form symmetric square root of the covariance. Theirs went "
        "through multivariate_normal's SVD, whose result depends on the BLAS kernel "
        "(docs/reproducibility.md), so these are not their data sets: every comparison with "
        "their numbers is statistical, paired by seed.",
        f"{EFA_NAME}: efa.tabular.AttentionTableClassifier("
        + ", ".join(f"{k}={v!r}" for k, v in est.items())
        + "): one residual_linear attention layer (5 heads × 4 dims, width 20, "
        "the CBOW mixture of experts of Theorem 2) over the 5 features and the response, all "
        "masked in turn (joint pseudo-likelihood, exact two-stream), early stopping on 15 % of "
        "the training rows. These settings were fixed after looking at training curves on one "
        "data set ((5,0,0.9), seed 4951); nothing was tuned per setting or on test rows.",
        f"{GLM_NAME}: the same estimator with "
        + ", ".join(f"{k}={v!r}" for k, v in (spec.glm or {}).items())
        + ": the response is an ordered exponential family (efa.core.families.Ordinal, "
        "p(y = k) ∝ exp(η s_k + b_k), learned increasing scores), η gets a GLM term (an "
        "effect per feature level), and the GLM part is fitted first with the attention's "
        "read-out at 0 (the ordinal logit with learned scores, unpenalised, by L-BFGS to "
        "convergence), then every parameter from there. Chosen on development data sets (seeds "
        "1–2 of every setting, not among the reported 20; docs/moe.md §3), not on these.",
        f"{GLM_RIDGE}: the same with glm_C='auto' (the estimator's default): the GLM stage's "
        "ridge penalty, scikit-learn's C from 1e-3 to 1e3, chosen by the response's log loss "
        "on the validation split, the ordinal scores held at s_k = k in that stage (the ridge "
        "adjacent-categories logit), learned after it.",
        "LR: the reference's LogisticRegression(max_iter=2000), untuned, on all data sets. "
        "CatBoost: native categorical features (ordered target statistics of single columns, "
        "max_ctr_complexity=1; depth 6, lr 0.1, L2 3), number of trees ≤ 500 "
        "by early stopping on a stratified 20 % of the training rows. TabM: k=16, 2 blocks of "
        "128, dropout 0.1, AdamW 2e-3, epochs by early stopping (patience 10) on a stratified "
        f"20 % validation split; on the first {spec.tabm_seeds} data sets of each setting. "
        "Ordered logit: the proportional-odds model of the ordered bins (statsmodels "
        "OrderedModel by maximum likelihood, efa.baselines.tabular.OrderedLogit; one-hot "
        "levels, or standardised numbers), no regulariser, no tuning.",
        "… numbers: the same data with each bin read as its index 0..9 (float "
        f"columns): {EFA_NUMBERS} is the estimator above with numeric='gaussian' (every feature "
        "a heteroscedastic Gaussian value field, standardised; the response stays a class); "
        "LR: standardised features, multinomial logistic regression with L2 picked by 5-fold "
        "stratified CV on log loss over 1e-4..1e4, fitted to convergence; CatBoost and TabM "
        "as above with numeric features. The bins are ordered, so this is the reading a user "
        "would try; it was chosen for efa on development data sets (seeds 1–5, which are not "
        "among the reported 20, in four n_c = 5 settings; docs/moe.md), not on these.",
        "RF / GB / MLP / ATN (quoted): the authors' per-seed CSV values (their runs on their "
        "data), not rerun here; `efa reproduce tabular-simulation-grids` reruns the three grids "
        "on one data set per setting (below).",
        "Class MSE = mean squared difference of predicted and true bin index (the paper's MSE). "
        "Log loss only for the models run here (the authors' CSVs have none).",
    ]
    seconds = {}
    for r in results:
        for model, m in r["models"].items():
            seconds[model] = seconds.get(model, 0.0) + m["seconds"]
    report.notes.append("Fit and prediction time summed over the data sets, in core-seconds "
                        "(one thread each): " + ", ".join(f"{m} {v:,.0f}"
                                                          for m, v in seconds.items()) + ".")
    return report


def _against_ordered_logit(report, spec, summary):
    """The GLM-first row against the well-specified plain peer, setting by setting: the
    simulation's response is a binned linear function of the features."""
    mine, peer = GLM_NAME, "Ordered logit"
    if not all((s, mine) in summary and (s, peer) in summary for s in spec.settings):
        return
    a = [float(np.mean(summary[s, mine][0])) for s in spec.settings]
    b = [float(np.mean(summary[s, peer][0])) for s in spec.settings]
    ahead = sum(x >= y for x, y in zip(a, b, strict=True))
    report.extra.setdefault("claims", {})["efa_glm_vs_ordered_logit"] = {
        "mean accuracy": [float(np.mean(a)), float(np.mean(b))],
        "settings at least as accurate": ahead, "settings": len(a)}
    report.sections.append(
        "### Attention on top of the ordinal GLM, against the plain ordered logit\n\n"
        f"- {mine}: mean accuracy over the settings {np.mean(a):.3f} against {peer}'s (one-hot "
        f"levels) {np.mean(b):.3f}; at least as accurate in {ahead} of {len(a)} settings ("
        + ", ".join(f"{setting_name(s)} {x - y:+.3f}"
                    for s, x, y in zip(spec.settings, a, b, strict=True)) + ").")


def _paper_layout(report, spec, summary, used, full):
    """Accuracy and MSE in the paper's Table-1 layout (mean ± population sd, as the paper)."""
    models = list(dict.fromkeys(m for (_, m) in summary))
    for k, metric in enumerate(("accuracy", "class MSE")):
        lines = [f"### Test {metric}: mean ± population sd over {len(used)} data sets "
                 "(paper's value in brackets where it has one)", "",
                 "| (n_c, noise, corr) | " + " | ".join(models) + " |",
                 "|---" * (len(models) + 1) + "|"]
        table = PAPER_ACC if k == 0 else PAPER_MSE
        for s in spec.settings:
            cells = []
            for m in models:
                if (s, m) not in summary:
                    cells.append("")
                    continue
                v = np.array(summary[s, m][k])
                base = m.replace(" (quoted)", "")
                paper = (table.get(tuple(s), (None,) * 5)[PAPER_MODELS.index(base)]
                         if base in PAPER_MODELS and full else None)
                cells.append(f"{v.mean():.3f} ± {v.std():.3f}"
                             + (f" [{paper:.3f}]" if paper is not None else ""))
            lines.append(f"| {setting_name(s)} | " + " | ".join(cells) + " |")
        report.sections.append("\n".join(lines))


def _claims(report, spec, summary, used):
    """The targets, each a mean over the data sets against the paper's, with paired standard
    errors: data set k shares its seed's coefficients and noises with the authors' data set k
    (only the covariates' factor differs, :func:`efa.datasets.tabular.simulate`), so the
    difference is taken seed by seed."""
    ref = authors_values()
    lines = ["### Targets (means over data sets against the paper's; SE = standard error)", ""]
    # The authors' per-seed values come from their CSV; the pairs share a seed.
    lr = []
    for s in spec.settings:
        acc = summary[s, "LR"][0]
        theirs = [ref[tuple(s), sd]["acc_test_lr"] for sd in used]
        se = standard_error(np.subtract(acc, theirs))
        lr.append((setting_name(s), float(np.mean(acc)), se, PAPER_ACC[tuple(s)][0]))
    inside = sum(abs(m - p) <= 2 * se for _, m, se, p in lr)
    # The pairing holds only if the data sets share the authors' coefficients and noises: then
    # the reference LR's accuracy follows theirs seed by seed.
    follows = [float(np.corrcoef(summary[s, "LR"][0],
                                 [ref[tuple(s), sd]["acc_test_lr"] for sd in used])[0, 1])
               for s in spec.settings]
    report.extra.setdefault("claims", {}).update({
        "lr_within_2se_of_table_1": inside, "lr_vs_table_1": lr,
        "lr_per_seed_correlation_with_authors": [min(follows), max(follows)]})
    for model, key in ((EFA_NUMBERS, "efa_numbers"), (GLM_NAME, "efa_glm"),
                       (GLM_RIDGE, "efa_glm_ridge"), (EFA_NAME, "efa")):
        if (spec.settings[0], model) not in summary:
            continue
        beat = []
        for s in spec.settings:
            mine = summary[s, model][0]
            theirs = [ref[tuple(s), sd]["acc_test_at"] for sd in used]
            diff = float(np.mean(mine)) - PAPER_ACC[tuple(s)][4]
            se = standard_error(np.subtract(mine, theirs))
            beat.append((setting_name(s), float(np.mean(mine)), PAPER_ACC[tuple(s)][4],
                         diff >= 0, diff, se))
        wins = sum(b[3] for b in beat)
        behind = [b for b in beat if b[4] < -2 * b[5]]
        ahead_2se = [b for b in beat if b[4] > 2 * b[5]]
        # The covariates differ from the authors', and so may the difficulty: the margin over
        # the reference LR on the same data sets sets efa against ATN's margin over LR on theirs.
        margins = []
        for s in spec.settings:
            mine = float(np.mean(summary[s, model][0])) - float(np.mean(summary[s, "LR"][0]))
            theirs = PAPER_ACC[tuple(s)][4] - PAPER_ACC[tuple(s)][0]
            margins.append((setting_name(s), mine, theirs, mine >= theirs))
        ahead = sum(m[3] for m in margins)
        report.extra["claims"] |= {f"{key}_mean_accuracy_ge_paper_atn": wins,
                                   f"{key}_vs_paper_atn": beat,
                                   f"{key}_behind_paper_atn_beyond_2se": len(behind),
                                   f"{key}_ahead_of_paper_atn_beyond_2se": len(ahead_2se),
                                   f"{key}_not_behind_paper_atn_beyond_2se":
                                       len(beat) - len(behind),
                                   f"{key}_margin_over_lr_ge_atn_margin": ahead,
                                   f"{key}_margins_over_lr": margins}
        lines.append(
            f"- {model}: mean accuracy ≥ the paper's ATN in {wins} of {len(beat)} settings "
            f"(target ≥ 10); ahead by more than 2 paired SE in {len(ahead_2se)}, within 2 SE "
            f"(20 data sets cannot tell them apart) in "
            f"{len(beat) - len(behind) - len(ahead_2se)}, behind by more than 2 SE in "
            f"{len(behind)}: "
            + ", ".join(f"{n} {m:.3f} vs {p:.3f} ({d:+.3f} ± {e:.3f}){'' if ok else ' (loses)'}"
                        for n, m, p, ok, d, e in beat) + ". Its margin over the reference "
            f"LR on the same data sets is at least ATN's margin over LR in Table 1 in {ahead} of "
            f"{len(margins)}: " + ", ".join(f"{n} {a:+.3f} vs {b:+.3f}"
                                            for n, a, b, _ in margins) + ".")
    lines.append(f"- LR (the reference's, untuned): mean accuracy within 2 paired SE (ours "
                 f"against the authors' 20 data sets) of Table 1 in "
                 f"{inside} of {len(lr)} settings: "
                 + ", ".join(f"{n} {m:.3f} ± {se:.3f} vs {p:.3f}" for n, m, se, p in lr)
                 + f". Its per-seed accuracy correlates {min(follows):.2f}–{max(follows):.2f} "
                 "with the authors' LR on the data set of the same seed (per setting).")
    grid = [g for g in _grid_runs() if g["n"] == 2000]
    if grid:
        from experiments.moe.tabular_grids import against_authors

        rows, within = against_authors(grid)
        lines.append(f"- Reference grids rerun on {len(rows)} (data set, model) pairs "
                     "(results/tabular-simulation-grids), one data set per setting: inside the "
                     "authors' spread over their 20 data sets (mean ± 2 sd) in "
                     + ", ".join(f"{m} {k} of {n}" for m, (k, n) in within.items()) + ".")
        lines += ["", table(["data set", "model", "rerun accuracy", "authors' (same seed)",
                             "authors' mean ± sd (20 data sets)"],
                            [[n, m, f"{a:.4f}", f"{s:.4f}", f"{mu:.4f} ± {sd:.4f}"]
                             for n, m, a, s, mu, sd in rows])]
        report.extra["claims"]["grids_within_authors_2sd"] = within
    else:
        lines.append("- Reference grids: not rerun yet (`efa reproduce tabular-simulation-grids "
                     "--seeds 1`).")
    report.sections.insert(0, "\n".join(lines))


def plots(report: Report, folder) -> None:
    from experiments.harness.plots import bar_plot

    n = len({r.setting for r in report.rows if r.metric == "test accuracy"})
    bar_plot(report, "test accuracy", Path(folder) / "accuracy.png",
             "Tabular simulation under covariate shift (Table 1); hatched: authors' runs",
             "test accuracy (mean ± sd over data sets)", figsize=(2 + 1.1 * n, 4.5),
             hatched=lambda model: "quoted" in model, xlabel="(n_c, noise, corr)")


