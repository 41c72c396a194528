"""Data-parallel training with PyTorch's own engine (``torch.distributed``,
DistributedDataParallel), as ``efa.fit`` uses it when a process group is initialised — e.g. by
``torchrun --nproc_per_node 2 -m efa.cli train ...`` (gloo on CPU, nccl on GPUs).

Every rank holds the whole data set and draws the same shuffled order; each global batch is
split between the ranks, and the loss is normalised by the *global* number of predicted
positions, so that the ranks together compute exactly the gradient of one process with the
same batch. Validation is evaluated on a shard per rank and all-reduced, so early stopping
decides identically everywhere; rank 0 writes the checkpoints.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import Tensor, nn

if TYPE_CHECKING:  # for annotations only
    from efa.core.conditional import ConditionalModel
    from efa.core.data import Sequences
    from efa.core.softmax import Sampling


def world() -> tuple[int, int]:
    """Return this process's rank and the world size.

    Returns
    -------
    rank : int
        The rank, 0 without an initialised process group.
    size : int
        The number of processes, 1 without an initialised process group.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_from_environment(device: str | None = None) -> bool:
    """Initialise the process group from torchrun's environment (RANK, WORLD_SIZE, ...).

    Uses gloo on CPU and nccl on CUDA; does nothing when ``WORLD_SIZE`` is unset or 1, or a
    process group is already initialised.

    Parameters
    ----------
    device : str or None, default None
        The training device; a name starting with ``"cuda"`` selects nccl.

    Returns
    -------
    bool
        True when this call initialised a process group; False when not launched by torchrun
        (or already initialised).
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or (dist.is_available() and
                                                       dist.is_initialized()):
        return False
    cuda = device is not None and str(device).startswith("cuda")
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    return True


def all_sum(values: list[float], device: torch.device | None = None) -> list[float]:
    """Sum ``values`` over the ranks, element by element (float64).

    Parameters
    ----------
    values : list of float
        This rank's numbers.
    device : torch.device or None, default None
        Where the reduction's tensor lives (the device of the process group's backend).

    Returns
    -------
    list of float
        The sums, the same on every rank; ``values`` itself in a single process.
    """
    if world()[1] == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def barrier() -> None:
    """Wait for every rank (a no-op in a single process)."""
    if world()[1] > 1:
        dist.barrier()


class Loss(nn.Module):
    """The training objective as a module, so that DistributedDataParallel can wrap it.

    DDP synchronises gradients through the module it wraps.

    Parameters
    ----------
    model : ConditionalModel
        The model whose :meth:`~efa.ConditionalModel.loss` is the objective.
    """

    def __init__(self, model: ConditionalModel):
        super().__init__()
        self.model = model

    def forward(self, batch: Sequences, weights: Tensor | None = None,
                counts: dict[str, int] | None = None, scale: float = 1.0,
                sampling: Sampling | None = None) -> Tensor:
        """Compute the model's training loss on ``batch``: its data term times ``scale``,
        plus the model's ``penalty()`` once (DDP averages the ranks' gradients, so a penalty
        scaled with the data term would count ``scale`` times).

        Parameters
        ----------
        batch : Sequences
            This rank's part of the batch.
        weights : torch.Tensor or None, default None
            Per-position weights, as in the model's ``loss``.
        counts : dict of str to int or None, default None
            Each field's number of predicted positions to divide by (the global count across
            the ranks).
        scale : float, default 1.0
            A factor on the loss.
        sampling : Sampling or None, default None
            Sampled-softmax settings, as in the model's ``loss``.

        Returns
        -------
        torch.Tensor
            The scalar loss.
        """
        loss = self.model.loss(batch, weights=weights, counts=counts, sampling=sampling)
        penalty = self.model.penalty()
        return loss * scale if penalty is None else (loss - penalty) * scale + penalty


def check_sizes(n: int, batch_size: int, size: int, drop_last: bool) -> None:
    """Refuse a world size that does not divide the batches, unless ``drop_last``.

    Parameters
    ----------
    n : int
        The number of training sequences.
    batch_size : int
        The global batch size.
    size : int
        The world size.
    drop_last : bool
        Whether the last partial batch is skipped.

    Raises
    ------
    ValueError
        When ``size`` does not divide ``batch_size``, or (without ``drop_last``) the last
        partial batch.
    """
    if size == 1:
        return
    if batch_size % size:
        raise ValueError(f"batch_size {batch_size} is not a multiple of the world size {size}")
    if n % batch_size % size and not drop_last:
        raise ValueError(
            f"world size {size} does not divide the data: {n} sequences in batches of "
            f"{batch_size} leave a last batch of {n % batch_size}; pass drop_last=True (the last "
            "partial batch is skipped) or use a data size divisible by the world size"
        )
