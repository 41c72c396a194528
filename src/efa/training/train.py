"""Fitting: Adam(W) with a schedule, early stopping on the validation log-likelihood with the
best weights restored, seeded shuffling, a progress bar, and checkpoints that resume.

Works for any ``ConditionalModel`` (EFA and the factorisation baselines alike). Nothing here
returns a non-finite number without an error that says where it came from.

``TrainConfig`` and ``History`` live in :mod:`efa.training.settings` and are importable from
here too; a batch's loss, the update and the schedules are in :mod:`efa.training.steps`.
"""

from __future__ import annotations

import contextlib
import copy
import random
import sys
import time
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from efa.core import softmax
from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.deprecation import moved_out
from efa.training import checkpoint, distributed, steps
from efa.training.scoring import check_int, check_targets, evaluate, in_batches, raise_non_finite
from efa.training.settings import (
    History,
    StartKept,
    StillImproving,
    TimeLimitReached,
    TrainConfig,
    default_batch_size,
    default_patience,
    patience_now,
    plateau_patience,
    with_overrides,
)

__getattr__ = moved_out(__name__)  # names moved out: efa.deprecation.MOVED_NAMES

JOB_SAVE_SECONDS = 60.0


@dataclass
class _Context:
    device: str | None = None
    checkpoints: Path | None = None
    fits: int = 0  # fits started in this context: fit K checkpoints to checkpoints/fitK


_CONTEXT: ContextVar[_Context | None] = ContextVar("efa_fit_context", default=None)


@contextlib.contextmanager
def fit_context(device: str | None = None,
                checkpoints: str | Path | None = None) -> Iterator[None]:
    """Set a device and job checkpoints for every ``fit`` inside the block (a context manager).

    Within the block, every ``fit`` without a device of its own trains on ``device``, and
    every fit without a ``checkpoint_dir`` of its own checkpoints to ``checkpoints/fitK`` (the
    K-th fit of the block, single-process fits only, saved at most every
    ``JOB_SAVE_SECONDS``), so that a killed job resumes its fits mid-way. ``efa reproduce``
    runs each job inside one; nothing is written onto a model or into a module.

    Parameters
    ----------
    device : str or None, default None
        The device for the block's fits (None: each fit's own default).
    checkpoints : str or pathlib.Path or None, default None
        The job's checkpoint folder (None: no job checkpoints).

    Yields
    ------
    None
        The settings hold until the block ends, also when it raises.
    """
    token = _CONTEXT.set(_Context(device, None if checkpoints is None else Path(checkpoints)))
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def _job_fit_folder(size: int) -> Path | None:
    """The next fit's folder in the running context (single-process fits only: the time-based
    saves of a job's fits need no agreement between ranks)."""
    context = _CONTEXT.get()
    if context is None or context.checkpoints is None or size != 1:
        return None
    context.fits += 1
    return context.checkpoints / f"fit{context.fits - 1}"


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch: same seed, same numbers.

    The same numbers on the same machine, with the same number of torch threads.

    Parameters
    ----------
    seed : int
        The seed, >= 0.

    Raises
    ------
    ValueError
        When ``seed`` is not an integer >= 0.
    """
    check_int("seed", seed, 0)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _val_loss(model, data, batch_size, monitor=None) -> float:
    rank, size = distributed.world()
    if size == 1:
        return -sum(evaluate(model, data, batch_size, fields=monitor).values())
    # Each rank scores its shard; the all-reduced sums make the same decision everywhere.
    shard = data[torch.arange(rank, len(data), size)] if rank < len(data) else None
    sums = {f.name: [0.0, 0] for f in model.target_fields
            if monitor is None or f.name in monitor}
    if shard is not None:
        with torch.no_grad():
            model.eval()
            for _, batch in in_batches(shard, batch_size, model.device):
                for name, (s, n) in model.log_likelihood_sums(batch, check=False).items():
                    if name in sums:
                        sums[name][0] += float(s)
                        sums[name][1] += n
            model.train()
    flat = distributed.all_sum([v for pair in sums.values() for v in pair])
    return -sum(flat[2 * k] / max(flat[2 * k + 1], 1) for k in range(len(sums)))


# --------------------------------------------------------------------------- fitting


def fit(
    model: ConditionalModel,
    train: Sequences,
    val: Sequences | None = None,
    config: TrainConfig | None = None,
    **overrides: Any,
) -> History:
    """Maximise the (pseudo) log-likelihood of ``train``; stop early on ``val``.

    Parameters
    ----------
    model : ConditionalModel
        The model to train, in place (``efa.EFA`` or a peer).
    train : Sequences
        Training data; every ``Value`` whose ``loc``/``scale`` are unset is standardised to the
        mean and standard deviation of its training values first.
    val : Sequences, optional
        Validation data for early stopping, the schedule and the best epoch (restored at the
        end). Without it the model trains for ``max_epochs`` and keeps the last weights.
    config : TrainConfig, optional
        The settings (default ``TrainConfig()``).
    **overrides
        Any :class:`TrainConfig` field by name, e.g. ``lr=3e-3, threads=1``.

    Returns
    -------
    History
        Losses and learning rates per epoch, the best epoch and why training stopped.

    Notes
    -----
    With ``checkpoint_dir`` the full state is saved after every epoch and a killed run resumes
    from the last completed epoch with identical results; the checkpoint is tied to the model,
    the data and the settings, and anything else is refused (``resume=False`` starts over).

    Examples
    --------
    >>> history = efa.fit(model, train, val, threads=1, progress=False)  # doctest: +SKIP
    """
    cfg = with_overrides(config, overrides, "fit")
    if cfg.monitor is not None:
        check_targets(model, cfg.monitor)
    generic = [what for what, on in (("positions=m", cfg.positions is not None),
                                     ("data-parallel training", distributed.world()[1] > 1),
                                     ("sampled_softmax", cfg.sampled_softmax is not None)) if on]
    if generic and getattr(model, "own_objective", False):
        raise ValueError(f"{generic[0]} needs a model whose loss takes per-sequence weights and "
                         f"global counts, as efa.EFA's does; {type(model).__name__}.loss "
                         f"computes its own objective: train it without {generic[0]}")
    if cfg.positions is not None and cfg.positions > train.max_len:
        raise ValueError(
            f"positions={cfg.positions} is more than the sequences hold ({train.max_len}); "
            "use positions=None for the exact objective"
        )
    for what, data in (("training", train), ("validation", val)):
        if data is None:
            continue
        model.check(data)
        watched = [f.name for f in model.target_fields if what == "training"
                   or cfg.monitor is None or f.name in cfg.monitor]
        empty = [name for name in watched if not data.predicted(name).any()]
        if empty:
            raise ValueError(
                f"the {what} data have no predicted position for field(s) {empty} (all values "
                "missing, or `scored` all False): there is nothing to fit or to stop early on"
            )
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"{type(model).__name__} has no parameters to train: it is used as it "
                         "is (evaluate, predict), not fitted")
    half = {str(p.dtype) for p in model.parameters() if p.dtype in (torch.float16, torch.bfloat16)}
    if half:  # AdamW's steps underflow there
        raise ValueError(f"fit trains float32 or float64 weights, the model has {sorted(half)}: "
                         "keep the weights float32 and pass autocast='fp16' or 'bf16'")
    device = cfg.device or getattr(_CONTEXT.get(), "device", None)
    if device is not None:  # checked before anything of the model changes
        check_device(device)
    model.standardise(train)  # Value fields left at loc/scale None: standardised on train
    if device is not None:
        model.to(device)
    threads = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    try:
        return _fit(model, train, val, cfg)
    finally:
        torch.set_num_threads(threads)


def fit_glm_first(model: ConditionalModel, train: Sequences, val: Sequences | None = None,
                  config: TrainConfig | None = None,
                  **overrides: Any) -> tuple[History, History]:
    """Fit the GLM that ``model`` contains, then every parameter from there.

    Stage 1 sets the GLM's read-out weights to 0 and trains only the GLM's parameters
    (``model.glm_part()``; for ``EFA`` the multinomial logit on context counts of its
    ``Category(bag=True)`` fields); stage 2 trains everything from that fit and, as every fit
    does, keeps it unless an epoch beats it on validation: the model never ends worse on
    validation than the GLM it contains.

    Parameters
    ----------
    model : ConditionalModel
        A model with a ``glm_part()`` that returns parameters (e.g. an ``EFA`` with a
        ``Category(bag=True)`` target field); trained in place.
    train : Sequences
        Training data.
    val : Sequences, optional
        Validation data, as in :func:`fit`.
    config : TrainConfig, optional
        The settings of both stages (default ``TrainConfig()``); a ``checkpoint_dir`` gets a
        folder per stage (``glm`` and ``all``).
    **overrides
        Any :class:`TrainConfig` field by name.

    Returns
    -------
    first : History
        Stage 1's history (the GLM alone).
    second : History
        Stage 2's history (every parameter).

    Raises
    ------
    ValueError
        When ``model`` contains no GLM to fit first.
    """
    part = getattr(model, "glm_part", None)
    params, zero = part() if part is not None else ([], [])
    if not params:
        raise ValueError(f"{type(model).__name__} contains no GLM to fit first (an EFA needs a "
                         "Category(bag=True) target field)")
    cfg = with_overrides(config, overrides, "fit_glm_first")
    stages = [cfg, cfg]
    if cfg.checkpoint_dir:
        stages = [replace(cfg, checkpoint_dir=str(Path(cfg.checkpoint_dir) / stage))
                  for stage in ("glm", "all")]
    with torch.no_grad():
        for w in zero:
            w.zero_()
    keep = {id(p) for p in params}
    frozen = [p for p in model.parameters() if p.requires_grad and id(p) not in keep]
    for p in frozen:
        p.requires_grad_(False)
    try:
        first = fit(model, train, val, stages[0])
    finally:
        for p in frozen:
            p.requires_grad_(True)
    return first, fit(model, train, val, stages[1])


def check_device(device: str | torch.device) -> None:
    """Refuse a device that does not exist on this machine (the CPU always does).

    Parameters
    ----------
    device : str or torch.device
        E.g. ``"cuda"``, ``"cuda:1"`` or ``"cpu"``.

    Raises
    ------
    ValueError
        When the device's backend is not available or the index is beyond its device count.
    """
    d = torch.device(device)
    if d.type == "cpu":
        return
    backend = getattr(torch, d.type, None)
    if backend is None or not backend.is_available() or (
            d.index is not None and d.index >= backend.device_count()):
        raise ValueError(f"device {device!r} does not exist on this machine")


def _fit(model, train, val, cfg: TrainConfig) -> History:
    rank, size = distributed.world()
    chosen = []  # what the settings left unset and the data decided
    if cfg.batch_size is None:
        cfg = replace(cfg, batch_size=default_batch_size(len(train), size))
        chosen.append(f"batch_size={cfg.batch_size}")
    assert cfg.batch_size is not None
    distributed.check_sizes(len(train), cfg.batch_size, size, cfg.drop_last)
    device = model.device
    gen = torch.Generator().manual_seed(cfg.seed)
    sampler = torch.Generator().manual_seed(cfg.seed + 7919)  # sampled positions
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    n_batches = len(train) // cfg.batch_size if cfg.drop_last else -(-len(train) // cfg.batch_size)
    if n_batches == 0:
        raise ValueError(f"drop_last with {len(train)} sequences in batches of "
                         f"{cfg.batch_size} leaves no batch")
    if cfg.patience is None:
        cfg = replace(cfg, patience=default_patience(n_batches))
        if val is not None:
            chosen.append(f"patience={cfg.patience}")
    assert cfg.batch_size is not None and cfg.patience is not None
    if cfg.plateau_steps is not None and val is not None:
        chosen.append(f"patience={plateau_patience(cfg, n_batches)} on the first plateau "
                      f"({cfg.plateau_steps} steps' worth)")
    if chosen and cfg.progress and rank == 0:
        print(f"efa.fit chose {' and '.join(chosen)} for {len(train)} training sequences "
              f"({n_batches} steps per epoch; pass them to set them)", file=sys.stderr, flush=True)
    sched, plateau = steps.scheduler(opt, cfg, n_batches)
    schedule = plateau or sched  # exactly one is built; its state rides in the checkpoint
    assert schedule is not None
    hist, best_state, bad, start_epoch = History(), None, 0, 0
    initial = copy.deepcopy(model.state_dict())
    fingerprint = {
        "model": checkpoint.model_fingerprint(model),
        "data": checkpoint.data_fingerprint(train, val),
        "settings": cfg.resume_key(),
        "initial": checkpoint.weights_fingerprint(initial),
    }
    own = cfg.checkpoint_dir is not None and cfg.checkpoint_dir != ""
    folder = Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else _job_fit_folder(size)
    if own and folder is not None and folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"checkpoint_dir {str(folder)!r} is a file, not a folder")
    negatives = torch.Generator().manual_seed(cfg.seed + 104729)  # in the checkpoint too
    # Bucketed batches differ in length: divide each by the epoch's mean count, not its own.
    per_batch = None if cfg.bucket is None else {
        f.name: float(train.predicted(f.name).sum()) / n_batches for f in model.target_fields}
    if folder is not None and cfg.resume:
        resumed = _resume(folder, own, fingerprint, model, opt, schedule, gen, sampler,
                          negatives)
        if resumed is not None:
            hist, best_state, bad = resumed
            start_epoch = hist.epochs_run
    sampling = None if cfg.sampled_softmax is None else softmax.Sampling(
        cfg.sampled_softmax, softmax.proposals(model, train, cfg.proposal), negatives)
    objective: torch.nn.Module = distributed.Loss(model)
    if size > 1:
        from torch.nn.parallel import DistributedDataParallel

        objective = DistributedDataParallel(objective, find_unused_parameters=True)
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.autocast or "")

    if val is not None and start_epoch == 0:  # (a resumed run has it in its history)
        hist.start_val = _val_loss(model, val, cfg.eval_batch_size, cfg.monitor)
    t0 = saved = time.perf_counter() - hist.seconds
    # On a terminal only: piped into a log, a bar writes hundreds of carriage returns.
    bar = tqdm(range(start_epoch, cfg.max_epochs), desc="fit", unit="epoch",
               disable=not cfg.progress or not sys.stderr.isatty() or rank != 0,
               initial=start_epoch, total=cfg.max_epochs)
    try:
        for epoch in bar:
            if bad >= patience_now(cfg, hist, n_batches):
                hist.stopped = "patience"
                break
            pace = hist.seconds / max(hist.epochs_run, 1)
            if cfg.time_limit is not None and hist.epochs_run > 0 and \
                    time.perf_counter() - t0 + pace > cfg.time_limit:
                hist.stopped = "time_limit"
                break
            began = time.perf_counter()
            model.train()
            order = torch.randperm(len(train), generator=gen)
            total = 0.0
            for idx in steps.batches(order, train.lengths, cfg.batch_size, n_batches,
                                     cfg.bucket, gen):
                with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                    loss, batch = steps.batch_loss(model, objective, train, idx, cfg, sampler,
                                                    sampling, rank, size, per_batch)
                if not torch.isfinite(loss):
                    raise_non_finite(model, batch, idx[rank::size], "fit", f" at epoch {epoch}")
                steps.step(model, opt, sched, loss, cfg.grad_clip)
                total += float(loss.detach()) / size
            hist.train_loss.append(distributed.all_sum([total])[0] / n_batches)
            if val is not None:
                v = _val_loss(model, val, cfg.eval_batch_size, cfg.monitor)
                hist.val_loss.append(v)
                if plateau is not None:
                    plateau.step(v)
                if v < hist.best_val - cfg.min_delta:
                    hist.best_val, hist.best_epoch, bad = v, epoch, 0
                    best_state = copy.deepcopy(model.state_dict())
                else:
                    bad += 1
            hist.lr.append(opt.param_groups[0]["lr"])
            hist.epochs_run = epoch + 1
            hist.seconds = time.perf_counter() - t0
            hist.epoch_seconds.append(time.perf_counter() - began)
            bar.set_postfix(
                train=f"{hist.train_loss[-1]:.4f}",
                val=f"{hist.val_loss[-1]:.4f}" if hist.val_loss else "-",
            )
            # A job's own checkpoints are written at most every JOB_SAVE_SECONDS: many short
            # fits are not slowed down, and a kill costs at most that much of a long one.
            if folder is not None and (own or time.perf_counter() - saved >= JOB_SAVE_SECONDS):
                if rank == 0:
                    checkpoint.save_state(folder, model, opt, schedule, gen, sampler,
                                          asdict(hist), best_state, bad, fingerprint,
                                          negatives)
                saved = time.perf_counter()
                distributed.barrier()
    except FloatingPointError:
        # Leave the user a usable model, not the destroyed weights.
        model.load_state_dict(best_state if best_state is not None else initial)
        model.eval()
        raise
    finally:
        bar.close()
    hist.stopped = hist.stopped or ("patience" if bad >= patience_now(cfg, hist, n_batches)
                                    else "max_epochs")
    if hist.start_val is not None and hist.start_val <= hist.best_val:
        best_state, hist.best_val, hist.best_epoch = initial, hist.start_val, -1
        warnings.warn(f"no epoch improved on the starting weights' validation loss "
                      f"({hist.start_val:.6g}): they are kept", StartKept, stacklevel=3)
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    hist.threads = torch.get_num_threads()
    hist.batch_size, hist.patience = cfg.batch_size, cfg.patience
    hist.plateau_patience = plateau_patience(cfg, n_batches)
    if hist.stopped == "time_limit":
        warnings.warn(f"fit stopped at its time limit of {cfg.time_limit:g} s after "
                      f"{hist.epochs_run} epochs ({hist.seconds:.1f} s); "
                      + (f"the best epoch (epoch {hist.best_epoch + 1} counted from 1, "
                         f"best_epoch={hist.best_epoch}) is restored"
                         if hist.best_epoch >= 0 else "the last weights are kept"
                         if val is None else "the starting weights are kept"),
                      TimeLimitReached, stacklevel=3)
    if val is not None and hist.best_epoch == hist.epochs_run - 1 and \
            hist.epochs_run == cfg.max_epochs:
        warnings.warn(
            f"the best validation epoch was the last one (epoch {hist.epochs_run} counted from "
            f"1, best_epoch={hist.best_epoch}): the model may "
            "still be improving; consider more epochs", StillImproving, stacklevel=3)
    return hist


def _resume(folder: Path, own: bool, fingerprint: dict, model, opt, sched, gen, sampler,
            negatives):
    """(history, best weights, bad epochs) from the checkpoint in ``folder``, or None. A user's
    folder written for another model, data or settings is an error saying what differs; a
    job's own (``own`` False) is started over: restore_state checks the fingerprint before it
    changes anything, and the next save replaces the file."""
    state = checkpoint.load(folder)
    if state is None:
        return None
    saved = state[1].get("fingerprint", {}) if isinstance(state[1], dict) else None
    if isinstance(saved, dict) and isinstance(saved.get("settings"), dict):
        # A setting added to TrainConfig after the checkpoint was written counts as its
        # default there, so that the checkpoint still resumes a fit that leaves it unset.
        for k, v in TrainConfig().resume_key().items():
            saved["settings"].setdefault(k, v)
    try:
        return checkpoint.restore_state(state, folder, fingerprint, model, opt, sched, gen,
                                        sampler, History, negatives)
    except ValueError:
        if own:
            raise
        return None
