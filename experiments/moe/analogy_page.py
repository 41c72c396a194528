"""docs/analogy.md's tables, generated from the committed results of ``analogy-toy`` and
``analogy-lee`` by ``efa summary``."""

from __future__ import annotations

from pathlib import Path

from experiments.harness.report import published

PAGE = Path("docs") / "analogy.md"
CBOW, ATTENTION = "CBOW (CategoricalFM)", "attention (1 layer, Eq. 1)"
SPEARMAN = "Spearman corr(wᵀc, p(w,c)/p(c))"
PEARSON = "Pearson corr(wᵀc, log p(w,c)/p(c) + log|V|)"
EQ2 = "Pearson corr(wᵀc, Eq. 2 of Prop 14)"
LEE_MODELS = {"efa CBOW": "efa CBOW", "efa attention": "efa attention",
              "efa attention (c̃)": "efa attention (c̃)", "gensim Word2Vec CBOW":
              "gensim Word2Vec", "random vectors": "random"}


def _head(doc: dict) -> str:
    n = len(doc["seeds"])
    return (f"`{doc['command']}` ({n} seed{'s' * (n != 1)}, {doc['wall_seconds']:,.0f} s "
            f"wall; mean ± std over seeds):")


def _fmt(r: dict | None, std: bool = True) -> str:
    if r is None:
        return "—"
    if not std or round(r["std"], 3) == 0:
        return f"{r['mean']:.3f}"
    return f"{r['mean']:.3f} ± {r['std']:.3f}"


def toy_table(results: Path) -> str:
    """Prop 9 on the toy language: CBOW's and one attention layer's correlations per width d,
    the paper's CBOW numbers in brackets."""
    doc = published(results, "analogy-toy")
    c = {(r["setting"], r["model"], r["metric"]): r for r in doc["rows"]}
    settings = list(dict.fromkeys(r["setting"] for r in doc["rows"]))
    lines = [_head(doc), "", "| d | CBOW Spearman (paper) | CBOW Pearson (paper) | attention "
             "Spearman | attention Pearson | attention Eq. 2 |", "|---|---|---|---|---|---|"]
    for s in settings:
        cbow = [f"{_fmt(c[s, CBOW, m])} ({c[s, CBOW, m]['paper']:.3f})"
                for m in (SPEARMAN, PEARSON)]
        attention = [_fmt(c[s, ATTENTION, m]) for m in (SPEARMAN, PEARSON, EQ2)]
        lines.append(f"| {s.removeprefix('d=')} | " + " | ".join(cbow + attention) + " |")
    return "\n".join(lines)


def lee_table(results: Path) -> str:
    """Analogies on the Lee corpus: accuracy, mean cosine and its chance level, Prop 13 and
    Prop 9, per model (context embeddings)."""
    doc = published(results, "analogy-lee")
    c = {(r["setting"], r["model"], r["metric"]): r for r in doc["rows"]}
    rows = [
        ("accuracy, overall (raw 3CosAdd)", "overall", "analogy accuracy (3CosAdd, raw vectors)",
         True),
        ("accuracy, semantic", "semantic", "analogy accuracy (3CosAdd, raw vectors)", True),
        ("mean cosine(b + c − a, d)", "overall", "mean cosine(x_b + x_c − x_a, x_d)", True),
        ("its chance level (d → a random word)", "overall",
         "mean cosine(x_b + x_c − x_a, x_random word) (chance)", False),
        ("Prop 13: Spearman corr(e_W, e_C)", "Prop 13",
         "Prop 13: Spearman corr(e_W, e_C) over the questions", True),
        ("Prop 9 on windows: Pearson", "Prop 9 (windows)", "Prop 9: " + PEARSON, True),
    ]
    lines = [_head(doc), "", "| context embeddings | " + " | ".join(LEE_MODELS.values()) + " |",
             "|---" * (len(LEE_MODELS) + 1) + "|"]
    for label, setting, metric, std in rows:
        cells = []
        for model in LEE_MODELS:
            r = c.get((setting, model, metric))
            if r is None and model == "efa attention (c̃)" and setting == "Prop 13":
                r = c.get((setting, "efa attention", "Prop 17: Spearman corr(e_W, e_C̃)"))
            cells.append(_fmt(r, std))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


BLOCKS = {"analogy-toy": toy_table, "analogy-lee": lee_table}
