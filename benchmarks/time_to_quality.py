"""Time to quality on 10⁶ sequences from a known EFA teacher: held-out masked NLL against
wall-clock time for efa and a 15 %-masking MLM transformer, the teacher's own NLL as the floor.

    python benchmarks/time_to_quality.py            # -> results/scale/time_to_quality.json
    python benchmarks/time_to_quality.py --quick    # tiny, printed only
    python benchmarks/time_to_quality.py --device cuda --budget 60
                                        # on a GPU -> results/scale/time_to_quality-cuda.json

Teacher: a unidirectional EFA (one layer, width 32, D = 1,000 items, sequences of 20) with
random weights made sharper than at initialisation, sampled ancestrally. The quantity every
model is scored on is the masked conditional −log p(x_i | x_−i) of held-out sequences; the
teacher's is computed exactly by renormalising its joint over the D values of x_i.
Students (width 64, 2 layers of the same kind unless stated, one torch thread, AdamW 1e-3,
batch 256), each trained for the same wall-clock budget:
- efa-2L-m5: bidirectional EFA, 2 pre-LN layers, exact masked copies for 5 sampled positions
  per sequence per step (unbiased);
- efa-1L: bidirectional EFA, 1 pre-LN layer, exact masked pseudo-likelihood of every position
  in one pass (two-stream);
- mlm: ``nn.TransformerEncoder``, 2 pre-LN layers, 15 % random masking.

On ``--device cuda`` the same teacher (its weights are drawn on the CPU) samples its sequences
on the GPU with a CUDA generator, so the data are other draws from the same distribution; the
training clock stops after ``torch.cuda.synchronize()``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import efa

ROOT = Path(__file__).resolve().parents[1]
D, I = 1_000, 20


def teacher(seed: int = 0, device: str = "cpu") -> efa.EFA:
    torch.manual_seed(seed)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", D, dim=32)], num_layers=1, num_heads=2,
                                  max_len=I, block="pre_ln", ffn_hidden=64,
                                  direction="unidirectional"))
    with torch.no_grad():  # sharper than at initialisation: conditionals with structure
        model.encoders["item"].table.weight.mul_(10.0)
        model.readouts["item"].net.weight.mul_(4.0)
    return model.eval().to(device)


@torch.no_grad()
def sample(model: efa.EFA, n: int, gen: torch.Generator, chunk: int = 20_000) -> torch.Tensor:
    """Ancestral sampling: x_t ~ p(x_t | x_<t), position by position. One position per
    sequence is asked at each step, so ``mode='auto'`` computes that state alone (the copies
    algorithm) instead of both streams and a read-out at every position."""
    out = []
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        x = torch.zeros(m, I, dtype=torch.long, device=model.device)
        for t in range(I):
            data = efa.Sequences({"item": x[:, : t + 1]},
                                 torch.full((m,), t + 1, device=model.device))
            at = torch.zeros(m, t + 1, dtype=torch.bool, device=model.device)
            at[:, t] = True
            logits = model.natural_params_at(data, {"item": at})["item"]
            x[:, t] = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]
        out.append(x)
    return torch.cat(out)


def cached_sample(model: efa.EFA, n: int, gen: torch.Generator) -> torch.Tensor:
    """``sample``, kept under runs/ (ignored by git) keyed by the teacher's weights and n:
    drawing 10⁶ sequences takes about 13 minutes on one thread, so a rerun reuses them."""
    import hashlib

    digest = hashlib.sha256()
    for v in model.state_dict().values():
        digest.update(v.detach().cpu().numpy().tobytes())
    device = "" if model.device.type == "cpu" else f"-{model.device.type}"
    path = (ROOT / "runs" / "time_to_quality"
            / f"teacher-{digest.hexdigest()[:12]}-{n}{device}.pt")
    if path.exists():
        return torch.load(path)
    data = sample(model, n, gen)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, path)
    return data


@torch.no_grad()
def teacher_nll(model: efa.EFA, x: torch.Tensor, chunk: int = 2_000) -> float:
    """Mean −log p(x_i | x_−i) under the teacher: its joint renormalised over x_i's D values."""
    total, count = 0.0, 0
    for s in range(len(x)):
        for i in range(I):
            variants = x[s].repeat(D, 1)
            variants[:, i] = torch.arange(D, device=x.device)
            joint = []
            for start in range(0, D, chunk):
                v = variants[start : start + chunk]
                lls = model.position_log_likelihoods(efa.Sequences(
                    {"item": v}, torch.full((len(v),), I, device=v.device)))
                joint.append(lls["item"].sum(1))
            joint = torch.cat(joint)
            total -= float(joint[x[s, i]] - torch.logsumexp(joint, 0))
            count += 1
    return total / count


def student(kind: str, device: str = "cpu"):
    from torch import nn

    if kind.startswith("efa"):
        return efa.EFA(efa.EFAConfig(
            [efa.Category("item", D, dim=64)], num_layers=1 if kind == "efa-1L" else 2,
            num_heads=4, max_len=I, block="pre_ln", ffn_hidden=256,
            direction="bidirectional")).to(device)

    class MLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(D + 1, 64), nn.Embedding(I, 64)
            layer = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True,
                                               norm_first=True)
            self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.out = nn.Linear(64, D)

        def logits(self, inp):
            return self.out(self.enc(self.tok(inp) + self.pos.weight[: inp.shape[1]]))

        def loss(self, x, gen):
            target = (torch.rand(x.shape, generator=gen) < 0.15).to(x.device)
            logits = self.logits(torch.where(target, D, x))
            return nn.functional.cross_entropy(logits[target], x[target])

        @torch.no_grad()
        def masked_nll(self, x):  # one copy per position, as efa's exact evaluation
            total = 0.0
            for i in range(I):
                inp = x.clone()
                inp[:, i] = D
                total -= float(torch.log_softmax(self.logits(inp)[:, i], -1)
                               .gather(1, x[:, i : i + 1]).sum())
            return total / x.numel()

    return MLM().to(device)


def held_out_nll(model, x: torch.Tensor) -> float:
    if isinstance(model, efa.EFA):
        model.eval()
        out = -efa.evaluate(model, efa.Sequences(
            {"item": x}, torch.full((len(x),), I, device=x.device)))["item"]
        model.train()
        return out
    return model.masked_nll(x)


def train_for(kind: str, train: torch.Tensor, test: torch.Tensor, budget: float,
              evals: int) -> list[dict]:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    device = train.device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model = student(kind, device.type)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    from efa.training.steps import sample_positions

    curve, seconds, step, next_eval = [], 0.0, 0, 0.0
    order = torch.randperm(len(train), generator=gen)
    while seconds < budget:
        if seconds >= next_eval:
            curve.append({"seconds": seconds, "steps": step, "nll": held_out_nll(model, test)})
            next_eval += budget / evals
        t0 = time.perf_counter()
        idx = order[(step * 256) % len(train):][:256]
        x = train[idx.to(device)]
        if kind.startswith("efa"):
            data = efa.Sequences({"item": x}, torch.full((len(x),), I, device=device))
            if kind == "efa-2L-m5":
                sampled, w = sample_positions(data, 5, gen)
                loss = model.loss(sampled, weights=w, counts={"item": x.numel()})
            else:
                loss = model.loss(data)
        else:
            loss = model.loss(x, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
        seconds += time.perf_counter() - t0
        step += 1
    curve.append({"seconds": seconds, "steps": step, "nll": held_out_nll(model, test)})
    return curve


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--budget", type=float, default=None,
                   help="training seconds per model (default 300; 5 with --quick)")
    args = p.parse_args()
    torch.set_num_threads(1)
    n, budget, n_test, evals = (2_000, 5.0, 4, 2) if args.quick else (1_000_000, 300.0, 100, 10)
    budget = args.budget or budget
    dev = args.device
    t0 = time.perf_counter()
    gen = torch.Generator(device=dev).manual_seed(1)
    t = teacher(device=dev)
    data = cached_sample(t, n + n_test, gen)
    train, test = data[:n], data[n:]
    floor = teacher_nll(t, test)
    sampled_at = time.perf_counter() - t0
    curves = {k: train_for(k, train, test, budget, evals) for k in ("efa-2L-m5", "efa-1L", "mlm")}
    from experiments.harness.provenance import environment

    command = ("python benchmarks/time_to_quality.py" + (" --quick" if args.quick else "")
               + (f" --device {dev}" if dev != "cpu" else "")
               + (f" --budget {args.budget:g}" if args.budget else ""))
    doc = {"command": command, "device": dev,
           "D": D, "I": I, "train_sequences": n, "test_sequences": n_test,
           "budget_seconds": budget, "threads": 1, "teacher_nll": floor,
           "unigram_nll": float(torch.log(torch.tensor(float(D)))),
           "generation_seconds": sampled_at, "curves": curves,
           "final": {k: v[-1]["nll"] for k, v in curves.items()},
           "wall_seconds": time.perf_counter() - t0, "environment": environment(1, 0, dev)}
    print(json.dumps({k: doc[k] for k in ("teacher_nll", "final", "wall_seconds")}, indent=1))
    if not args.quick:
        out = ROOT / "results" / "scale"
        out.mkdir(parents=True, exist_ok=True)
        name = "time_to_quality" + ("-cuda" if dev == "cuda" else "") + ".json"
        (out / name).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
