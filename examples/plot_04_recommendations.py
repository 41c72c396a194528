"""
Next-item recommendations from an events table
==============================================

A long table of (user, day, item) events with text item labels becomes one sequence per user
with ``efa.Sequences.from_events``. A unidirectional EFA with a ``distinct`` item field (a user
does not buy the same album twice) learns which albums follow which; ``efa.recommend`` lists
the most probable next albums, seen ones left out, and ``efa.ranking_metrics`` scores the
same ranking on held-out users (HR@5, NDCG@5 of each user's last album against all albums).
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

import efa
from efa.core.events import split_by_sequence

torch.set_num_threads(1)  # one thread: faster on a busy machine, and reproducible

# %%
# Made-up listening histories
# ---------------------------
# Six genres of eight albums; each user sticks to one genre 80 % of the time.

rng = np.random.default_rng(0)
genres = ["jazz", "rock", "folk", "soul", "punk", "opera"]
albums = [f"{g} {k}" for g in genres for k in range(1, 9)]
rows = []
for user in range(1200):
    favourite = rng.integers(len(genres))
    n = rng.integers(4, 12)
    own = rng.random(n) < 0.8
    pool = np.where(own, favourite * 8 + rng.integers(0, 8, n), rng.integers(0, 48, n))
    for day, album in enumerate(dict.fromkeys(pool)):  # distinct, in order of first listen
        rows.append((f"u{user}", day, albums[album]))
events = pd.DataFrame(rows, columns=["user", "day", "album"])
ev = efa.Sequences.from_events(events, "user", "day", {"album": "album"}, max_len=12)
labels = ev.vocabularies["album"]  # code k is labels[k]
train, val, test = split_by_sequence(ev.data, (0.7, 0.15, 0.15), seed=0)
print(f"{len(events)} events, {len(ev.data)} users, {len(labels)} albums")

# %%
# Fit, recommend, score
# ---------------------

torch.manual_seed(0)
model = efa.EFA(efa.EFAConfig([efa.Category("album", len(labels), dim=24, distinct=True,
                                             labels=labels)],
                              max_len=12, num_layers=1, direction="unidirectional"))
efa.fit(model, train, val, max_epochs=40, progress=False, threads=1)
print("efa, held-out ranking:", efa.ranking_metrics(model, test, k=5))
# For scale: ranking the albums a user has not heard by their popularity in training (ties
# counted against the held-out album, as ranking_metrics counts them).
score = torch.bincount(train.fields["album"][train.valid()], minlength=len(labels)).double()
score = score.repeat(len(test), 1)
earlier = test.valid() & (torch.arange(test.max_len) < test.lengths[:, None] - 1)
rows, cols = earlier.nonzero(as_tuple=True)
score[rows, test.fields["album"][rows, cols]] = -torch.inf
last = test.fields["album"][torch.arange(len(test)), test.lengths - 1]
rank = (score >= score.gather(1, last[:, None])).sum(1) - 1
print(f"popularity, HR@5: {(rank < 5).double().mean():.3f}")
top = efa.recommend(model, test, k=5)  # the next album of every held-out user
print(top.head(5))

# %%
# The top five of three held-out users
# ------------------------------------

fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), constrained_layout=True)
colours = {g: f"C{i}" for i, g in enumerate(genres)}
for ax, seq in zip(axes, (0, 1, 2), strict=True):
    rec = top[top["sequence"] == seq].iloc[::-1]  # best on top
    ax.barh(rec["label"], rec["probability"],
            color=[colours[label.split()[0]] for label in rec["label"]])
    seen = [labels[i] for i in test.fields["album"][seq, : test.lengths[seq]].tolist()]
    ax.set_title("history: " + ", ".join(seen[-4:]), fontsize=9)
    ax.set_xlabel("p(next album | history)")
axes[0].set_ylabel("recommended album")
fig.suptitle("Top-5 next albums (bar colour: genre; last four albums of the history above)")
plt.show()
