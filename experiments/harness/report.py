"""The results contract of ``efa reproduce``: one folder per experiment with ``results.json``
(everything, including the data behind every plot), ``results.md`` (generated from it) and PNG
plots (drawn from it). A :class:`Report` can be rebuilt from its JSON, so tables and plots can
be regenerated without refitting anything (``efa replot``)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np


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
        if not self.values:
            raise ValueError(f"row ({self.setting!r}, {self.model!r}, {self.metric!r}): a row "
                             "needs at least one value (one per seed): values is empty")
        self.mean = float(np.mean(self.values))
        self.std = float(np.std(self.values, ddof=1)) if len(self.values) > 1 else 0.0


@dataclass
class Report:
    """Rows of (setting, model, metric, per-seed values), free-form ``notes``, ``extra`` data
    (JSON), ``figures`` (the JSON data each plot is drawn from) and ``sections`` (markdown
    appended to results.md, e.g. a table of another shape)."""

    experiment: str
    command: str
    seeds: list[int]
    rows: list[Row] = field(default_factory=list)
    wall_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)
    sections: list[str] = field(default_factory=list)
    environment: dict = field(default_factory=dict)

    def add(self, setting, model, metric, values, paper=None) -> Row:
        row = Row(setting, model, metric, list(values), paper)
        self.rows.append(row)
        return row

    def to_json(self) -> dict:
        import torch

        from experiments.harness.provenance import environment

        env = self.environment or environment(torch.get_num_threads())
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
            "environment": env,
            "sections": self.sections,
            "figures": self.figures,
            **self.extra,
        }

    @classmethod
    def from_json(cls, doc: dict, source: str = "results.json") -> Report:
        """The report a results file holds; a file missing what a report needs is an error
        naming what is missing (``source``: where it came from, for that message)."""
        if not isinstance(doc, dict):
            raise ValueError(f"{source} must hold a JSON object, got a {type(doc).__name__}")
        missing = [k for k in ("experiment", "command", "seeds", "rows") if k not in doc]
        if missing:
            raise ValueError(f"{source} is incomplete: it has no {missing}")
        if not isinstance(doc["seeds"], list):
            raise ValueError(f"{source}: seeds must be a list of seeds, got {doc['seeds']!r}")
        if not isinstance(doc["rows"], list) or not doc["rows"]:
            raise ValueError(f"{source}: rows must be a non-empty list of rows, got "
                             f"{doc['rows']!r}")
        row_keys = ("setting", "model", "metric", "values", "paper")
        for k, r in enumerate(doc["rows"]):
            lacking = [key for key in row_keys if not isinstance(r, dict) or key not in r]
            if lacking:
                raise ValueError(f"{source} is incomplete: row {k} has no {lacking}")
            values = r["values"]
            if not isinstance(values, list) or not values or not all(
                    isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                raise ValueError(f"{source}: row {k} ({r['setting']}, {r['model']}) needs a "
                                 f"non-empty list of numbers as values, got {values!r}")
        return cls._from_json(doc)

    @classmethod
    def _from_json(cls, doc: dict) -> Report:
        known = {"experiment", "command", "seeds", "wall_seconds", "rows", "notes",
                 "environment", "sections", "figures"}
        report = cls(doc["experiment"], doc["command"], doc["seeds"],
                     wall_seconds=doc.get("wall_seconds", 0.0), notes=list(doc.get("notes", [])),
                     extra={k: v for k, v in doc.items() if k not in known},
                     figures=doc.get("figures", {}), sections=list(doc.get("sections", [])),
                     environment=doc.get("environment", {}))
        report.rows = [Row(r["setting"], r["model"], r["metric"], r["values"], r["paper"])
                       for r in doc["rows"]]
        return report

    @classmethod
    def read(cls, folder: Path) -> Report:
        path = Path(folder) / "results.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist")
        try:
            doc = json.loads(path.read_text())
        except ValueError as err:
            raise ValueError(f"{path} is not valid JSON: {err}") from None
        return cls.from_json(doc, str(path))

    def markdown(self) -> str:
        env = self.to_json()["environment"]
        threads = env.get("threads")
        lines = [
            f"# {self.experiment}",
            "",
            f"Regenerate with: `{self.command}`",
            "",
            f"Seeds: {self.seeds} (mean ± std over seeds); wall time {self.wall_seconds:.0f} s "
            f"with {threads} torch thread(s).",
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
        for section in self.sections:
            lines += ["", section.rstrip()]
        lines += ["", "## Environment", "", provenance(env)]
        return "\n".join(lines) + "\n"

    def write(self, folder: Path) -> Path:
        """Write results.json and results.md into ``folder`` (created)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.json").write_text(json.dumps(self.to_json(), indent=2) + "\n")
        (folder / "results.md").write_text(self.markdown())
        return folder


def provenance(env: dict) -> str:
    """One line of what made the numbers: versions, CPU, BLAS kernels, threads (files written
    before efa recorded more than python, torch and threads say only those)."""
    skip = {"blas", "cpu", "cpus", "threads", "workers", "device", "OPENBLAS_CORETYPE"}
    parts = [f"{k} {v}" for k, v in env.items() if k not in skip and v is not None]
    if env.get("cpu"):
        parts.append(f"CPU {env['cpu']} ({env.get('cpus')} cores)")
    parts += [f"{b['used by']}'s BLAS {b['library']} {b.get('version') or ''} kernel "
              f"{b['kernel']}".replace("  ", " ") for b in env.get("blas", [])]
    if env.get("OPENBLAS_CORETYPE"):
        parts.append(f"OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']}")
    parts.append(f"{env.get('threads')} torch thread(s) × {env.get('workers', 1)} worker(s) "
                 f"on {env.get('device', 'cpu')}")
    return "; ".join(parts) + "."


def fmt(mean: float, std: float) -> str:
    digits = 3 if abs(mean) < 100 else 1
    if math.isnan(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def published(results: Path, name: str, file: str = "results.json") -> dict:
    """``results/<name>/<file>`` as a dict, refused when a ``--quick`` run made it (a page
    generated from it would publish numbers of a code-path check)."""
    path = Path(results) / name / file
    doc = json.loads(path.read_text())
    if "--quick" in doc.get("command", ""):
        raise ValueError(f"{path} was made by `{doc['command']}`, a --quick run: not results to "
                         "publish; rerun the full command")
    return doc
