"""Fingerprints of every data generator's draws at fixed seeds (docs/reproducibility.md).

``python tests/fingerprints.py`` prints one JSON object: the BLAS kernels this process runs
(``kernels``) and, per generator, a fingerprint of each array it drew:

- ``sha256`` of the exact bytes, for every array;
- for floating arrays that pass through torch (a Cholesky factor, a network forward, a
  vectorised exp or sum), also ``summary`` numbers (shape, mean, sd, first and last values).
  Their draws are unique mathematically, but the last bits may follow the CPU's vector width
  or LAPACK; :mod:`tests.test_reproducibility` compares those by summary with a tolerance
  and everything else (integers, NumPy's element-wise draws) by hash.

``python tests/fingerprints.py --write`` stores this machine's as the committed reference,
``tests/fingerprints.json`` (only after a deliberate change to a generator).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

REFERENCE = Path(__file__).with_name("fingerprints.json")


def kernels() -> dict:
    """{library: kernel} of the BLAS libraries loaded in this process, and torch's CPU
    capability (threadpoolctl reads what OpenBLAS actually runs, not what was asked)."""
    import scipy.linalg  # noqa: F401  (loaded so that threadpoolctl sees its BLAS)
    import torch
    from threadpoolctl import threadpool_info

    out = {Path(i["filepath"]).parent.name.split(".")[0]: i.get("architecture")
           for i in threadpool_info() if i["user_api"] == "blas"}
    out["torch"] = torch.backends.cpu.get_cpu_capability()
    return out


def _array(a, torch_float: bool) -> dict:
    import torch

    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    a = np.ascontiguousarray(np.asarray(a))
    out = {"dtype": str(a.dtype), "shape": list(a.shape),
           "sha256": hashlib.sha256(a.tobytes()).hexdigest()[:16]}
    if torch_float and a.dtype.kind == "f":
        flat = a.astype(np.float64).ravel()
        out["summary"] = [float(flat.mean()), float(flat.std()), *map(float, flat[:4]),
                          float(flat[-1])]
    return out


def _sequences(s) -> dict:
    return {"lengths": s.lengths, **{f"field {k}": s.fields[k] for k in sorted(s.fields)}}


def draws() -> dict[str, tuple[bool, dict]]:
    """{generator: (drawn by torch?, {array name: array})} at fixed seeds, small sizes."""
    import torch

    from efa.core.families import Gaussian, Poisson
    from efa.core.fields import Attribute, Category, Value
    from efa.datasets.tabular import simulate, simulation_seeds
    from efa.generators import (
        LITERAL,
        NOISY,
        TNPGP,
        ExpFamilyLatent,
        GPLatent,
        LinearGaussian,
        attention_teacher,
        sample,
        sample_note,
        sample_tnp,
    )
    from experiments.cme import exchangeability as ex
    from experiments.efa_paper import synthetic
    from experiments.fenchel import fenchel_toy
    from experiments.moe import analogy_toy

    torch.set_num_threads(1)
    out = {}
    for variant in ("code", "paper"):
        tr, te = simulate(1, 0.5, 0.9, 4951, n=300, variant=variant)
        out[f"datasets.tabular.simulate {variant}"] = (False, {"train": tr.to_numpy(),
                                                               "test": te.to_numpy()})
    tr, te = simulate(5, 1.5, 0.1, 2743, n=200, shift=False)
    out["datasets.tabular.simulate no shift"] = (False, {"train": tr.to_numpy(),
                                                         "test": te.to_numpy()})
    out["datasets.tabular.simulation_seeds"] = (False, {"seeds": np.array(simulation_seeds())})
    orders, ratings, means = synthetic.generate(20, seed=42)
    out["experiments.efa_paper.synthetic.generate"] = (False, {"orders": orders, "ratings": ratings,
                                                     "means": means})
    out["experiments.efa_paper.synthetic.split"] = (
        False, dict(enumerate(synthetic.split(20, 16, 42))))
    out["experiments.moe.analogy_toy.generate"] = (False, {"ids": analogy_toy.generate(20, 0)})
    out["experiments.fenchel.fenchel_toy.random_problem"] = (
        True, dict(zip(("t", "z", "log_u"), fenchel_toy.random_problem(0, 8, 4), strict=True)))
    out["experiments.cme.exchangeability.circle_data"] = (
        True, dict(zip(("keys", "values"), ex.circle_data(20, ex._generator(0, 20, 1)),
                       strict=True)))
    out["generators.sample_note LITERAL"] = (True, _sequences(sample_note(LITERAL, 4, 0)))
    out["generators.sample_note NOISY"] = (True, _sequences(sample_note(NOISY, 4, 0)))
    t = sample_tnp(TNPGP(), 2, 0)
    out["generators.sample_tnp"] = (True, {**_sequences(t.data), "num_context": t.num_context,
                                           "lengthscale": t.lengthscale, "scale": t.scale})
    out["generators.sample_tnp sizes"] = (True, _sequences(sample_tnp(TNPGP(), 1, 0,
                                                                      sizes=(5, 5)).data))
    for name, gen, kw in (
            ("LinearGaussian", LinearGaussian(dim=2), {}),
            ("LinearGaussian min_length", LinearGaussian(dim=2), {"min_length": 2}),
            ("LinearGaussian circle", LinearGaussian(dim=2, covariates="circle"), {}),
            ("GPLatent", GPLatent(dim=1), {}),
            ("ExpFamilyLatent bernoulli", ExpFamilyLatent("bernoulli", dim=2), {}),
            ("ExpFamilyLatent poisson", ExpFamilyLatent("poisson", dim=2), {})):
        s = gen.sample(4, 6, seed=0, **kw)
        out[f"generators.{name}"] = (True, {**_sequences(s.sequences), "latent": s.latent,
                                            "signal": s.signal})
    teacher = attention_teacher([Category("item", 8), Value("count", Poisson())], max_len=5,
                                seed=0)
    out["generators.teacher categories and counts"] = (True, _sequences(sample(teacher, 16,
                                                                               seed=1)))
    teacher = attention_teacher([Attribute("c", size=2), Value("y", Gaussian(1.0))],
                                max_len=5, seed=0)
    out["generators.teacher gaussian"] = (True, _sequences(sample(teacher, 16, seed=1)))
    return out


def fingerprints() -> dict:
    return {"kernels": kernels(),
            "draws": {name: {k: _array(a, by_torch) for k, a in arrays.items()}
                      for name, (by_torch, arrays) in draws().items()}}


if __name__ == "__main__":
    doc = fingerprints()
    if sys.argv[1:] == ["--write"]:
        REFERENCE.write_text(json.dumps(doc["draws"], indent=1) + "\n")
        print(f"wrote {REFERENCE}")
    else:
        print(json.dumps(doc))
