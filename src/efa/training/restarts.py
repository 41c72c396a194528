"""Several fits of one model from different initial weights, the one with the lowest
validation loss kept (scikit-learn's ``n_init``).

Where a covariate steers attention, the initial draw alone can move a fit's test loss more
than the choice of architecture does (docs/guide/training.md, "When the defaults fall short");
``fit_restarts`` runs that choice for the user, on validation data only, at ``restarts`` times
the cost of one fit.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.training.checkpoint import weights_fingerprint
from efa.training.scoring import check_int
from efa.training.settings import History, TrainConfig, with_overrides
from efa.training.train import fit


@dataclass
class Restarts:
    """What :func:`fit_restarts` did.

    Parameters
    ----------
    model : ConditionalModel
        The kept fit: the lowest best validation loss over the restarts (the earliest on a
        tie), with its best epoch restored.
    history : History
        Its history.
    histories : list of History
        Every restart's history, in the order fitted (``histories[best] is history``).
    best : int
        The index of the kept restart.
    seeds : list of int
        The torch seed each restart's model was built under (``seed + k``).
    """

    model: ConditionalModel
    history: History
    histories: list[History]
    best: int
    seeds: list[int]


def fit_restarts(build: Callable[[], ConditionalModel], train: Sequences, val: Sequences,
                 restarts: int = 3, seed: int = 0, config: TrainConfig | None = None,
                 **overrides: Any) -> Restarts:
    """Fit ``restarts`` models, each built by ``build()`` under its own torch seed, and keep
    the one with the lowest validation loss.

    Restart k builds its model under ``torch.manual_seed(seed + k)`` (inside
    ``torch.random.fork_rng``, so drawing the weights leaves the caller's random state as it
    was) and fits it with :func:`efa.fit` and the same settings; only the initial weights
    differ between restarts (the batch order follows the settings' ``seed``; dropout's
    masks, if the model has any, are drawn under a seed that follows from ``seed + k``). The
    choice reads each fit's ``History.best_val`` (the restored weights' validation loss, over
    ``monitor``'s fields where set) and nothing of any test data. Each restart's model is
    built (and checked) before the previous one is fitted, and only the best fit so far is
    kept: at most three models are held at once.

    Parameters
    ----------
    build : callable
        Returns a new, unfitted model each call, e.g. ``lambda: efa.EFA(config)``, with
        weights drawn from torch's random state (not under a seed of its own).
    train : Sequences
        Training data.
    val : Sequences
        Validation data: it stops each fit early and chooses between them.
    restarts : int, default 3
        The number of fits (each costs about one fit's time).
    seed : int, default 0
        Restart k's models are drawn under ``seed + k``.
    config : TrainConfig, optional
        The settings of every fit (default ``TrainConfig()``). Each applies to each fit:
        ``time_limit`` bounds every fit, not their sum; a ``checkpoint_dir`` gets a folder per
        restart (``restart0``, ``restart1``, ...), so that a killed run resumes where it was.
    **overrides
        Any :class:`TrainConfig` field by name.

    Returns
    -------
    Restarts
        The kept model and its history, every restart's history, the kept index and the
        seeds.

    Raises
    ------
    ValueError
        Without validation data, for ``restarts`` or ``seed`` not an integer (at least 1 and 0),
        when ``build`` returns a model it returned before (that would refit the same weights, a
        warm start rather than a restart), or one whose initial weights equal an earlier
        restart's (a ``build`` that sets its own seed: every restart would be the same fit).
    TypeError
        When ``build`` is not callable or returns something other than a model.

    Examples
    --------
    >>> config = efa.EFAConfig(fields, max_len=20)  # doctest: +SKIP
    >>> result = efa.fit_restarts(lambda: efa.EFA(config), train, val,
    ...                           restarts=3)  # doctest: +SKIP
    >>> model = result.model  # doctest: +SKIP
    """
    if val is None:
        raise ValueError("fit_restarts chooses between its fits on validation data: pass val")
    if not callable(build) or isinstance(build, torch.nn.Module):  # a model is callable too
        raise TypeError(f"build must be a callable that returns a new model (e.g. "
                        f"lambda: efa.EFA(config)), got {type(build).__name__}")
    check_int("restarts", restarts, 1)
    check_int("seed", seed, 0)
    cfg = with_overrides(config, overrides, "fit_restarts")
    built: weakref.WeakSet[ConditionalModel] = weakref.WeakSet()
    starts: dict[str, int] = {}  # initial weights' fingerprint -> the restart that drew them
    kept: ConditionalModel | None = None
    histories: list[History] = []
    best = 0
    seeds = [seed + k for k in range(restarts)]

    def draw(k: int) -> tuple[ConditionalModel, int]:
        """Restart k's model, checked: a new one, with weights of its own; and the seed of
        its fit's dropout (the next draw of the same stream, so not the weights' numbers)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seeds[k])
            model = build()
            dropout_seed = int(torch.randint(2**62, ()))
        if not isinstance(model, ConditionalModel):
            raise TypeError(f"build() returned {type(model).__name__}, not a model (efa.EFA or "
                            "another efa.ConditionalModel)")
        if model in built:
            raise ValueError("build() returned a model it had returned before: it must build a "
                             "new one on each call, e.g. lambda: efa.EFA(config)")
        built.add(model)
        start = weights_fingerprint(model.state_dict())
        if start in starts:  # e.g. a build that seeds itself: every restart the same fit
            raise ValueError(f"restart {k}'s model starts from the same weights as restart "
                             f"{starts[start]}: build() must draw them from torch's random "
                             f"state, which fit_restarts seeds (seed + k), not set a seed itself")
        starts[start] = k
        return model, dropout_seed

    # The next restart is drawn before this one is fitted, so a bad build is refused before
    # any fit's time is spent on it.
    following: tuple[ConditionalModel, int] | None = draw(0)
    for k in range(restarts):
        assert following is not None
        (model, dropout_seed), following = following, (
            draw(k + 1) if k + 1 < restarts else None)
        run = cfg if not cfg.checkpoint_dir else replace(
            cfg, checkpoint_dir=str(Path(cfg.checkpoint_dir) / f"restart{k}"))
        # Dropout draws from torch's global state, which fit leaves to its caller: seeded
        # here, the same arguments give the same restarts, whatever the caller drew before.
        cuda = sorted({p.device.index or 0 for p in model.parameters() if p.is_cuda})
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(dropout_seed)
            histories.append(fit(model, train, val, run))
        if kept is None or histories[k].best_val < histories[best].best_val:
            kept, best = model, k
    assert kept is not None
    return Restarts(kept, histories[best], histories, best, seeds)
