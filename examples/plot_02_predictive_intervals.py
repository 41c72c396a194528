"""
Predictive intervals along a sequence
=====================================

Counts are drawn with a rate that is particular to each sequence and drifts slowly, so the
best forecast of the next count is learned from the counts before it. A unidirectional EFA
with a Poisson value field gives a full predictive distribution at every position;
``efa.predictive_frame`` tabulates its mean and exact central 90 % interval, drawn here
against the observed counts of three held-out sequences.
"""

import matplotlib.pyplot as plt
import numpy as np
import torch

import efa
from efa.core.families import Poisson

torch.set_num_threads(1)  # one thread: faster on a busy machine, and reproducible

# %%
# Counts with a per-sequence, slowly drifting rate
# ------------------------------------------------
# log rate = a sequence's level + a small random walk: early positions know little about the
# level, later ones can estimate it from the counts seen so far.

rng = np.random.default_rng(0)
n, length = 1500, 24
level = rng.normal(1.2, 0.7, (n, 1))
log_rate = level + np.cumsum(rng.normal(0, 0.08, (n, length)), axis=1)
counts = rng.poisson(np.exp(log_rate))
data = efa.Sequences({"count": torch.as_tensor(counts)}, torch.full((n,), length))
train, val = data[torch.arange(1200)], data[torch.arange(1200, n)]

# %%
# Fit and tabulate the predictive distributions
# ---------------------------------------------

torch.manual_seed(0)
model = efa.EFA(efa.EFAConfig([efa.Value("count", Poisson(), dim=16)], max_len=length,
                              num_layers=1, num_heads=2, direction="unidirectional"))
efa.fit(model, train, val, max_epochs=30, progress=False, threads=1)
frame = efa.predictive_frame(model, val, "count", level=0.9)
print("validation log-likelihood per count:", round(efa.evaluate(model, val)["count"], 3))
print("share of counts inside their 90 % interval:", round(frame["covered"].mean(), 3))
print(frame[["sequence", "position", "observed", "mean", "lower", "upper", "covered"]].head())

# %%
# Observed counts, predictive mean and 90 % interval
# --------------------------------------------------
# The interval is of the count itself (whole numbers, holding at least 90 %), so it is drawn
# as steps; it narrows as the context grows.

fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True, constrained_layout=True)
for ax, seq in zip(axes, (0, 1, 2), strict=True):
    rows = frame[frame["sequence"] == seq]
    ax.fill_between(rows["position"], rows["lower"], rows["upper"], step="mid", alpha=0.3,
                    label="90 % predictive interval")
    ax.plot(rows["position"], rows["mean"], color="C0", label="predictive mean")
    ax.plot(rows["position"], np.exp(log_rate[1200 + seq]), "k--", lw=1, label="true rate")
    ax.plot(rows["position"], rows["observed"], "o", color="C3", ms=4, label="observed count")
    ax.set_ylabel("count")
    ax.set_title(f"held-out sequence {seq}: {rows['covered'].mean():.0%} of counts covered")
fig.legend(*axes[0].get_legend_handles_labels(), loc="outside upper center", ncol=4)
axes[-1].set_xlabel("position")
plt.show()
