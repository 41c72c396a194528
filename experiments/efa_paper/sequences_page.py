"""docs/sequences.md's results and targets, generated from the committed results of the three
sequence experiments (``movielens-sequence``, ``movielens-ratings``, ``instacart``) and the
Instacart speed benchmark, so that the page cannot fall out of step with them."""

from __future__ import annotations

from pathlib import Path

from experiments.harness.evaluate import lower_on, paired, said_lower
from experiments.harness.report import fmt, published

CE = "test CE"
RATING_CE, RATING_NLL = "test CE (paper: no log y!)", "test NLL (full)"
EFA, LOGIT = "EFA + distinct", "Logit + distinct"


def _cells(doc: dict, metric: str) -> dict[tuple[str, str], dict]:
    return {(r["setting"], r["model"]): r for r in doc["rows"] if r["metric"] == metric}


def _best_other(cell: dict, setting: str, exclude: tuple[str, ...]) -> str:
    """The lowest-mean model of ``setting`` that is not efa's and not in ``exclude``."""
    peers = [m for (s, m) in cell if s == setting and not m.startswith("EFA") and m not in exclude]
    return min(peers, key=lambda m: cell[setting, m]["mean"])


def _paired(ours: dict, peer: dict) -> tuple[float, int]:
    """Mean of the per-seed differences (ours − peer) and the seeds on which ours is lower."""
    return paired(ours["values"], peer["values"]).mean, lower_on(ours["values"], peer["values"])


def _short(setting: str) -> str:
    """"paper: v1 unidirectional" → "paper v1 uni"."""
    return (setting.replace(":", "").replace("unidirectional", "uni")
            .replace("bidirectional", "bi"))


def _pct(row: dict) -> str:
    return f"{100 * (row['mean'] - row['paper']) / row['paper']:+.1f} %"


def results_tables(results: Path) -> str:
    """The Results section's tables and paired comparisons."""
    ml, rt, ic = (published(results, n) for n in ("movielens-sequence", "movielens-ratings",
                                               "instacart"))
    n = len(ml["seeds"])
    out = [f"**movielens-sequence** (test CE, nats per masked movie; {n} seeds, mean ± std; "
           f"`{ml['command']}`):", "",
           f"| setting | {LOGIT} | best other peer | **{EFA}** |", "|---|---|---|---|"]
    c = _cells(ml, CE)
    settings = list(dict.fromkeys(s for s, _ in c))
    exceptions, vs_logit = [], []
    for s in settings:
        best = _best_other(c, s, (LOGIT,))
        out.append(f"| {s} | {fmt(c[s, LOGIT]['mean'], c[s, LOGIT]['std'])} | {best} "
                   f"{fmt(c[s, best]['mean'], c[s, best]['std'])} | "
                   f"{fmt(c[s, EFA]['mean'], c[s, EFA]['std'])} |")
        vs_logit.append(_paired(c[s, EFA], c[s, LOGIT]))
        d, lower = _paired(c[s, EFA], c[s, best])
        if lower < n:
            exceptions.append(f"{_short(s)} MovieLens, where {best} is level with {EFA} "
                              f"({d:+.4f} nats, EFA lower on {lower} of {n} seeds)")
    paper = [s for s in settings if s.startswith("paper")]
    uni, bi = (next(s for s in paper if s.endswith(k)) for k in ("unidirectional",
                                                                 "bidirectional"))
    better = c[bi, EFA]["mean"] < c[uni, EFA]["mean"]
    out += ["", f"The paper's EFA: {c[uni, 'EFA']['paper']:.3f} (uni) / "
            f"{c[bi, 'EFA']['paper']:.3f} (bi); ours without the distinct support "
            f"{c[uni, 'EFA']['mean']:.3f} / {c[bi, 'EFA']['mean']:.3f}. The bidirectional EFA is "
            + ("*better* than the unidirectional one, as it should be with more context"
               if better else "*worse* than the unidirectional one")
            + ("; in the paper it was worse." if c[bi, "EFA"]["paper"] > c[uni, "EFA"]["paper"]
               else "."), ""]

    c, nll = _cells(rt, RATING_CE), _cells(rt, RATING_NLL)
    preds = [_cells(rt, f"mean pred | y={y}") for y in (1, 2, 3)]
    out += [f"**movielens-ratings**, paper protocol (the paper's CE without log y! / full NLL; "
            f"Table 2's EFA in brackets; `{rt['command']}`):", "",
            "| setting | GLM | FM | **EFA** | EFA mean pred. at y = 1, 2, 3 |",
            "|---|---|---|---|---|"]
    settings = list(dict.fromkeys(s for s, _ in c))
    for s in (s for s in settings if s.startswith("paper")):
        def both(m: str, s: str = s) -> str:
            return f"{c[s, m]['mean']:.3f} / {nll[s, m]['mean']:.3f}"

        out.append(f"| {s.removeprefix('paper: ')} | {both('GLM')} | {both('FM')} | "
                   f"{both('EFA')} ({c[s, 'EFA']['paper']:.3f}) | "
                   + ", ".join(f"{p[s, 'EFA']['mean']:.2f}" for p in preds) + " |")
    clean = [s for s in settings if s.startswith("clean")]
    v1, v2 = (f"paper: {v} bidirectional" for v in ("v1", "v2"))
    out += ["", "Clean protocol (CE, GLM → EFA): " + "; ".join(
        f"{s.removeprefix('clean: ')} {c[s, 'GLM']['mean']:.3f} → {c[s, 'EFA']['mean']:.3f}"
        for s in clean) + ". In full NLL v1 "
        + ("beats" if nll[v1, "EFA"]["mean"] < nll[v2, "EFA"]["mean"] else "loses to")
        + f" v2 (bidirectional {nll[v1, 'EFA']['mean']:.3f} against "
        f"{nll[v2, 'EFA']['mean']:.3f}): the paper's {c[v1, 'EFA']['paper']:.3f} against "
        f"{c[v2, 'EFA']['paper']:.3f} \"cross-entropies\" differ only by their dropped log y! "
        "terms.", ""]
    vs_glm = [(s, *_paired(c[s, "EFA"], c[s, "GLM"])) for s in settings]

    c = _cells(ic, CE)
    out += [f"**instacart** (test CE, nats per masked product; `{ic['command']}`):", "",
            f"| setting | {LOGIT} | best other peer | **{EFA}** (paper EFA) |",
            "|---|---|---|---|"]
    vs_best = []
    for s in dict.fromkeys(s for s, _ in c):
        best = _best_other(c, s, (LOGIT,))
        out.append(f"| {s} | {fmt(c[s, LOGIT]['mean'], c[s, LOGIT]['std'])} | {best} "
                   f"{fmt(c[s, best]['mean'], c[s, best]['std'])} | "
                   f"{fmt(c[s, EFA]['mean'], c[s, EFA]['std'])} ({c[s, EFA]['paper']:.3f}) |")
        vs_best.append((s, best, *_paired(c[s, EFA], c[s, best])))
        if vs_best[-1][3] < n:
            exceptions.append(f"{s} Instacart, where {best} is level with {EFA} "
                              f"({vs_best[-1][2]:+.4f} nats, EFA lower on {vs_best[-1][3]} of "
                              f"{n} seeds)")

    def listed(pairs: list[tuple[float, int]]) -> str:
        ds = " / ".join(f"{d:+.3f}" for d, _ in pairs)
        lows = {lower for _, lower in pairs}
        return ds + (f", {said_lower(lows.pop(), n)}" if len(lows) == 1 else " (" + ", ".join(
            said_lower(lower, n) for _, lower in pairs) + ")")

    out += ["", f"Paired over seeds (EFA minus the peer, mean of the per-seed differences; "
            f"settings in the tables' order): against {LOGIT}, MovieLens sequences "
            f"{listed(vs_logit)}; against the GLM, ratings {listed([p[1:] for p in vs_glm])} "
            f"({' / '.join(_short(s) for s, *_ in vs_glm)}); on Instacart, against the best "
            "other peer "
            f"({' / '.join(b for _, b, *_ in vs_best)}), {listed([p[2:] for p in vs_best])}."
            + (" The exceptions: " + "; ".join(exceptions) + ": see [Peers](peers.md)."
               if exceptions else " EFA + distinct is lower than the best other peer on every "
               "seed of every setting.")]
    return "\n".join(out)


def _every_peer(ml: dict, rt: dict, ic: dict) -> str:
    """The target row "EFA better than every peer on every row": EFA + distinct (ratings: EFA)
    against every other model of its setting, paired over seeds."""
    n = len(ml["seeds"])
    level, beaten = [], 0
    for name, doc, ours, metric in (("MovieLens", ml, EFA, CE), ("ratings", rt, "EFA", RATING_CE),
                                    ("Instacart", ic, EFA, CE)):
        c = _cells(doc, metric)
        for s, m in c:
            if m.startswith("EFA") or (s, ours) not in c:
                continue
            d, lower = _paired(c[s, ours], c[s, m])
            if lower == n:
                beaten += 1
            else:
                level.append(f"{m} on {_short(s)} {name} ({d:+.4f}, EFA lower on {lower} of {n})")
    c = _cells(ml, CE)
    bi = "paper: bidirectional"
    return ("| EFA better than every peer on every row | "
            + ("met" if not level else "met but for " + "; ".join(level))
            + f": lower on every seed against {beaten} of {beaten + len(level)} (setting, peer) "
            f"pairs. The plain EFA (ablation, no distinct support) against the plain Logit on "
            f"MovieLens bidirectional: {c[bi, 'EFA']['mean']:.3f} vs "
            f"{c[bi, 'Logit']['mean']:.3f} |")


def _instacart_fits(ic: dict) -> str:
    """What one Instacart fit of each kind took (the ``seconds`` of every job)."""
    def span(pick) -> tuple[float, float]:
        got = [t for k, v in ic["seconds"].items() if pick(k.rsplit("/", 1)[1]) for t in v
               if t > 0]  # a convex fit shared by the seeds is timed on the first one only
        return min(got), max(got)

    logit = span(lambda m: m.startswith("Logit"))
    bert = span(lambda m: m.startswith("BERT4Rec"))
    efa = span(lambda m: m.startswith("EFA"))
    return (f"On Instacart the recommender peers and the converged logits dominate: a converged "
            f"logit took {logit[0]:,.0f}–{logit[1]:,.0f} s, a BERT4Rec up to {bert[1]:,.0f} s, an "
            f"EFA fit {efa[0]:.0f}–{efa[1]:.0f} s")


def targets_table(results: Path) -> str:
    """The Targets section's table, each status computed from the files."""
    ml, rt, ic = (published(results, n) for n in ("movielens-sequence", "movielens-ratings",
                                               "instacart"))
    fm = [r for doc in (ml, rt, ic) for r in doc["rows"]
          if r["model"] == "FM" and r["paper"] is not None and r["metric"] in (CE, RATING_CE)]
    worst = max(abs(r["mean"] - r["paper"]) / r["paper"] for r in fm)
    ours = []  # (label, ours, paper)
    c = _cells(ml, CE)
    for s in ("paper: unidirectional", "paper: bidirectional"):
        ours.append((f"ML seq {_short(s)}", c[s, EFA]["mean"],
                     c[s, "EFA"]["paper"]))
    c = _cells(ic, CE)
    for s in ("unidirectional", "bidirectional"):
        ours.append((f"Instacart {_short(s)}", c[s, EFA]["mean"], c[s, EFA]["paper"]))
    c = _cells(rt, RATING_CE)
    for s in (s for s, m in c if m == "EFA" and s.startswith("paper")):
        ours.append((f"ratings {_short(s)}",
                     c[s, "EFA"]["mean"], c[s, "EFA"]["paper"]))
    close = [o for o in ours if o[1] < o[2] and o[2] - o[1] < 0.002]
    bench = published(results, "instacart", "benchmark.json")
    walls = [doc["wall_seconds"] for doc in (ml, rt, ic)]
    resumed = ic.get("resumed_jobs")
    lines = [
        "| target | status |", "|---|---|",
        f"| FM within 3 % of the paper (protocol check) | "
        f"{'met' if worst <= 0.03 else '**missed**'} on all {len(fm)} FM rows: "
        + ", ".join(_pct(r) for r in fm) + " (ML seq, ratings, Instacart; files' order) |",
        "| EFA better than the paper's EFA on every row | "
        + ("met" if all(o < p for _, o, p in ours) else "**missed**") + ": "
        + "; ".join(f"{k} {o:.3f} vs {p:.3f}" for k, o, p in ours)
        + (". **Only marginal on** " + ", ".join(f"{k} ({o:.4f} vs {p:.3f}; the paper gives "
                                                 "three digits)" for k, o, p in close)
           if close else "") + " |",
        _every_peer(ml, rt, ic),
        f"| Instacart bidirectional EFA ≤ {bench['target_ce']:.3f} in ≤ "
        f"{bench['budget_seconds'] / 60:.0f} min | "
        + ("met" if bench["test_ce"] <= bench["target_ce"]
           and bench["wall_seconds"] <= bench["budget_seconds"] else "**missed**")
        + f": `{bench['command']}` (`results/instacart/benchmark.json`: "
        f"{bench['model'].split(' (')[0]}, seed "
        f"{bench['seed']}, {bench['threads']} thread"
        + (f", {bench['cpu']}" if "cpu" in bench else "")
        + f"): {bench['epochs_run']} epochs, "
        f"{bench['wall_seconds']:.0f} s wall from process start ({bench['fit_seconds']:.0f} s "
        f"training), test CE {bench['test_ce']:.3f}; validation reached its final level "
        f"({bench['final_val_ce']:.3f}) after {bench['seconds_to_final_val']:.0f} s |",
        "| all three experiments, 5 seeds, ≤ 20 min on 2 cores | "
        + ("met" if sum(walls) <= 1200 and not resumed else "**not shown by the committed "
           "runs**, which since added the SASRec / BERT4Rec peers, converged logits and "
           "recommendation metrics")
        + ": " + " + ".join(f"{w:.0f}" for w in walls) + " s"
        + (f" (Instacart's for the last {resumed[1] - resumed[0]} of {resumed[1]} jobs; the "
           "rest resumed from a journal)" if resumed else "")
        + f". {_instacart_fits(ic)} |",
        "| plots readable without the paper | dot plots per setting with the paper's numbers as "
        "crosses; attention maps and Q/K/V maps labelled with product names |",
    ]
    return "\n".join(lines)


PAGE = Path("docs") / "sequences.md"
BLOCKS = {"sequences": results_tables, "sequence-targets": targets_table}
