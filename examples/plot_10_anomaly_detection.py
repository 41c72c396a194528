"""
Anomaly detection with predictive surprisal
===========================================

A bidirectional EFA predicts each value of a series from all the other values of the same
series. An observation that the model finds improbable given its context is a candidate
anomaly: ``efa.predictive_frame`` gives its surprisal −log p(y | context) and standardised
residual. Here known offsets are injected at random positions of held-out series, and the
receiver operating characteristic of both scores is compared with a context-free score (the
distance of a value from its own series' mean, in that series' standard deviations).
"""

import matplotlib.pyplot as plt
import numpy as np
import torch
from sklearn.metrics import roc_auc_score, roc_curve

import efa
from efa.core.families import LearnedGaussian

torch.set_num_threads(1)  # one thread: faster on a busy machine, and reproducible

# %%
# Smooth series: a level per series plus an AR(1) wander
# ------------------------------------------------------

rng = np.random.default_rng(0)
n, length, phi = 2000, 20, 0.9
y = np.zeros((n, length))
y[:, 0] = rng.normal(0, 1.15, n)
for t in range(1, length):
    y[:, t] = phi * y[:, t - 1] + rng.normal(0, 0.5, n)
y += rng.normal(10, 3, (n, 1))


def as_sequences(values):
    return efa.Sequences({"y": torch.as_tensor(values, dtype=torch.float32)},
                         torch.full((len(values),), length))


train, val = as_sequences(y[:1400]), as_sequences(y[1400:1700])

torch.manual_seed(0)
model = efa.EFA(efa.EFAConfig([efa.Value("y", LearnedGaussian(), dim=16)], max_len=length,
                              num_layers=1, direction="bidirectional"))
efa.fit(model, train, val, max_epochs=100, batch_size=64, progress=False, threads=1)
print(f"learned predictive sd: {model.field('y').family.sigma.item():.3f}")

# %%
# Inject anomalies into held-out series and score every position
# --------------------------------------------------------------
# 2 % of the positions get an offset of ±1.5: three innovation standard deviations, but
# little more than one standard deviation of a series around its own mean.

test = y[1700:].copy()
anomaly = rng.random(test.shape) < 0.02
test[anomaly] += rng.choice([-1.5, 1.5], anomaly.sum())
frame = efa.predictive_frame(model, as_sequences(test), "y")
truth = anomaly[frame["sequence"], frame["position"]]
naive = np.abs((test - test.mean(1, keepdims=True)) / test.std(1, keepdims=True))
scores = {"surprisal (efa)": frame["surprisal"], "|residual| (efa)": frame["residual"].abs(),
          "|z| within the series (no model)": naive[frame["sequence"], frame["position"]]}

# %%
# ROC curves
# ----------
# With one learned σ for every prediction the surprisal is a monotone function of the absolute
# residual, so the two rank the values alike and their curves coincide (drawn dashed over
# solid); with a count family or a heteroscedastic Gaussian they differ.

fig, ax = plt.subplots(figsize=(5.5, 5), constrained_layout=True)
for (name, score), style in zip(scores.items(), ("-", "--", "-"), strict=True):
    fpr, tpr, _ = roc_curve(truth, score)
    auc = roc_auc_score(truth, score)
    print(f"{name}: AUC {auc:.3f}")
    ax.plot(fpr, tpr, style, lw=2 if style == "-" else 1.5, label=f"{name}, AUC {auc:.3f}")
ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--", label="chance")
ax.set(xlabel="false positive rate", ylabel="true positive rate",
       title=f"Detecting {truth.sum()} injected offsets among {len(truth)} values")
ax.legend(loc="lower right", fontsize=8)
plt.show()
