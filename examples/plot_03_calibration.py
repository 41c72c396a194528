"""
Calibration of value and category predictions
==============================================

A likelihood model should mean what it says: its 90 % intervals should hold 90 % of the
observations, and of the predictions it makes with 70 % confidence about 70 % should be right.
``efa.calibration`` measures both on held-out data: for a value field the coverage of central
intervals and the probability integral transform (PIT, uniform when calibrated), for a
category the reliability curve of the top-1 probability and its expected calibration error.
"""

import matplotlib.pyplot as plt
import numpy as np
import torch

import efa
from efa.core.families import Gaussian
from efa.generators import attention_teacher, sample, student_fields

torch.set_num_threads(1)  # one thread: faster on a busy machine, and reproducible

# %%
# A teacher with an item and a Gaussian measurement per position
# ---------------------------------------------------------------

fields = [efa.Category("item", 8), efa.Value("temp", Gaussian())]
teacher = attention_teacher(fields, max_len=8, strength=4.0, seed=2,
                            unbounded_feeds=("q", "k"))
train, val, test = (sample(teacher, n, seed=s) for n, s in ((3000, 1), (500, 2), (2000, 3)))

torch.manual_seed(0)
model = efa.EFA(efa.EFAConfig(student_fields(teacher), max_len=8, num_layers=1,
                              direction="unidirectional"))
efa.fit(model, train, val, max_epochs=40, progress=False, threads=1)

# %%
# Measure
# -------

temp = efa.calibration(model, test, "temp")
item = efa.calibration(model, test, "item")
print(temp.frame())
print(f"PIT uniformity p-value: {temp.pit_p_value:.3f}")
print(f"expected calibration error of the item: {item.ece:.3f}")

# %%
# Where intervals are off: the level calibrated on held-out data
# ---------------------------------------------------------------
# ``efa.conformal_level`` finds, on held-out data, the level whose central interval of the
# model's own predictive holds 90 % of the values (split conformal). A model that says
# what it means gets a level near 0.9 back; one whose intervals are too narrow, a higher one.

q = efa.conformal_level(model, val, "temp", level=0.9)
covered = efa.predictive_frame(model, test, "temp", level=q)["covered"].mean()
print(f"level asked of the predictive: {q:.3f}; test values inside: {covered:.3f}")

# %%
# Draw
# ----
# Coverage on the diagonal and a flat PIT histogram mean calibrated intervals; reliability
# points on the diagonal mean honest item probabilities (marker area: number of predictions).

fig, (a, b, c) = plt.subplots(1, 3, figsize=(12, 3.8), constrained_layout=True)
a.plot([0, 1], [0, 1], color="grey", lw=0.8, label="ideal")
a.plot(temp.levels, temp.coverage, "o-", label="efa")
a.set(xlim=(0.4, 1), ylim=(0.4, 1), xlabel="nominal level", ylabel="observed coverage",
      title="temp: central interval coverage")
a.legend()
bins = len(temp.pit)
b.bar((np.arange(bins) + 0.5) / bins, temp.pit, width=1 / bins, edgecolor="white")
b.axhline(temp.n / bins, color="k", ls="--", lw=1, label="uniform")
b.set(xlabel="PIT value", ylabel="count",
      title=f"temp: PIT histogram (p = {temp.pit_p_value:.2f})")
b.legend()
used = np.asarray(item.count) > 0
c.plot([0, 1], [0, 1], color="grey", lw=0.8)
c.scatter(np.asarray(item.confidence)[used], np.asarray(item.accuracy)[used],
          s=300 * np.asarray(item.count)[used] / max(item.count), alpha=0.7)
c.plot(np.asarray(item.confidence)[used], np.asarray(item.accuracy)[used], lw=1)
c.set(xlim=(0, 1), ylim=(0, 1), xlabel="top-1 probability (bin mean)", ylabel="accuracy",
      title=f"item: reliability (ECE = {item.ece:.3f})")
plt.show()
