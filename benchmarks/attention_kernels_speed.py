"""Cost of one training step of EFA with each attention kernel, relative to softmax (issue 11).

For the models of ``efa reproduce attention-kernels`` (MovieLens sequences uni-/bidirectional,
Instacart bidirectional, temperature same day ℓ = 1; their experiment modules' sizes and batch
sizes), every kernel's model is first trained for ``--warm`` steps (so that the exact kernel's
Newton solver works in a trained regime, not at the near-zero keys of the initialisation), then
one training step (forward, backward, AdamW update) is timed ``--steps`` times, the kernels
interleaved round by round so that machine load affects them alike. Reported: the median step
time and its ratio to softmax's in the same run, one torch thread. Targets: ``generalized``
≤ 1.3×, ``fenchel`` ≤ 10×. Writes ``OUT/attention-kernels/benchmark.json`` and
``benchmark.md``.

    flock /tmp/efa-cpu.lock .venv/bin/python benchmarks/attention_kernels_speed.py
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from efa.training.train import seed_everything
from experiments.efa_paper import instacart, items, movielens
from experiments.efa_paper import temperature as temp
from experiments.fenchel import attention_kernels as ak

KERNELS = {
    "softmax": lambda s: "softmax",
    "generalized (α)": lambda s: "generalized",
    "generalized (α + T5 buckets)": lambda s: ak.kernel_spec("generalized", s),
    "generalized + context": lambda s: ak.kernel_spec("generalized + context", s),
    "second_order": lambda s: ak.kernel_spec("second_order", s),
    "fenchel": lambda s: ak.kernel_spec("fenchel", s),
    "ot": lambda s: ak.kernel_spec("ot", s),
}
TARGETS = {"generalized (α)": 1.3, "generalized (α + T5 buckets)": 1.3, "fenchel": 10.0}


def build(setting: str, attention):
    """(model, training Sequences, training config) of ``setting`` with kernel ``attention``."""
    if setting.startswith("temperature"):
        spec = temp.SPEC
        train, _, _, _ = temp.load(0, spec.lag_layout, spec.center)
        model = temp.spatial_efa(train, 1, name=temp.NAME, block=spec.block, attention=attention)
        return model, train, spec.train["two_stream"]
    name, direction = setting.split(": ")
    ex = movielens if name == "movielens" else instacart
    train = (ex.load("paper", 0) if name == "movielens" else ex.load())[0]
    n_items = ex.N_MOVIES if name == "movielens" else ex.N_ITEMS
    model, _ = items.categorical_model("EFA + distinct", direction, n_items, ex.MAX_LEN, ex.SPEC,
                                       train, attention=attention)
    return model, train, ex.SPEC.train["EFA"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15, help="timed steps per kernel")
    parser.add_argument("--warm", type=int, default=40, help="training steps before timing")
    parser.add_argument("--settings", nargs="*", default=list(ak.SETTINGS))
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    result = {"command": "python benchmarks/attention_kernels_speed.py", "threads": 1,
              "steps": args.steps, "warm": args.warm, "settings": {}}
    for setting in args.settings:
        runs = {}
        for name, spec in KERNELS.items():
            seed_everything(0)
            model, train, cfg = build(setting, spec(setting))
            opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
            order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))
            batches = [train[order[torch.arange(i * cfg.batch_size, (i + 1) * cfg.batch_size)
                                   % len(train)]] for i in range(args.warm + args.steps)]
            runs[name] = {"model": model, "opt": opt, "batches": batches, "times": []}
            for b in batches[: args.warm]:
                _step(model, opt, b)
        for k in range(args.steps):  # interleaved: one step of every kernel per round
            for run in runs.values():
                b = run["batches"][args.warm + k]
                t0 = time.perf_counter()
                _step(run["model"], run["opt"], b)
                run["times"].append(time.perf_counter() - t0)
        base = _median(runs["softmax"]["times"])
        entry = {}
        for name, run in runs.items():
            med = _median(run["times"])
            entry[name] = {"median_seconds": med, "ratio": med / base, "times": run["times"]}
            kern = run["model"].blocks[0].attn.kernel
            if getattr(kern, "last_solve", None):
                its = kern.last_solve["iterations"]
                entry[name]["newton_last_step"] = {"max": int(its.max()),
                                                   "mean": float(its.float().mean())}
        result["settings"][setting] = entry
        print(setting, {k: round(v["ratio"], 2) for k, v in entry.items()}, flush=True)
    result["wall_seconds"] = time.perf_counter() - t_start
    result["load_average"] = _load_average()
    folder = args.out / "attention-kernels"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "benchmark.json").write_text(json.dumps(result, indent=2) + "\n")
    (folder / "benchmark.md").write_text(markdown(result))
    print(markdown(result))


def _step(model, opt, batch):
    loss = model.loss(batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def _median(x):
    x = sorted(x)
    return x[len(x) // 2]


def _load_average():
    try:
        return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def markdown(result: dict) -> str:
    names = list(KERNELS)
    lines = ["# Training-step cost of the attention kernels (× softmax, same run)", "",
             f"`{result['command']}` — 1 torch thread, {result['warm']} warm-up training steps "
             f"per model, median of {result['steps']} interleaved timed steps; load average "
             f"{result.get('load_average')}. Targets: generalized ≤ 1.3×, fenchel ≤ 10×.", "",
             "| setting | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for setting, entry in result["settings"].items():
        cells = []
        for n in names:
            e = entry[n]
            cell = f"{e['ratio']:.2f}" + (" (softmax: {:.1f} ms)".format(
                1000 * e["median_seconds"]) if n == "softmax" else "")
            if n in TARGETS:
                cell += " ✓" if e["ratio"] <= TARGETS[n] else " ✗"
            cells.append(cell)
        lines.append(f"| {setting} | " + " | ".join(cells) + " |")
    lines.append("")
    for setting, entry in result["settings"].items():
        if "newton_last_step" in entry.get("fenchel", {}):
            n = entry["fenchel"]["newton_last_step"]
            lines.append(f"- {setting}: fenchel's Newton iterations in the last timed step: "
                         f"max {n['max']}, mean {n['mean']:.2f}.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
