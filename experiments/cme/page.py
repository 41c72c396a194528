"""docs/exchangeability.md's table of CME attention on the temperatures, generated from the
committed ``results/temperature-cme/results.json`` by ``efa summary``."""

from __future__ import annotations

from pathlib import Path

from experiments.harness.report import published

PAGE = Path("docs") / "exchangeability.md"
MSE = "test MSE (°F²)"
ROWS = {"EFA, CME attention": "EFA cme ℓ={}", "EFA, softmax attention": "EFA softmax ℓ={}",
        "Gaussian conditional (shrinkage on validation)": "Gaussian conditional",
        "GP on (lat, lon) (RBF, γ and λ on validation)":
        "GP on (lat, lon) (RBF, γ and λ on validation)"}


def mse_table(results: Path) -> str:
    """Test MSE, same day, by depth: CME and softmax attention (mean ± std over seeds, the
    lower of the two in bold) beside the two peers that have no depth."""
    doc = published(results, "temperature-cme")
    c = {r["model"]: r for r in doc["rows"] if r["setting"] == "same day" and r["metric"] == MSE}
    depths = sorted({int(m.rsplit("=", 1)[1]) for m in c if m.startswith("EFA cme")})
    n = len(doc["seeds"])
    lines = [f"`{doc['command']}` ({n} seeds, {doc['wall_seconds']:,.0f} s wall; test MSE in °F², "
             "same day, mean ± std over seeds):", "",
             "| model | " + " | ".join(f"ℓ = {d}" for d in depths) + " |",
             "|---" * (len(depths) + 1) + "|"]
    for label, name in ROWS.items():
        cells = []
        for d in depths:
            r = c[name.format(d)]
            if len(set(r["values"])) == 1:
                cells.append(f"{r['mean']:.3f}")
                continue
            text = f"{r['mean']:.3f} ± {r['std']:.3f}"
            other = c[(ROWS["EFA, softmax attention"] if "cme" in name
                       else ROWS["EFA, CME attention"]).format(d)]
            cells.append(f"**{text}**" if r["mean"] < other["mean"] else text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


BLOCKS = {"temperature-cme": mse_table}
