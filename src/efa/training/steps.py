"""One optimisation step of :func:`efa.fit`: the batch's loss, the update, the schedule.

The loss of a batch is this rank's share of it, normalised by the predicted positions of the
whole batch when data-parallel or when positions are sampled (:func:`sample_positions`), so
that the ranks and the sampled terms together give the exact batch objective's gradient (in
expectation, for sampled positions). The update clips the gradient's norm; the schedules are
those of :class:`efa.TrainConfig`.
"""

from __future__ import annotations

import math

import torch

from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.core.softmax import Sampling
from efa.training.settings import TrainConfig, default_patience, stall_window

__all__ = ["batch_loss", "sample_positions", "scheduler", "step"]


def batch_loss(model: ConditionalModel, objective: torch.nn.Module, train: Sequences,
               idx: torch.Tensor, cfg: TrainConfig, sampler: torch.Generator,
               sampling: Sampling | None, rank: int, size: int,
               per_batch: dict[str, float] | None = None) -> tuple[torch.Tensor, Sequences]:
    """Compute this rank's loss on the batch ``train[idx]``.

    In a single process without sampled positions, this is ``model.loss(batch)``; otherwise
    the loss goes through ``objective`` with each field's count of predicted positions over the
    whole batch (all ranks, all positions) and, with ``cfg.positions``, the weights of the
    sampled positions.

    Parameters
    ----------
    model : ConditionalModel
        The model being fitted.
    objective : torch.nn.Module
        The model's loss as a module (:class:`efa.training.distributed.Loss`, wrapped by
        DistributedDataParallel when data-parallel).
    train : Sequences
        The training data.
    idx : torch.Tensor
        The sequence indices of the global batch; this rank takes ``idx[rank::size]``.
    cfg : TrainConfig
        The fit's settings (``positions`` is read).
    sampler : torch.Generator
        Draws the sampled positions.
    sampling : Sampling or None
        Sampled-softmax settings, or None for the full softmax.
    rank : int
        This process's rank.
    size : int
        The world size.
    per_batch : dict of str to float, optional
        Each field's count to divide by instead of the batch's own: its predicted positions
        in the training data over the batches per epoch. With length buckets a batch's own
        count would weigh a position of a short batch up to L_max / L_min times more (the
        objective drifts towards a mean per sequence); with it, every position weighs the
        same and an epoch's gradient is that of the per-position mean.

    Returns
    -------
    loss : torch.Tensor
        The scalar loss.
    batch : Sequences
        The batch it was computed on (on the model's device; with sampled positions, its
        ``scored`` mask marks the kept ones).
    """
    batch = train[idx[rank::size]]
    if batch.device != model.device:
        batch = batch.to(model.device)
    if size == 1 and cfg.positions is None and per_batch is None:  # options only when used: a
        return (model.loss(batch) if sampling is None else  # subclass may narrow them
                model.loss(batch, sampling=sampling)), batch
    # Normalise by the predicted positions of the whole batch (all ranks, all positions): the
    # ranks then sum to one process's exact-batch gradient.
    whole = train[idx] if size > 1 else batch
    counts = per_batch or {f.name: int(whole.predicted(f.name).sum())
                           for f in model.target_fields}
    weights = None
    if cfg.positions is not None:
        batch, weights = sample_positions(batch, cfg.positions, sampler)
    return objective(batch, weights, counts, float(size), sampling), batch


def batches(order: torch.Tensor, lengths: torch.Tensor, batch_size: int, n_batches: int,
            bucket: int | None, gen: torch.Generator) -> list[torch.Tensor]:
    """Cut an epoch's shuffled ``order`` into its ``n_batches`` batches of sequence indices.

    Without ``bucket``, consecutive slices of ``order`` (the last may be shorter, or is left
    out when ``n_batches`` says so). With ``bucket`` = b, each window of b · batch_size
    indices of ``order`` is sorted by length (longest first, ties in the order's order) before
    it is cut, and the batches are then put in a random order drawn from ``gen``: a batch holds
    sequences of similar lengths, so less padding, while which sequences meet in a window, and
    the order of the batches, stay random.

    Parameters
    ----------
    order : torch.Tensor
        A permutation of the training sequences' indices.
    lengths : torch.Tensor
        Every training sequence's length.
    batch_size : int
        Sequences per batch.
    n_batches : int
        Batches to return: ``ceil(len(order) / batch_size)``, or its floor to drop the
        last partial batch.
    bucket : int or None
        Batches per sorted window (None: no sorting).
    gen : torch.Generator
        Draws the batches' order (only with ``bucket``).

    Returns
    -------
    list of torch.Tensor
        The batches, in the order they are trained on.
    """
    if bucket is None:
        return [order[s : s + batch_size] for s in range(0, n_batches * batch_size, batch_size)]
    window = bucket * batch_size
    # A dropped partial batch is cut from the shuffled order before sorting: cut after it, it
    # would be the last window's shortest sequences, the same ones every epoch when one
    # window holds the data.
    order = order[: n_batches * batch_size]
    cut: list[torch.Tensor] = []
    for start in range(0, len(order), window):
        part = order[start : start + window]
        part = part[torch.sort(lengths[part].cpu(), descending=True, stable=True).indices]
        cut += list(part.split(batch_size))
    return [cut[i] for i in torch.randperm(len(cut), generator=gen)]


def step(model: torch.nn.Module, opt: torch.optim.Optimizer,
         sched: torch.optim.lr_scheduler.LRScheduler | None, loss: torch.Tensor,
         grad_clip: float | None) -> None:
    """Take one optimiser step on ``loss``.

    Zeroes the gradients, back-propagates, clips the gradient's norm, steps the optimiser and
    then the per-step scheduler.

    Parameters
    ----------
    model : torch.nn.Module
        The model whose parameters' gradients are clipped.
    opt : torch.optim.Optimizer
        The optimiser.
    sched : torch.optim.lr_scheduler.LRScheduler or None
        A per-step scheduler, or None (a per-epoch plateau scheduler is stepped by the fit).
    loss : torch.Tensor
        The scalar loss.
    grad_clip : float or None
        The largest gradient norm; None or 0 for no clipping.
    """
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    if sched is not None:
        sched.step()


def sample_positions(batch: Sequences, m: int,
                     gen: torch.Generator) -> tuple[Sequences, torch.Tensor]:
    """Keep ``m`` scored positions per sequence, uniformly at random (all when fewer).

    The weights n_b / m_b (scored positions over kept ones, per sequence) make the sum of the
    kept terms an unbiased estimate of the sum of all of them.

    Parameters
    ----------
    batch : Sequences
        The batch.
    m : int
        Positions kept per sequence.
    gen : torch.Generator
        Draws the positions (on the CPU).

    Returns
    -------
    batch : Sequences
        The batch with ``scored`` True at the kept positions only.
    weights : torch.Tensor, shape (B,)
        Per sequence, n_b / m_b (float64).
    """
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


def scheduler(opt: torch.optim.Optimizer, cfg: TrainConfig, steps_per_epoch: int
              ) -> tuple[torch.optim.lr_scheduler.LambdaLR | None,
                         torch.optim.lr_scheduler.ReduceLROnPlateau | None]:
    """Build the learning-rate schedule that ``cfg.schedule`` names.

    ``"anneal"`` halves the rate after every stall test that fails: a validation epoch that
    does not improve on the best by ``cfg.min_delta`` (early stopping's own test), or
    :func:`~efa.training.settings.stall_window` such epochs in a row when an epoch takes fewer
    than 16 steps; ``"plateau"`` halves it after
    ``max(1, patience // 3) + 1`` stalled epochs (PyTorch's relative threshold); ``"cosine"``
    decays it per step to 0 over ``max_epochs`` after a linear warm-up of
    ``cfg.warmup_steps``; ``"constant"`` keeps it after the warm-up.

    Parameters
    ----------
    opt : torch.optim.Optimizer
        The optimiser.
    cfg : TrainConfig
        The fit's settings.
    steps_per_epoch : int
        Batches per epoch.

    Returns
    -------
    per_step : torch.optim.lr_scheduler.LambdaLR or None
        The scheduler stepped after every batch (``"cosine"``, ``"constant"``).
    per_epoch : torch.optim.lr_scheduler.ReduceLROnPlateau or None
        The scheduler stepped with every validation loss (``"anneal"``, ``"plateau"``).
        Exactly one of the two is not None.
    """
    if cfg.schedule == "anneal":
        # The rate comes down exactly when validation stops responding to it; the stall test is
        # early stopping's own (an improvement of at least min_delta on the best).
        return None, torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, factor=0.5, patience=stall_window(steps_per_epoch) - 1,
            threshold=cfg.min_delta, threshold_mode="abs"
        )
    if cfg.schedule == "plateau":
        patience = cfg.patience or default_patience(steps_per_epoch)
        return None, torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, factor=0.5, patience=max(1, patience // 3)
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
