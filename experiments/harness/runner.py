"""One runner for every experiment.

An experiment is a module (registered by name in :mod:`experiments`) with

- ``SPEC`` / ``QUICK``: its settings as data (frozen dataclasses holding ``TrainConfig`` s);
  ``QUICK`` is a tiny version exercising the same code path;
- ``jobs(spec, seeds) -> list[dict]``: the grid of settings × seeds, each job with a ``cost``;
- ``task(job) -> dict | list[dict]``: one unit of work, run in a worker process;
- ``tables(results, spec, seeds, command) -> Report``: rows, notes, figure data, sections;
- ``plots(report, folder)``: PNGs drawn from the report alone (so ``efa replot`` works).

:func:`reproduce` runs the jobs longest first over a pool of single-threaded worker processes
and writes the results folder atomically. With a ``journal`` folder (``efa reproduce`` keeps
one at ``OUT/.NAME.jobs/`` for full runs) every finished job's result is saved as it arrives,
so an interrupted run started again with the same command runs only the jobs it lacks; the
folder is removed once the results are written. Entries are JSON plus safetensors, never
pickles (:mod:`experiments.harness.journal`): a run longer than one machine's lifetime carries its
finished jobs to the next machine by committing them (never the ``KEY.fits`` checkpoints,
which hold weights; docs/design.md).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from experiments.harness.journal import entry as _entry
from experiments.harness.journal import load as _load
from experiments.harness.journal import save as _journal_save
from experiments.harness.report import Report


def default_workers(quick: bool) -> int:
    env = os.environ.get("EFA_WORKERS")
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"EFA_WORKERS must be a positive integer, got {env!r}")
        return int(env)
    return 1 if quick else max(1, min(2, os.cpu_count() or 1))


def _quiet() -> None:
    """Experiments report their best epochs in the results; the interactive hint is noise."""
    import warnings

    from efa.training.train import StillImproving

    warnings.simplefilter("ignore", StillImproving)


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    _quiet()
    with contextlib.suppress(Exception):  # Linux: die with the parent, even on SIGKILL
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def _terminate_on_sigterm(pool: cf.ProcessPoolExecutor):
    """SIGTERM to the parent terminates the workers too (SIGINT already does)."""

    def handler(signum, frame):
        for p in list(getattr(pool, "_processes", {}).values()):
            with contextlib.suppress(Exception):
                p.terminate()
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_jobs(task, jobs: list[dict], workers: int = 1, threads: int = 1,
             progress: bool = False, device: str | None = None,
             journal: Path | None = None) -> list[dict]:
    """``task(job)`` for every job, longest (``cost``) first, on ``workers`` processes with
    ``threads`` torch threads each (in-process when ``workers == 1``). Results are flattened
    (a task may return a list) and come back in job order. With ``journal``, jobs whose result
    it holds are not run again and each new result is saved there as soon as it arrives."""
    keys = [job_key(j) for j in jobs]
    done = {k: _load(journal, k) for k in keys} if journal is not None else {}
    done = {k: r for k, r in done.items() if r is not None}
    # each job's fit checkpoints, beside its journal entry until that is saved
    fits = {k: None if journal is None else Path(journal) / f"{k}.fits" for k in keys}
    mid = sum(fits[k] is not None and fits[k].exists() for k in keys if k not in done)
    if (done or mid) and progress:
        print(f"  resuming: {len(done)} of {len(jobs)} jobs already done ({journal})"
              + (f"; {mid} resume from their fits' checkpoints" if mid else ""), flush=True)
    todo = sorted((i for i, k in enumerate(keys) if k not in done),
                  key=lambda i: -jobs[i].get("cost", 1.0))
    _init_worker(threads)

    def finished(i, result):
        _announce(result, progress)
        if journal is not None:
            if _journal_save(journal, keys[i], result):
                shutil.rmtree(fits[keys[i]], ignore_errors=True)
            else:
                print(f"  job {keys[i]}: its result cannot be journaled (kept in memory only)",
                      file=sys.stderr, flush=True)
        done[keys[i]] = result

    if workers <= 1 or len(todo) <= 1:
        for i in todo:
            finished(i, _run(task, jobs[i], fits[keys[i]], device))
    else:
        ctx = mp.get_context("spawn")  # fork after torch's thread pools start is unsafe
        with cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                    initargs=(threads,)) as pool, \
                _terminate_on_sigterm(pool):
            futures = {pool.submit(_run, task, jobs[i], fits[keys[i]], device): i
                       for i in todo}
            # A failed job must not stop the others' results from reaching the journal:
            # leaving this block waits for every queued job anyway. Each failure is printed
            # when it happens and the first is raised once the rest have finished.
            failed = []
            for f in cf.as_completed(futures):
                try:
                    result = f.result()
                except Exception as e:
                    failed.append(e)
                    what = {k: v for k, v in jobs[futures[f]].items()
                            if k not in ("spec", "cost")}
                    print(f"  job {what} failed: {e!r}", file=sys.stderr, flush=True)
                    continue
                finished(futures[f], result)
            if failed:
                raise failed[0]
    results = [done[k] for k in keys]
    return [r for rs in results for r in (rs if isinstance(rs, list) else [rs])]


def _run(task, job: dict, checkpoints: Path | None, device: str | None = None):
    """``task(job)`` with every fit in it on ``device`` and checkpointing under
    ``checkpoints`` (when given)."""
    from efa.training import train

    with train.fit_context(device, checkpoints):
        return task(job)


def job_key(job: dict) -> str:
    """A stable name for a job: a hash of its settings (specs by their dataclass repr)."""
    text = json.dumps(job, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _announce(result, progress: bool):
    if progress:
        for r in result if isinstance(result, list) else [result]:
            keys = ("protocol", "variant", "direction", "model", "kind", "layers", "seed")
            what = " ".join(f"{r[k]}" for k in keys if k in r)
            print(f"  {what}: {r.get('seconds', 0.0):.1f} s", flush=True)
    return result


def reproduce(name: str, seeds: int, quick: bool = False, progress: bool = True,
              command: str = "", workers: int | None = None, threads: int = 1,
              device: str | None = None, journal: Path | None = None) -> Report:
    """Run experiment ``name`` for seeds 0..seeds-1 and return its report (``journal``: see
    :func:`run_jobs`)."""
    import torch

    from experiments import get
    from experiments.harness.provenance import environment

    exp = get(name)
    spec = exp.QUICK if quick else exp.SPEC
    workers = default_workers(quick) if workers is None else workers
    torch.set_num_threads(threads)
    t0, cpu0 = time.perf_counter(), cpu_seconds()
    jobs = exp.jobs(spec, seeds)
    # Counted before the run (which adds entries); run_jobs reads the entries it reuses.
    resumed = sum(_entry(journal, job_key(j)) is not None for j in jobs) if journal else 0
    results = run_jobs(exp.task, jobs, workers, threads, progress, device, journal)
    report = exp.tables(results, spec, seeds, command)
    report.wall_seconds = time.perf_counter() - t0
    report.extra["cpu_seconds"] = round(cpu_seconds() - cpu0, 1)
    if resumed:  # the wall and CPU totals cover only the jobs this invocation ran
        report.extra["resumed_jobs"] = [resumed, len(jobs)]
    report.environment = environment(threads, workers, device)
    report.notes.append(
        f"Ran on {workers} worker process(es) × {threads} torch thread(s) each (EFA_WORKERS "
        "overrides the number of workers; numbers depend on the thread count): wall "
        f"{report.wall_seconds:.0f} s, CPU {report.extra['cpu_seconds']:.0f} s."
        + (f" Resumed: {resumed} of {len(jobs)} jobs were run by an earlier invocation of the "
           "same command (interrupted, or with --only), whose time is not in these totals "
           "(each job's own seconds are in the rows)." if resumed else "")
    )
    return report


def retable(folder: Path) -> Report:
    """The report of ``folder`` with its tables, notes and claims computed again from the runs
    its results.json stores (after a change to the experiment's tables, or to a results file
    they read: tabular-simulation reads tabular-simulation-grids'). What the run measured of
    itself (wall and CPU time, resumed jobs, environment, its "Ran on" note) is kept, and so
    are the figures the experiment's ``KEPT_FIGURES`` names (drawn from what its runs do not
    store)."""
    from experiments import get

    old = Report.read(folder)
    runs = old.extra.get("runs")
    if not runs:
        raise ValueError(f"{folder}/results.json stores no runs to recompute the tables from")
    exp = get(old.experiment)
    spec = exp.QUICK if "--quick" in old.command.split() else exp.SPEC
    report = exp.tables(runs, spec, len(old.seeds), old.command)
    report.wall_seconds, report.environment = old.wall_seconds, old.environment
    for key in ("cpu_seconds", "resumed_jobs"):
        if key in old.extra:
            report.extra[key] = old.extra[key]
    report.notes += [n for n in old.notes if n.startswith("Ran on ")]
    # Figures drawn from what the runs do not store cannot be recomputed: the file's stand.
    for key in getattr(exp, "KEPT_FIGURES", ()):
        if key in old.figures and key not in report.figures:
            report.figures[key] = old.figures[key]
    return report


def select(jobs: list[dict], only: list[str]) -> list[dict]:
    """The jobs matching every ``KEY=PATTERN`` of ``only`` (fnmatch globs on str(job[KEY]))."""
    from fnmatch import fnmatchcase

    keys = sorted({k for j in jobs for k in j if k not in ("spec", "cost")})
    rules = []
    for rule in only:
        key, sep, pattern = rule.partition("=")
        if not sep or not key:
            raise ValueError(f"--only takes KEY=PATTERN, got {rule!r}")
        if key not in keys:
            raise ValueError(f"--only {rule!r}: the jobs have no key {key!r}; they have {keys}")
        rules.append((key, pattern))
    picked = [j for j in jobs if all(fnmatchcase(str(j.get(k)), p) for k, p in rules)]
    if not picked:
        raise ValueError(f"--only {' '.join(only)} matches none of the {len(jobs)} jobs")
    return picked


def run_only(name: str, seeds: int, only: list[str], journal: Path, workers: int | None = None,
             threads: int = 1, device: str | None = None,
             progress: bool = True) -> tuple[int, int]:
    """Run the jobs of experiment ``name`` that ``only`` selects into ``journal`` (the full
    run's), e.g. a long peer on a spare core; returns (jobs in the journal, all jobs)."""
    import torch

    from experiments import get

    exp = get(name)
    jobs = exp.jobs(exp.SPEC, seeds)
    torch.set_num_threads(threads)
    workers = default_workers(False) if workers is None else workers
    run_jobs(exp.task, select(jobs, only), workers, threads, progress, device, journal)
    return sum(_entry(journal, job_key(j)) is not None for j in jobs), len(jobs)


def cpu_seconds() -> float:
    """CPU time of this process and of its finished child processes (the workers)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


# --------------------------------------------------------------------------- the results folder


def check_destination(folder: Path, command: str, force: bool) -> None:
    """Refuse to replace results made by a different command (other seeds, --quick) unless
    ``force``; refuse a destination that is not a writable folder. Called before any work."""
    folder = Path(folder)
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise NotADirectoryError(f"{probe} is not a folder: cannot write {folder}")
    if not os.access(probe, os.W_OK):
        raise PermissionError(f"cannot write into {probe}")
    old = folder / "results.json"
    if old.exists() and not force:
        try:
            doc = json.loads(old.read_text())
            previous = doc.get("command") if isinstance(doc, dict) else None
        except (ValueError, OSError):
            previous = None
        if previous != command:
            raise FileExistsError(
                f"{folder} holds results made by `{previous}`; this run is `{command}`. "
                "Pass --out elsewhere, or --force to replace them"
            )


def write_atomically(report: Report, folder: Path, plots) -> Path:
    """Write the report and its plots into a temporary folder beside ``folder``, keep any file
    of the old folder the run does not make (e.g. a benchmark's), then swap it in."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        report.write(tmp)
        plots(report, tmp)
        if folder.exists():
            for f in folder.iterdir():
                if not (tmp / f.name).exists():
                    (shutil.copytree if f.is_dir() else shutil.copy2)(f, tmp / f.name)
            old = folder.parent / f".{folder.name}.old-{os.getpid()}"
            os.replace(folder, old)
            os.replace(tmp, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
