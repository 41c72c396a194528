"""What a result was computed with: package versions, the CPU, and the BLAS kernels.

Recorded in every ``results.json`` (``environment``) so a number can be traced to the machine
and code that made it; ``efa summary`` / ``results.md`` show it (docs/reproducibility.md).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
from importlib import metadata

# The packages whose code computes a number here: the core and the experiments' peers.
PACKAGES = ("torch", "numpy", "scipy", "pandas", "scikit-learn", "catboost", "tabm",
            "rtdl-revisiting-models", "statsmodels", "gensim", "pot")


def versions() -> dict[str, str | None]:
    """Installed version of each of :data:`PACKAGES` (None: not installed)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str:
    """The processor's model name (Linux: /proc/cpuinfo), else what platform reports."""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def blas() -> list[dict]:
    """numpy's and scipy's BLAS libraries with the kernel each runs (threadpoolctl), and
    torch's (its build's BLAS and the CPU capability its kernels dispatch to)."""
    import numpy  # noqa: F401  (loaded, so threadpoolctl sees its BLAS)
    import scipy.linalg  # noqa: F401
    import torch
    from threadpoolctl import threadpool_info

    out = [{"library": i.get("internal_api"), "version": i.get("version"),
            "kernel": i.get("architecture"), "threads": i.get("num_threads"),
            "used by": os.path.basename(os.path.dirname(i.get("filepath", ""))).split(".")[0]}
           for i in threadpool_info() if i.get("user_api") == "blas"]
    out.sort(key=lambda b: (b["used by"], str(b["library"])))  # load order varies between runs
    config = torch.__config__.show()
    info = next((p.split("=", 1)[1] for p in config.replace(",", "\n").split()
                 if p.startswith("BLAS_INFO=")), None)
    out.append({"library": info, "version": None,
                "kernel": torch.backends.cpu.get_cpu_capability(),
                "threads": torch.get_num_threads(), "used by": "torch"})
    return out


def environment(threads: int, workers: int = 1, device: str | None = None) -> dict:
    """The ``environment`` of a results file."""
    return {"python": platform.python_version(), **versions(), "cpu": cpu_model(),
            "cpus": os.cpu_count(), "blas": blas(),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "threads": threads, "workers": workers, "device": device or "cpu",
            **({"gpu": gpu()} if str(device).startswith("cuda") else {})}


def gpu() -> dict:
    """The CUDA device a result ran on: its name, memory, and the CUDA torch was built for."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count, "cuda": torch.version.cuda,
            "driver": _driver()}


def _driver() -> str | None:
    """The NVIDIA driver's version: the first dotted number of /proc/driver/nvidia/version
    (its wording differs between drivers, the number does not)."""
    with contextlib.suppress(OSError):
        with open("/proc/driver/nvidia/version") as f:
            found = re.search(r"\b\d+\.\d+(?:\.\d+)?\b", f.readline())
            return found.group(0) if found else None
    return None
