"""
Spatial prediction on a map of sites
====================================

Sixty-four made-up weather stations on a grid, each day a smooth temperature field over
(latitude, longitude) with a warm front that moves from day to day, plus noise. Each day is a
set of sites; ``efa.spatial.spatial_efa`` predicts every site's temperature from all the other
sites of that day. On held-out days the predicted mean is mapped beside the truth.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

import efa
from efa.spatial import sites_to_sequences, spatial_efa

torch.set_num_threads(1)  # one thread: faster on a busy machine, and reproducible

# %%
# A long table of (station, date, lat, lon, temp)
# -----------------------------------------------

rng = np.random.default_rng(0)
lat, lon = np.meshgrid(np.linspace(30, 48, 8), np.linspace(-120, -76, 8), indexing="ij")
sites = pd.DataFrame({"station": range(64), "lat": lat.ravel(), "lon": lon.ravel()})
days = pd.DataFrame({"date": pd.date_range("2021-01-01", periods=150),
                     "front": rng.uniform(-120, -76, 150),  # where the front is that day
                     "amp": rng.normal(8, 2, 150)})
df = sites.merge(days, how="cross")
df["temp"] = (70 - 1.2 * (df.lat - 30) + 4 * np.cos(df.lon / 8)  # climate: smooth in space
              + df.amp * np.exp(-((df.lon - df.front) / 8) ** 2)  # today's front
              + rng.normal(0, 1, len(df)))

data, station, dates = sites_to_sequences(df, site="station", time="date", lat="lat",
                                          lon="lon", value="temp", return_index=True)
train, val, test = (data[torch.arange(a, b)] for a, b in ((0, 110), (110, 130), (130, 150)))

# %%
# Fit and predict every site of the held-out days from the others
# ---------------------------------------------------------------

torch.manual_seed(0)
model = spatial_efa(train, num_layers=1)  # standardised on the training days
efa.fit(model, train, val, max_epochs=300, progress=False, threads=1)  # fit's defaults
frame = efa.predictive_frame(model, test, "value", level=0.9)
climate = train.fields["value"].mean(0)  # each site's mean over the training days
print(f"test MSE: {efa.mean_squared_error(model, test, 'value'):.2f} °F²; each site's "
      f"training mean: {((test.fields['value'] - climate) ** 2).mean():.2f} °F²")
print(f"90 % interval coverage: {frame['covered'].mean():.3f}")

# %%
# Truth and prediction on one held-out day
# ----------------------------------------

day = frame[frame["sequence"] == 0]
xy = sites.set_index("station").loc[station[day["position"]]]
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), constrained_layout=True)
vmin, vmax = day[["observed", "mean"]].min().min(), day[["observed", "mean"]].max().max()
for ax, column, title in ((axes[0], "observed", "observed"),
                          (axes[1], "mean", "predicted from the other sites")):
    im = ax.scatter(xy["lon"], xy["lat"], c=day[column], s=120, cmap="coolwarm",
                    vmin=vmin, vmax=vmax)
    ax.set(xlabel="longitude", ylabel="latitude", title=f"{dates[130].date()}: {title}")
fig.colorbar(im, ax=axes[:2], label="temperature (°F)")
axes[2].plot(frame["observed"], frame["mean"], ".", alpha=0.3)
axes[2].axline((60, 60), slope=1, color="k", lw=0.8)
axes[2].set(xlabel="observed (°F)", ylabel="predicted mean (°F)",
            title="all 20 held-out days, every site")
plt.show()
