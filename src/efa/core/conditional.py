"""What EFA shares with its special cases and peers (efa.baselines): natural parameters at
asked positions, the (pseudo) log-likelihood they define, predicted means, and the training
loss every model takes the same arguments of (the context counts that support restrictions
and the bag term read are in :mod:`efa.core.context`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, ClassVar, cast

import torch
from torch import Tensor, nn

from efa.core import softmax
from efa.core.checks import check_sequences, refuse_padding, refuse_sampling
from efa.core.context import context_items
from efa.core.data import Sequences
from efa.core.families.base import Shifted
from efa.core.fields import Field
from efa.deprecation import moved_out

if TYPE_CHECKING:  # for annotations only
    from efa.core.fields import Category, Value

__getattr__ = moved_out(__name__)  # names moved out: efa.deprecation.MOVED_NAMES


@contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """Evaluation mode inside the block (dropout off: a prediction is the model's, not a
    draw), the model's own mode restored after it, also when the block raises.

    Parameters
    ----------
    model : torch.nn.Module
        The model.

    Yields
    ------
    None
        Inside the block the model is in eval mode.
    """
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


class ConditionalModel(nn.Module):
    """What EFA and its special cases and peers share: natural parameters of every target
    field at asked positions, and the (pseudo) log-likelihood they define.

    Subclasses set ``fields`` (and ``max_len``, ``direction``) and implement either
    ``natural_params`` (dense, [B, I, n] at every position) or ``natural_params_at`` (only at
    the asked positions, for models that pay per position).

    Parameters
    ----------
    *args, **kwargs
        Passed to :class:`torch.nn.Module`, which takes none: each subclass has its own
        constructor.
    """

    fields: list[Field]
    max_len: int | None = None
    # True for a model whose loss is an objective of its own (a cloze task, cell dropout, a
    # context split): sampled positions, data-parallel normalisation and the sampled softmax,
    # which reweight the generic pseudo-likelihood, do not apply to it.
    own_objective: ClassVar[bool] = False

    @property
    def direction(self) -> str:
        """"bidirectional" (each value given all others) or "unidirectional" (given those
        before it); set by the model, checked where it is set."""
        return self.__dict__.get("_direction", "bidirectional")

    @direction.setter
    def direction(self, value: str) -> None:
        # Scoring compares with both names: any other string would mix the two directions.
        if value not in ("bidirectional", "unidirectional"):
            raise ValueError(f"{type(self).__name__}: direction must be 'bidirectional' or "
                             f"'unidirectional', got {value!r}")
        self.__dict__["_direction"] = value

    @property
    def device(self) -> torch.device:
        """Where the model's parameters (or buffers) live; data are moved there."""
        for t in (*self.parameters(), *self.buffers()):
            return t.device
        return torch.device("cpu")

    @property
    def target_fields(self) -> list[Field]:
        return [f for f in self.fields if f.target]

    def field(self, name: str) -> Field:
        """The field called ``name``.

        Parameters
        ----------
        name : str
            A field's name.

        Returns
        -------
        Field
            The field.

        Raises
        ------
        KeyError
            If the model has no such field (the error names its fields).
        """
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"the model has no field {name!r} (fields: {[f.name for f in self.fields]})")

    def target(self, name: str | None) -> Field:
        """The target field ``name``.

        Parameters
        ----------
        name : str or None
            A target field's name (None: the first target).

        Returns
        -------
        Field
            The field.

        Raises
        ------
        KeyError
            If the model has no such field.
        ValueError
            If the field is not a target (the error names the targets).
        """
        if name is None:
            return self.target_fields[0]
        f = self.field(name)
        if not f.target:
            raise ValueError(f"field {name!r} is not predicted by this model (targets: "
                             f"{[t.name for t in self.target_fields]})")
        return f

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """η of every target field at every position.

        Parameters
        ----------
        data : Sequences
            The sequences, on the model's device.

        Returns
        -------
        dict of str to torch.Tensor
            Per target field, η of shape (B, I, num_natural) (NaN where the model did not
            compute it).
        """
        at = {f.name: data.valid() for f in self.target_fields}
        out = {}
        for name, eta in self.natural_params_at(data, at).items():
            full = eta.new_full((*at[name].shape, eta.shape[-1]), float("nan"))
            full[at[name]] = eta
            out[name] = full
        return out

    def natural_params_at(self, data: Sequences, at: dict[str, Tensor]) -> dict[str, Tensor]:
        """η of each field in ``at`` at its asked positions, support restrictions applied.

        Parameters
        ----------
        data : Sequences
            The sequences, on the model's device.
        at : dict of str to torch.Tensor
            Per target field, where to predict: bool of shape (B, I).

        Returns
        -------
        dict of str to torch.Tensor
            Per field of ``at``, η of shape (P, num_natural) at its P asked positions, in the
            order of ``at[name].nonzero()``.
        """
        dense = self.natural_params(data)
        return {name: self.restrict(name, data, m, dense[name][m]) for name, m in at.items()}

    @torch.no_grad()
    def predictive(self, data: Sequences, field: str,
                   at: Tensor | None = None) -> torch.distributions.Distribution:
        """p(y_i | context) of the target ``field`` at the asked positions, as a
        ``torch.distributions`` object: mean, variance, ``sample``, and ``log_prob`` equal to
        efa's log-likelihood (a category's or ordinal class's index 0..K−1), in evaluation
        mode and without gradients (as ``predict_mean``: a fitted model's predictions).
        One pass, unbatched: :func:`efa.predictive_frame` scores data sets in batches.

        Parameters
        ----------
        data : Sequences
            The sequences (moved to the model's device).
        field : str
            A target field.
        at : torch.Tensor, shape (B, I), optional
            Where to predict (bool; default: ``data.predicted(field)``).

        Returns
        -------
        torch.distributions.Distribution
            Batch shape (P,) over the asked positions in the order of ``at.nonzero()``
            (shifted by the family's ``shift`` where it has one).

        Raises
        ------
        ValueError
            If ``field`` is not a target, ``data`` fails ``check`` or ``at`` is not a bool
            (B, I) mask of real positions.
        """
        f = _family_field(self.target(field))
        self.check(data)
        data, at = self._here(data, at)
        refuse_padding(data, at)
        at = data.predicted(field) if at is None else at
        with evaluating(self):
            dist = f.family.distribution(self.natural_params_at(data, {field: at})[field])
        shift = getattr(f.family, "shift", 0)  # the family's distribution is of y − shift
        return Shifted(dist, shift) if shift else dist

    def restrict(self, name: str, data: Sequences, at: Tensor, eta: Tensor) -> Tensor:
        """Apply a field's support restriction (``Category(distinct=True)``) at ``at``.

        Parameters
        ----------
        name : str
            The field.
        data : Sequences
            The sequences (the context's items are read).
        at : torch.Tensor, shape (B, I)
            The asked positions (bool).
        eta : torch.Tensor, shape (P, num_natural)
            η at the asked positions.

        Returns
        -------
        torch.Tensor, shape (P, num_natural)
            η with the items already in each position's context excluded, or ``eta`` itself
            for a field without the restriction.
        """
        f = self.field(name)
        if not getattr(f, "distinct", False):
            return eta
        f = cast("Category", f)  # distinct: a Category
        return f.restrict(eta, context_items(data, name, f.num_categories, self.direction, at))

    def forward(self, data: Sequences) -> dict[str, Tensor]:
        """η of every target field at every position (:meth:`natural_params`).

        Parameters
        ----------
        data : Sequences
            The sequences, on the model's device.

        Returns
        -------
        dict of str to torch.Tensor
            Per target field, η of shape (B, I, num_natural).
        """
        return self.natural_params(data)

    def _here(self, data: Sequences, at: Tensor | None = None):
        """``data`` (and a position mask) on the model's device."""
        device = self.device
        if data.device != device:
            data = data.to(device)
        if at is not None and (not isinstance(at, Tensor) or at.dtype != torch.bool
                               or at.shape != data.valid().shape):
            raise ValueError(
                f"at must be a bool tensor of shape {list(data.valid().shape)} (sequences × "
                f"positions) saying where to predict, got "
                + (f"{at.dtype} of shape {list(at.shape)}" if isinstance(at, Tensor)
                   else type(at).__name__))
        return data, (None if at is None else at.to(device))

    def check(self, data: Sequences) -> None:
        """Check that ``data`` fits the model's fields (names, kinds, values, lengths).

        Parameters
        ----------
        data : Sequences
            The sequences.

        Raises
        ------
        ValueError
            Naming the first problem (a TypeError for a wrong dtype).
        """
        dtype = next((p.dtype for p in self.parameters() if p.is_floating_point()), None)
        check_sequences(data, self.fields, self.max_len, dtype)

    def log_likelihood_sums(
        self, data: Sequences, base_measure: bool = True, check: bool = True,
        weights: Tensor | None = None, sampling: softmax.Sampling | None = None,
    ) -> dict[str, tuple[Tensor, int]]:
        """Per target field: the sum of log p(y_i | context) over the predicted positions, and
        their count.

        Parameters
        ----------
        data : Sequences
            The sequences, on the model's device.
        base_measure : bool, default True
            Include log h(y).
        check : bool, default True
            Check ``data`` against the fields first.
        weights : torch.Tensor, shape (B,), optional
            A weight per sequence on its terms (sampled positions, see ``fit``).
        sampling : Sampling, optional
            Train category targets by the sampled softmax (see ``fit``).

        Returns
        -------
        dict of str to tuple of (torch.Tensor, int)
            Per target field, (the sum, a scalar tensor; the number of predicted positions).
        """
        if check:
            self.check(data)
        at = {f.name: data.predicted(f.name) for f in self.target_fields}
        lps = self.log_probs_at(data, at, base_measure, sampling)
        out = {}
        for f in self.target_fields:
            m = at[f.name]
            lp = lps[f.name]
            if weights is not None:
                lp = lp * weights[m.nonzero()[:, 0]].to(lp.dtype)
            out[f.name] = (lp.sum(), int(m.sum()))
        return out

    def log_probs_at(self, data: Sequences, at: dict[str, Tensor], base_measure: bool = True,
                     sampling: softmax.Sampling | None = None) -> dict[str, Tensor]:
        """log p(y_i | context) of each field in ``at`` at its asked positions.

        Parameters
        ----------
        data : Sequences
            The sequences, on the model's device.
        at : dict of str to torch.Tensor
            Per target field, where to score: bool of shape (B, I).
        base_measure : bool, default True
            Include log h(y).
        sampling : Sampling, optional
            The sampled softmax, refused here (:func:`refuse_sampling`).

        Returns
        -------
        dict of str to torch.Tensor
            Per field of ``at``, shape (P,), in the order of ``at[name].nonzero()``.
        """
        refuse_sampling(self, sampling)
        etas = self.natural_params_at(data, at)
        return {name: _family_field(self.field(name)).family.log_prob(
                    data.fields[name][m], etas[name], base_measure)
                for name, m in at.items()}

    def position_log_likelihoods(self, data: Sequences,
                                 base_measure: bool = True) -> dict[str, Tensor]:
        """log p(y_i | context) at every predicted position, unbatched and unchecked.

        Parameters
        ----------
        data : Sequences
            The sequences, on the model's device.
        base_measure : bool, default True
            Include log h(y).

        Returns
        -------
        dict of str to torch.Tensor
            Per target field, shape (B, I), NaN where the field is not predicted.
        """
        at = {f.name: data.predicted(f.name) for f in self.target_fields}
        lps = self.log_probs_at(data, at, base_measure)
        out = {}
        for f in self.target_fields:
            m = at[f.name]
            full = lps[f.name].new_full(m.shape, float("nan"))
            full[m] = lps[f.name]
            out[f.name] = full
        return out

    def loss(self, data: Sequences, check: bool = False, weights: Tensor | None = None,
             counts: dict[str, int] | None = None,
             sampling: softmax.Sampling | None = None) -> Tensor:
        """Training objective: the sum over target fields of the mean negative log-likelihood
        (+ the model's ``penalty()``, if it has one). Every model takes these arguments; one
        whose objective is its own (``own_objective``) refuses the last three
        (:func:`refuse_generic_options`).

        Parameters
        ----------
        data : Sequences
            A batch, on the model's device.
        check : bool, default False
            Check ``data`` against the fields first.
        weights, sampling : optional
            As in :meth:`log_likelihood_sums`.
        counts : dict of str to int, optional
            Per target field, the denominator instead of its number of predicted positions
            (the global count across data-parallel ranks, or of the full batch when positions
            are sampled).

        Returns
        -------
        torch.Tensor
            The loss, a scalar.
        """
        ll = self.log_likelihood_sums(data, check=check, weights=weights, sampling=sampling)
        loss = -cast(Tensor, sum(s / max(n if counts is None else counts[name], 1)
                                 for name, (s, n) in ll.items()))
        penalty = self.penalty()
        return loss if penalty is None else loss + penalty

    def penalty(self) -> Tensor | None:
        """A prior's negative log-density added to the training loss (None: no prior)."""
        return None

    def standardise(self, data: Sequences) -> ConditionalModel:
        """Called by ``efa.fit`` with the training data before it trains (nothing here).

        Parameters
        ----------
        data : Sequences
            The training data.

        Returns
        -------
        ConditionalModel
            The model itself.
        """
        return self

    @torch.no_grad()
    def predict_mean(self, data: Sequences, at: Tensor | None = None) -> dict[str, Tensor]:
        """E[y_i | context] of every target field at the asked positions (missing values
        included: an imputation), in evaluation mode (the model's mode is restored).

        Parameters
        ----------
        data : Sequences
            The sequences (checked, and moved to the model's device).
        at : torch.Tensor, shape (B, I), optional
            Where to predict (bool; default: every real position).

        Returns
        -------
        dict of str to torch.Tensor
            Per target field, shape (B, I) (class probabilities (B, I, K) for categories),
            NaN where not asked.

        Raises
        ------
        ValueError
            If ``at`` asks for padding.
        FloatingPointError
            If a mean at an asked position is not finite (naming the field, sequence and
            position).
        """
        out, at = self._means_at(data, at)
        for name, full in out.items():
            bad = at & ~torch.isfinite(full.reshape(*at.shape, -1)).all(-1)
            if bad.any():
                b, i = bad.nonzero()[0].tolist()
                raise FloatingPointError(
                    f"predict_mean: non-finite predicted mean of field {name!r} at sequence {b}, "
                    f"position {i}: the parameters diverged (a NaN/inf weight) or a context "
                    "value is extreme for the model")
        return out

    def _means_at(self, data: Sequences, at: Tensor | None) -> tuple[dict[str, Tensor], Tensor]:
        """predict_mean's numbers, unchecked, and the positions they are at."""
        self.check(data)
        data, at = self._here(data, at)
        refuse_padding(data, at)
        at = data.valid() if at is None else at
        with evaluating(self):
            etas = self.natural_params_at(data, {f.name: at for f in self.target_fields})
        out = {}
        for f in self.target_fields:
            mean = _family_field(f).family.mean(etas[f.name])
            full = mean.new_full((*at.shape, *mean.shape[1:]), float("nan"))
            full[at] = mean
            out[f.name] = full
        return out, at


def _family_field(f: Field) -> Category | Value:
    """``f`` as a field with a ``family``: every target field has one (``Field`` declares none)."""
    return cast("Category | Value", f)
