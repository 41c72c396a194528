"""docs/fenchel.md's tables, generated from the committed results of ``fenchel-toy`` and
``attention-kernels`` (and its speed benchmark) by ``efa summary``."""

from __future__ import annotations

from pathlib import Path

from experiments.harness.report import published

PAGE = Path("docs") / "fenchel.md"
SETTINGS = {"movielens: unidirectional": "MovieLens uni", "movielens: bidirectional":
            "MovieLens bi", "instacart: bidirectional": "Instacart bi",
            "temperature: same day ℓ=1": "temperature ℓ = 1"}
KERNELS = ("generalized", "generalized + context", "second_order", "fenchel", "ot")


def _small(v: float) -> str:
    return f"{v:.3f}" if v >= 0.001 else f"{v:.1g}"


def toy_table(results: Path) -> str:
    """The d = 2 problem: each approximation's error of ĥ, and the first-order deviation of λ,
    per α."""
    doc = published(results, "fenchel-toy")
    picture = doc["figures"]["picture"]
    cell = {(r["setting"], r["model"]): r["mean"] for r in doc["rows"]
            if r["setting"].startswith("d = 2 toy")}
    alphas = [p["alpha"] for p in picture]
    head = "| α | " + " | ".join(f"{a:g}" for a in alphas) + " |"

    def row(label: str, model: str) -> str:
        return f"| {label} | " + " | ".join(_small(cell[f"d = 2 toy, α = {a:g}", model])
                                          for a in alphas) + " |"

    return "\n".join([
        f"`{doc['command']}`:", "", head, "|---" * (len(alphas) + 1) + "|",
        row("‖ĥ₁₇ − ĥ‖ (d = 2)", "Eq. 17 (λ = αz)"),
        row("‖ĥ₁₄ − ĥ‖ (d = 2)", "Eq. 14 (second order)"),
        "| ‖λ* − αz‖/‖λ*‖ (d = 2) | " + " | ".join(f"{p['dev_first']:.3f}" for p in picture)
        + " |"])


def kernels_table(results: Path) -> str:
    """Δ = kernel − softmax in test log-likelihood per prediction (mean ± SE over seeds, bold
    where the 2-SE verdict is a difference) and, in brackets, seconds per epoch against
    softmax in the same run (* : OT's rerun)."""
    doc = published(results, "attention-kernels")
    comp = doc["comparisons"]
    lines = [f"`{doc['command']}`:", "", "| setting | " + " | ".join(KERNELS) + " |",
             "|---" * (len(KERNELS) + 1) + "|"]
    for setting, label in SETTINGS.items():
        digits = 3 if setting.startswith("temperature") else 4
        cells = []
        for kernel in KERNELS:
            c = comp[f"{setting} / {kernel}"]
            text = f"{c['mean']:+.{digits}f} ± {c['se']:.{digits}f}".replace("-", "−")
            if c["verdict"] != "no difference":
                text = f"**{text}**"
            star = "*" if kernel == "ot" else ""
            cells.append(f"{text} ({c['time_ratio']:.2f}×{star})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speed_table(results: Path) -> str:
    """Per training step relative to softmax (`benchmarks/attention_kernels_speed.py`)."""
    doc = published(results, "attention-kernels", "benchmark.json")
    settings = doc["settings"]
    models = [m for m in next(iter(settings.values())) if m != "softmax"]
    lines = [f"`{doc['command']}`:", "", "| setting | " + " | ".join(models) + " |",
             "|---" * (len(models) + 1) + "|"]
    for k, (setting, label) in enumerate(SETTINGS.items()):
        ms = settings[setting]["softmax"]["median_seconds"] * 1000
        softmax = f"(softmax {ms:.1f} ms)" if k == 0 else f"({ms:.1f} ms)"
        lines.append(f"| {label} {softmax} | "
                     + " | ".join(f"{settings[setting][m]['ratio']:.2f}" for m in models) + " |")
    return "\n".join(lines)


BLOCKS = {"fenchel-toy": toy_table, "attention-kernels": kernels_table,
          "attention-kernels-speed": speed_table}
