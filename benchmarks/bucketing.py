"""Length-bucketed batches (``TrainConfig.bucket``) on Instacart: time per epoch and quality.

Instacart's baskets hold 1–24 products (11.1 on average) and a batch is padded to its longest,
so about half of a plain batch is padding. This benchmark fits the configuration of
``efa reproduce instacart`` (bidirectional "EFA + distinct", one attention layer, batches of
512, the 15-epoch cosine schedule) once per seed and per ``bucket`` setting, interleaved
(seed 0 plain, seed 0 bucket 4, …), on one torch thread, and records per fit the wall seconds
of every epoch (``History.epoch_seconds``), the best validation CE and the test CE (nothing is
selected on test). The speed-up is the ratio of mean epoch times against the plain fit of the
same seed in the same run, so a busy machine moves both alike.

    .venv/bin/python benchmarks/bucketing.py [--seeds 0 1 2] [--buckets 4 16] [--out results]
    .venv/bin/python benchmarks/bucketing.py --layers 2 --seeds 0   # exact copies (≈ 20 min)
    .venv/bin/python benchmarks/bucketing.py --layers 2 --epochs 2 --seeds 0   # time only
    .venv/bin/python benchmarks/bucketing.py --quick    # 1,000 baskets, 2 epochs; printed only

With ``--layers 2`` the bidirectional model needs one masked copy per predicted position, each
padded like its batch, so padding costs most there; the 1-layer table is
``results/bucketing/benchmark.md``, the 2-layer one ``benchmark-2-layers.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

import torch

from efa.training.scoring import evaluate
from efa.training.train import fit, seed_everything
from experiments.efa_paper import instacart
from experiments.efa_paper.items import categorical_model
from experiments.harness.provenance import cpu_model


def one_fit(data, seed: int, bucket: int | None, quick: bool, layers: int,
            epochs: int | None) -> dict:
    train, val, test = data
    spec = replace(instacart.SPEC, layers={**instacart.SPEC.layers, "bidirectional": layers})
    seed_everything(seed)
    model, base = categorical_model("EFA + distinct", "bidirectional", instacart.N_ITEMS,
                                    instacart.MAX_LEN, spec, train)
    cfg = replace(spec.train[base], seed=seed, progress=False, bucket=bucket)
    if epochs is not None:
        cfg = replace(cfg, max_epochs=epochs)
    if quick:
        cfg = replace(cfg, max_epochs=2, batch_size=64)
    hist = fit(model, train, val, cfg)
    return {"seed": seed, "bucket": bucket, "batch_size": cfg.batch_size,
            "epochs_run": hist.epochs_run,
            "epoch_seconds": hist.epoch_seconds, "mean_epoch_seconds":
            statistics.fmean(hist.epoch_seconds), "best_val_ce": hist.best_val,
            "val_ce": hist.val_loss, "test_ce": -evaluate(model, test)["item"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--buckets", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="results")
    ap.add_argument("--layers", type=int, default=1,
                    help="attention layers (2: exact masked copies, where padding costs most)")
    ap.add_argument("--epochs", type=int, default=None,
                    help="at most this many epochs (default: the experiment's 15); fewer "
                    "measure the time per epoch only, not the quality")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    train, val, test = instacart.load()
    if args.quick:
        train, val, test = train[:1000], val[:200], test[:200]
    fits = [one_fit((train, val, test), seed, bucket, args.quick, args.layers, args.epochs)
            for seed in args.seeds for bucket in (None, *args.buckets)]
    lengths = train.lengths.float()
    doc = {
        "command": "python benchmarks/bucketing.py"
        + (f" --seeds {' '.join(map(str, args.seeds))}" if args.seeds != [0, 1, 2] else "")
        + (f" --buckets {' '.join(map(str, args.buckets))}" if args.buckets != [4, 16] else "")
        + (f" --threads {args.threads}" if args.threads != 1 else "")
        + (f" --layers {args.layers}" if args.layers != 1 else "")
        + (f" --epochs {args.epochs}" if args.epochs is not None else "")
        + (" --quick" if args.quick else ""),
        "model": f"bidirectional EFA + distinct, {args.layers} layer{'s' * (args.layers > 1)} "
        "(experiments.efa_paper.instacart.SPEC)",
        "layers": args.layers, "epochs": args.epochs,
        "threads": args.threads, "baskets": len(train), "mean_length": float(lengths.mean()),
        "max_length": int(lengths.max()), "cpu": cpu_model(), "fits": fits,
    }
    lines = _markdown(doc)
    print("\n".join(lines))
    if args.quick:
        return  # a quick run checks the code path; it never overwrites committed results
    folder = Path(args.out) / "bucketing"
    folder.mkdir(parents=True, exist_ok=True)
    name = "benchmark" + (f"-{args.layers}-layers" if args.layers != 1 else "")
    (folder / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (folder / f"{name}.md").write_text("\n".join(lines) + "\n")


def _markdown(doc: dict) -> list[str]:
    plain = {f["seed"]: f for f in doc["fits"] if f["bucket"] is None}
    lines = [
        "# Length-bucketed batches on Instacart", "",
        f"`{doc['command']}` on {doc['cpu']}: {doc['model']}; {doc['baskets']:,} training "
        f"baskets of {doc['mean_length']:.1f} products on average (at most "
        f"{doc['max_length']}), batches of {doc['fits'][0]['batch_size']}, {doc['threads']} "
        "thread. Speed-up: the plain "
        "fit's mean epoch time over this fit's, same seed, same run.", "",
        "| seed | bucket | epochs | mean epoch (s) | speed-up | best val CE | test CE |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in doc["fits"]:
        ratio = plain[f["seed"]]["mean_epoch_seconds"] / f["mean_epoch_seconds"]
        lines.append(f"| {f['seed']} | {f['bucket'] or '—'} | {f['epochs_run']} | "
                     f"{f['mean_epoch_seconds']:.2f} | {ratio:.2f}× | {f['best_val_ce']:.4f} | "
                     f"{f['test_ce']:.4f} |")
    for b in sorted({f["bucket"] for f in doc["fits"] if f["bucket"] is not None}):
        got = [f for f in doc["fits"] if f["bucket"] == b]
        ratios = [plain[f["seed"]]["mean_epoch_seconds"] / f["mean_epoch_seconds"] for f in got]
        diffs = [f["test_ce"] - plain[f["seed"]]["test_ce"] for f in got]
        quality = (f"; test CE minus the plain fit's {statistics.fmean(diffs):+.4f} (seeds "
                   f"{min(diffs):+.4f} to {max(diffs):+.4f})" if not doc.get("epochs") else
                   f"; quality not compared: {doc['epochs']} epochs measure the time only")
        lines += ["", f"bucket {b}: speed-up {statistics.fmean(ratios):.2f}× (seeds "
                  f"{min(ratios):.2f}–{max(ratios):.2f}){quality}."]
    lines += ["", "Epoch times include the validation pass, which is not bucketed."]
    return lines


if __name__ == "__main__":
    main()
