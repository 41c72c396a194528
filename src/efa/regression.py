"""In-context regression with efa: points (x, y, channel) of one random function form a
sequence, and y is predicted from the points before it (the UNN note, ``docs/in-context-
regression.md``).

- :func:`note_efa`: the note's model exactly, as an efa configuration: x feeds only the
  queries and keys (Eqs. 10–11), y only the values (Eq. 12), a query does not see its own
  token (Eq. 14: row j is normalised over h < j), and the read-out is a linear map of [x, k,
  attended value] (a ``concat`` block), a leaky ReLU (0.01) and a linear map to (μ, σ)
  (Eqs. 16–18), all without biases; heteroscedastic Gaussian likelihood.
- :func:`regression_efa`: the model a user would pick instead: every field feeds the attention,
  several pre-LN transformer blocks.
- :func:`gp_attention`: one head of kernel-ridge (CME) attention with the data's additive kernel
  family, returning the GP posterior mean and variance: the Bayes predictive is in the class.
- :func:`~efa.function_tables.functions_to_sequences`: a user's long table of (function, x, y,
  channel) rows (in :mod:`efa.function_tables`, importable from here too).
- :func:`predict`: the predictive (mean, sd) at new points given a context, each target
  predicted from the context alone (not from the other targets).

σ is floored (``HeteroscedasticGaussian(min_scale)``, in standardised units): a network can
otherwise drive σ → 0 on points it fits well and the likelihood → ∞; the default floor 0.01
also keeps the float32 natural parameters (μ/σ², −1/2σ²) accurate. Predictions at the floor
are reported by the experiment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

import numpy as np
import torch
from torch import Tensor

from efa.core.config import EFAConfig
from efa.core.data import Sequences
from efa.core.families import HeteroscedasticGaussian
from efa.core.fields import Attribute, Category, Value
from efa.core.model import EFA
from efa.deprecation import renamed
from efa.function_tables import functions_to_sequences as functions_to_sequences

if TYPE_CHECKING:  # for annotations only
    import pandas as pd

    from efa.core.attention import Block
    from efa.core.conditional import ConditionalModel

    class _Predictive(Protocol):
        def predict_mean_sd(self, data: Sequences) -> tuple[Tensor, Tensor]: ...

MIN_SCALE = 0.01  # σ floor, standardised units (× the y scale in the data's units)


def moments(train: Sequences) -> tuple[float, float, float, float]:
    """The location and scale of x and y over the training points, to standardise them.

    Parameters
    ----------
    train : Sequences
        Training functions with fields ``x`` and ``y``
        (:func:`~efa.function_tables.functions_to_sequences`).

    Returns
    -------
    tuple of float
        (x loc, x scale, y loc, y scale): means and standard deviations over the real
        positions (y's over its observed values).
    """
    valid = train.valid()
    x = train.fields["x"][valid].double().flatten()
    y = train.fields["y"][train.predicted("y", scored=False)].double()  # no placeholders
    return float(x.mean()), float(x.std()), float(y.mean()), float(y.std())


def _channels(channels) -> tuple[int, tuple | None]:
    """(number of channels, their labels or None) from a count or a list of labels (the
    labels :func:`~efa.function_tables.functions_to_sequences` returns, which the model then
    keeps)."""
    if isinstance(channels, bool):
        raise ValueError(f"channels must be a count or a list of labels, got {channels!r}")
    if isinstance(channels, int | np.integer):
        return int(channels), None
    if isinstance(channels, str) or not hasattr(channels, "__iter__"):
        raise ValueError(f"channels must be a count or a list of labels, got {channels!r}")
    labels = tuple(v.item() if hasattr(v, "item") else v for v in channels)
    return len(labels), labels


def channel_labels(model: ConditionalModel) -> list | None:
    """The channel labels a model was built with.

    Parameters
    ----------
    model : ConditionalModel
        A model from :func:`note_efa`, :func:`regression_efa` or :func:`gp_attention`.

    Returns
    -------
    list or None
        The labels of its ``channel`` field, in code order; None when it knows only their
        number (or has no channel field).
    """
    for f in model.fields:
        labels = getattr(f, "labels", None)
        if f.name == "channel" and labels is not None:
            return list(labels)
    return None


def _fields(train: Sequences, dims: dict, feeds: dict, readout: dict, hidden: int,
            min_scale: float, channels, encoder: str = "mlp") -> list:
    """[x, y, channel] standardised on ``train``; ``encoder`` embeds x and y ("mlp" or, with
    dims 1, "identity"); ``channels``: a count or the labels (see :func:`_channels`)."""
    channels, labels = _channels(channels)
    x_loc, x_scale, y_loc, y_scale = moments(train)
    fields = [
        Attribute("x", size=1, dim=dims["x"], hidden=hidden, encoder=encoder, loc=[x_loc],
                  scale=[x_scale], feeds=feeds["x"]),
        Value("y", HeteroscedasticGaussian(min_scale), dim=dims["y"], hidden=hidden,
              encoder=encoder, loc=y_loc, scale=y_scale, feeds=feeds["y"], **readout),
    ]
    if channels:
        fields.append(Category("channel", channels, target=False, dim=dims["channel"],
                               feeds=feeds["channel"], labels=labels))
    return fields


def note_efa(train: Sequences, e: int = 64, ell: int = 64, hidden: int = 64,
               min_scale: float = MIN_SCALE, channels: int | list = 2) -> EFA:
    """The UNN note's model (Eqs. 7–18), standardised on ``train``.

    Choices for what the note leaves open: the embeddings of x and y (Eqs. 7–8) are efa's
    learned maps of the standardised number, 1 → ``hidden`` → ``e`` with a ReLU (a linear map
    cannot make attention local: q·k is then bilinear in (x_i, x_j)); k's is a table (Eq. 9);
    σ = y_scale·(softplus(z₂) + ``min_scale``) from the second output of A4 and μ = y_loc +
    y_scale·z₁; one head of width e, unscaled scores (Eq. 13), no biases anywhere in Eqs.
    10–18.

    Parameters
    ----------
    train : Sequences
        Training functions from :func:`~efa.function_tables.functions_to_sequences` (x and y
        are standardised on them).
    e : int, default 64
        The width of the embeddings of x, y and the channel, and of the head.
    ell : int, default 64
        The hidden width ℓ of the read-out (A4).
    hidden : int, default 64
        The hidden width of the embeddings of x and y.
    min_scale : float, default 0.01
        The floor of σ, in standardised units.
    channels : int or list, default 2
        Their number, or their labels (as :func:`~efa.function_tables.functions_to_sequences`
        returns them: kept with the model, so :func:`predict_frame` maps a table's channels
        the way training did); 0: no channel field.

    Returns
    -------
    EFA
        The untrained model.
    """
    fields = _fields(
        train, {"x": e, "y": e, "channel": e},
        {"x": ("q", "k", "skip"), "y": ("v",), "channel": ("skip",)},
        {"readout": "mlp", "readout_hidden": (ell,), "readout_activation": "leaky_relu",
         "readout_bias": False}, hidden, min_scale, channels)
    return EFA(EFAConfig(fields, num_layers=1, num_heads=1, head_dim=e, max_len=None,
                         direction="unidirectional", attention="softmax", scale="none",
                         block="concat", bias=False, out_proj=False, attend_self=False,
                         meta={"model": "unn-note"}))


def _need_fields(data: Sequences, what: str, names) -> None:
    absent = [n for n in names if n not in data.fields]
    if absent:
        raise KeyError(f"{what} has no field(s) {absent} (it has {list(data.fields)}); build it "
                       "with efa.regression.functions_to_sequences")


def regression_efa(train: Sequences, layers: int = 4, heads: int = 4, x_dim: int = 32,
                   y_dim: int = 16, channel_dim: int = 16, hidden: int = 64, ffn: int = 128,
                   readout_hidden: int = 64, min_scale: float = MIN_SCALE,
                   channels: int | list = 2) -> EFA:
    """The efa model a user would pick for in-context regression.

    Tokens [g(x); λ₁(y); channel] feed the whole attention; ``layers`` pre-LN transformer
    blocks, causal, no positions (the points of a function are a set in random order),
    standardised on ``train``; y is read out as a Gaussian with a learned mean and scale.

    Parameters
    ----------
    train : Sequences
        Training functions from
        :func:`~efa.function_tables.functions_to_sequences`.
    layers, heads : int
        Transformer blocks and heads.
    x_dim, y_dim, channel_dim, hidden, ffn, readout_hidden : int
        Widths: the x, y and channel embeddings, the encoders' hidden layer, the feed-forward
        layer and the read-out's hidden layer.
    min_scale : float
        The floor of the predicted scale.
    channels : int or list
        Their number, or their labels (kept with the model, as in :func:`note_efa`).

    Returns
    -------
    EFA
    """
    _need_fields(train, "train", ("x", "y"))
    every = ("q", "k", "v", "skip")
    fields = _fields(
        train, {"x": x_dim, "y": y_dim, "channel": channel_dim},
        {"x": every, "y": every, "channel": every},
        {"readout": "mlp", "readout_hidden": (readout_hidden,)}, hidden, min_scale, channels)
    return EFA(EFAConfig(fields, num_layers=layers, num_heads=heads, max_len=None,
                         direction="unidirectional", block="pre_ln", ffn_hidden=ffn,
                         meta={"model": "regression-efa"}))


def gp_attention(train: Sequences, channels: int | list = 2, channel_dim: int = 2,
                 readout_hidden: int = 64, min_scale: float = MIN_SCALE) -> EFA:
    """One head of kernel-ridge (CME) attention that can *be* the GP.

    Queries and keys read the standardised x (identity encoder) and the channel's embedding,
    values read the standardised y; the similarity is additive, exp(−(x − x')²/2γ) on the
    first feature plus the dot product of the channel features (RBF + per-channel offsets, the
    data's kernel family), with the ridge λ learned; the head returns the GP posterior mean
    *and* variance (``posterior_variance``), and an MLP read-out of [x, channel, mean,
    variance] gives (μ, σ). With W^Q = W^K, the true length-scale, offset variance and noise,
    the attention's two outputs are the Bayes predictive's mean and variance (up to the noise
    λ): ``tests/test_regression.py``. Causal, no self-attention, no positions; it starts from
    W^Q = W^K = I (the kernel on (x, channel) itself), with ``bandwidth`` and ``ridge`` 0.1.

    Parameters
    ----------
    train : Sequences
        Training functions from :func:`~efa.function_tables.functions_to_sequences` (x and y
        are standardised on them).
    channels : int or list, default 2
        Their number, or their labels (kept with the model, as in :func:`note_efa`); 0 (or
        an empty list): no channel field, the similarity is then the RBF on x alone (the
        head is 1 wide).
    channel_dim : int, default 2
        The width of the channel's embedding (the head is 1 + ``channel_dim`` wide).
    readout_hidden : int, default 64
        The hidden width of the read-out.
    min_scale : float, default 0.01
        The floor of σ, in standardised units.

    Returns
    -------
    EFA
        The untrained model.
    """
    # Without channels the queries and keys are x alone: no features for the linear part.
    head = 1 + channel_dim if _channels(channels)[0] else 1
    fields = _fields(
        train, {"x": 1, "y": 1, "channel": channel_dim},
        {"x": ("q", "k", "skip"), "y": ("v",), "channel": ("q", "k", "skip")},
        {"readout": "mlp", "readout_hidden": (readout_hidden,)}, 128, min_scale, channels,
        encoder="identity")
    kernel = {"similarity": "rbf+linear", "rbf_dims": 1} if head > 1 else {"similarity": "rbf"}
    attention = {"kernel": "cme", **kernel, "posterior_variance": True, "bandwidth": 0.1,
                 "ridge": 0.1}
    model = EFA(EFAConfig(fields, num_layers=1, num_heads=1, head_dim=head, max_len=None,
                          direction="unidirectional", attention=attention, scale="none",
                          block="concat", bias=False, out_proj=False, attend_self=False,
                          meta={"model": "gp-attention"}))
    with torch.no_grad():  # start from W^Q = W^K = I: the kernel on (x, channel) itself
        attn = cast("Block", model.blocks[0]).attn
        attn.q.weight.copy_(torch.eye(head))
        attn.k.weight.copy_(torch.eye(head))
    return model


def gaussian_mean_sd(eta: Tensor) -> tuple[Tensor, Tensor]:
    """The mean and standard deviation of a Gaussian from its natural parameters.

    Parameters
    ----------
    eta : torch.Tensor, shape (..., 2)
        (η₁, η₂) = (μ/σ², −1/2σ²), η₂ < 0.

    Returns
    -------
    mean, sd : torch.Tensor, shape (...)
        μ = η₁ / (−2η₂) and σ = (−2η₂)^(−1/2), float64.
    """
    eta = eta.double()
    return eta[..., 0] / (-2 * eta[..., 1]), torch.rsqrt(-2 * eta[..., 1])


def causal_predictive(model: ConditionalModel, data: Sequences) -> tuple[Tensor, Tensor]:
    """The predictive mean and sd of each y_i given the points before it.

    Parameters
    ----------
    model : ConditionalModel
        An efa model (put in eval mode, run without gradients) or any peer with a
        ``predict_mean_sd(data)`` method, which is then called instead.
    data : Sequences
        The functions.

    Returns
    -------
    mean, sd : torch.Tensor, shape (B, I)
        float64, at every real position (NaN at padding).
    """
    if hasattr(model, "predict_mean_sd"):
        return cast("_Predictive", model).predict_mean_sd(data)
    model.eval()
    with torch.no_grad():
        eta = model.natural_params(data)["y"]
    return gaussian_mean_sd(eta)


@torch.no_grad()
def predict(model: EFA, context: Sequences, targets: Sequences) -> tuple[Tensor, Tensor]:
    """The predictive mean and sd of y at new points of each function, given its context points.

    Every target is predicted as a token appended after the whole context, seeing the context
    and its own (masked) token, never the other targets: for a unidirectional model this is
    exactly its prediction of a point that follows the context. One pass for all targets.

    Parameters
    ----------
    model : EFA
        An efa model without positions (``max_len=None``), e.g. from :func:`regression_efa`.
    context : Sequences
        The observed points of each function (fields ``x``, ``y`` and, if the model has it,
        ``channel``).
    targets : Sequences
        The points to predict (fields ``x`` and, if the model has it, ``channel``; a ``y``
        field is ignored): sequence b belongs to sequence b of ``context``.

    Returns
    -------
    mean, sd : torch.Tensor, shape (B, T)
        float64, NaN at the padding of ``targets``.

    Raises
    ------
    ValueError
        If ``model`` is not such a model, the numbers of functions differ, or the sequences
        do not fit the model.
    KeyError
        If ``targets`` has no ``x`` field.
    """
    if not isinstance(model, EFA) or model.max_len is not None:
        raise ValueError("predict needs an efa.EFA model without positions (max_len=None)")
    if len(context) != len(targets):
        raise ValueError(
            f"context has {len(context)} functions, targets {len(targets)}; sequence b of each "
            "must be the same function"
        )
    model.check(context)
    _need_fields(targets, "targets", ("x",))
    filled = dict(targets.fields)
    filled["y"] = torch.zeros(targets.fields["x"].shape[:2])
    targets = Sequences(filled, targets.lengths)
    model.check(targets)
    model.eval()
    content = model.encode(context, model.hidden_for(context, None))
    query = model.encode(targets, model.hidden_for(targets, "y"))
    b, c, t = len(context), context.max_len, targets.max_len
    own = torch.eye(t, dtype=torch.bool).expand(b, t, t)
    keys = context.valid()[:, None, :].expand(b, t, c)
    if not model.config.attend_self:
        own = own & ~keys.any(-1, keepdim=True)  # never: a context has at least one point
    allowed_q = torch.cat([keys, own], dim=-1)[:, None]
    allowed_c = model.allowed(context)
    for layer, block in enumerate(model.blocks):
        query, _ = block(query, allowed_q, memory=torch.cat([content, query], dim=1))
        if layer + 1 < len(model.blocks):
            content, _ = block(content, allowed_c)
    mean, sd = gaussian_mean_sd(model.readouts["y"](query))
    pad = ~targets.valid()
    return mean.masked_fill(pad, float("nan")), sd.masked_fill(pad, float("nan"))


def predict_frame(model: EFA, context: pd.DataFrame, targets: pd.DataFrame, function: str,
                  x: str, y: str, channel: str | None = None,
                  channels: list | None = None) -> pd.DataFrame:
    """The predictive of y at each row of a table, given the rows of the same function in another.

    :func:`predict` on tables: both are converted by
    :func:`~efa.function_tables.functions_to_sequences`. A target function without context
    rows is an error: an empty context has no predictive here.

    Parameters
    ----------
    model : EFA
        An efa model without positions, as for :func:`predict`.
    context : pandas.DataFrame
        The observed points: a table like the training one, with y.
    targets : pandas.DataFrame
        Rows (function, x[, channel]) to predict.
    function, x, y : str
        The columns of the function id, the input and the output (``y`` is read from
        ``context`` only).
    channel : str, optional
        A column of channel labels, in both tables.
    channels : list, optional
        The channel labels in code order, needed when the model does not keep them
        (:func:`channel_labels`); if both are known they must agree.

    Returns
    -------
    pandas.DataFrame
        A copy of ``targets`` with columns ``mean`` and ``sd``.

    Raises
    ------
    ValueError
        If a table is empty, a target function has no context rows, or the channel labels
        are unknown or disagree.
    KeyError
        If a table lacks a column.
    """
    import pandas as pd

    for name, frame in (("context", context), ("targets", targets)):
        if not isinstance(frame, pd.DataFrame) or frame.empty:
            raise ValueError(f"predict_frame needs a non-empty pandas DataFrame of {name}")
    for name, frame in (("context", context), ("targets", targets)):
        absent = [c for c in (function, x, *([y] if name == "context" else []),
                              *([channel] if channel else [])) if c not in frame]
        if absent:
            raise KeyError(f"{name} lacks the columns {absent} (it has {list(frame)})")
    # from_frame orders a Categorical's groups by its categories (unused ones included), the
    # rows below by sorted labels: plain labels keep the two orders one.
    given = targets
    context, targets = (f.astype({function: object}) if isinstance(
        f[function].dtype, pd.CategoricalDtype) else f for f in (context, targets))
    missing = sorted(map(str, set(targets[function]) - set(context[function])))
    if missing:
        raise ValueError(
            f"function(s) {missing[:5]} have target rows but no context rows: the predictive "
            "needs at least one observed (x, y) point of the function"
        )
    if channel is not None:
        known = channel_labels(model)
        if known is None and channels is None:
            raise ValueError(
                "the model does not know its channel labels: pass channels= (the labels "
                "functions_to_sequences returned for the training table), or build the model with "
                "channels=those labels so that it keeps them")
        if known is not None and channels is not None and list(channels) != known:
            raise ValueError(f"channels={list(channels)} differ from the labels the model was "
                             f"built with, {known}")
        channels = known if known is not None else channels
    ctx, labels = functions_to_sequences(context, function, x, y, channel, channels)
    ids = sorted(context[function].unique())  # the order of from_frame's groups
    tids = sorted(targets[function].unique())
    tgt = targets.assign(_y=0.0)
    seqs, _ = functions_to_sequences(tgt, function, x, "_y", channel, labels or None)
    take = torch.as_tensor([ids.index(f) for f in tids])
    mean, sd = predict(model, ctx[take], seqs)
    seq = tgt[function].map({f: i for i, f in enumerate(tids)}).to_numpy()
    pos = tgt.groupby(function, sort=False).cumcount().to_numpy()
    out = given.copy()
    out["mean"], out["sd"] = mean.numpy()[seq, pos], sd.numpy()[seq, pos]
    return out


# Renamed in efa 0.3 (one name per concept: a table of functions → Sequences; model factories
# named *_efa like spatial_efa and regression_efa).
frame_to_sequences = renamed(functions_to_sequences, "efa.regression.frame_to_sequences",
                             "efa.regression.functions_to_sequences")
note_model = renamed(note_efa, "efa.regression.note_model", "efa.regression.note_efa")
