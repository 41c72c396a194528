"""Spatial and spatiotemporal data (Sec 3.2 of the EFA paper): long site × time tables in,
``Sequences`` and the spatial models standardised on them out.

One sequence is one time step: a set of sites, each a token [g(lat, lon); λ₁(value)], with no
positional embedding; the masked site's value is predicted as a Gaussian from all the other
sites (and, with ``lags``, from every site's value at the previous time steps).

- :func:`sites_to_sequences`: a long table (site, time, lat, lon, value) → :class:`Sequences`
  (missing values → ``observed=False``: hidden from the model and not predicted).
- :func:`spatial_efa` / :func:`knn_fm`: the temperature experiment's EFA network and k-NN
  factorisation model, standardised on the training data.
- :func:`site_means` / :func:`anomalies`: per-site centring (squared errors are unchanged).

The peers live in :mod:`efa.baselines` (``KNNFM``, ``Climatology``, ``GaussianConditional``).
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from efa.baselines.fm import KNNFM
from efa.core.config import EFAConfig
from efa.core.data import Sequences
from efa.core.families import Family, Gaussian, HeteroscedasticGaussian, LearnedGaussian
from efa.core.fields import Attribute, Category, Value
from efa.core.model import EFA
from efa.deprecation import renamed
from efa.spatial_checks import check_step, check_table, lag_block, site_order

__all__ = [
    "anomalies",
    "sites_to_sequences",
    "knn_fm",
    "site_means",
    "spatial_efa",
]

COORDS = "coords"
LAG = "lag"
SENTINELS = (-99.0, -999.0, -9999.0)


# --------------------------------------------------------------------------- data


def sites_to_sequences(
    df: pd.DataFrame,
    *,
    site: str,
    time: str,
    lat: str,
    lon: str,
    value: str,
    lags: int = 0,
    step: pd.Timedelta | np.timedelta64 | float | None = None,
    target: str | None = None,
    name: str = "value",
    layout: str = "tokens",
    sites: Iterable[Hashable] | None = None,
    return_index: bool = False,
    missing: float | None = None,
) -> Sequences | tuple[Sequences, pd.Index, pd.Index]:
    """A long table with one row per (site, time) → one :class:`Sequences` row per time.

    Parameters
    ----------
    df : pandas.DataFrame
        One row per (site, time); a site needs one (lat, lon), and a duplicated (site, time)
        is an error.
    site, time, lat, lon, value : str
        The columns: site id, time, latitude and longitude (degrees), the value.
    lags : int
        With L > 0 the values at ``t − step``, …, ``t − L·step`` are added as context.
    step : Timedelta or float, optional
        The lag step, positive and finite (default: one day for datetime times, 1 otherwise).
        Float times match a lag to the time nearest ``t − l·step`` within a millionth of a
        step (floating-point subtraction misses exact matches); other times match exactly.
    target : str, optional
        A bool column: only times where it is True get a sequence (other rows can still serve
        as lag context).
    name : str
        The value field's name.
    layout : {"tokens", "fields"}
        How lags are laid out: "tokens" (the paper's) adds L more blocks of the same sites,
        I = S·(L+1) tokens, with a ``lag`` category field (0 = today, l = l steps back; only
        lag-0 tokens are targets); "fields" keeps S tokens, each carrying its own past values
        in extra value fields ``{name}_lag1`` … ``{name}_lag{L}`` (context only).
    sites : iterable, optional
        The sites and their order (default: the sorted unique site ids).
    return_index : bool
        Also return the sites and the times.
    missing : float, optional
        A sentinel that marks a missing value (e.g. -99 in the Kaggle temperature file);
        without it only NaN is missing, and a warning names a column holding a common sentinel
        (-99, -999, -9999).

    Returns
    -------
    Sequences or (Sequences, pandas.Index, pandas.Index)
        Sequence n holds the sites at time ``times[n]``: fields ``coords`` [N, I, 2] and
        ``name`` [N, I]. Missing values (NaN, the sentinel, or no row for a (site, time))
        become ``observed[name] = False``: the model sees [MASK] there and does not predict
        them (the stored number is 0, never NaN). With ``return_index=True`` also the sites
        and the times.

    Raises
    ------
    KeyError
        If a column is not in the table.
    ValueError
        Naming the column, site, row or lag at fault: a coordinate that is missing, not finite
        or off the globe (latitude in [-90, 90], longitude in [-180, 360]), a site with two
        places, a duplicated (site, time), a missing site or time, site ids that cannot be
        ordered, times that are neither numbers nor datetimes, a value that is not numeric or
        infinite, a ``step`` that is not positive and finite, or a lag that matches no time
        of the table (the step does not fit the times, or too many lags).
    """
    check_table(df, site=site, time=time, lat=lat, lon=lon, value=value, target=target,
                lags=lags, layout=layout)
    places = df.groupby(site)[[lat, lon]].agg(["min", "max"])
    moving = (places[(lat, "min")] != places[(lat, "max")]) | (
        places[(lon, "min")] != places[(lon, "max")]
    )
    if moving.any():
        raise ValueError(f"site {moving[moving].index[0]!r} has more than one (lat, lon)")
    if df.duplicated([site, time]).any():
        row = df[df.duplicated([site, time])].iloc[0]
        raise ValueError(f"site {row[site]!r} has more than one row at time {row[time]!r}")
    try:
        values = pd.to_numeric(df[value], errors="raise").astype(np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"column {value!r} is not numeric: {err}") from None
    if missing is not None:
        values = values.mask(values == missing)
    else:
        for sentinel in SENTINELS:
            hits = int((values == sentinel).sum())
            if hits:
                warnings.warn(
                    f"column {value!r} has {hits} values equal to {sentinel:g}, a common marker "
                    f"of a missing value; pass missing={sentinel:g} if that is what they are",
                    stacklevel=2,
                )
    if np.isinf(values).any():
        raise ValueError(f"column {value!r} has infinite values")

    order = site_order(df[site], sites)
    coords = places.reindex(order)
    if coords.isna().any().any():
        absent = list(coords.index[coords.isna().any(axis=1)])[:5]
        raise ValueError(f"no rows (hence no coordinates) for sites {absent}")
    latlon = np.stack([coords[(lat, "min")], coords[(lon, "min")]], axis=1)

    wide = pd.DataFrame({"s": df[site], "t": df[time], "v": values}).pivot(
        index="t", columns="s", values="v"
    )
    wide = wide.reindex(columns=order)
    times = df.loc[df[target].astype(bool), time] if target else df[time]
    times = pd.Index(sorted(times.unique()))
    step = check_step(step, times, time, lags)
    blocks = [lag_block(wide, times, lag, step, time) for lag in range(lags + 1)]
    n, s = len(times), len(order)
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
    scored = None
    if lag_ids is not None:
        fields[LAG] = lag_ids.expand(n, -1).contiguous()
        scored = (lag_ids == 0).expand(n, -1).contiguous()
    data = Sequences(fields, torch.full((n,), width), observed=observed, scored=scored)
    return (data, order, times) if return_index else data


def site_means(train: Sequences, name: str = "value") -> Tensor:
    """Per-site mean of the observed target values of ``train`` (sequences of one layout).

    Parameters
    ----------
    train : Sequences
        The training sequences, from :func:`sites_to_sequences` (either layout).
    name : str, default "value"
        The value field.

    Returns
    -------
    torch.Tensor, shape (n_sites,)
        float64, each site's mean over its observed, predicted values (lag tokens are not
        counted).

    Raises
    ------
    ValueError
        If a site has no observed training value.
    """
    m = train.predicted(name)
    y = torch.where(m, train.fields[name].double(), 0.0)
    sums, counts = y.sum(0), m.sum(0)
    s = int(train.scored_positions()[0].sum())  # lag-0 tokens come first in both layouts
    if (counts[:s] == 0).any():
        raise ValueError("every site needs at least one observed training value")
    return sums[:s] / counts[:s]


def anomalies(data: Sequences, means: Tensor, name: str = "value") -> Sequences:
    """Subtract each site's (training) mean from its value and from its lagged values.

    A shift per site does not change squared errors, so an EFA fitted to anomalies reports MSE
    in the data's units; the model then needs only departures from each site's climatology (at
    the price of not predicting sites that have no training data).

    Parameters
    ----------
    data : Sequences
        Sequences from :func:`sites_to_sequences` (either layout, the same sites).
    means : torch.Tensor, shape (n_sites,)
        One mean per site, e.g. :func:`site_means` of the training data.
    name : str, default "value"
        The value field; its lag fields ``{name}_lag1``, … are shifted too.

    Returns
    -------
    Sequences
        The same sequences with each observed value minus its site's mean (unobserved
        values stay 0).

    Raises
    ------
    KeyError
        If ``data`` has no field ``name``.
    ValueError
        If ``means`` is not one finite real number per site.
    """
    means = torch.as_tensor(means)
    if name not in data.fields:
        raise KeyError(f"no field {name!r}: the sequences have {list(data.fields)}")
    width = data.fields[name].shape[1]
    # The tokens layout with lags repeats the S sites once per lag (LAG says which block).
    sites = int((data.fields[LAG][0] == 0).sum()) if LAG in data.fields else width
    if means.dim() != 1 or len(means) != sites:
        raise ValueError(f"means must hold one value per site: the data have {sites} sites, "
                         f"means has shape {tuple(means.shape)}")
    if means.dtype == torch.bool or means.is_complex() or not torch.isfinite(means).all():
        raise ValueError("means must be finite real numbers (site_means(train) gives them)")
    means = means.double()
    fields = dict(data.fields)
    for k, y in data.fields.items():
        if k == name or k.startswith(f"{name}_lag"):
            reps = y.shape[1] // len(means)  # the tokens layout repeats the sites per lag
            shift = means.repeat(reps).to(torch.float64)
            seen = data.observed.get(k, torch.ones_like(y, dtype=torch.bool))
            fields[k] = torch.where(seen, y.double() - shift, 0.0).to(y.dtype)
    return Sequences(fields, data.lengths, data.observed, data.scored)


# --------------------------------------------------------------------------- EFA


# --------------------------------------------------------------------------- models


def _moments(data: Sequences, name: str) -> tuple[list[float], list[float], float, float]:
    """Means and standard deviations of the coordinates and values of ``data``. A constant
    (one latitude for every site, a single site, constant values) has no scale: it is centred
    and left unscaled (scale 1), with a warning, rather than divided by zero."""
    m = data.predicted(name)
    if not m.any():
        raise ValueError(f"the training data have no observed {name!r} value to standardise on")
    y = data.fields[name][m].double()
    c = data.fields[COORDS][data.valid()].double()
    c_scale = [_scale(v, f"coordinate {k} ({'lat' if k == 0 else 'lon'})")
               for k, v in enumerate(c.std(0).nan_to_num(0.0).tolist())]
    y_scale = _scale(float(y.std()) if len(y) > 1 else 0.0, f"the values of {name!r}")
    return c.mean(0).tolist(), c_scale, float(y.mean()), y_scale


def _scale(std: float, what: str) -> float:
    if std > 0:
        return std
    warnings.warn(f"{what} is constant in the training data: it is centred but not scaled",
                  stacklevel=3)
    return 1.0


def spatial_efa(
    train: Sequences,
    num_layers: int = 2,
    name: str = "value",
    sigma: float = 1.0,
    dim: int = 32,
    noise: str = "learned",
    **config: Any,
) -> EFA:
    """The paper's spatial EFA (App. H.4), standardised on ``train``.

    Parameters
    ----------
    train : Sequences
        Training data from :func:`sites_to_sequences` (coordinates and values are
        standardised on it).
    num_layers : int
        Post-LN transformer blocks.
    name : str
        The value field.
    sigma : float
        σ of ``noise="fixed"``.
    dim : int
        Width of the coordinate and value embeddings.
    noise : {"learned", "heteroscedastic", "fixed"}
        How the Gaussian's σ is had (below).
    **config
        Any :class:`EFAConfig` entry, overriding the paper's.

    Returns
    -------
    EFA

    Notes
    -----
    Tokens: g(standardised lat, lon) = MLP(2→128→32), λ₁(standardised value) = MLP(1→128→32)
    with a learned [MASK] vector, and with lags a 32-d lag embedding; concatenated and mixed by
    MLP(→64→32). ``num_layers`` post-LN transformer blocks (2 heads × 16, FFN 64), no positions,
    bidirectional, no attention mask. λ₂ = MLP(32→128→16→k) gives the Gaussian in the value's
    units: ``noise="learned"`` (the default) one σ learned for all predictions (k = 1,
    initialised at the values' standard deviation), ``"heteroscedastic"`` a mean and a scale
    per prediction (k = 2), ``"fixed"`` σ = ``sigma`` (the paper's: maximum likelihood = least
    squares, so its likelihood and intervals mean nothing). One learned σ is the default: the
    heteroscedastic read-out cost validation MSE at one layer (docs/temperature.md), while one
    σ leaves what the mean is fitted to unchanged.
    """
    if noise not in ("heteroscedastic", "learned", "fixed"):
        raise ValueError(f"noise must be 'heteroscedastic', 'learned' or 'fixed', got {noise!r}")
    c_loc, c_scale, y_loc, y_scale = _moments(train, name)
    family: Family = (HeteroscedasticGaussian() if noise == "heteroscedastic" else
                      LearnedGaussian(y_scale) if noise == "learned" else Gaussian(sigma))
    fields = [
        Attribute(COORDS, size=2, dim=dim, hidden=128, loc=c_loc, scale=c_scale),
        Value(
            name,
            family,
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
    cfg: dict[str, Any] = dict(
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


def knn_fm(train: Sequences, k: int, name: str = "value", **kw: Any) -> KNNFM:
    """The temperature experiment's k-NN FM (``efa.baselines.KNNFM``), standardised on
    ``train`` like :func:`spatial_efa`.

    Parameters
    ----------
    train : Sequences
        Training data from :func:`sites_to_sequences` (coordinates and values are
        standardised on it).
    k : int
        The number of neighbours.
    name : str, default "value"
        The value field.
    **kw
        Further arguments of :class:`efa.baselines.KNNFM` (``dim``, ``hidden``,
        ``pooling``).

    Returns
    -------
    KNNFM
        The model, untrained.
    """
    c_loc, c_scale, y_loc, y_scale = _moments(train, name)
    return KNNFM(
        Attribute(COORDS, size=2, loc=c_loc, scale=c_scale),
        Value(name, Gaussian(1.0), loc=y_loc, scale=y_scale),
        k,
        **kw,
    )


# Renamed in efa 0.3 (one name per concept: a table of sites → Sequences).
frame_to_sequences = renamed(sites_to_sequences, "efa.spatial.frame_to_sequences",
                             "efa.spatial.sites_to_sequences")
