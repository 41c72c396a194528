"""The probabilistic outputs on an accelerator give what they give on the CPU.

    python benchmarks/device_parity.py --device cuda   # -> results/scale/device_parity-cuda.json
    python benchmarks/device_parity.py --quick         # the CPU against itself, printed only

One model (a two-layer unidirectional attention teacher over items and Poisson counts, its
weights drawn on the CPU) is scored on the same 2,000 sequences on the CPU and on ``--device``:
log-likelihoods, the predictive distributions' means, variances and 90 % intervals, the
calibration summary, top-10 recommendations and seeded samples. Each row is the largest
absolute difference (or the share of disagreements) between the two devices; floating-point
reductions run in another order on a GPU, so differences of float32 rounding are expected and
anything larger is a bug. Samples are drawn with a CPU generator on both devices, so they agree
except where a probability differs by rounding right at a draw's threshold.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import efa
from efa.core.families import Poisson
from efa.generators import attention_teacher
from efa.generators import sample as teacher_sample

ROOT = Path(__file__).resolve().parents[1]


@torch.no_grad()
def outputs(model: efa.EFA, data: efa.Sequences, device: str) -> dict[str, torch.Tensor]:
    """Every probabilistic output of ``model`` on ``data``, computed on ``device``, on the CPU."""
    model = model.to(device)
    out: dict[str, torch.Tensor] = {}
    lls = efa.log_likelihoods(model, data)
    for name, ll in lls.items():
        out[f"log-likelihood {name}"] = ll[data.predicted(name)].double().cpu()
    item, count = model.predictive(data, "item"), model.predictive(data, "count")
    out["predictive probabilities item"] = item.probs.double().cpu()
    out["predictive mean count"] = count.mean.double().cpu()
    out["predictive variance count"] = count.variance.double().cpu()
    frame = efa.predictive_frame(model, data, "count", level=0.9)
    out["90% interval count"] = torch.tensor(frame[["lower", "upper"]].to_numpy(),
                                             dtype=torch.float64)
    for name in ("item", "count"):
        cal = efa.calibration(model, data, name)
        out[f"calibration {name}"] = torch.tensor(
            [*cal.coverage, *cal.confidence, *cal.accuracy, *cal.pit, *cal.count]
            + ([cal.ece] if cal.ece is not None else []), dtype=torch.float64)
    rec = efa.recommend(model, data, k=10)
    out["recommend item"] = torch.tensor(rec["item"].to_numpy())
    out["recommend probability"] = torch.tensor(rec["probability"].to_numpy(), dtype=torch.float64)
    drawn = efa.sample(model, 2_000, seed=3)
    out["sample item"] = drawn.fields["item"].cpu()
    model.to("cpu")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="the CPU against itself, printed only")
    args = ap.parse_args(argv)
    device = "cpu" if args.quick else args.device
    torch.set_num_threads(1)
    start = time.perf_counter()
    model = attention_teacher([efa.Category("item", 200), efa.Value("count", Poisson())],
                              max_len=16, num_layers=2, seed=5)
    data = teacher_sample(model, 2_000, length=15, seed=6)  # room for a next position
    ref, other = outputs(model, data, "cpu"), outputs(model, data, device)
    rows = []
    for key, a in ref.items():
        b = other[key]
        if key in ("recommend item", "sample item"):
            rows.append({"output": key, "share differing": float((a != b).double().mean())})
        else:
            rows.append({"output": key, "max abs difference": float((a - b).abs().max()),
                         "max abs value": float(a.abs().max())})
    for row in rows:
        print(row)
    if args.quick:
        return 0
    from experiments.harness.provenance import environment

    result = {"command": f"python benchmarks/device_parity.py --device {device}",
              "device": device, "rows": rows, "wall_seconds": time.perf_counter() - start,
              "environment": environment(threads=1, workers=0, device=device)}
    path = ROOT / "results" / "scale" / f"device_parity-{device}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
