"""UCI Car Evaluation under covariate shift (``efa reproduce car``): trained on cheap cars
(buying low/med), tested on expensive ones (buying high/vhigh, levels never seen in training),
with the protocol, models and bootstrap intervals of :mod:`experiments.moe.auto_mpg`."""

from __future__ import annotations

from dataclasses import replace

from experiments.moe import auto_mpg
from experiments.moe.auto_mpg import jobs, plots, tables, task

# Per-column vocabularies (the columns' levels differ); the test rows' buying levels were never
# seen, so they are [UNK] (= [MASK]) and training hides 20 % of the cells at random as well
# (cell_dropout), so that rows with a [MASK] in them are not out of distribution.
SPEC = replace(auto_mpg.SPEC, dataset="car", estimators=auto_mpg.estimators(
    cell_dropout=0.2, lr=1e-2, batch_size=128, patience=20, max_epochs=200))
QUICK = replace(auto_mpg.QUICK, dataset="car")

__all__ = ["QUICK", "SPEC", "jobs", "plots", "tables", "task"]
