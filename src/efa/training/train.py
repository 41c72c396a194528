"""Fitting: Adam(W) with a schedule, early stopping on the validation log-likelihood with the
best weights restored, seeded shuffling, a progress bar, and checkpoints that resume.

Works for any ``ConditionalModel`` (EFA and the factorisation baselines alike). Nothing here
returns a non-finite number without an error that says where it came from.
"""

from __future__ import annotations

import contextlib
import copy
import math
import random
import sys
import time
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from efa.core import softmax
from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.training import checkpoint, distributed
from efa.training.scoring import check_int, check_targets, evaluate, in_batches, raise_non_finite

SCHEDULES = ("anneal", "plateau", "cosine", "constant")
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
    """Within the block, every ``fit`` without a device of its own trains on ``device``, and
    every fit without a ``checkpoint_dir`` of its own checkpoints to ``checkpoints/fitK`` (the
    K-th fit of the block), so that a killed job resumes its fits mid-way. `efa reproduce` runs
    each job inside one; nothing is written onto a model or into a module."""
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


class StillImproving(UserWarning):
    """The best validation epoch was the last one: more epochs may help."""


@dataclass
class TrainConfig:
    """Training settings.

    The defaults (AdamW 6e-3, batches of 256 sequences, the learning rate halved after every
    validation epoch that does not improve on the best by ``min_delta`` = 1e-4 nats, stop
    after ``patience`` = 3 such epochs in a row, best epoch restored) fit efa's own teacher
    data to within 0.01 nats of the Bayes limit in about 17 epochs (``efa reproduce
    teacher``, docs/peers.md).
    schedule: "anneal" (halve the rate on every stalled validation epoch), "plateau" (halve it
      after ``max(1, patience // 3) + 1`` stalled epochs in a row, PyTorch's relative threshold
      of 1e-4; the earlier default), "cosine" (per step, over ``max_epochs``, after
      ``warmup_steps``), "constant". Without validation data "anneal" and "plateau" keep the
      rate constant.
    threads: torch CPU threads during ``fit`` (None: leave torch's setting). Results depend on
      the thread count; on a shared or small machine 1 thread is often fastest (no
      oversubscription). resume: with ``checkpoint_dir``, continue from a checkpoint written by
      the same model, data and settings (False: start over, replacing it).
    device: where to train ("cuda", "cuda:1", "cpu"; None: where the model is, or the
      default set by ``efa reproduce --device``); batches are moved there one at a time.
    autocast: "bf16" or "fp16" mixed precision for the forward pass (None: off).
    positions: m > 0 samples m scored positions per sequence per step (uniformly, with weights
      that keep the objective unbiased) instead of all of them — the cheap stochastic masked
      pseudo-likelihood for long sequences in copies mode; evaluation stays exact.
    drop_last: skip a last partial batch (needed when a data-parallel world size does not
      divide the data).
    sampled_softmax: k > 0 trains category read-outs by the sampled softmax with k negatives
      per batch from the ``proposal`` ("unigram": training frequencies, or "uniform"), with
      the log-Q correction (large vocabularies; evaluation stays exact).
    monitor: the target fields whose summed validation log-likelihood decides early stopping
      and the schedule (None: every target field), e.g. only the response of a classifier
      trained on the joint pseudo-likelihood; training still fits every field.
    """

    lr: float = 6e-3
    weight_decay: float = 0.0
    batch_size: int = 256
    max_epochs: int = 200
    patience: int = 3
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

    def __post_init__(self):
        for name in ("progress", "resume", "drop_last"):  # 'False' would be truthy
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.monitor is not None:
            if isinstance(self.monitor, str) or not all(isinstance(m, str) for m in self.monitor) \
                    or not self.monitor:
                raise ValueError("monitor must be None or a non-empty tuple of field names, got "
                                 f"{self.monitor!r}")
            self.monitor = tuple(self.monitor)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        for name in ("batch_size", "max_epochs", "patience", "eval_batch_size"):
            check_int(name, getattr(self, name), 1)
        check_int("warmup_steps", self.warmup_steps, 0)
        check_int("seed", self.seed, None)
        if self.threads is not None:
            check_int("threads", self.threads, 1)
        if self.positions is not None:
            check_int("positions", self.positions, 1)
        if self.sampled_softmax is not None:
            check_int("sampled_softmax", self.sampled_softmax, 1)
        if self.proposal not in ("unigram", "uniform"):
            raise ValueError(f"proposal must be 'unigram' or 'uniform', got {self.proposal!r}")
        if self.autocast not in (None, "bf16", "fp16"):
            raise ValueError(f"autocast must be None, 'bf16' or 'fp16', got {self.autocast!r}")
        for name, low in (("lr", 0.0), ("weight_decay", None), ("grad_clip", 0.0),
                          ("min_delta", None)):
            v = getattr(self, name)
            if name == "grad_clip" and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) \
                    or (low is not None and v <= low) or v < 0:
                raise ValueError(f"{name} must be a finite number {'> 0' if low == 0 else '>= 0'}"
                                 f", got {v!r}")


@dataclass
class History:
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)  # after each epoch's schedule step
    best_epoch: int = -1
    best_val: float = math.inf
    epochs_run: int = 0
    seconds: float = 0.0
    threads: int | None = None  # torch threads it trained with (numbers depend on them)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch: same seed, same numbers (on the same machine, with the same
    number of torch threads)."""
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

    Without ``val`` the model trains for ``max_epochs`` and keeps the last weights. With
    ``checkpoint_dir`` the full state is saved after every epoch and a killed run resumes from
    the last completed epoch with identical results; the checkpoint is tied to the model, the
    data and the settings, and anything else is refused (``resume=False`` starts over).
    """
    if config is not None and not isinstance(config, TrainConfig):
        raise TypeError(
            f"fit's fourth argument is a TrainConfig, got {config!r}; pass settings as keywords, "
            "e.g. fit(model, train, val, max_epochs=30)"
        )
    known = {f.name for f in fields(TrainConfig)}
    unknown = set(overrides) - known
    if unknown:
        raise TypeError(f"fit got unknown settings {sorted(unknown)}; TrainConfig has "
                        f"{sorted(known)}")
    cfg = config or TrainConfig()
    if overrides:
        cfg = TrainConfig(**{**asdict(cfg), **overrides})
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
    model.standardise(train)  # Value fields left at loc/scale None: standardised on train
    device = cfg.device or getattr(_CONTEXT.get(), "device", None)
    if device is not None:
        check_device(device)
        model.to(device)
    threads = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    try:
        return _fit(model, train, val, cfg)
    finally:
        torch.set_num_threads(threads)


def check_device(device: str | torch.device) -> None:
    d = torch.device(device)
    if d.type == "cpu":
        return
    backend = getattr(torch, d.type, None)
    if backend is None or not backend.is_available() or (
            d.index is not None and d.index >= backend.device_count()):
        raise ValueError(f"device {device!r} does not exist on this machine")


def _fit(model, train, val, cfg: TrainConfig) -> History:
    rank, size = distributed.world()
    distributed.check_sizes(len(train), cfg.batch_size, size, cfg.drop_last)
    device = model.device
    gen = torch.Generator().manual_seed(cfg.seed)
    sampler = torch.Generator().manual_seed(cfg.seed + 7919)  # sampled positions
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    n_batches = len(train) // cfg.batch_size if cfg.drop_last else \
        math.ceil(len(train) / cfg.batch_size)
    if n_batches == 0:
        raise ValueError(f"drop_last with {len(train)} sequences in batches of "
                         f"{cfg.batch_size} leaves no batch")
    sched, plateau = _scheduler(opt, cfg, n_batches)
    hist, best_state, bad, start_epoch = History(), None, 0, 0
    initial = copy.deepcopy(model.state_dict())
    fingerprint = {
        "model": checkpoint.model_fingerprint(model),
        "data": checkpoint.data_fingerprint(train, val),
        "settings": _resume_key(asdict(cfg)),
        "initial": checkpoint.weights_fingerprint(initial),
    }
    own = cfg.checkpoint_dir is not None and cfg.checkpoint_dir != ""
    folder = Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else _job_fit_folder(size)
    if own and folder is not None and folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"checkpoint_dir {str(folder)!r} is a file, not a folder")
    if folder is not None and cfg.resume:
        resumed = _resume(folder, own, fingerprint, model, opt, plateau or sched, gen, sampler)
        if resumed is not None:
            hist, best_state, bad = resumed
            start_epoch = hist.epochs_run
    negatives = torch.Generator().manual_seed(cfg.seed + 104729)
    sampling = None if cfg.sampled_softmax is None else softmax.Sampling(
        cfg.sampled_softmax, softmax.proposals(model, train, cfg.proposal), negatives)
    objective: torch.nn.Module = distributed.Loss(model)
    if size > 1:
        from torch.nn.parallel import DistributedDataParallel

        objective = DistributedDataParallel(objective, find_unused_parameters=True)
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.autocast or "")

    t0 = saved = time.perf_counter() - hist.seconds
    bar = tqdm(
        range(start_epoch, cfg.max_epochs),
        # On a terminal only: piped into a log, a bar writes hundreds of carriage returns.
        disable=not cfg.progress or not sys.stderr.isatty() or rank != 0,
        desc="fit",
        unit="epoch",
        initial=start_epoch,
        total=cfg.max_epochs,
    )
    try:
        for epoch in bar:
            if bad >= cfg.patience:
                break
            model.train()
            order = torch.randperm(len(train), generator=gen)
            total = 0.0
            for start in range(0, n_batches * cfg.batch_size, cfg.batch_size):
                idx = order[start : start + cfg.batch_size]
                with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                    loss, batch = _batch_loss(model, objective, train, idx, cfg, sampler,
                                              sampling, rank, size)
                if not torch.isfinite(loss):
                    raise_non_finite(model, batch, idx[rank::size], "fit", f" at epoch {epoch}")
                _step(model, opt, sched, loss, cfg.grad_clip)
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
            bar.set_postfix(
                train=f"{hist.train_loss[-1]:.4f}",
                val=f"{hist.val_loss[-1]:.4f}" if hist.val_loss else "-",
            )
            # A job's own checkpoints are written at most every JOB_SAVE_SECONDS: many short
            # fits are not slowed down, and a kill costs at most that much of a long one.
            if folder is not None and (own or time.perf_counter() - saved >= JOB_SAVE_SECONDS):
                if rank == 0:
                    checkpoint.save_state(folder, model, opt, plateau or sched, gen, sampler,
                                          asdict(hist), best_state, bad, fingerprint)
                saved = time.perf_counter()
                distributed.barrier()
    except FloatingPointError:
        # Leave the user a usable model, not the destroyed weights.
        model.load_state_dict(best_state if best_state is not None else initial)
        model.eval()
        raise
    finally:
        bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    hist.threads = torch.get_num_threads()
    if val is not None and hist.best_epoch == hist.epochs_run - 1 and \
            hist.epochs_run == cfg.max_epochs:
        warnings.warn(
            f"the best validation epoch was the last one ({hist.epochs_run}): the model may "
            "still be improving; consider more epochs", StillImproving, stacklevel=3)
    return hist


def _resume(folder: Path, own: bool, fingerprint: dict, model, opt, sched, gen, sampler):
    """(history, best weights, bad epochs) from the checkpoint in ``folder``, or None. A user's
    folder written for another model, data or settings is an error saying what differs; a
    job's own (``own`` False) is started over: restore_state checks the fingerprint before it
    changes anything, and the next save replaces the file."""
    state = checkpoint.load(folder)
    if state is None:
        return None
    try:
        return checkpoint.restore_state(state, folder, fingerprint, model, opt, sched, gen,
                                        sampler, History)
    except ValueError:
        if own:
            raise
        return None


def _batch_loss(model, objective, train: Sequences, idx, cfg: TrainConfig, sampler,
                sampling, rank: int, size: int) -> tuple[torch.Tensor, Sequences]:
    """This rank's loss on the batch ``train[idx]`` (and the batch it was computed on)."""
    batch = train[idx[rank::size]]
    if batch.device != model.device:
        batch = batch.to(model.device)
    if size == 1 and cfg.positions is None:  # options only when used: a subclass may narrow
        return (model.loss(batch) if sampling is None else
                model.loss(batch, sampling=sampling)), batch
    # Normalise by the predicted positions of the whole batch (all ranks, all positions): the
    # ranks then sum to one process's exact-batch gradient.
    whole = train[idx] if size > 1 else batch
    counts = {f.name: int(whole.predicted(f.name).sum()) for f in model.target_fields}
    weights = None
    if cfg.positions is not None:
        batch, weights = sample_positions(batch, cfg.positions, sampler)
    return objective(batch, weights, counts, float(size), sampling), batch


def _step(model, opt, sched, loss: torch.Tensor, grad_clip: float | None) -> None:
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    if sched is not None:
        sched.step()


def sample_positions(batch: Sequences, m: int,
                     gen: torch.Generator) -> tuple[Sequences, torch.Tensor]:
    """Keep m scored positions per sequence, uniformly at random (all when fewer), and the
    weights n_b / m_b that make the sum of the kept terms an unbiased estimate of the sum of
    all of them."""
    slots = batch.scored_positions()
    keys = torch.rand(slots.shape, generator=gen).to(slots.device)
    keys = keys.masked_fill(~slots, 2.0)  # never picked before a real slot
    k = min(m, slots.shape[1])
    chosen = torch.zeros_like(slots)
    chosen.scatter_(1, keys.topk(k, dim=1, largest=False).indices, True)
    chosen &= slots
    n = slots.sum(1)
    weights = n.double() / chosen.sum(1).clamp(min=1)
    return batch.with_scored(chosen), weights


def _resume_key(cfg: dict) -> dict:
    """The settings a resumed run must share with the run that wrote the checkpoint."""
    return {k: v for k, v in cfg.items()
            if k not in ("progress", "checkpoint_dir", "threads", "resume")}


def _scheduler(opt, cfg: TrainConfig, steps_per_epoch: int):
    """(per-step scheduler, per-epoch plateau scheduler); exactly one is not None."""
    if cfg.schedule == "anneal":
        # The rate comes down exactly when validation stops responding to it; the stall test is
        # early stopping's own (an improvement of at least min_delta on the best).
        return None, torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, factor=0.5, patience=0, threshold=cfg.min_delta, threshold_mode="abs"
        )
    if cfg.schedule == "plateau":
        return None, torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, factor=0.5, patience=max(1, cfg.patience // 3)
        )
    total = cfg.max_epochs * steps_per_epoch

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.schedule == "constant":
            return 1.0
        progress = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor), None
