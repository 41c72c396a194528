"""
Sampling sequences from a fitted model
======================================

A unidirectional EFA defines a joint distribution over whole sequences, so ``efa.sample``
draws from it exactly, position by position. A model fitted to a known teacher's sequences
should then produce sequences like the teacher's: the same frequency of each item at each
position, and of each pair of items at neighbouring positions. A bidirectional model only
has conditionals; ``efa.sample`` runs Gibbs sweeps over them (``sweeps=``), whose draws are
compared too. A second draw from the teacher shows how far apart two samples of this size
are by chance alone.
"""

import matplotlib.pyplot as plt
import numpy as np
import torch

import efa
from efa.generators import attention_teacher
from efa.generators import sample as teacher_sample

torch.set_num_threads(1)  # one thread: faster on a busy machine, and reproducible

K, L = 6, 5
teacher = attention_teacher([efa.Category("item", K)], max_len=L, seed=1)
train, val = teacher_sample(teacher, 8000, seed=1), teacher_sample(teacher, 2000, seed=2)

models = {}
for direction in ("unidirectional", "bidirectional"):
    torch.manual_seed(0)
    models[direction] = efa.EFA(efa.EFAConfig([efa.Category("item", K)], max_len=L,
                                              num_layers=2, direction=direction))
    efa.fit(models[direction], train, val, progress=False, threads=1)

# %%
# Draw 10,000 sequences from each and from the teacher
# ----------------------------------------------------

n = 10_000
draws = {"teacher": teacher_sample(teacher, n, seed=3).fields["item"],
         "teacher, another draw": teacher_sample(teacher, n, seed=6).fields["item"],
         "unidirectional (ancestral)": efa.sample(models["unidirectional"], n, seed=4)
         .fields["item"],
         "bidirectional (Gibbs, 10 sweeps)": efa.sample(models["bidirectional"], n, sweeps=10,
                                                        seed=5).fields["item"]}


def frequencies(x):
    """Share of each item at each position [L·K], and of each neighbouring pair [(L−1)·K²]."""
    single = torch.stack([torch.bincount(x[:, i], minlength=K) for i in range(L)])
    pairs = torch.stack([torch.bincount(x[:, i] * K + x[:, i + 1], minlength=K * K)
                         for i in range(L - 1)])
    return single.flatten().numpy() / n, pairs.flatten().numpy() / n


freq = {name: frequencies(x) for name, x in draws.items()}
colours = dict(zip(draws, ("C0", "grey", "C1", "C2"), strict=True))
for name in list(draws)[1:]:
    gap = np.abs(freq[name][1] - freq["teacher"][1]).max()
    print(f"{name:>33}: largest gap to the teacher's pair frequencies {gap:.4f}")

# %%
# Item frequencies per position, and pair frequencies, against the teacher's
# ---------------------------------------------------------------------------

fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4), constrained_layout=True)
width = 0.2
for j, (name, (single, _)) in enumerate(freq.items()):
    a.bar(np.arange(K) + (j - 1.5) * width, single.reshape(L, K).mean(0), width, label=name,
          color=colours[name])
a.set(xlabel="item", ylabel="share of all positions", title="marginal item frequencies")
a.legend(fontsize=8)
for name in list(draws)[1:]:
    b.plot(freq["teacher"][1], freq[name][1], ".", alpha=0.6, label=name, color=colours[name])
b.axline((0, 0), slope=1, color="k", lw=0.8)
b.set(xlabel="teacher's frequency", ylabel="frequency in the other draws",
      title=f"all {(L - 1) * K * K} (item at i, item at i+1) pairs")
b.legend(fontsize=8)
plt.show()
