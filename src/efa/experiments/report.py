"""The results contract of ``efa reproduce``: ``results.json``, a ``results.md`` table and PNG
plots, one folder per experiment."""

from __future__ import annotations

import json
import math
import platform
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


@dataclass
class Row:
    setting: str
    model: str
    metric: str
    values: list[float]
    paper: float | None = None
    mean: float = field(init=False)
    std: float = field(init=False)

    def __post_init__(self):
        self.values = [float(v) for v in self.values]
        self.mean = float(np.mean(self.values))
        self.std = float(np.std(self.values, ddof=1)) if len(self.values) > 1 else 0.0


@dataclass
class Report:
    experiment: str
    command: str
    seeds: list[int]
    rows: list[Row] = field(default_factory=list)
    wall_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def add(self, setting, model, metric, values, paper=None) -> Row:
        row = Row(setting, model, metric, list(values), paper)
        self.rows.append(row)
        return row

    def find(self, setting: str, model: str, metric: str | None = None) -> Row:
        for r in self.rows:
            if r.setting == setting and r.model == model and (metric is None or r.metric == metric):
                return r
        raise KeyError((setting, model, metric))

    def to_json(self) -> dict:
        return {
            "experiment": self.experiment,
            "command": self.command,
            "seeds": self.seeds,
            "wall_seconds": round(self.wall_seconds, 2),
            "rows": [
                {k: v for k, v in asdict(r).items() if k != "values"} | {"values": r.values}
                for r in self.rows
            ],
            "notes": self.notes,
            "environment": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
            },
            **self.extra,
        }

    def markdown(self) -> str:
        lines = [
            f"# {self.experiment}",
            "",
            f"Regenerate with: `{self.command}`",
            "",
            f"Seeds: {self.seeds} (mean ± std over seeds); wall time {self.wall_seconds:.0f} s "
            f"with {torch.get_num_threads()} torch thread(s).",
            "",
            "| setting | model | metric | mean ± std | paper |",
            "|---|---|---|---|---|",
        ]
        for r in self.rows:
            paper = "—" if r.paper is None else f"{r.paper:.3f}"
            lines.append(
                f"| {r.setting} | {r.model} | {r.metric} | {fmt(r.mean, r.std)} | {paper} |"
            )
        if self.notes:
            lines += ["", *[f"- {n}" for n in self.notes]]
        return "\n".join(lines) + "\n"

    def write(self, out: Path) -> Path:
        out = Path(out) / self.experiment
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(self.to_json(), indent=2) + "\n")
        (out / "results.md").write_text(self.markdown())
        return out


def fmt(mean: float, std: float) -> str:
    digits = 3 if abs(mean) < 100 else 1
    if math.isnan(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def bar_plot(report: Report, metric: str, path: Path, title: str, ylabel: str) -> None:
    """Mean ± std per (setting, model) with the paper's numbers as black ticks."""
    rows = [r for r in report.rows if r.metric == metric]
    settings = list(dict.fromkeys(r.setting for r in rows))
    models = list(dict.fromkeys(r.model for r in rows))
    width = 0.8 / len(models)
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(settings) * len(models) / 2, 4))
    for m, model in enumerate(models):
        for s, setting in enumerate(settings):
            r = next((r for r in rows if r.setting == setting and r.model == model), None)
            if r is None:
                continue
            x = s + (m - (len(models) - 1) / 2) * width
            ax.bar(x, r.mean, width, yerr=r.std, color=f"C{m}", label=model if s == 0 else None)
            if r.paper is not None:
                ax.plot(
                    [x - width / 2, x + width / 2],
                    [r.paper] * 2,
                    "k-",
                    lw=2,
                    label="paper" if (m, s) == (0, 0) else None,
                )
    ax.set_xticks(range(len(settings)), settings)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def heatmap(matrix, labels, path: Path, title: str, vmax=None) -> None:
    n = len(labels)
    fig, ax = plt.subplots(figsize=(max(5.5, 1.5 + 0.45 * n), max(4.5, 1.2 + 0.4 * n)))
    im = ax.imshow(matrix, cmap="viridis", vmin=0, vmax=vmax)
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("attended position (key)")
    ax.set_ylabel("masked position (query)")
    ax.set_title("\n".join(textwrap.wrap(title, 60)), fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
