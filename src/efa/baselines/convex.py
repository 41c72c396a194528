"""Fitting the convex GLMs of :mod:`efa.baselines.glm` (``ContextLogit``, ``RatingGLM``) to
convergence: :func:`fit_convex` minimises the mean negative log-likelihood plus an L2 penalty
by full-batch L-BFGS in float64, and :func:`select_l2` picks the penalty on validation data (a
peer stopped early by a stochastic optimiser is a weaker peer).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
from torch import Tensor

from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences

if TYPE_CHECKING:  # for annotations only

    class _Convex(Protocol):
        """What the convex fitting reads of a GLM (``ContextLogit``, ``RatingGLM``)."""

        def penalised(self) -> dict[str, list[Tensor]]: ...

        def objective(self, data: Sequences) -> Callable[[], Tensor]: ...


@dataclass
class ConvexFit:
    """What :func:`fit_convex` reached: the penalty it used, the L-BFGS iterations, the
    gradient's max-norm and the objective at the end, and whether it met the tolerance.

    Parameters
    ----------
    l2 : float
        The L2 penalty of the weights.
    design_ratio : float
        The design effects' penalty as a fraction of ``l2``.
    iterations : int
        The L-BFGS iterations taken.
    grad_norm : float
        The largest absolute entry of the gradient at the end.
    objective : float
        The penalised objective at the end.
    converged : bool
        Whether ``grad_norm`` is within 10 × the tolerance.
    """

    l2: float
    design_ratio: float
    iterations: int
    grad_norm: float
    objective: float
    converged: bool


def penalty(model: ConditionalModel, l2: float, design_ratio: float = 1.0) -> Tensor | float:
    """The L2 penalty (l2 / 2)·(‖weights‖² + design_ratio·‖design effects‖²).

    Parameters
    ----------
    model : ConditionalModel
        A GLM with a ``penalised()`` method (``ContextLogit``, ``RatingGLM``).
    l2 : float
        The penalty of the weights.
    design_ratio : float, default 1.0
        The design effects' penalty as a fraction of ``l2``.

    Returns
    -------
    torch.Tensor or float
        The penalty over the groups of ``model.penalised()`` (a scalar tensor; the number 0.0
        when nothing is penalised).
    """
    groups = cast("_Convex", model).penalised()
    total: Tensor | float
    total = sum(p.pow(2).sum() for p in groups.get("weights", []))
    total = total + design_ratio * sum(p.pow(2).sum() for p in groups.get("design", []))
    return 0.5 * l2 * total


def fit_convex(model: ConditionalModel, train: Sequences, l2: float, design_ratio: float = 1.0,
               max_iter: int = 3000, tol: float = 1e-7) -> ConvexFit:
    """Minimise mean NLL + :func:`penalty` by full-batch L-BFGS (strong Wolfe line search) in
    float64, from the model's current weights, until the gradient's max-norm is below
    ``tol``. The model is left in float64.

    Parameters
    ----------
    model : ConditionalModel
        The GLM to fit in place; its ``objective(train)`` is used where it has one, its
        ``loss(train)`` otherwise.
    train : Sequences
        The training sequences (checked against the model's fields).
    l2 : float
        The L2 penalty of the weights (see :func:`penalty`).
    design_ratio : float, default 1.0
        The design effects' penalty as a fraction of ``l2``.
    max_iter : int, default 3000
        The most L-BFGS iterations.
    tol : float, default 1e-7
        The gradient's max-norm at which L-BFGS stops.

    Returns
    -------
    ConvexFit
        The penalty, the iterations, the final gradient's max-norm and objective, and whether
        it converged.
    """
    model.double()
    model.check(train)
    nll = (cast("_Convex", model).objective(train) if hasattr(model, "objective")
           else lambda: model.loss(train))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.LBFGS(params, lr=1.0, max_iter=max_iter, history_size=50,
                            tolerance_grad=tol, tolerance_change=1e-14,
                            line_search_fn="strong_wolfe")

    def objective():
        opt.zero_grad()
        loss = nll() + penalty(model, l2, design_ratio)
        loss.backward()
        return loss

    opt.step(objective)
    loss = float(objective().detach())
    grad = max(float(cast(Tensor, p.grad).abs().max()) for p in params)
    iterations = opt.state[opt._params[0]].get("n_iter", 0)
    return ConvexFit(l2, design_ratio, iterations, grad, loss, grad <= tol * 10)


L2_GRID = (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 1e-6)
DESIGN_RATIOS = (1.0, 0.1, 0.01)


def select_l2(model: ConditionalModel, train: Sequences, val: Sequences,
              grid: Sequence[float] = L2_GRID,
              design_ratios: Sequence[float] = DESIGN_RATIOS) -> tuple[ConditionalModel, dict]:
    """Pick the L2 penalty on validation: for each ratio of the design effects' penalty to the
    weights' (position and length effects may need less shrinkage than the weights), walk the
    penalty path from strong to weak, each fit warm-started from the previous one, until the
    validation NLL has worsened twice in a row; keep the best fit over all. A model with
    nothing penalised is fitted once, with no penalty; one without design effects takes only
    the ratio 1.

    Parameters
    ----------
    model : ConditionalModel
        The GLM (``ContextLogit``, ``RatingGLM``); each path starts from its current weights.
    train : Sequences
        The training sequences.
    val : Sequences
        The validation sequences, scored by the summed negative log-likelihood of
        :func:`efa.evaluate`.
    grid : sequence of float, default L2_GRID
        The penalties tried, walked from the largest (1e-1 … 1e-6 by default).
    design_ratios : sequence of float, default DESIGN_RATIOS
        The ratios of the design effects' penalty to the weights' (1, 0.1, 0.01 by default).

    Returns
    -------
    model : ConditionalModel
        ``model`` itself, with the weights of the best validation fit.
    info : dict
        ``"l2"`` and ``"design_ratio"``: the chosen penalty; ``"val_nll"``: ``"l2/ratio"`` →
        validation NLL of every fit; ``"fits"``: each fit's :class:`ConvexFit` as a dict.

    Raises
    ------
    FloatingPointError
        If no penalty gave a finite validation NLL.
    """
    from efa.training.scoring import evaluate

    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    fits: list[dict[str, Any]]
    best, curve, fits = None, {}, []
    groups = cast("_Convex", model).penalised()
    if not groups:
        grid, design_ratios = (0.0,), (1.0,)
    elif not groups.get("design"):
        design_ratios = (1.0,)
    for ratio in design_ratios:
        model.load_state_dict(start)
        worse, last = 0, float("inf")
        for l2 in sorted(grid, reverse=True):
            fit = fit_convex(model, train, l2, ratio)
            nll = -sum(evaluate(model, val).values())
            curve[f"{l2:g}/{ratio:g}"], fits = nll, [*fits, fit.__dict__]
            if best is None or nll < best[0]:
                state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                best = (nll, l2, ratio, state)
            worse = worse + 1 if nll > last else 0
            last = nll
            if worse >= 2:
                break
    if best is None or not math.isfinite(best[0]):
        raise FloatingPointError("no L2 penalty gave a finite validation NLL")
    model.load_state_dict(best[3])
    return model, {"l2": best[1], "design_ratio": best[2], "val_nll": curve, "fits": fits}
