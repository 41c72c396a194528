"""
Attention kernels compared on the same data
===========================================

``EFAConfig(attention=...)`` swaps the attention kernel and nothing else: softmax, the
softmax-free linear form, kernel conditional-mean-embedding attention (``cme``) and the kernels
of the Fenchel-duality view (``generalized``, ``second_order``) and entropic optimal transport
(``ot``). Each is fitted for the same ten epochs to the same sequences from a known teacher
and scored on held-out sequences with ``efa.evaluate``; the teacher's own log-likelihood is
the Bayes limit that none can beat.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
import torch

import efa
from efa.generators import attention_teacher, sample
from efa.training.settings import StillImproving

torch.set_num_threads(1)  # one thread: faster on a busy machine, and reproducible

teacher = attention_teacher([efa.Category("item", 10)], max_len=8, strength=3.0, seed=0)
train, val, test = (sample(teacher, n, seed=s) for n, s in ((3000, 1), (500, 2), (2000, 3)))
bayes = efa.evaluate(teacher, test)["item"]
print(f"Bayes limit (the teacher): {bayes:.4f} nats per item")

# %%
# One fit per kernel, everything else the same
# --------------------------------------------

kernels = {"softmax": "softmax", "linear": "linear", "cme": {"kernel": "cme"},
           "generalized": {"kernel": "generalized"},
           "second_order": {"kernel": "second_order"}, "ot": {"kernel": "ot"}}
truth = efa.log_likelihoods(teacher, test)["item"].mean(1)  # per sequence
scores, excess, se = {}, [], []
for name, attention in kernels.items():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 10, dim=16)], max_len=8,
                                  num_layers=1, num_heads=2, direction="unidirectional",
                                  attention=attention))
    with warnings.catch_warnings():  # the same 10 epochs for all, some may still improve
        warnings.simplefilter("ignore", StillImproving)
        efa.fit(model, train, val, max_epochs=10, batch_size=64, progress=False, threads=1)
    scores[name] = efa.evaluate(model, test)["item"]
    # paired per-sequence gap to the teacher: the error bar of each bar's height
    gap = truth - efa.log_likelihoods(model, test)["item"].mean(1)
    excess.append(float(gap.mean()))
    se.append(float(gap.std() / len(gap) ** 0.5))
    print(f"{name:>12}: {scores[name]:.4f} nats per item")

# %%
# Held-out log-likelihood and the gap to the Bayes limit
# ------------------------------------------------------

fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8), constrained_layout=True)
x = np.arange(len(kernels))
a.plot(x, list(scores.values()), "o", ms=8)  # points: a bar from 0 would say nothing here
a.axhline(bayes, color="k", ls="--", lw=1, label="Bayes limit (teacher)")
a.set(xticks=x, xticklabels=list(kernels), ylabel="mean log-likelihood per item (nats)",
      title="held-out log-likelihood (higher is better)")
a.legend(loc="lower right")
b.bar(x, excess, yerr=2 * np.asarray(se), capsize=4, color="C1")
b.set(xticks=x, xticklabels=list(kernels), ylabel="teacher − model (nats per item)",
      title="excess over the Bayes limit (±2 paired s.e.)")
for ax in (a, b):
    ax.tick_params(axis="x", rotation=30)
plt.show()
