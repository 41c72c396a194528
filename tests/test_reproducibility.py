"""Same data on every machine (docs/reproducibility.md): every generator's draws fingerprinted
under several BLAS kernels and CPU capabilities, against each other and against the committed
fingerprints; draws never go through a factorisation whose result is not unique; the lock
holds what pyproject asks for; results files record their provenance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from tests import fingerprints

ROOT = Path(__file__).resolve().parents[1]

# Each variant asks for kernels; what actually ran is read back in the subprocess. The first
# runs as the suite does (whatever OPENBLAS_CORETYPE the caller set).
VARIANTS = (
    {},
    {"OPENBLAS_CORETYPE": "Haswell"},
    {"OPENBLAS_CORETYPE": "Nehalem", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
     "ATEN_CPU_CAPABILITY": "default"},
    {"OPENBLAS_CORETYPE": "Sandybridge", "ATEN_CPU_CAPABILITY": "avx2"},
)
# torch-computed floats: the tolerance for last bits (a Cholesky of a GP covariance with a
# 1e-9 jitter moves f by ~3e-8 between LAPACKs); the draws differ by O(1) when a
# factorisation is not unique.
RTOL, ATOL = 1e-5, 1e-6


def _run(env: dict) -> dict:
    full = {**os.environ, **env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "fingerprints.py")],
                         env=full, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, f"fingerprints under {env} failed:\n{out.stderr[-3000:]}"
    return json.loads(out.stdout)


def _differences(a: dict, b: dict) -> list[str]:
    bad = []
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            bad.append(f"{name}: present in only one")
            continue
        for key in sorted(set(a[name]) | set(b[name])):
            x, y = a[name].get(key), b[name].get(key)
            if x is None or y is None or x["shape"] != y["shape"] or x["dtype"] != y["dtype"]:
                bad.append(f"{name}/{key}: {x and x['shape']} vs {y and y['shape']}")
            elif "summary" in x and "summary" in y:
                if not np.allclose(x["summary"], y["summary"], rtol=RTOL, atol=ATOL):
                    bad.append(f"{name}/{key}: {x['summary']} vs {y['summary']}")
            elif x["sha256"] != y["sha256"]:
                bad.append(f"{name}/{key}: sha256 {x['sha256']} vs {y['sha256']}")
    return bad


@pytest.mark.slow
@pytest.mark.xdist_group("subprocess")
def test_draws_are_the_same_under_every_blas_kernel_and_match_the_committed_ones():
    runs = [(env, _run(env)) for env in VARIANTS]
    unavailable = []
    for env, doc in runs:
        asked = env.get("OPENBLAS_CORETYPE")
        if asked and doc["kernels"]["numpy"] != asked:
            unavailable.append(f"OPENBLAS_CORETYPE={asked} ran {doc['kernels']['numpy']}")
        asked = env.get("ATEN_CPU_CAPABILITY")
        if asked and doc["kernels"]["torch"].lower() != asked:
            unavailable.append(f"ATEN_CPU_CAPABILITY={asked} ran {doc['kernels']['torch']}")
    if unavailable:  # reported, and the check below still needs two kernels that ran
        warnings.warn("kernels this CPU did not run: " + "; ".join(unavailable), stacklevel=1)
    ran = {doc["kernels"]["numpy"] for _, doc in runs}
    assert len(ran) >= 2, (f"only OpenBLAS kernel(s) {ran} ran here ({unavailable}): the "
                           "check needs two that differ")
    first = runs[0][1]["draws"]
    for env, doc in runs[1:]:
        bad = _differences(first, doc["draws"])
        assert not bad, f"draws under {env} differ from those under {VARIANTS[0]}:\n" + \
            "\n".join(bad)
    committed = json.loads(fingerprints.REFERENCE.read_text())
    bad = _differences(committed, first)
    assert not bad, ("draws differ from the committed tests/fingerprints.json (regenerate it "
                     "only after a deliberate change to a generator):\n" + "\n".join(bad))


def test_no_draw_goes_through_a_factorisation_whose_result_is_not_unique(monkeypatch):
    """SVD, eigendecompositions and multivariate_normal (SVD by default) are refused while
    every generator draws; every Cholesky factor it takes is of a symmetric positive-definite
    matrix (so unique), and SciPy's LAPACK finds the same factor as torch's."""
    import scipy.linalg

    def refuse(name):
        def call(*args, **kwargs):
            raise AssertionError(f"a generator called {name}, whose result is not unique")
        return call

    for mod, names in ((torch.linalg, ("svd", "svdvals", "eigh", "eig")),
                       (torch, ("svd", "pca_lowrank", "svd_lowrank")),
                       (np.linalg, ("svd", "eigh", "eig"))):
        for n in names:
            monkeypatch.setattr(mod, n, refuse(f"{mod.__name__}.{n}"))
    # NumPy's generators are immutable types that bind numpy.linalg's svd at import: read the
    # source instead, of the library and of everything that draws data for it (the
    # experiments left src/ in session 16). torch.distributions.MultivariateNormal factors by
    # Cholesky: allowed; a Generator's multivariate normal with method="cholesky" would be too,
    # but nothing needs it.
    sources = [p for folder in ("src", "experiments", "benchmarks")
               for p in sorted((ROOT / folder).rglob("*.py"))]
    assert any(p.parts[-3:-1] == ("experiments", "harness") for p in sources)
    call = ".multivariate" + "_normal("  # spelled apart: this guard is not a call itself
    calls = [f"{p.relative_to(ROOT)}:{k}" for p in sources
             for k, line in enumerate(p.read_text().splitlines(), 1) if call in line]
    assert not calls, f"multivariate_normal (an SVD by default) is called at {calls}"
    chol, factors = torch.linalg.cholesky, []

    def checked(a, *args, **kwargs):
        out = chol(a, *args, **kwargs)
        factors.append((a.detach().double().numpy(), out.detach().double().numpy()))
        return out

    monkeypatch.setattr(torch.linalg, "cholesky", checked)
    drawn = fingerprints.draws()
    assert len(drawn) >= 20 and factors
    for a, low in factors:
        a2 = a.reshape(-1, *a.shape[-2:])
        for m, f in zip(a2, low.reshape(a2.shape), strict=True):
            assert np.allclose(m, m.T)
            np.testing.assert_allclose(scipy.linalg.cholesky(m, lower=True), f, atol=1e-7)


def test_the_lock_pins_every_requirement_of_pyproject_within_its_range():
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    text = (ROOT / "requirements.lock").read_text()
    pins = {}
    for line in text.splitlines():
        if "==" in line and not line.startswith((" ", "#")):
            name, version = line.split(" ")[0].split("==")
            pins[canonicalize_name(name)] = version
            assert "--hash=sha256:" in text.split(line, 1)[1].split("==", 1)[0], line
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + [r for extra in ("dev", "experiments")
                                         for r in project["optional-dependencies"][extra]]
    for req in map(Requirement, wanted):
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in requirements.lock: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"requirements.lock pins {req.name}=={pins[name]}, outside {req.specifier}"
    assert pins["torch"].startswith("2.13.0")


def test_results_record_their_provenance():
    from experiments.harness.provenance import PACKAGES, environment

    env = environment(threads=1, workers=2)
    for key in ("python", *PACKAGES, "cpu", "blas", "threads", "workers"):
        assert key in env, key
    assert env["torch"].startswith("2.13.0") and env["numpy"] == np.__version__
    libraries = {b["used by"]: b for b in env["blas"]}
    assert {"numpy", "torch"} <= set(libraries)
    assert libraries["numpy"]["kernel"] and libraries["torch"]["kernel"]
    json.dumps(env)  # it goes into results.json
