"""
Attention maps of a fitted model
================================

A small unidirectional EFA is fitted to item sequences drawn from a known attention teacher;
``model.attention_weights`` then shows, for one held-out sequence, how much each masked
position attends to every earlier position, one heatmap per head. Rows are the predicted
positions (queries), columns the context positions (keys); the causal mask leaves the upper
triangle empty.
"""

import matplotlib.pyplot as plt
import torch

import efa
from efa.generators import attention_teacher, bayes_nll, sample

torch.set_num_threads(1)  # one thread: faster on a busy machine, and reproducible

# %%
# Data from a teacher with known weights
# --------------------------------------
# The teacher is itself a unidirectional EFA with seeded weights, so its conditional
# negative log-likelihood on fresh data is the Bayes limit a student can approach.

teacher = attention_teacher([efa.Category("item", 12)], max_len=8, num_heads=2, strength=3.0,
                            seed=0)
train, val = sample(teacher, 3000, seed=1), sample(teacher, 500, seed=2)
print("Bayes NLL per item:", round(bayes_nll(teacher, val)["item"], 3))

# %%
# A student of the same shape
# ---------------------------
# One layer with two heads, so that each head's map is the whole story of a prediction.

torch.manual_seed(0)
model = efa.EFA(efa.EFAConfig([efa.Category("item", 12, dim=16)], max_len=8, num_layers=1,
                              num_heads=2, direction="unidirectional"))
efa.fit(model, train, val, max_epochs=40, progress=False, threads=1)
print("student NLL per item:", round(-efa.evaluate(model, val)["item"], 3))

# %%
# Attention weights of one sequence
# ---------------------------------
# ``attention_weights`` returns [layers, sequences, heads, I, I]: row i is what the query at
# the masked position i pays to each position it may see (itself, masked, included).

weights = model.attention_weights(val, "item")
seq = 0
items = val.fields["item"][seq].tolist()
fig, axes = plt.subplots(1, 2, figsize=(9, 4.2), constrained_layout=True)
for head, ax in enumerate(axes):
    w = weights[0, seq, head].clone()
    w[torch.ones(8, 8, dtype=torch.bool).triu(1)] = float("nan")  # masked out: drawn blank
    im = ax.imshow(w.numpy(), cmap="viridis", vmin=0, vmax=1)
    ax.set_title(f"head {head + 1}")
    ax.set_xlabel("context position (item)")
    ax.set_ylabel("predicted position")
    ax.set_xticks(range(8), [f"{i}\n({x})" for i, x in enumerate(items)])
    ax.set_yticks(range(8))
fig.colorbar(im, ax=axes, label="attention weight", shrink=0.8)
fig.suptitle("Attention of each masked position to its context (layer 1, one sequence)")
plt.show()
