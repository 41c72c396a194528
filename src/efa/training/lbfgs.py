"""Fitting to convergence by full-batch L-BFGS in float64: for convex stages, where
:func:`efa.fit`'s minibatch Adam with early stopping ends short of the optimum (the table
estimator's ``glm_solver="lbfgs"``)."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable

import torch
from sklearn.exceptions import ConvergenceWarning

from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.training.settings import History

# L-BFGS's stopping rule: the largest gradient entry of the mean loss at most GRAD_TOL
# (float64 makes that reachable), or LBFGS_MAX_ITER iterations with a warning.
GRAD_TOL = 1e-7
LBFGS_MAX_ITER = 1000


def fit_lbfgs(model: ConditionalModel, train: Sequences, threads: int | None = None,
              penalty: Callable[[], torch.Tensor] | None = None) -> History:
    """Minimise the training loss (+ ``penalty()``) over ``model``'s trainable parameters by
    full-batch L-BFGS in float64 (strong Wolfe line search), then cast the model back to its
    dtype.

    Meant for a convex stage, such as the table estimator's GLM stage (the loss is convex in
    the GLM's parameters with the read-outs at 0 and the ordinal scores fixed): the result is
    then the stage's (penalised) maximum-likelihood fit, deterministic and independent of
    batch order. No dropout is applied (the model is in eval mode throughout). It starts from
    the model's current parameters, so a path of penalties can be warm-started.

    Parameters
    ----------
    model : ConditionalModel
        The model; only parameters with ``requires_grad`` move (freeze the rest first).
    train : Sequences
        The training data, in one batch.
    threads : int or None, default None
        Torch CPU threads for the stage (None: leave torch's setting).
    penalty : callable, optional
        Returns a scalar added to the loss, computed from the model's parameters (called in
        float64, inside the fit).

    Returns
    -------
    History
        ``epochs_run``: L-BFGS iterations; ``train_loss``: the final objective (loss +
        penalty); ``stopped``:
        ``"converged"`` or ``"max_iter"``.

    Warns
    -----
    sklearn.exceptions.ConvergenceWarning
        If the iteration or evaluation limit ended the fit before the gradient tolerance was
        met.

    Raises
    ------
    FloatingPointError
        If the loss is not finite at the end.
    """
    dtype = next(model.parameters()).dtype
    was_training = model.training
    saved_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        model.double().eval()
        data = train.to(torch.float64)
        opt = torch.optim.LBFGS(params, lr=1.0, max_iter=LBFGS_MAX_ITER,
                                max_eval=2 * LBFGS_MAX_ITER, history_size=50,
                                tolerance_grad=GRAD_TOL, tolerance_change=1e-12,
                                line_search_fn="strong_wolfe")

        def objective() -> torch.Tensor:
            loss = model.loss(data)
            return loss if penalty is None else loss + penalty()

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = objective()
            loss.backward()
            return loss

        opt.step(closure)
        with torch.no_grad():
            loss = float(objective())
        state = opt.state[params[0]]
        n_iter, evals = int(state.get("n_iter", 0)), int(state.get("func_evals", 0))
    finally:
        model.to(dtype).train(was_training)
        torch.set_num_threads(saved_threads)
    if not math.isfinite(loss):
        raise FloatingPointError(f"L-BFGS fit ended with the loss {loss}")
    converged = n_iter < LBFGS_MAX_ITER and evals < 2 * LBFGS_MAX_ITER
    if not converged:
        warnings.warn(f"L-BFGS stopped after {n_iter} iterations and {evals} "
                      f"loss evaluations without reaching the gradient tolerance {GRAD_TOL:g} "
                      f"(limits: {LBFGS_MAX_ITER} iterations, {2 * LBFGS_MAX_ITER} "
                      "evaluations); the parameters stay where it stopped",
                      ConvergenceWarning, stacklevel=3)
    return History(train_loss=[loss], epochs_run=n_iter, seconds=time.perf_counter() - start,
                   threads=torch.get_num_threads() if threads is None else threads,
                   stopped="converged" if converged else "max_iter")
