"""docs/in-context-regression.md's throughput table, generated from the committed
``results/in-context-regression/benchmark.json`` by ``efa summary``."""

from __future__ import annotations

from pathlib import Path

from experiments.harness.report import published

PAGE = Path("docs") / "in-context-regression.md"


def throughput_table(results: Path) -> str:
    """Points per second per model, and as a ratio to the exact GP (torch and scikit-learn)
    and to the GP fitted per function."""
    doc = published(results, "in-context-regression", "benchmark.json")
    pps = doc["points_per_second"]
    lines = ["| model | points/s | × exact GP (torch) | × exact GP (scikit-learn) | × fitted GP |",
             "|---|---|---|---|---|"]
    for model, rate in pps.items():
        lines.append(f"| {model} | {rate:,.0f} | {doc['ratio_to_exact_gp_torch'][model]:.2f} | "
                     f"{doc['ratio_to_exact_gp_sklearn'][model]:.2f} | "
                     f"{doc['ratio_to_fitted_gp'][model]:.1f} |")
    return "\n".join(lines)


BLOCKS = {"in-context-regression-speed": throughput_table}
