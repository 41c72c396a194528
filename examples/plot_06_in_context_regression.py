"""
In-context regression with uncertainty bands
============================================

Each sequence is a handful of noisy (x, y) points of its own random sine wave. A causal EFA
trained on many such functions predicts y at a new x from the points seen so far, with a
Gaussian predictive whose mean and standard deviation both depend on the context:
``efa.regression.predict_frame`` returns them for any query points. The band is drawn for one
held-out function given 4 and then 12 of its points: it is wide where the context says little
and tightens around the observed points.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

import efa
from efa.regression import functions_to_sequences, predict_frame, regression_efa

torch.set_num_threads(1)  # one thread: faster on a busy machine, and reproducible

# %%
# A long table of points from random sine waves
# ---------------------------------------------

rng = np.random.default_rng(0)
amp, freq, phase = rng.uniform(0.5, 2, 700), rng.uniform(0.6, 1.4, 700), rng.uniform(0, 6.3, 700)


def wave(fn, x):
    return amp[fn] * np.sin(freq[fn] * x + phase[fn])


rows = [(fn, x, wave(fn, x) + rng.normal(0, 0.1))
        for fn in range(700) for x in rng.uniform(0, 10, rng.integers(6, 25))]
df = pd.DataFrame(rows, columns=["function", "x", "y"])
data, _ = functions_to_sequences(df, "function", "x", "y")
train, val = data[torch.arange(600)], data[torch.arange(600, 700)]

# %%
# Fit a small causal transformer
# ------------------------------

torch.manual_seed(0)
model = regression_efa(train, layers=2, heads=2, channels=0)  # no channel field here
efa.fit(model, train, val, max_epochs=60, batch_size=16, progress=False, threads=1)
print("validation log-likelihood per point:", round(efa.evaluate(model, val)["y"], 3))

# %%
# Mean and ±2 sd for one held-out function, given more and more of its points
# ----------------------------------------------------------------------------

fn = 650
points = df[df["function"] == fn]
grid = pd.DataFrame({"function": fn, "x": np.linspace(0, 10, 200)})
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True, constrained_layout=True)
for ax, n in zip(axes, (4, 12), strict=True):
    context = points.iloc[:n]
    pred = predict_frame(model, context, grid, "function", "x", "y")
    ax.fill_between(pred["x"], pred["mean"] - 2 * pred["sd"], pred["mean"] + 2 * pred["sd"],
                    alpha=0.3, label="mean ± 2 sd")
    ax.plot(pred["x"], pred["mean"], label="predictive mean")
    ax.plot(grid["x"], wave(fn, grid["x"]), "k--", lw=1, label="true function")
    ax.plot(context["x"], context["y"], "o", color="C3", label="context points")
    ax.set(xlabel="x", title=f"function {fn} given {n} points")
    inside = (abs(wave(fn, pred["x"]) - pred["mean"]) < 2 * pred["sd"]).mean()
    print(f"{n} points: mean sd {pred['sd'].mean():.2f}, truth inside the band {inside:.0%}")
axes[0].set_ylabel("y")
axes[0].legend(fontsize=8)
plt.show()
