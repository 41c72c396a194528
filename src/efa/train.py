"""Fitting: Adam(W) with a schedule, early stopping on the validation log-likelihood with the
best weights restored, seeded shuffling, a progress bar, and checkpoints that resume.

Works for any ``ConditionalModel`` (EFA and the factorisation baselines alike).
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from efa.data import Sequences
from efa.model import ConditionalModel


@dataclass
class TrainConfig:
    lr: float = 3e-3
    weight_decay: float = 0.0
    batch_size: int = 128
    max_epochs: int = 200
    patience: int = 10
    schedule: str = "plateau"  # "plateau" (halve on a stalled val loss), "cosine", "constant"
    warmup_steps: int = 0
    grad_clip: float | None = 1.0
    seed: int = 0
    eval_batch_size: int = 1024
    progress: bool = True
    checkpoint_dir: str | None = None

    def __post_init__(self):
        if self.schedule not in ("plateau", "cosine", "constant"):
            raise ValueError(f"schedule must be plateau, cosine or constant, got {self.schedule!r}")
        if self.lr <= 0 or self.batch_size < 1 or self.max_epochs < 1 or self.patience < 1:
            raise ValueError("lr, batch_size, max_epochs and patience must be positive")


@dataclass
class History:
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    best_epoch: int = -1
    best_val: float = math.inf
    epochs_run: int = 0
    seconds: float = 0.0


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch: same seed, same numbers (on the same machine)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@torch.no_grad()
def evaluate(
    model: ConditionalModel, data: Sequences, batch_size: int = 1024, base_measure: bool = True
) -> dict[str, float]:
    """Mean log-likelihood per target field over all predicted positions of ``data``."""
    model.check(data)
    was_training = model.training
    model.eval()
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for start in range(0, len(data), batch_size):
        batch = data[torch.arange(start, min(start + batch_size, len(data)))]
        for name, (s, n) in model.log_likelihood(batch, base_measure, check=False).items():
            sums[name] = sums.get(name, 0.0) + float(s)
            counts[name] = counts.get(name, 0) + n
    model.train(was_training)
    return {name: sums[name] / max(counts[name], 1) for name in sums}


@torch.no_grad()
def predictions(model: ConditionalModel, data: Sequences, name: str, batch_size: int = 1024):
    """(observed y, predicted mean E[y | context]) at every predicted position of ``name``."""
    model.check(data)
    model.eval()
    ys, means = [], []
    for start in range(0, len(data), batch_size):
        batch = data[torch.arange(start, min(start + batch_size, len(data)))]
        mask = batch.predicted(name)
        ys.append(batch.fields[name][mask])
        means.append(model.predict_mean(batch, at=mask)[name][mask])
    return torch.cat(ys), torch.cat(means)


def mean_squared_error(model: ConditionalModel, data: Sequences, name: str) -> float:
    y, mu = predictions(model, data, name)
    return float(((y.to(mu.dtype) - mu) ** 2).mean())


def _val_loss(model, data, batch_size) -> float:
    return -sum(evaluate(model, data, batch_size).values())


def fit(
    model: ConditionalModel,
    train: Sequences,
    val: Sequences | None = None,
    config: TrainConfig | None = None,
    **overrides,
) -> History:
    """Maximise the (pseudo) log-likelihood of ``train``; stop early on ``val``.

    Without ``val`` the model trains for ``max_epochs`` and keeps the last weights. With
    ``checkpoint_dir`` the full state is saved after every epoch and a killed run resumes from
    the last completed epoch with identical results.
    """
    cfg = config or TrainConfig()
    if overrides:
        cfg = TrainConfig(**{**asdict(cfg), **overrides})
    model.check(train)
    if val is not None:
        model.check(val)
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    sched, plateau = _scheduler(opt, cfg, steps_per_epoch)
    hist, best_state, bad, start_epoch = History(), None, 0, 0

    ckpt = Path(cfg.checkpoint_dir) / "checkpoint.pt" if cfg.checkpoint_dir else None
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        if _resume_key(state["config"]) != _resume_key(asdict(cfg)):
            raise ValueError(
                f"{ckpt} was written with a different TrainConfig; use another checkpoint_dir "
                "or delete it to start over"
            )
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        (plateau or sched).load_state_dict(state["scheduler"])
        gen.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        hist, best_state, bad = History(**state["history"]), state["best_state"], state["bad"]
        start_epoch = hist.epochs_run

    t0 = time.perf_counter() - hist.seconds
    bar = tqdm(
        range(start_epoch, cfg.max_epochs),
        disable=not cfg.progress,
        desc="fit",
        unit="epoch",
        initial=start_epoch,
        total=cfg.max_epochs,
    )
    for epoch in bar:
        if bad >= cfg.patience:
            break
        model.train()
        order = torch.randperm(len(train), generator=gen)
        total, n_batches = 0.0, 0
        for start in range(0, len(train), cfg.batch_size):
            batch = train[order[start : start + cfg.batch_size]]
            loss = model.loss(batch)
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"non-finite training loss {float(loss.detach())} at epoch {epoch}; lower the "
                    "learning rate or check the data scale"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            if sched is not None:
                sched.step()
            total += float(loss.detach())
            n_batches += 1
        hist.train_loss.append(total / n_batches)
        if val is not None:
            v = _val_loss(model, val, cfg.eval_batch_size)
            hist.val_loss.append(v)
            if plateau is not None:
                plateau.step(v)
            if v < hist.best_val - 1e-6:
                hist.best_val, hist.best_epoch, bad = v, epoch, 0
                best_state = copy.deepcopy(model.state_dict())
            else:
                bad += 1
        hist.epochs_run = epoch + 1
        hist.seconds = time.perf_counter() - t0
        bar.set_postfix(
            train=f"{hist.train_loss[-1]:.4f}",
            val=f"{hist.val_loss[-1]:.4f}" if hist.val_loss else "-",
        )
        if ckpt is not None:
            _save_checkpoint(ckpt, model, opt, plateau or sched, gen, hist, best_state, bad, cfg)
    bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return hist


def _resume_key(cfg: dict) -> dict:
    """The settings a resumed run must share with the run that wrote the checkpoint."""
    return {k: v for k, v in cfg.items() if k not in ("progress", "checkpoint_dir")}


def _scheduler(opt, cfg: TrainConfig, steps_per_epoch: int):
    """(per-step scheduler, per-epoch plateau scheduler); exactly one is not None."""
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


def _save_checkpoint(path: Path, model, opt, sched, gen, hist, best_state, bad, cfg) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "generator": gen.get_state(),
        "torch_rng": torch.get_rng_state(),
        "history": asdict(hist),
        "best_state": best_state,
        "bad": bad,
        "config": asdict(cfg),
    }
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # atomic: a kill mid-write leaves the previous checkpoint intact
    (path.parent / "history.json").write_text(json.dumps(asdict(hist)))
