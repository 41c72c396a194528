"""
A table classifier and its gates
================================

``efa.tabular.AttentionTableClassifier`` is a scikit-learn classifier that treats a row as a
set of cells and predicts the masked response by attention over the other cells. With
``backbone="linear"`` its prediction is exactly a mixture of experts, one expert per column,
and ``gates(X)`` gives the mixing weights: how much each column's expert counts for the
response of that row. On a made-up table where only ``colour`` and ``size`` matter (and
interact), the gates go to those two columns; ``brand`` and ``store`` are noise.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import OneHotEncoder

from efa.tabular import AttentionTableClassifier

torch.set_num_threads(1)  # one thread: faster on a busy machine, and reproducible

# %%
# A categorical table with an interaction
# ---------------------------------------

rng = np.random.default_rng(0)
n = 1500
X = pd.DataFrame({"colour": rng.choice(["red", "green", "blue", "black"], n),
                  "size": rng.choice(["S", "M", "L"], n),
                  "brand": rng.choice(["acme", "zeta", "nova"], n),
                  "store": rng.choice(["north", "south", "east", "west"], n)})
# buy large red or blue items, and small green ones; 10 % of labels flipped
big, small = X["size"] == "L", X["size"] == "S"
buy = (big & X.colour.isin(["red", "blue"])) | (small & (X.colour == "green"))
y = np.where(buy ^ (rng.random(n) < 0.1), "buy", "skip")
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0)

# %%
# Fit both classifiers
# --------------------

clf = AttentionTableClassifier(backbone="linear", num_heads=2, embedding_dim=16,
                               max_epochs=60, random_state=0).fit(X_train, y_train)
onehot = OneHotEncoder().fit(X_train)
lr = LogisticRegression(max_iter=1000).fit(onehot.transform(X_train), y_train)
print(f"attention (linear backbone) accuracy: {clf.score(X_test, y_test):.3f}")
print(f"logistic regression, one-hot:        {lr.score(onehot.transform(X_test), y_test):.3f}")
print("(the labels are 90 % right: no classifier can expect more than about 0.90)")

# %%
# Gates of the masked response
# ----------------------------
# gates(X) is [rows, heads, columns + 1]: the last slot is the response's own [MASK] token.
# Averaged over heads, then over the test rows of each (colour, size) combination.

gates = clf.gates(X_test).mean(1)
slots = list(X.columns) + ["[MASK]"]
cells = X_test.colour + " " + X_test["size"]
table = pd.DataFrame(gates, columns=slots, index=cells.to_numpy()).groupby(level=0).mean()
fig, ax = plt.subplots(figsize=(6.5, 5), constrained_layout=True)
im = ax.imshow(table.to_numpy(), cmap="magma", vmin=0, aspect="auto")
ax.set_xticks(range(len(slots)), slots)
ax.set_yticks(range(len(table)), table.index)
ax.set(xlabel="column whose expert is weighted", ylabel="rows with this colour and size",
       title="Gates of the response's mixture of experts\n(mean over heads and rows)")
fig.colorbar(im, ax=ax, label="gate weight")
plt.show()
