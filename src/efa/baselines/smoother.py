"""Nadaraya–Watson smoother of the causal in-context regression task: y_i predicted from the
points before it by kernel-weighted averaging,

    w_j = exp(−(x_i − x_j)² / 2h²) · (1 if k_j = k_i else ρ),   μ_i = Σ w_j y_j / Σ w_j,
    σ_i² = Σ w_j (y_j − μ_i)² / Σ w_j + τ²,

with (h, ρ, τ) picked on validation functions by the mean log-likelihood over a grid
(:func:`select_smoother`); with no weight in the context (the first point, or ρ = 0 and no
point of the channel yet) the prediction is the training mean and variance of y.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences

BANDWIDTHS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5)
CHANNEL_WEIGHTS = (0.0, 0.01, 0.1, 0.3, 1.0)
NUGGETS = (1e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3)


class NadarayaWatson(ConditionalModel):
    """The Nadaraya–Watson smoother of this module's docstring, each point predicted from the
    points before it.

    Parameters
    ----------
    fields : list of Field
        The model's fields: those of the regression EFA (``x``, the target ``y`` with a
        heteroscedastic Gaussian, ``channel``); the data are read by these names.
    bandwidth : float
        The RBF weight's bandwidth h.
    channel_weight : float
        ρ, the weight factor of a point of another channel.
    nugget : float
        τ², the variance added to the weighted variance.
    prior_mean : float
        The predictive mean where the context carries no weight.
    prior_var : float
        The predictive variance where the context carries no weight.
    """

    direction = "unidirectional"

    def __init__(self, fields: list, bandwidth: float, channel_weight: float, nugget: float,
                 prior_mean: float, prior_var: float):
        super().__init__()
        self.fields = fields
        self.bandwidth, self.channel_weight, self.nugget = bandwidth, channel_weight, nugget
        self.prior_mean, self.prior_var = prior_mean, prior_var

    def predict_mean_sd(self, data: Sequences) -> tuple[Tensor, Tensor]:
        """Predictive mean and standard deviation of every point of ``data`` given the points
        before it.

        Parameters
        ----------
        data : Sequences
            Sequences with the fields ``x`` (shape (B, I, 1)), ``channel`` and ``y``.

        Returns
        -------
        mean : torch.Tensor, shape (B, I)
            μ_i (float64), NaN at padding.
        sd : torch.Tensor, shape (B, I)
            σ_i (float64), NaN at padding.
        """
        x = data.fields["x"][..., 0].double()
        y = data.fields["y"].double()
        k = data.fields["channel"]
        valid = data.valid()
        seen = data.predicted("y", scored=False)  # an unobserved y is in no context
        y = torch.where(seen, y, 0.0)  # its placeholder may be NaN: NaN · 0 would be NaN
        n = x.shape[1]
        w = torch.exp(-0.5 * ((x[:, :, None] - x[:, None, :]) / self.bandwidth) ** 2)
        same = k[:, :, None] == k[:, None, :]
        w = w * torch.where(same, 1.0, self.channel_weight)
        before = torch.ones(n, n, dtype=torch.bool).tril(-1)
        w = w * (before & seen[:, None, :])
        total = w.sum(-1)
        empty = total < 1e-12
        safe = torch.where(empty, 1.0, total)
        mean = (w * y[:, None, :]).sum(-1) / safe
        var = (w * (y[:, None, :] - mean[..., None]) ** 2).sum(-1) / safe + self.nugget
        mean = torch.where(empty, self.prior_mean, mean)
        var = torch.where(empty, self.prior_var, var)
        nan = torch.tensor(float("nan"), dtype=torch.float64)
        return torch.where(valid, mean, nan), torch.where(valid, var.sqrt(), nan)

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """The Gaussian's natural parameters of every point given the points before it.

        Parameters
        ----------
        data : Sequences
            As for :meth:`predict_mean_sd`.

        Returns
        -------
        dict of str to torch.Tensor
            ``"y"`` → (μ/σ², −1/(2σ²)), shape (B, I, 2).
        """
        mean, sd = self.predict_mean_sd(data)
        return {"y": torch.stack([mean / sd**2, -0.5 / sd**2], dim=-1)}


def select_smoother(fields: list, train: Sequences, val: Sequences) -> tuple[NadarayaWatson,
                                                                             dict]:
    """The smoother whose (h, ρ, τ²) maximise the mean log-likelihood of the scored points of
    ``val``; the prior mean/variance come from ``train``.

    The grid is every combination of ``BANDWIDTHS``, ``CHANNEL_WEIGHTS`` and ``NUGGETS``.

    Parameters
    ----------
    fields : list of Field
        The model's fields, as :class:`NadarayaWatson` takes them.
    train : Sequences
        The training functions: the mean and variance of their ``y`` are the prior.
    val : Sequences
        The validation functions, scored at their predicted points.

    Returns
    -------
    model : NadarayaWatson
        The smoother of the best (h, ρ, τ²).
    grid : dict of str to float
        ``str((h, ρ, τ²))`` → the mean validation log-likelihood.
    """
    y = train.fields["y"][train.predicted("y", scored=False)].double()
    prior = float(y.mean()), float(y.var())
    scored = val.predicted("y")
    yv = val.fields["y"].double()[scored]
    grid = {}
    for h, rho, tau in itertools.product(BANDWIDTHS, CHANNEL_WEIGHTS, NUGGETS):
        model = NadarayaWatson(fields, h, rho, tau, *prior)
        mean, sd = model.predict_mean_sd(val)
        ll = torch.distributions.Normal(mean[scored], sd[scored]).log_prob(yv).mean()
        grid[(h, rho, tau)] = float(ll)
    best = max(grid, key=lambda k: grid[k])
    return NadarayaWatson(fields, *best, *prior), {str(k): v for k, v in grid.items()}
