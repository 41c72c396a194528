"""Spatial and spatiotemporal EFA (Sec 3.2 of the paper) and its peers.

One sequence is one time step: a set of sites, each a token [g(lat, lon); λ₁(value)], with no
positional embedding; the masked site's value is predicted as a Gaussian from all the other
sites (and, with ``lags``, from every site's value at the previous time steps, which are context
tokens marked by a ``lag`` category and never predicted).

- :func:`frame_to_sequences`: a long table (site, time, lat, lon, value) → :class:`Sequences`
  (missing values → ``observed=False``: hidden from the model and not predicted).
- :func:`spatial_efa`: the EFA network of the paper's temperature experiment, standardised on
  the training data; :func:`warm_start` starts a lagged model exactly at a same-day one.
- :func:`split_targets` / :func:`thin_targets`: cheaper exact training of multi-layer
  bidirectional models (masked copies) on small, diverse batches / a fixed validation subset.
- :func:`site_means` / :func:`anomalies`: per-site centring (squared errors are unchanged).
- :class:`KNNFM`: the paper's FM baseline, Prop 2 with the sum over the k nearest sites by
  Haversine distance.
- :class:`Climatology` (per-site mean) and :class:`GaussianConditional` (multivariate normal of
  the stacked site vector with a shrunk covariance; each site's conditional mean given all the
  others, i.e. simple kriging with the empirical covariance): the statistician's peers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from efa.data import Sequences
from efa.datasets.temperature import haversine_km
from efa.families import Gaussian
from efa.fields import Attribute, Category, Value
from efa.model import EFA, ConditionalModel, EFAConfig

__all__ = [
    "KNNFM",
    "Climatology",
    "GaussianConditional",
    "anomalies",
    "frame_to_sequences",
    "haversine",
    "knn_indices",
    "select_shrinkage",
    "sequence_matrix",
    "site_means",
    "spatial_efa",
    "split_targets",
    "thin_targets",
    "warm_start",
]

COORDS = "coords"
LAG = "lag"


# --------------------------------------------------------------------------- data


def frame_to_sequences(
    df: pd.DataFrame,
    *,
    site: str,
    time: str,
    lat: str,
    lon: str,
    value: str,
    lags: int = 0,
    step=None,
    target: str | None = None,
    name: str = "value",
    layout: str = "tokens",
    sites=None,
    return_index: bool = False,
):
    """A long table with one row per (site, time) → one :class:`Sequences` row per time.

    Sequence n holds the sites at time ``times[n]`` (in ``sites`` order: sorted unique site ids
    unless given). Fields: ``coords`` [N, I, 2] (lat, lon in degrees) and ``name`` [N, I] (the
    value). With ``lags=L`` the values at ``t − step``, …, ``t − L·step`` (``step`` defaults to
    one day for datetime times and 1 otherwise) are added as context, in one of two layouts:

    - ``layout="tokens"`` (the paper's): L more blocks of the same sites, I = S·(L+1) tokens, a
      ``lag`` category field (0 = today, l = l steps back); only lag-0 tokens are targets.
    - ``layout="fields"``: still S tokens, each carrying its own past values in extra value
      fields ``{name}_lag1``, …, ``{name}_lag{L}`` (context only, never predicted).

    Missing values -- NaN in ``value``, or no row for a (site, time) -- become
    ``observed[name] = False``: the model sees [MASK] there and does not predict them (the
    stored number is 0, never NaN). ``target`` names an optional bool column: only times where it
    is True get a sequence (other rows can still serve as lag context). A site needs one
    (lat, lon); a duplicated (site, time) is an error.

    Returns the Sequences, or ``(sequences, sites, times)`` with ``return_index=True``.
    """
    for col in (site, time, lat, lon, value, *([target] if target else [])):
        if col not in df.columns:
            raise KeyError(f"column {col!r} not in the table (has {list(df.columns)})")
    if lags < 0:
        raise ValueError(f"lags must be >= 0, got {lags}")
    if layout not in ("tokens", "fields"):
        raise ValueError(f"layout must be 'tokens' or 'fields', got {layout!r}")
    if df[[lat, lon]].isna().any().any():
        raise ValueError(f"columns {lat!r}/{lon!r} have missing coordinates")
    places = df.groupby(site)[[lat, lon]].agg(["min", "max"])
    moving = (places[(lat, "min")] != places[(lat, "max")]) | (
        places[(lon, "min")] != places[(lon, "max")]
    )
    if moving.any():
        raise ValueError(f"site {moving[moving].index[0]!r} has more than one (lat, lon)")
    if df.duplicated([site, time]).any():
        row = df[df.duplicated([site, time])].iloc[0]
        raise ValueError(f"site {row[site]!r} has more than one row at time {row[time]!r}")
    values = pd.to_numeric(df[value], errors="raise").astype(np.float64)
    if np.isinf(values).any():
        raise ValueError(f"column {value!r} has infinite values")

    sites = pd.Index(sorted(df[site].unique()) if sites is None else list(sites))
    unknown = set(df[site].unique()) - set(sites)
    if unknown:
        raise ValueError(f"sites not in `sites`: {sorted(unknown)[:5]}")
    coords = places.reindex(sites)
    if coords.isna().any().any():
        missing = list(coords.index[coords.isna().any(axis=1)])[:5]
        raise ValueError(f"no rows (hence no coordinates) for sites {missing}")
    latlon = np.stack([coords[(lat, "min")], coords[(lon, "min")]], axis=1)

    wide = pd.DataFrame({"s": df[site], "t": df[time], "v": values}).pivot(
        index="t", columns="s", values="v"
    )
    wide = wide.reindex(columns=sites)
    times = df.loc[df[target].astype(bool), time] if target else df[time]
    times = pd.Index(sorted(times.unique()))
    if step is None:
        step = pd.Timedelta(days=1) if pd.api.types.is_datetime64_any_dtype(times) else 1
    blocks = [wide.reindex(times - lag * step).to_numpy() for lag in range(lags + 1)]
    n, s = len(times), len(sites)
    if layout == "fields":
        names = [name] + [f"{name}_lag{lag}" for lag in range(1, lags + 1)]
        latlon_tokens, lag_ids = latlon, None
    else:
        blocks, names = [np.concatenate(blocks, axis=1)], [name]  # [N, S·(L+1)]
        latlon_tokens = np.tile(latlon, (lags + 1, 1))
        lag_ids = torch.arange(lags + 1).repeat_interleave(s) if lags else None
    width = latlon_tokens.shape[0]
    fields = {
        COORDS: torch.as_tensor(latlon_tokens, dtype=torch.float32).expand(n, -1, -1).contiguous()
    }
    observed = {}
    for field_name, y in zip(names, blocks, strict=True):
        seen = ~np.isnan(y)
        fields[field_name] = torch.as_tensor(np.where(seen, y, 0.0), dtype=torch.float32)
        observed[field_name] = torch.as_tensor(seen)
    targets = None
    if lag_ids is not None:
        fields[LAG] = lag_ids.expand(n, -1).contiguous()
        targets = (lag_ids == 0).expand(n, -1).contiguous()
    data = Sequences(fields, torch.full((n,), width), observed=observed, targets=targets)
    return (data, sites, times) if return_index else data


def sequence_matrix(data: Sequences, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The stacked vector of every time step, for the matrix-based peers: (values [N, P]
    float64 with NaN where missing, predicted [N, P] bool).

    P = I for the ``tokens`` layout (lag tokens are columns that are never predicted); for the
    ``fields`` layout the lag fields ``{name}_lag1``, … are appended as further columns.
    """
    if (data.lengths != data.max_len).any():
        raise ValueError("the matrix peers need sequences of equal length (one per time step)")
    prefix = f"{name}_lag"
    lag_names = sorted(
        (k for k in data.fields if k.startswith(prefix)), key=lambda k: int(k[len(prefix) :])
    )
    ys, preds = [], []
    for k in [name, *lag_names]:
        y = data.fields[k].double().numpy().copy()
        if k in data.observed:
            y[~data.observed[k].numpy()] = np.nan
        ys.append(y)
        preds.append(data.predicted(name).numpy() if k == name else np.zeros(y.shape, bool))
    return np.concatenate(ys, axis=1), np.concatenate(preds, axis=1)


def _target_slots(data: Sequences) -> Tensor:
    t = data.valid()
    return t & data.targets if data.targets is not None else t


def split_targets(data: Sequences, per_row: int, seed: int = 0) -> Sequences:
    """The same prediction terms, spread over more rows: each sequence's target positions are
    shuffled (seeded) and cut into rows of at most ``per_row`` targets; every row keeps the whole
    sequence as context. A bidirectional multi-layer EFA pays one masked copy per target either
    way, but small batches of such rows mix many time steps per gradient step while still
    sharing each row's token encoding among its targets."""
    slots = _target_slots(data)
    g = torch.Generator().manual_seed(seed)
    rows, masks = [], []
    for n in range(len(data)):
        idx = slots[n].nonzero().flatten()
        idx = idx[torch.randperm(len(idx), generator=g)]
        for start in range(0, len(idx), per_row):
            m = torch.zeros(data.max_len, dtype=torch.bool)
            m[idx[start : start + per_row]] = True
            rows.append(n)
            masks.append(m)
    order = torch.randperm(len(rows), generator=g)
    sub = data[torch.tensor(rows)[order]]
    return Sequences(sub.fields, sub.lengths, sub.observed, torch.stack(masks)[order])


def thin_targets(data: Sequences, per_row: int, seed: int = 0) -> Sequences:
    """Keep at most ``per_row`` random target positions per sequence (a cheaper, fixed subset,
    e.g. of the validation set for early stopping)."""
    slots = _target_slots(data)
    g = torch.Generator().manual_seed(seed)
    keep = torch.zeros_like(slots)
    for n in range(len(data)):
        idx = slots[n].nonzero().flatten()
        keep[n, idx[torch.randperm(len(idx), generator=g)[:per_row]]] = True
    return Sequences(data.fields, data.lengths, data.observed, keep)


def site_means(train: Sequences, name: str = "value") -> Tensor:
    """Per-site mean of the observed target values of ``train`` (sequences of one layout)."""
    m = train.predicted(name)
    y = torch.where(m, train.fields[name].double(), 0.0)
    sums, counts = y.sum(0), m.sum(0)
    s = int(_target_slots(train)[0].sum())  # lag-0 tokens come first in both layouts
    if (counts[:s] == 0).any():
        raise ValueError("every site needs at least one observed training value")
    return sums[:s] / counts[:s]


def anomalies(data: Sequences, means: Tensor, name: str = "value") -> Sequences:
    """Subtract each site's (training) mean from its value and from its lagged values.

    A shift per site does not change squared errors, so an EFA fitted to anomalies reports MSE
    in the data's units; the model then needs only departures from each site's climatology (at
    the price of not predicting sites that have no training data)."""
    fields = dict(data.fields)
    for k, y in data.fields.items():
        if k == name or k.startswith(f"{name}_lag"):
            reps = y.shape[1] // len(means)  # the tokens layout repeats the sites per lag
            shift = means.repeat(reps).to(torch.float64)
            seen = data.observed.get(k, torch.ones_like(y, dtype=torch.bool))
            fields[k] = torch.where(seen, y.double() - shift, 0.0).to(y.dtype)
    return Sequences(fields, data.lengths, data.observed, data.targets)


# --------------------------------------------------------------------------- EFA


def _moments(data: Sequences, name: str) -> tuple[list[float], list[float], float, float]:
    m = data.predicted(name)
    y = data.fields[name][m].double()
    c = data.fields[COORDS][data.valid()].double()
    return c.mean(0).tolist(), c.std(0).tolist(), float(y.mean()), float(y.std())


def spatial_efa(
    train: Sequences,
    num_layers: int = 2,
    name: str = "value",
    sigma: float = 1.0,
    dim: int = 32,
    **config,
) -> EFA:
    """The paper's spatial EFA (App. H.4), standardised on ``train``.

    Tokens: g(standardised lat, lon) = MLP(2→128→32), λ₁(standardised value) = MLP(1→128→32)
    with a learned [MASK] vector, and with lags a 32-d lag embedding; concatenated and mixed by
    MLP(→64→32). ``num_layers`` post-LN transformer blocks (2 heads × 16, FFN 64), no positions,
    bidirectional, no attention mask. λ₂ = MLP(32→128→16→1) gives the Gaussian mean in the
    value's units (σ fixed at ``sigma``: maximum likelihood = least squares). ``config``
    overrides any :class:`EFAConfig` entry.
    """
    c_loc, c_scale, y_loc, y_scale = _moments(train, name)
    fields = [
        Attribute(COORDS, size=2, dim=dim, hidden=128, loc=c_loc, scale=c_scale),
        Value(
            name,
            Gaussian(sigma),
            dim=dim,
            hidden=128,
            readout_hidden=(128, 16),
            loc=y_loc,
            scale=y_scale,
        ),
    ]
    for k in train.fields:
        if k.startswith(f"{name}_lag"):  # the "fields" layout: past values of the same site
            fields.append(
                Value(
                    k, Gaussian(sigma), target=False, dim=dim, hidden=128, loc=y_loc, scale=y_scale
                )
            )
    if LAG in train.fields:  # the "tokens" layout: which day a token is from
        fields.append(Category(LAG, int(train.fields[LAG].max()) + 1, target=False, dim=dim))
    cfg = dict(
        num_layers=num_layers,
        num_heads=2,
        head_dim=16,
        d_model=32,
        mix="mlp",
        mix_hidden=64,
        max_len=None,
        direction="bidirectional",
        block="post_ln",
        ffn_hidden=64,
    )
    cfg.update(config)
    return EFA(EFAConfig(fields, **cfg))


def warm_start(model: EFA, base: EFA) -> EFA:
    """Initialise ``model`` from ``base``, whose fields are a subset of ``model``'s (e.g. a
    same-day model for a model with lagged inputs), so that ``model`` starts out computing
    exactly what ``base`` computes: every shared parameter is copied, and the token-mixing
    layer's input columns of the fields ``base`` does not have are set to zero (their encoders
    keep their random initialisation and start receiving gradients at once). Returns ``model``.
    """
    if model.config.mix == "none" or base.config.mix != model.config.mix:
        raise ValueError("warm_start needs both models to mix tokens with the same 'linear'/'mlp'")
    dims = {f.name: f.dim for f in base.fields}
    for f in model.fields:
        if f.name in dims and dims[f.name] != f.dim:
            raise ValueError(f"field {f.name!r} has dim {f.dim} here and {dims[f.name]} in base")
    missing = set(dims) - {f.name for f in model.fields}
    if missing:
        raise ValueError(f"base has fields the model does not: {sorted(missing)}")
    first = "mix.0.weight" if model.config.mix == "mlp" else "mix.weight"
    state, base_state = model.state_dict(), base.state_dict()
    for k, v in base_state.items():
        if k == first:
            continue
        if k not in state or state[k].shape != v.shape:
            raise ValueError(f"parameter {k!r} does not match between the two models")
        state[k] = v.clone()
    offsets, start = {}, 0
    for f in model.fields:
        offsets[f.name], start = start, start + f.dim
    weight = torch.zeros_like(state[first])
    start = 0
    for f in base.fields:
        at = offsets[f.name]
        weight[:, at : at + f.dim] = base_state[first][:, start : start + f.dim]
        start += f.dim
    state[first] = weight
    model.load_state_dict(state)
    return model


# --------------------------------------------------------------------------- FM baseline


def haversine(lat1: Tensor, lon1: Tensor, lat2: Tensor, lon2: Tensor) -> Tensor:
    """Great-circle distance in km (degrees in, broadcasting): ``datasets.haversine_km`` on
    tensors (coordinates carry no gradient)."""
    return torch.from_numpy(
        haversine_km(*(torch.as_tensor(x).numpy() for x in (lat1, lon1, lat2, lon2)))
    )


def knn_indices(coords: Tensor, available: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """For every token i, its k nearest *other available* tokens by Haversine distance.

    coords [B, I, 2] (lat, lon), available [B, I] bool. Returns (indices [B, I, k], usable
    [B, I, k] bool: False where fewer than k others are available). Ties go to the smaller index.
    """
    c = coords.double()
    d = haversine(c[..., :, None, 0], c[..., :, None, 1], c[..., None, :, 0], c[..., None, :, 1])
    n = d.shape[-1]
    blocked = torch.eye(n, dtype=torch.bool) | ~available[:, None, :]
    d = d.masked_fill(blocked, float("inf"))
    d, idx = torch.sort(d, dim=-1, stable=True)
    k = min(k, n - 1)
    return idx[..., :k], torch.isfinite(d[..., :k])


class KNNFM(ConditionalModel):
    """Prop 2 with a k-nearest-neighbour context (the paper's FM baseline, Sec 6.4):

        y_i | y_-i ~ N(loc + scale · h(τ_i)ᵀ Σ_{j ∈ kNN(i)} h(τ_j) z_j, σ²),
        z_j = (y_j − loc) / scale,  h = MLP(2 → 128 → 32) of the standardised (lat, lon),

    kNN(i) = the k nearest other sites *with an observed value* by Haversine distance. The
    paper's formula is on raw values with no intercept; standardising z (the same loc/scale as
    the EFA) is the same model plus an intercept ``loc`` and a unit change, and ``pooling="mean"``
    divides the sum by the number of neighbours. The reference code is lost; the experiment
    uses the defaults (standardised, sum) and says so.
    """

    def __init__(
        self,
        coords: Attribute,
        value: Value,
        k: int,
        dim: int = 32,
        hidden: int = 128,
        pooling: str = "sum",
    ):
        super().__init__()
        if pooling not in ("sum", "mean"):
            raise ValueError(f"pooling must be 'sum' or 'mean', got {pooling!r}")
        if value.family.name != "gaussian":
            raise ValueError("KNNFM models a Gaussian value")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.fields = [coords, value]
        self.k, self.pooling = k, pooling
        self.h = nn.Sequential(nn.Linear(coords.size, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.register_buffer("c_loc", torch.tensor(coords.loc, dtype=torch.float32))
        self.register_buffer("c_scale", torch.tensor(coords.scale, dtype=torch.float32))

    @classmethod
    def for_data(cls, train: Sequences, k: int, name: str = "value", **kw) -> KNNFM:
        c_loc, c_scale, y_loc, y_scale = _moments(train, name)
        return cls(
            Attribute(COORDS, size=2, loc=c_loc, scale=c_scale),
            Value(name, Gaussian(1.0), loc=y_loc, scale=y_scale),
            k,
            **kw,
        )

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        coords_f, value = self.fields
        tau = data.fields[coords_f.name]
        available = data.valid() & data.observed.get(value.name, data.valid())
        y = data.fields[value.name]
        z = torch.where(available, (y.to(self.c_loc.dtype) - value.loc) / value.scale, 0.0)
        if bool((tau == tau[:1]).all() and (available == available[:1]).all()):
            # Every sequence has the same sites, all available (one table of days): one kernel.
            tau, available = tau[:1], available[:1]
        idx, usable = knn_indices(tau, available, self.k)  # [B or 1, I, k]
        e = self.h((tau.to(self.c_loc.dtype) - self.c_loc) / self.c_scale)  # [B or 1, I, K]
        z = z.to(e.dtype)
        # The FM is linear in z: pred_i = Σ_j A_ij h(τ_i)ᵀh(τ_j) z_j with A the kNN adjacency,
        # which is one batched matrix product (no [B, I, k, K] gather).
        adj = torch.zeros(idx.shape[0], idx.shape[1], idx.shape[1], dtype=e.dtype)
        adj.scatter_(2, idx, usable.to(e.dtype))
        if self.pooling == "mean":
            adj = adj / usable.sum(-1, keepdim=True).clamp(min=1)
        weights = adj * (e @ e.transpose(1, 2))
        mean = value.loc + value.scale * (weights @ z[..., None])
        return {value.name: value.family.link(mean)}


# --------------------------------------------------------------------------- peers


class Climatology:
    """Predict each token (site × lag slot) by its training mean; one number per site."""

    def fit(self, train: Sequences, name: str) -> Climatology:
        y, _ = sequence_matrix(train, name)
        self.name, self.mean_ = name, np.nanmean(y, axis=0)
        return self

    def predict(self, data: Sequences) -> np.ndarray:
        return np.broadcast_to(self.mean_, (len(data), len(self.mean_))).copy()

    def mse(self, data: Sequences) -> float:
        return _mse(self.predict(data), data, self.name)


class GaussianConditional:
    """y (all tokens of a time step, stacked) ~ N(μ, Σ_α), Σ_α = (1 − α) S + α (tr S / p) I.

    μ and S are the mean and (maximum-likelihood) covariance of the training rows without
    missing values; α shrinks S towards a scaled identity (``sklearn.covariance
    .ShrunkCovariance``). A target token i is predicted by its conditional mean given the other
    *observed* tokens O of its row, with P = (Σ_α)_{OO}⁻¹:

        E[y_i | y_{O∖i}] = μ_i − (1 / P_ii) Σ_{j ∈ O, j ≠ i} P_ij (y_j − μ_j).
    """

    def __init__(self, alpha: float = 0.0):
        if not 0 <= alpha <= 1:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        self.alpha = alpha

    def fit(self, train: Sequences, name: str) -> GaussianConditional:
        y, _ = sequence_matrix(train, name)
        complete = y[np.isfinite(y).all(axis=1)]
        if len(complete) < 2:
            raise ValueError("need at least two time steps without missing values")
        self.name = name
        self.mean_ = complete.mean(0)
        self.cov_emp_ = np.cov(complete, rowvar=False, bias=True)
        return self

    @property
    def covariance_(self) -> np.ndarray:
        s, p = self.cov_emp_, len(self.cov_emp_)
        return (1 - self.alpha) * s + self.alpha * np.trace(s) / p * np.eye(p)

    def predict(self, data: Sequences) -> np.ndarray:
        """[N, P] conditional means of the stacked vector (NaN at missing entries)."""
        y, _ = sequence_matrix(data, self.name)
        sigma = self.covariance_
        out = np.full_like(y, np.nan)
        obs = np.isfinite(y)
        patterns, inverse = np.unique(obs, axis=0, return_inverse=True)
        for p, pattern in enumerate(patterns):
            rows = np.flatnonzero(inverse.reshape(-1) == p)
            o = np.flatnonzero(pattern)
            prec = np.linalg.inv(sigma[np.ix_(o, o)])
            d = y[np.ix_(rows, o)] - self.mean_[o]
            # μ_i − (1/P_ii) Σ_{j≠i} P_ij d_j = μ_i + d_i − (P d)_i / P_ii
            out[np.ix_(rows, o)] = self.mean_[o] + d - (d @ prec) / np.diag(prec)
        return out

    def mse(self, data: Sequences) -> float:
        return _mse(self.predict(data), data, self.name)


SHRINKAGE_GRID = (0.0, 0.001, 0.003, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5)


def select_shrinkage(
    train: Sequences, val: Sequences, name: str, grid=SHRINKAGE_GRID
) -> tuple[GaussianConditional, dict[float, float]]:
    """Fit on ``train`` and pick α on the validation MSE; returns (model, {α: val MSE})."""
    model = GaussianConditional().fit(train, name)
    curve = {}
    for a in grid:
        model.alpha = a
        curve[a] = model.mse(val)
    model.alpha = min(curve, key=curve.get)
    return model, curve


def _mse(pred: np.ndarray, data: Sequences, name: str) -> float:
    y, m = sequence_matrix(data, name)
    return float(((pred[m] - y[m]) ** 2).mean())
