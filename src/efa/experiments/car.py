"""UCI Car Evaluation under covariate shift (``efa reproduce car``): trained on cheap cars
(buying low/med), tested on expensive ones (buying high/vhigh, levels never seen in training),
with the protocol, models and bootstrap intervals of :mod:`efa.experiments.auto_mpg`."""

from __future__ import annotations

from dataclasses import replace

from efa.experiments import auto_mpg
from efa.experiments.auto_mpg import jobs, plots, tables, task

SPEC = replace(auto_mpg.SPEC, dataset="car")
QUICK = replace(auto_mpg.QUICK, dataset="car")

__all__ = ["QUICK", "SPEC", "jobs", "plots", "tables", "task"]
