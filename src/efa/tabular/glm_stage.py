"""The first stage of the table estimator's ``init="glm"``: the GLM part of a
:class:`~efa.tabular.model.TableEFA` fitted with the network's read-outs held at 0, by Adam or
by L-BFGS along a ridge path over C chosen on the validation rows."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from sklearn.exceptions import ConvergenceWarning

from efa.core.conditional import evaluating
from efa.core.families import Ordinal
from efa.tabular.model import GLM_STAGE
from efa.training.lbfgs import fit_lbfgs
from efa.training.train import fit

if TYPE_CHECKING:  # for annotations only
    from efa.core.data import Sequences
    from efa.tabular.model import TableEFA
    from efa.training.train import History, TrainConfig


# The GLM stage's penalties tried with glm_C="auto": scikit-learn's C (the inverse strength of
# ½‖effects, slopes‖² against the response's summed log loss), walked from strong to weak.
GLM_C_GRID = tuple(10.0**k for k in range(-3, 4))


def fit_glm_stage(model: TableEFA, train: Sequences, val: Sequences | None,
                  cfg: TrainConfig, solver: str = "adam",
                  C: float | str = "auto") -> tuple[History, float | None]:
    """The first stage of ``init="glm"``: only the GLM's parameters move, with the network's
    read-outs (weights) at 0, so the model is the plain GLM on the response (the features'
    cells keep a context-free prediction meanwhile).

    The read-outs' weights are set to 0 and every parameter but the GLM's and the read-outs'
    biases is frozen for the stage (and released after it).

    Parameters
    ----------
    model : TableEFA
        The model, with a GLM term.
    train : Sequences
        The training rows.
    val : Sequences or None
        The validation rows: for early stopping (``solver="adam"``) or for choosing ``C``.
    cfg : TrainConfig
        The training settings (:func:`efa.fit`'s; ``solver="lbfgs"`` reads only
        ``threads``).
    solver : {"adam", "lbfgs"}, default "adam"
        ``"adam"``: :func:`efa.fit` with ``cfg``, stopped early on ``val``. ``"lbfgs"``: the
        GLM's (penalised) maximum-likelihood fit, by full-batch L-BFGS in float64 to
        convergence (:func:`efa.training.lbfgs.fit_lbfgs`); with a penalty the ordinal
        scores are held at s_k = k, so that the stage is a convex GLM (the ridge
        adjacent-categories logit).
    C : float or "auto", default "auto"
        ``solver="lbfgs"`` only: scikit-learn's C, the inverse strength of the penalty
        ½‖effects, slopes‖² / C on the response's summed log loss (``math.inf``: none);
        ``"auto"``: each of :data:`GLM_C_GRID` from the strongest, warm-started, the one with
        the best response log loss on ``val`` kept (the walk stops once it has worsened
        twice in a row).

    Returns
    -------
    History
        The stage's training history; with ``solver="lbfgs"``, ``epochs_run`` counts the
        iterations of every fit on the path, ``val_loss`` holds the path's validation log
        losses and ``best_val`` the kept fit's.
    float or None
        The penalty's C (None with ``solver="adam"``).

    Raises
    ------
    ValueError
        If ``C="auto"`` and there are no validation rows.
    """
    with torch.no_grad():
        for readout in model.readouts.values():
            for name, p in readout.named_parameters():
                if not name.endswith("bias"):
                    p.zero_()
    glm = {id(p) for p in model.glm_parameters()}
    for readout in model.readouts.values():  # the features' intercepts too
        glm |= {id(p) for n, p in readout.named_parameters() if n.endswith("bias")}
    if solver == "lbfgs" and C != math.inf:  # a penalty: the scores held at s_k = k, so the
        # stage is a convex GLM and C is well posed (free scores would absorb the effects'
        # scale and escape the penalty); unpenalised, they stay free (the stereotype model)
        for family in (m for m in model.modules() if isinstance(m, Ordinal)):
            with torch.no_grad():  # (the loop above zeroed the response's)
                family.raw_steps.fill_(math.log(math.expm1(1.0)))
            glm.discard(id(family.raw_steps))
    frozen = [p for p in model.parameters() if id(p) not in glm]
    for p in frozen:
        p.requires_grad_(False)
    token = GLM_STAGE.set(model)
    try:
        if solver == "lbfgs":
            return glm_path(model, train, val, cfg.threads, C)
        return fit(model, train, val, cfg), None
    finally:
        GLM_STAGE.reset(token)
        for p in frozen:
            p.requires_grad_(True)


def glm_path(model: TableEFA, train: Sequences, val: Sequences | None, threads: int | None,
             C: float | str) -> tuple[History, float]:
    """The L-BFGS GLM stage of :func:`fit_glm_stage` (its parameters frozen as it set them),
    at one C or along :data:`GLM_C_GRID` with the C chosen on ``val``.

    Parameters
    ----------
    model : TableEFA
        The model, in its GLM stage.
    train, val : Sequences
        The training and validation rows (``val`` may be None for a numeric ``C``).
    threads : int or None
        Torch CPU threads.
    C : float or "auto"
        As in :func:`fit_glm_stage`.

    Returns
    -------
    History
        As :func:`fit_glm_stage` says.
    float
        The kept fit's C.

    Raises
    ------
    ValueError
        If ``C="auto"`` and ``val`` is None or has no labelled row.
    """
    n = int(train.predicted(model.response).sum())  # C's penalty is on the summed log loss
    weights = [model.level_effect, model.slope]

    def penalty_at(c: float) -> Callable[[], torch.Tensor] | None:
        if math.isinf(c):
            return None
        return lambda: sum((w.square().sum() for w in weights),
                           torch.zeros((), dtype=weights[0].dtype)) / (2 * c * max(n, 1))

    if C != "auto":
        return fit_lbfgs(model, train, threads, penalty_at(float(C))), float(C)
    if val is not None:
        last = torch.zeros_like(val.valid())
        last[:, -1] = True  # the response's column
        val = val.with_scored(last)
    if val is None or not bool(val.predicted(model.response).any()):
        raise ValueError("glm_C='auto' chooses the GLM stage's penalty on the validation "
                         "rows' labels, and there are none: give glm_C a number")
    params = [p for p in model.parameters() if p.requires_grad]
    best: tuple[float, float, list[torch.Tensor], History] | None = None
    path: list[float] = []
    iterations, worse = 0, 0
    for c in GLM_C_GRID:
        with warnings.catch_warnings():  # only the kept fit's limit is worth a warning
            warnings.simplefilter("ignore", ConvergenceWarning)
            history = fit_lbfgs(model, train, threads, penalty_at(c))
        iterations += history.epochs_run
        with torch.no_grad(), evaluating(model):  # without cell dropout, as fit_lbfgs fits
            s, m = model.log_likelihood_sums(val)[model.response]
        path.append(-float(s) / m)
        if best is None or path[-1] < best[0]:
            best, worse = (path[-1], c, [p.detach().clone() for p in params], history), 0
        else:
            worse += 1
            if worse == 2:
                break
    assert best is not None
    score, c, state, history = best
    with torch.no_grad():
        for p, v in zip(params, state, strict=True):
            p.copy_(v)
    if history.stopped == "max_iter":
        warnings.warn(f"the GLM stage's fit at the chosen C = {c:g} stopped at the L-BFGS "
                      "limits without reaching the gradient tolerance; its parameters stay "
                      "where it stopped", ConvergenceWarning, stacklevel=4)
    history.epochs_run, history.val_loss, history.best_val = iterations, path, score
    return history, c
