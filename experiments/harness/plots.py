"""Plots of the results contract, drawn from a :class:`Report`'s rows and figure data.

Figures are made with matplotlib's object API (``matplotlib.figure.Figure``), which renders to
PNG without pyplot: importing efa never changes a user's matplotlib backend.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from experiments.harness.report import Report


def figure(*args, **kwargs):
    """(fig, axes) like ``plt.subplots``, without pyplot's global state."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=kwargs.pop("figsize", None))
    axes = fig.subplots(*args, **kwargs)
    return fig, axes


def save(fig, path: Path, **kwargs) -> None:
    fig.savefig(path, dpi=kwargs.pop("dpi", 120), **kwargs)


def bar_plot(report: Report, metric: str, path: Path, title: str, ylabel: str,
             figsize=None, hatched=lambda model: False, xlabel: str | None = None) -> None:
    """Mean ± std per (setting, model) with the paper's numbers as black ticks; the bars of
    the models ``hatched`` picks (e.g. numbers quoted from the authors) hatched and paler."""
    rows = [r for r in report.rows if r.metric == metric]
    settings = list(dict.fromkeys(r.setting for r in rows))
    models = list(dict.fromkeys(r.model for r in rows))
    width = 0.8 / len(models)
    fig, ax = figure(figsize=figsize or (1.8 + 1.6 * len(settings) * len(models) / 2, 4))
    for m, model in enumerate(models):
        for s, setting in enumerate(settings):
            r = next((r for r in rows if r.setting == setting and r.model == model), None)
            if r is None:
                continue
            x = s + (m - (len(models) - 1) / 2) * width
            ax.bar(x, r.mean, width, yerr=r.std, color=f"C{m}", label=model if s == 0 else None,
                   capsize=1.5, hatch="//" if hatched(model) else None,
                   alpha=0.6 if hatched(model) else 1.0)
            if r.paper is not None:
                ax.plot([x - width / 2, x + width / 2], [r.paper] * 2, "k-", lw=2,
                        label="paper" if (m, s) == (0, 0) else None)
    many = len(settings) > 6
    ax.set_xticks(range(len(settings)), settings, rotation=30 if many else 0,
                  fontsize=8 if many else None)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7 if many else 8, ncol=4 if many else 1)
    fig.tight_layout()
    save(fig, path)


def heatmap(matrix, labels, path: Path, title: str, vmax=None) -> None:
    n = len(labels)
    fig, ax = figure(figsize=(max(5.5, 1.5 + 0.45 * n), max(4.5, 1.2 + 0.4 * n)))
    im = ax.imshow(np.asarray(matrix), cmap="viridis", vmin=0, vmax=vmax)
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("attended position (key)")
    ax.set_ylabel("masked position (query)")
    ax.set_title("\n".join(textwrap.wrap(title, 60)), fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    save(fig, path)


def dot_plot(report: Report, metric: str, path, title: str, xlabel: str) -> None:
    """One panel per setting: a dot (mean) with a bar (± std over seeds) per model, and the
    paper's number as a black cross. Dots rather than bars: the axis does not start at 0."""
    rows = [r for r in report.rows if r.metric == metric]
    settings = list(dict.fromkeys(r.setting for r in rows))
    models = list(dict.fromkeys(r.model for r in rows))
    cols = min(2, len(settings))
    nrows = -(-len(settings) // cols)
    fig, axes = figure(nrows, cols, figsize=(6.2 * cols, 0.42 * len(models) * nrows + 1.4),
                       squeeze=False)
    for ax, setting in zip(axes.flat, settings, strict=False):
        mine = [r for r in rows if r.setting == setting]  # own x range: v1 and v2 differ
        values = [v for r in mine for v in (r.mean - r.std, r.mean + r.std, r.paper)
                  if v is not None]
        lo, hi = min(values), max(values)
        for k, m in enumerate(models):
            r = next((r for r in rows if r.setting == setting and r.model == m), None)
            if r is None:
                ax.text(lo, k, "  (not run)", va="center", fontsize=7, color="0.5")
                continue
            color = "C3" if m.startswith("EFA") else ("C0" if m.startswith("FM") else "0.35")
            ax.errorbar(r.mean, k, xerr=r.std, fmt="o", color=color, ms=6, capsize=3)
            ax.annotate(f"{r.mean:.3f}", (r.mean, k), xytext=(0, 6), textcoords="offset points",
                        ha="center", fontsize=7)
            if r.paper is not None:
                ax.plot(r.paper, k, "kx", ms=8, mew=2)
        ax.set_yticks(range(len(models)), models, fontsize=8)
        ax.set_ylim(len(models) - 0.4, -0.7)
        pad = 0.08 * (hi - lo) + 1e-3
        ax.set_xlim(lo - pad, hi + pad)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(setting, fontsize=10)
        ax.set_xlabel(xlabel)
    for ax in list(axes.flat)[len(settings):]:
        ax.axis("off")
    fig.suptitle(f"{title}\n(dots: mean ± std over {len(report.seeds)} seeds; crosses: the "
                 "paper's single run)", fontsize=10)
    fig.tight_layout()
    save(fig, path)


def line_panels(panels: dict, path: Path, xlabel: str, ylabel: str, log_x: bool = False) -> None:
    """One panel per key of ``panels`` ({title: {line label: {x: y}}}), one line per label
    (validation curves of a settings grid)."""
    fig, axes = figure(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
    for ax, (title, lines) in zip(axes[0], panels.items(), strict=True):
        for k, (label, points) in enumerate(lines.items()):
            xs = sorted(points)
            ax.plot(xs, [points[x] for x in xs], "o-", color=f"C{k}", label=label)
        if log_x:
            ax.set_xscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel)
    axes[0][0].set_ylabel(ylabel)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    save(fig, path)
