"""What a fit is told (``TrainConfig``) and what it reports (``History``, the warnings it
gives)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace

import numpy as np

from efa.training.scoring import check_bool, check_int

SCHEDULES = ("anneal", "plateau", "cosine", "constant")


class StillImproving(UserWarning):
    """The best validation epoch was the last one: more epochs may help."""


class TimeLimitReached(UserWarning):
    """``fit`` stopped at its ``time_limit`` (the best epoch so far restored)."""


class StartKept(UserWarning):
    """No epoch improved on the starting weights' validation loss: they are kept."""


@dataclass
class TrainConfig:
    """Training settings of :func:`efa.fit` (each may also be passed to ``fit`` by name).

    The defaults (AdamW 6e-3, batches of 256 sequences, the learning rate halved after every
    validation epoch that does not improve on the best by ``min_delta`` = 1e-4 nats, stop
    after ``patience`` = 3 such epochs in a row, best epoch restored; small data sets get
    smaller batches and longer stall tests, :func:`default_batch_size`,
    :func:`stall_window`) fit efa's own teacher
    data to within 0.01 nats of the Bayes limit in about 17 epochs (``efa reproduce
    teacher``, docs/peers.md). With validation data, the starting weights are scored before
    the first epoch and count as a candidate: a fit never ends worse on validation than where
    it started (a warm start, a GLM stage), and a ``StartKept`` warning says when no epoch beat
    them.

    Parameters
    ----------
    lr : float
        AdamW's learning rate.
    weight_decay : float
        AdamW's decoupled weight decay.
    batch_size : int or None
        Sequences per step. None (the default): chosen from the number of training sequences
        by :func:`default_batch_size` (256, fewer for small data so that an epoch takes at
        least 16 steps); :class:`History` records the size used.
    max_epochs : int
        At most this many passes over the training data.
    patience : int or None
        Stop after this many validation epochs in a row without an improvement of
        ``min_delta``. None (the default): 3 stall tests of :func:`stall_window` epochs each,
        which is 3 epochs whenever an epoch takes at least 16 steps; :class:`History`
        records the patience used.
    schedule : {"anneal", "plateau", "cosine", "constant"}
        "anneal" halves the rate after every stall test that fails (one validation epoch, or
        :func:`stall_window` epochs in a row when an epoch takes fewer than 16 steps);
        "plateau" halves it after
        ``max(1, patience // 3) + 1`` stalled epochs in a row (PyTorch's relative threshold of
        1e-4; the earlier default); "cosine" decays it per step over ``max_epochs`` after
        ``warmup_steps``. Without validation data "anneal" and "plateau" keep it constant.
    min_delta : float
        A smaller validation improvement (nats) counts as a stalled epoch.
    warmup_steps : int
        Linear warm-up steps of the "cosine" and "constant" schedules (refused with the
        others, which have none).
    grad_clip : float or None
        Clip the gradient's norm to this value (None: no clipping).
    seed : int
        Seeds the fit's own draws: the shuffling, the length buckets' order, sampled
        positions and sampled negatives. Dropout's masks come from torch's global random
        state, as in any torch model: call :func:`efa.seed_everything` before ``fit`` to
        repeat a fit with dropout (:func:`efa.fit_restarts` seeds each restart's).
    eval_batch_size : int
        Sequences per batch when scoring validation data.
    progress : bool
        Show a progress bar (on terminals).
    checkpoint_dir : str or None
        Save the full state after every epoch there; a killed run resumes from it.
    threads : int or None
        Torch CPU threads during the fit (None: leave torch's setting). Results depend on the
        thread count; on a shared or small machine 1 thread is often fastest.
    resume : bool
        With ``checkpoint_dir``, continue from a checkpoint written by the same model, data and
        settings (False: start over, replacing it).
    device : str or None
        Where to train ("cuda", "cuda:1", "cpu"; None: where the model is, or the default set
        by ``efa reproduce --device``); batches are moved there one at a time.
    autocast : {"bf16", "fp16"} or None
        Mixed precision for the forward pass (None: off).
    positions : int or None
        m > 0 samples m scored positions per sequence per step (uniformly, with weights that
        keep the objective unbiased) instead of all of them: the cheap stochastic masked
        pseudo-likelihood for long sequences in copies mode; evaluation stays exact.
    drop_last : bool
        Skip a last partial batch (needed when a data-parallel world size does not divide the
        data).
    sampled_softmax : int or None
        k > 0 trains category read-outs by the sampled softmax with k negatives per batch from
        the ``proposal``, with the log-Q correction (large vocabularies; evaluation stays
        exact).
    proposal : {"unigram", "uniform"}
        The sampled softmax's proposal: training frequencies or uniform.
    monitor : tuple of str or None
        The target fields whose summed validation log-likelihood decides early stopping and
        the schedule (None: every target field), e.g. only the response of a classifier
        trained on the joint pseudo-likelihood; training still fits every field.
    time_limit : float or None
        Seconds of training (wall clock, counted over a resumed run's parts too): no epoch
        starts that would, at the pace of the epochs so far, end after it; the first epoch
        always runs. The best epoch is restored and a ``TimeLimitReached`` warning says so.
        Not part of a checkpoint's settings: a resumed run may have another budget.
    plateau_steps : int or None
        While the best validation loss is still within ``plateau_tol`` of the first epoch's,
        stop only after this many optimiser steps' worth of epochs without improvement (at
        least ``patience``); once it has left that band, ``patience`` applies. A response that
        depends on several inputs together can sit on such a plateau for hundreds of steps
        before it is learned, while a loss that is falling needs no longer wait. None (the
        default): ``patience`` throughout. :func:`patience_now` gives the rule.
    plateau_tol : float
        The band of ``plateau_steps``, in the validation loss's nats.
    bucket : int or None
        Length-bucketed batches: the epoch's shuffled order is cut into windows of ``bucket``
        batches, each window is sorted by sequence length before it is cut into batches, and
        the batches are shuffled. A batch is padded to its longest sequence, so batches of
        similar lengths carry less padding (Hugging Face's ``group_by_length`` does the same
        with windows of 50). None (the default): batches are cut from the shuffled order as
        it is. :func:`efa.training.steps.batches` gives the rule.
    """

    lr: float = 6e-3
    weight_decay: float = 0.0
    batch_size: int | None = None  # None: default_batch_size(len(train))
    max_epochs: int = 200
    patience: int | None = None  # None: 3 * stall_window(steps per epoch)
    schedule: str = "anneal"
    min_delta: float = 1e-4  # a smaller validation improvement counts as a stalled epoch
    warmup_steps: int = 0
    grad_clip: float | None = 1.0
    seed: int = 0
    eval_batch_size: int = 1024
    progress: bool = True
    checkpoint_dir: str | None = None
    threads: int | None = None
    resume: bool = True
    device: str | None = None
    autocast: str | None = None
    positions: int | None = None
    drop_last: bool = False
    sampled_softmax: int | None = None
    proposal: str = "unigram"
    monitor: tuple[str, ...] | None = None
    time_limit: float | None = None
    plateau_steps: int | None = None
    plateau_tol: float = 0.02
    bucket: int | None = None

    def __post_init__(self):
        for name in ("progress", "resume", "drop_last"):  # 'False' would be truthy
            check_bool(name, getattr(self, name))
        # NumPy numbers become Python ones: torch's generators and the checkpoint's JSON take
        # only those.
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.integer):
                setattr(self, f.name, int(v))
            elif isinstance(v, np.floating):
                setattr(self, f.name, float(v))
        if self.monitor is not None:
            if isinstance(self.monitor, str) or not all(isinstance(m, str) for m in self.monitor) \
                    or not self.monitor:
                raise ValueError("monitor must be None or a non-empty tuple of field names, got "
                                 f"{self.monitor!r}")
            self.monitor = tuple(self.monitor)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        for name in ("max_epochs", "eval_batch_size"):
            check_int(name, getattr(self, name), 1)
        for name in ("batch_size", "patience", "plateau_steps", "bucket"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1)
        check_int("warmup_steps", self.warmup_steps, 0)
        check_int("seed", self.seed, 0)
        if self.seed >= 2**63:  # what torch's generators take
            raise ValueError(f"seed must be below 2**63, got {self.seed}")
        if self.threads is not None:
            check_int("threads", self.threads, 1)
        if self.positions is not None:
            check_int("positions", self.positions, 1)
        if self.sampled_softmax is not None:
            check_int("sampled_softmax", self.sampled_softmax, 1)
        if self.proposal not in ("unigram", "uniform"):
            raise ValueError(f"proposal must be 'unigram' or 'uniform', got {self.proposal!r}")
        # Settings that would be ignored without a word are refused.
        if self.proposal != "unigram" and self.sampled_softmax is None:
            raise ValueError(f"proposal={self.proposal!r} is the sampled softmax's: it needs "
                             "sampled_softmax=<number of negatives>")
        if self.warmup_steps and self.schedule not in ("cosine", "constant"):
            raise ValueError(f"warmup_steps={self.warmup_steps} warms up the 'cosine' and "
                             f"'constant' schedules; schedule={self.schedule!r} has none")
        if self.time_limit is not None and (
                isinstance(self.time_limit, bool) or not isinstance(self.time_limit, int | float)
                or not 0 < self.time_limit < math.inf):
            raise ValueError(f"time_limit must be None or a finite number of seconds > 0, got "
                             f"{self.time_limit!r}")
        if self.autocast not in (None, "bf16", "fp16"):
            raise ValueError(f"autocast must be None, 'bf16' or 'fp16', got {self.autocast!r}")
        for name, low in (("lr", 0.0), ("weight_decay", None), ("grad_clip", 0.0),
                          ("min_delta", None), ("plateau_tol", None)):
            v = getattr(self, name)
            if name == "grad_clip" and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) \
                    or (low is not None and v <= low) or v < 0:
                raise ValueError(f"{name} must be a finite number {'> 0' if low == 0 else '>= 0'}"
                                 f", got {v!r}")

    def resume_key(self) -> dict:
        """The settings a resumed fit must share with the fit that wrote its checkpoint, as
        the checkpoint's JSON reads them back (a tuple is a list there, a device a string).

        Returns
        -------
        dict
            Every setting but ``progress``, ``checkpoint_dir``, ``threads``, ``resume`` and
            ``time_limit``.
        """
        key = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in
               ("progress", "checkpoint_dir", "threads", "resume", "time_limit")}
        return json.loads(json.dumps(key, default=str))


def with_overrides(config: TrainConfig | None, overrides: dict, caller: str) -> TrainConfig:
    """``config`` (the default settings if None) with the keyword ``overrides``, checked by
    name: the settings of :func:`efa.fit` and of the functions that fit through it.

    Parameters
    ----------
    config : TrainConfig or None
        The settings given, if any.
    overrides : dict
        :class:`TrainConfig` fields by name.
    caller : str
        The public function the settings were given to, named in the errors.

    Returns
    -------
    TrainConfig
        A new one where anything is overridden, ``config`` itself otherwise.

    Raises
    ------
    TypeError
        If ``config`` is not a :class:`TrainConfig` or an override names no field of it.
    """
    if config is not None and not isinstance(config, TrainConfig):
        raise TypeError(f"{caller}'s config is a TrainConfig, got {config!r}; pass settings as "
                        f"keywords, e.g. {caller}(..., max_epochs=30)")
    known = {f.name for f in fields(TrainConfig)}
    unknown = set(overrides) - known
    if unknown:
        raise TypeError(f"{caller} got unknown settings {sorted(unknown)}; TrainConfig has "
                        f"{sorted(known)}")
    cfg = config or TrainConfig()
    return replace(cfg, **overrides) if overrides else cfg


@dataclass
class History:
    """What :func:`efa.fit` did.

    Losses sum, over the target fields (the ``monitor`` fields for ``val_loss`` when set),
    each field's mean negative log-likelihood per predicted position: ``val_loss`` on the
    whole validation set, ``train_loss`` the mean of the epoch's batch losses (which add the
    model's penalty, such as ``bag_l2``).

    Parameters
    ----------
    train_loss : list of float
        The training loss of every epoch.
    val_loss : list of float
        The validation loss after every epoch (empty without validation data).
    lr : list of float
        The learning rate after each epoch's schedule step.
    best_epoch : int, default -1
        The best epoch's index in ``val_loss`` (from 0: 1 is the second epoch; its weights
        are restored); −1 when the starting weights were kept,
        or when there was no validation data (then the last epoch's weights are kept).
    best_val : float, default inf
        Its validation loss.
    epochs_run : int, default 0
        Epochs run.
    seconds : float, default 0.0
        Seconds of training.
    epoch_seconds : list of float
        The wall seconds of every epoch, its validation included (empty for a fit by
        :func:`efa.training.lbfgs.fit_lbfgs`).
    threads : int or None, default None
        The torch threads it trained with (numbers depend on them).
    start_val : float or None, default None
        The validation loss of the starting weights.
    stopped : str, default ""
        Why training ended: ``"patience"``, ``"max_epochs"`` or ``"time_limit"`` (a fit by
        :func:`efa.training.lbfgs.fit_lbfgs`: ``"converged"`` or ``"max_iter"``).
    batch_size : int or None, default None
        The sequences per step it trained with (chosen from the data when the settings left
        it unset).
    patience : int or None, default None
        The early-stopping patience it trained with, in epochs (chosen from the data when the
        settings left it unset).
    plateau_patience : int or None, default None
        Its patience while the validation loss had not left the first epoch's plateau
        (``plateau_steps`` in epochs; None when the settings did not ask for one).
    """

    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)  # after each epoch's schedule step
    best_epoch: int = -1
    best_val: float = math.inf
    epochs_run: int = 0
    seconds: float = 0.0
    epoch_seconds: list[float] = field(default_factory=list)  # each epoch's, validation included
    threads: int | None = None  # torch threads it trained with (numbers depend on them)
    start_val: float | None = None  # validation loss of the starting weights
    stopped: str = ""  # why training ended: "patience", "max_epochs", "time_limit"
    batch_size: int | None = None  # the sequences per step it trained with
    patience: int | None = None  # the early-stopping patience it trained with (epochs)
    plateau_patience: int | None = None  # its patience while on the first epoch's plateau


def default_batch_size(n: int, world: int = 1) -> int:
    """The batch size ``fit`` uses when the settings leave it unset.

    256 sequences per step; with fewer than 4,096 training sequences, the largest power of two
    at most n / 16 (and at least 16), so that an epoch takes at least 16 steps. A fixed 256
    gave small data sets one to three steps per epoch, and early stopping ended such fits
    before they had learned anything (the user guide's 800 movie sequences). At 4,096
    sequences and more the size is 256, the setting every committed teacher result used.

    Parameters
    ----------
    n : int
        The number of training sequences.
    world : int, default 1
        Processes training together (torchrun): the size is rounded down to a multiple of
        it, and is at least ``world``.

    Returns
    -------
    int
        Sequences per step (over all processes).
    """
    size = 256
    while size > 16 and size * 16 > n:
        size //= 2
    return max(world, size - size % world)


#: Steps of training that one stall test (of early stopping and the "anneal" schedule) covers
#: at least.
STALL_STEPS = 16


def stall_window(steps_per_epoch: int) -> int:
    """Epochs in a row that count as one stall test of early stopping and of the ``"anneal"``
    schedule: 1, or as many as it takes to cover 16 steps when an epoch takes fewer.

    On a small data set an epoch is a few steps (80 sequences in batches of 16 are 5), and a
    validation loss that does not improve after so little training is noise, not a plateau:
    halving the rate and stopping on it ended such fits early (the spatial guide's 80 days,
    with σ still far above the noise's). Whenever an epoch takes at least 16 steps — 256
    sequences or more with :func:`default_batch_size` — the window is one epoch, as before.

    Parameters
    ----------
    steps_per_epoch : int
        Optimisation steps per epoch.

    Returns
    -------
    int
        Epochs per stall test.
    """
    return max(1, math.ceil(STALL_STEPS / max(1, steps_per_epoch)))


def default_patience(steps_per_epoch: int) -> int:
    """The early-stopping patience ``fit`` uses when the settings leave it unset: 3 stall tests
    of :func:`stall_window` epochs each (3 epochs when an epoch takes at least 16 steps).

    Parameters
    ----------
    steps_per_epoch : int
        Optimisation steps per epoch.

    Returns
    -------
    int
        Epochs in a row without improvement before the fit stops.
    """
    return 3 * stall_window(steps_per_epoch)


def plateau_patience(cfg: TrainConfig, steps_per_epoch: int) -> int | None:
    """The patience, in epochs, of a fit whose validation loss has not left the first epoch's
    plateau: ``cfg.plateau_steps`` optimiser steps' worth (rounded up), at least
    ``cfg.patience``; None when the settings ask for no plateau rule.

    Parameters
    ----------
    cfg : TrainConfig
        The fit's settings, ``patience`` resolved.
    steps_per_epoch : int
        Optimiser steps per epoch.

    Returns
    -------
    int or None
        Epochs in a row without improvement before a fit on its plateau stops.
    """
    assert cfg.patience is not None
    if cfg.plateau_steps is None:
        return None
    return max(cfg.patience, -(-cfg.plateau_steps // steps_per_epoch))


def patience_now(cfg: TrainConfig, hist: History, steps_per_epoch: int) -> int:
    """The early-stopping patience in force after the epochs in ``hist``: ``cfg.patience``, or
    :func:`plateau_patience` while the best validation loss is still within
    ``cfg.plateau_tol`` nats of the first epoch's.

    Parameters
    ----------
    cfg : TrainConfig
        The fit's settings, ``patience`` resolved.
    hist : History
        The epochs so far.
    steps_per_epoch : int
        Optimiser steps per epoch.

    Returns
    -------
    int
        Epochs in a row without improvement before the fit stops.
    """
    assert cfg.patience is not None
    waiting = plateau_patience(cfg, steps_per_epoch)
    if waiting is None or (hist.val_loss and hist.best_val < hist.val_loss[0] - cfg.plateau_tol):
        return cfg.patience
    return waiting
