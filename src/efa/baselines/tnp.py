"""TNP-D (Nguyen & Grover, 2022), the standard transformer model of in-context regression,
built from standard PyTorch modules following tung-nd/TNP-pytorch
``regression/models/tnpd.py`` and ``tnp.py`` (not packaged, and hard-coded to CUDA there):

- tokens: context points [x, y], target points [x, 0], embedded by an MLP of depth 4
  (``build_mlp(dim_x + dim_y, d_model, d_model, emb_depth)``: Linear, ReLU, …, Linear);
- ``nn.TransformerEncoder`` of 6 post-LN layers (d_model 64, 4 heads, feed-forward 128, ReLU,
  no dropout) in which every token attends to the context tokens only;
- predictor Linear(64, 128), ReLU, Linear(128, 2) on the target tokens → (μ, log σ), σ = exp
  (``bound_std=False``, the reference's GP setting);
- trained on its own objective: the mean log-likelihood of the targets given the context, with
  a random number of context points per batch (shared by the batch, as the reference's sampler).

Adaptations, the same as efa's models get: the channel is part of x (one-hot), and x and y are
standardised on the training data (the likelihood is reported in the data's units). On the
causal objective of the UNN note, y_i is predicted with the points before it as context: one
pass per position.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from efa.core.checks import refuse_generic_options, refuse_unobserved
from efa.core.conditional import ConditionalModel, evaluating
from efa.core.data import Sequences
from efa.regression import moments

if TYPE_CHECKING:  # for annotations only
    from efa.core.softmax import Sampling


def build_mlp(dim_in: int, dim_hid: int, dim_out: int, depth: int) -> nn.Sequential:
    """``depth`` linear layers ``dim_in → dim_hid → … → dim_out`` with ReLU between them.

    Parameters
    ----------
    dim_in : int
        Input width.
    dim_hid : int
        Width of every hidden layer.
    dim_out : int
        Output width.
    depth : int
        The number of linear layers (at least 2).

    Returns
    -------
    torch.nn.Sequential
        Linear, ReLU, …, Linear.
    """
    modules: list[nn.Module] = [nn.Linear(dim_in, dim_hid), nn.ReLU()]
    for _ in range(depth - 2):
        modules += [nn.Linear(dim_hid, dim_hid), nn.ReLU()]
    modules.append(nn.Linear(dim_hid, dim_out))
    return nn.Sequential(*modules)


class TNPD(ConditionalModel):
    """TNP-D, the transformer neural process of this module's docstring, scored causally (each
    point given the points before it).

    Parameters
    ----------
    train : Sequences
        The training functions, with the fields ``x`` (shape (N, I, 1)) and ``y``: x and y
        are standardised on them (:func:`efa.regression.moments`).
    fields : list of Field
        The model's fields: those of the regression EFA (``x``, the target ``y`` with a
        heteroscedastic Gaussian, ``channel``); the data are read by these names.
    channels : int, default 2
        The number of channels, one-hot appended to x (0: no ``channel`` field).
    d_model : int, default 64
        Width of the tokens.
    emb_depth : int, default 4
        Linear layers of the embedding MLP.
    dim_feedforward : int, default 128
        Width of each layer's feed-forward network and of the predictor's hidden layer.
    nhead : int, default 4
        Attention heads per layer.
    num_layers : int, default 6
        Transformer layers.
    min_context : int, default 1
        The fewest context points drawn in training.
    """

    own_objective = True  # see ConditionalModel.own_objective

    direction = "unidirectional"
    norm: Tensor  # a buffer, declared for the type checker

    def __init__(self, train: Sequences, fields: list, channels: int = 2, d_model: int = 64,
                 emb_depth: int = 4, dim_feedforward: int = 128, nhead: int = 4,
                 num_layers: int = 6, min_context: int = 1):
        super().__init__()
        self.fields, self.channels, self.min_context = fields, channels, min_context
        x_loc, x_scale, y_loc, y_scale = moments(train)
        self.register_buffer("norm", torch.tensor([x_loc, x_scale, y_loc, y_scale]))
        dim_x = 1 + channels
        self.embedder = build_mlp(dim_x + 1, d_model, d_model, emb_depth)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.predictor = nn.Sequential(nn.Linear(d_model, dim_feedforward), nn.ReLU(),
                                       nn.Linear(dim_feedforward, 2))

    def _x(self, data: Sequences, idx) -> Tensor:
        x = (data.fields["x"][idx].float() - self.norm[0]) / self.norm[1]
        if self.channels:
            onehot = nn.functional.one_hot(data.fields["channel"][idx], self.channels)
            x = torch.cat([x, onehot.float()], dim=-1)
        return x

    def sets(self, xc: Tensor, yc: Tensor, xt: Tensor) -> tuple[Tensor, Tensor]:
        """The predictive of target points given a context set; the context size C is shared.

        Parameters
        ----------
        xc : torch.Tensor, shape (B, C, dx)
            The context's inputs: standardised x, then the one-hot channel.
        yc : torch.Tensor, shape (B, C)
            The context's values, in the data's units.
        xt : torch.Tensor, shape (B, T, dx)
            The targets' inputs, as ``xc``.

        Returns
        -------
        mean : torch.Tensor, shape (B, T)
            The predictive means, in the data's units.
        sd : torch.Tensor, shape (B, T)
            The predictive standard deviations, in the data's units.

        Raises
        ------
        ValueError
            If the context is empty.
        """
        c, t = xc.shape[1], xt.shape[1]
        if c < 1:
            raise ValueError("TNP-D needs at least one context point")
        yc = ((yc.float() - self.norm[2]) / self.norm[3])[..., None]
        inp = torch.cat([torch.cat([xc, yc], -1),
                         torch.cat([xt, torch.zeros_like(xt[..., :1])], -1)], dim=1)
        mask = torch.full((c + t, c + t), float("-inf"))
        mask[:, :c] = 0.0  # every token attends to the context only
        out = self.predictor(self.encoder(self.embedder(inp), mask=mask)[:, c:])
        mean = self.norm[2] + self.norm[3] * out[..., 0]
        return mean, self.norm[3] * torch.exp(out[..., 1])

    def loss(self, data: Sequences, check: bool = False, weights: Tensor | None = None,
             counts: dict[str, int] | None = None,
             sampling: Sampling | None = None) -> Tensor:
        """The TNP objective on equal-length sequences: context = the first m points (m ~
        U{min_context, …, N − 1}, one m per batch), targets = the rest.

        Parameters
        ----------
        data : Sequences
            A batch of sequences, all of the same length N.
        check : bool, default False
            Unused (the signature every model's loss shares).
        weights : torch.Tensor, optional
            Refused: TNP-D's objective is its own.
        counts : dict of str to int, optional
            Refused, as ``weights``.
        sampling : Sampling, optional
            Refused, as ``weights``.

        Returns
        -------
        torch.Tensor
            A scalar: the mean negative log-likelihood of the targets.

        Raises
        ------
        ValueError
            If the sequences' lengths differ, a value is not observed, or ``weights``,
            ``counts`` or ``sampling`` is given.
        """
        refuse_generic_options(self, weights, counts, sampling)
        refuse_unobserved(data, "TNP-D")
        n = int(data.lengths.min())
        if int(data.lengths.max()) != n:
            raise ValueError("TNP-D trains on batches of equal-length sequences")
        m = int(torch.randint(self.min_context, n, (1,)))
        mean, sd = self.sets(self._x(data, (slice(None), slice(0, m))),
                             data.fields["y"][:, :m], self._x(data, (slice(None), slice(m, n))))
        y = data.fields["y"][:, m:n].float()
        return -torch.distributions.Normal(mean, sd).log_prob(y).mean()

    def predictive_at(self, data: Sequences, at: Tensor) -> tuple[Tensor, Tensor]:
        """The predictive of y_i given y_<i at the asked positions: one pass per distinct
        position i, over the sequences asking it.

        Parameters
        ----------
        data : Sequences
            The sequences.
        at : torch.Tensor, shape (B, I)
            Bool, where to predict (never the first position).

        Returns
        -------
        mean : torch.Tensor, shape (P,)
            float64, in the order of ``at.nonzero()``.
        sd : torch.Tensor, shape (P,)
            float64, in the same order.

        Raises
        ------
        ValueError
            If a first position is asked (its context is empty), or a value is not observed.
        """
        refuse_unobserved(data, "TNP-D")
        b_idx, i_idx = at.nonzero(as_tuple=True)
        mean = torch.full((len(b_idx),), float("nan"), dtype=torch.float64)
        sd = mean.clone()
        for i in i_idx.unique().tolist():
            rows = (i_idx == i).nonzero().flatten()
            if i == 0:
                raise ValueError("TNP-D cannot predict the first point (an empty context)")
            b = b_idx[rows]
            mu, s = self.sets(self._x(data, (b, slice(0, i))), data.fields["y"][b, :i],
                              self._x(data, (b, slice(i, i + 1))))
            mean[rows], sd[rows] = mu[:, 0].double(), s[:, 0].double()
        return mean, sd

    @torch.no_grad()
    def predict_mean_sd(self, data: Sequences) -> tuple[Tensor, Tensor]:
        """The predictive at every position after the first, in evaluation mode without
        gradients.

        Parameters
        ----------
        data : Sequences
            The sequences.

        Returns
        -------
        mean : torch.Tensor, shape (B, I)
            float64, NaN at the first position and at padding.
        sd : torch.Tensor, shape (B, I)
            float64, NaN at the first position and at padding.
        """
        at = data.valid().clone()
        at[:, 0] = False
        mean = torch.full(at.shape, float("nan"), dtype=torch.float64)
        sd = mean.clone()
        with evaluating(self):  # the caller's mode is restored
            mean[at], sd[at] = self.predictive_at(data, at)
        return mean, sd

    def natural_params_at(self, data: Sequences, at: dict[str, Tensor]) -> dict[str, Tensor]:
        """The Gaussian's natural parameters of y at the asked positions.

        Parameters
        ----------
        data : Sequences
            The sequences.
        at : dict of str to torch.Tensor
            ``"y"`` → where to predict, bool of shape (B, I) (never the first position).

        Returns
        -------
        dict of str to torch.Tensor
            ``"y"`` → (μ/σ², −1/(2σ²)), shape (P, 2), in the order of ``at["y"].nonzero()``.
        """
        mean, sd = self.predictive_at(data, at["y"])
        return {"y": torch.stack([mean / sd**2, -0.5 / sd**2], dim=-1)}
