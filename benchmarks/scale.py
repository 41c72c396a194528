"""Training throughput and peak memory of efa against a plain PyTorch transformer of the same
width and depth, over vocabulary sizes D and sequence lengths I (issue "Scale").

    python benchmarks/scale.py            # the grid -> results/scale/throughput.json
    python benchmarks/scale.py --targets  # the target cells, 5 interleaved rounds
                                          #   -> results/scale/targets.json
    python benchmarks/scale.py --quick    # a tiny grid, printed only (never written)
    python benchmarks/scale.py --device cuda [--targets]  # the same on a GPU
                                          #   -> results/scale/{throughput,targets}-cuda.json

Models (width 64, 2 pre-LN layers, 4 heads of 16, batch 64, one torch thread each):
- efa-uni: unidirectional EFA, exact likelihood by two-stream attention (every position).
- lm: causal ``nn.TransformerEncoder`` language model (every position), full softmax.
- efa-bi: bidirectional EFA, exact masked pseudo-likelihood by in-model copies (every position).
- efa-bi-m: the same, m = 5 sampled positions per sequence per step.
- mlm: bidirectional ``nn.TransformerEncoder`` with 15 % random masking (BERT4Rec style).
Throughput counts *predicted* tokens per second. Each (model, D, I) runs in a fresh process,
so its peak resident memory (ru_maxrss) is its own. Ratios are measured in the same run. The
grid gives each configuration one window; ``--targets`` measures the cells the issue's targets
are stated at (D = 10³ and 10⁴, I = 50) in ``--rounds`` rounds, every model once per round in
an order that alternates between rounds, and reports the median over rounds: on a shared
machine, load that comes and goes then hits every model alike.

On ``--device cuda`` every configuration runs in one process (a CUDA start per configuration
would cost more than its window); the step time is taken after ``torch.cuda.synchronize()``,
the memory column is the peak of ``torch.cuda.max_memory_allocated`` (reset before each
configuration), and the windows are shorter (2 s) because a GPU step is short.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH, LAYERS, HEADS, BATCH = 64, 2, 4, 64
MODELS = ("efa-uni", "lm", "efa-bi", "efa-bi-m", "mlm")


def build(kind: str, d: int, i: int, device: str = "cpu"):
    import torch
    from torch import nn

    import efa

    chunk = 8192 if d > 32768 else None  # chunked only where dense logits would not fit
    if kind.startswith("efa"):
        cfg = efa.EFAConfig(
            [efa.Category("item", d, dim=WIDTH, vocab_chunk=chunk)], num_layers=LAYERS,
            num_heads=HEADS, max_len=i, block="pre_ln", ffn_hidden=4 * WIDTH,
            direction="unidirectional" if kind == "efa-uni" else "bidirectional",
        )
        return efa.EFA(cfg).to(device)

    class Plain(nn.Module):
        """Token + position embeddings, nn.TransformerEncoder (pre-LN), linear read-out."""

        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(d + 1, WIDTH)  # last row: [MASK]
            self.pos = nn.Embedding(i, WIDTH)
            layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.enc = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
            self.out = nn.Linear(WIDTH, d)

        def loss(self, x, gen):
            causal = kind == "lm"
            inp = x
            if not causal:  # 15 % of the tokens masked, predicted (drawn on the CPU: same masks)
                target = (torch.rand(x.shape, generator=gen) < 0.15).to(x.device)
                inp = torch.where(target, d, x)
            h = self.tok(inp) + self.pos.weight[: x.shape[1]]
            mask = (nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
                    if causal else None)
            h = self.enc(h, mask=mask, is_causal=causal)
            if causal:  # predict x_t from x_<t
                return nn.functional.cross_entropy(self.out(h[:, :-1]).flatten(0, 1),
                                                   x[:, 1:].flatten()), x[:, 1:].numel()
            return nn.functional.cross_entropy(self.out(h[target]), x[target]), int(target.sum())

    return Plain().to(device)


def measure(kind: str, d: int, i: int, seconds: float, batch: int, device: str = "cpu") -> dict:
    import torch

    import efa

    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = build(kind, d, i, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, d, (batch, i), generator=gen).to(device)
    data = efa.Sequences({"item": x}, torch.full((batch,), i, device=device))
    from efa.training.steps import sample_positions

    steps, predicted, t0, times = 0, 0, time.perf_counter(), []
    while steps < 3 or time.perf_counter() - t0 < seconds:
        if steps == 1:  # the first step warms up allocators and caches
            predicted, t0 = 0, time.perf_counter()
        start = time.perf_counter()
        if kind.startswith("efa"):
            batch_data, weights, counts = data, None, None
            if kind == "efa-bi-m":
                batch_data, weights = sample_positions(data, 5, gen)
                counts = {"item": batch * i}
            loss = model.loss(batch_data, weights=weights, counts=counts)
            n = int(batch_data.scored_positions().sum()) if kind == "efa-bi-m" else batch * i
        else:
            loss, n = model.loss(x, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
        if steps >= 1:
            predicted += n
            times.append(time.perf_counter() - start)
        steps += 1
    # The median step: robust to the other processes of a shared machine.
    per_step = sorted(times)[len(times) // 2]
    memory = ({"peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30} if cuda else
              {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20})
    return {"model": kind, "D": d, "I": i, "batch": batch, "steps": len(times),
            "seconds_per_step": per_step, "tokens_per_second": predicted / len(times) / per_step,
            **memory}


def run_isolated(kind, d, i, seconds, batch, device="cpu") -> dict:
    if device == "cuda":  # in this process; the memory column is reset per configuration
        import torch

        try:
            return measure(kind, d, i, seconds, batch, device)
        except torch.OutOfMemoryError as e:
            return {"model": kind, "D": d, "I": i, "batch": batch, "error": str(e)[:300]}
    out = subprocess.run(
        [sys.executable, __file__, "--one", kind, str(d), str(i), str(seconds), str(batch)],
        capture_output=True, text=True, cwd=ROOT,
    )
    if out.returncode:
        return {"model": kind, "D": d, "I": i, "batch": batch,
                "error": out.stderr.strip().splitlines()[-1][:300]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def slope(xs, ys) -> float:
    """Least-squares slope of log y on log x: the cost exponent."""
    lx, ly = [math.log(v) for v in xs], [math.log(v) for v in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx)


def summarise(rows: list[dict]) -> dict:
    ok = {(r["model"], r["D"], r["I"]): r for r in rows if "error" not in r and r["batch"] == BATCH}
    ratios, exponents = {}, {}
    for d in sorted({k[1] for k in ok}):
        for i in sorted({k[2] for k in ok}):
            get = lambda m, d=d, i=i: ok.get((m, d, i))  # noqa: E731
            if get("efa-uni") and get("lm"):
                ratios[f"uni D={d} I={i}: efa/lm throughput"] = (
                    get("efa-uni")["tokens_per_second"] / get("lm")["tokens_per_second"])
            if get("efa-bi") and get("mlm"):
                ratios[f"bi D={d} I={i}: efa/mlm throughput"] = (
                    get("efa-bi")["tokens_per_second"] / get("mlm")["tokens_per_second"])
                # Cost of one exact masked copy vs one forward+backward of a sequence (the MLM's
                # step divided by the batch).
                ratios[f"bi D={d} I={i}: copy cost / sequence fwd+bwd"] = (
                    get("efa-bi")["seconds_per_step"] / (BATCH * i)
                    / (get("mlm")["seconds_per_step"] / BATCH))
            if get("efa-bi-m") and get("mlm"):
                ratios[f"bi D={d} I={i}: efa m=5 / mlm throughput"] = (
                    get("efa-bi-m")["tokens_per_second"] / get("mlm")["tokens_per_second"])
    for m in MODELS:
        for d in sorted({k[1] for k in ok}):
            pts = sorted((k[2], 1 / ok[k]["tokens_per_second"]) for k in ok
                         if k[0] == m and k[1] == d)
            if len(pts) >= 2:
                exponents[f"{m}: time per token ∝ I^a at D={d}"] = slope(*zip(*pts, strict=True))
        for i in sorted({k[2] for k in ok}):
            pts = sorted((k[1], 1 / ok[k]["tokens_per_second"]) for k in ok
                         if k[0] == m and k[2] == i)
            if len(pts) >= 2:
                exponents[f"{m}: time per token ∝ D^b at I={i}"] = slope(*zip(*pts, strict=True))
    return {"ratios": ratios, "exponents": exponents}


def rounds_of(configs: list[tuple], rounds: int, seconds: float, device: str = "cpu"
              ) -> list[dict]:
    """Every (model, D, I) of ``configs`` once per round (order reversed every other round);
    per configuration the median tokens/s and step time over rounds, the largest peak RSS."""
    runs: dict[tuple, list[dict]] = {c: [] for c in configs}
    for r in range(rounds):
        for c in configs if r % 2 == 0 else configs[::-1]:
            runs[c].append(run_isolated(*c, seconds, BATCH, device))
    rows = []
    for (m, d, i), rs in runs.items():
        ok = [x for x in rs if "error" not in x]
        if not ok:
            rows.append(rs[0])
            continue
        med = lambda k, ok=ok: sorted(x[k] for x in ok)[len(ok) // 2]  # noqa: E731
        memory = "peak_gpu_gib" if device == "cuda" else "peak_rss_gib"
        rows.append({"model": m, "D": d, "I": i, "batch": BATCH, "rounds": len(ok),
                     "seconds_per_step": med("seconds_per_step"),
                     "tokens_per_second": med("tokens_per_second"),
                     "tokens_per_second_rounds": [x["tokens_per_second"] for x in ok],
                     memory: max(x[memory] for x in ok)})
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--targets", action="store_true")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--one", nargs=5)
    args = p.parse_args()
    dev = args.device
    suffix = "-cuda" if dev == "cuda" else ""
    flag = " --device cuda" if dev == "cuda" else ""
    if args.one:
        kind, d, i, seconds, batch = args.one
        print(json.dumps(measure(kind, int(d), int(i), float(seconds), int(batch))))
        return
    t0 = time.perf_counter()
    if args.targets:
        configs = [(m, d, 50) for d in (1_000, 10_000) for m in MODELS]
        rows = rounds_of(configs, args.rounds, 2.0 if dev == "cuda" else 6.0, dev)
        command = f"python benchmarks/scale.py --targets --rounds {args.rounds}{flag}"
        name = f"targets{suffix}.json"
    else:
        ds, is_, seconds = ((1000,), (20,), 1.0) if args.quick else (
            (1_000, 10_000, 100_000), (20, 50, 200), 2.0 if dev == "cuda" else 8.0)
        rows = [run_isolated(m, d, i, seconds, BATCH, dev)
                for d in ds for i in is_ for m in MODELS]
        if not args.quick:  # the memory target: D = 10⁵, I = 50, batch 256
            rows += [run_isolated(m, 100_000, 50, seconds, 256, dev)
                     for m in ("efa-uni", "efa-bi-m")]
        command = "python benchmarks/scale.py" + (" --quick" if args.quick else "") + flag
        name = f"throughput{suffix}.json"
    for r in rows:
        print(json.dumps(r), flush=True)
    from experiments.harness.provenance import environment

    doc = {"command": command, "width": WIDTH, "layers": LAYERS, "heads": HEADS, "batch": BATCH,
           "threads": 1, "device": dev, "wall_seconds": time.perf_counter() - t0, "rows": rows,
           **summarise(rows), "environment": environment(1, 0, dev)}
    print(json.dumps({k: doc[k] for k in ("ratios", "exponents")}, indent=1))
    if not args.quick:
        out = ROOT / "results" / "scale"
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
