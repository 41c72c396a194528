"""The experiments' command line: ``efa reproduce | replot | summary | list`` from a checkout of
the repository (the ``efa`` command hands these to this app), or ``python -m experiments ...``.
Heavy imports happen inside the commands, so ``list`` and ``--help`` answer at once.

Errors print one line; ``--debug`` (or ``EFA_DEBUG=1``) shows the traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from efa.cli import fail, state  # the same one-line errors and --debug as `efa`
from experiments import EXPERIMENTS

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Reproductions of the papers efa implements (results/ of the repository)")


@app.callback()
def main(debug: bool = typer.Option(False, "--debug", help="show tracebacks (or EFA_DEBUG=1)")):
    if debug:
        state["debug"] = True


@app.command()
def reproduce(
    name: str = typer.Argument(..., help=f"experiment: {', '.join(EXPERIMENTS)}"),
    seeds: int = typer.Option(5, min=1, help="number of seeds (0..N-1)"),
    out: str = typer.Option("results", help="results go to OUT/NAME/"),
    quick: bool = typer.Option(False, help="tiny configuration exercising the same code path"),
    force: bool = typer.Option(False, help="replace results made by a different command"),
    progress: bool = typer.Option(True, help="show progress"),
    workers: int = typer.Option(0, min=0, help="worker processes (0: EFA_WORKERS or 2)"),
    threads: int = typer.Option(
        1, min=1, help="torch CPU threads per worker; 1 is as fast for these small models and "
        "never thrashes when several runs share the cores (numbers depend on it)",
    ),
    device: str = typer.Option(None, help="train on this device (cpu, cuda, cuda:1)"),
    only: list[str] = typer.Option(
        None, help="KEY=PATTERN (repeatable): run only the jobs whose KEY matches the glob "
        "PATTERN (e.g. model='Logit*') into the journal, and write no results; the same "
        "command without --only then runs the rest and writes them",
    ),
):
    """Run an experiment and write OUT/NAME/results.json, results.md and plots. A full run saves
    each finished job in OUT/.NAME.jobs/: run the same command again after an interruption to
    run only the missing jobs, the running ones from their fits' last checkpoints (delete that
    folder to start over)."""
    if name not in EXPERIMENTS:
        fail(EXPERIMENTS.lookup_error(name))
    if only and quick:
        fail(ValueError("--only fills the journal of a full run; it cannot go with --quick"))
    if not out.strip():  # Path("") is the current directory: the results would land there
        fail(ValueError(f"--out is empty ({out!r}): give the folder the results go to "
                        "(OUT/NAME/), e.g. --out results"))
    folder = Path(out) / name
    command = " ".join(
        ["efa reproduce", name, f"--seeds {seeds}"]
        + ([f"--out {Path(out)}"] if Path(out) != Path("results") else [])
        + (["--quick"] if quick else [])
        # numbers depend on the thread count: a non-default layout is part of the command
        + ([f"--workers {workers}"] if workers else [])
        + ([f"--threads {threads}"] if threads != 1 else [])
    )
    from experiments import get
    from experiments.harness import runner

    try:
        runner.check_destination(folder, command, force)  # before any work
        if device is not None:
            from efa.training.train import check_device

            check_device(device)
        # Full runs keep a journal of finished jobs: run the same command again to resume.
        journal = None if quick else Path(out) / f".{name}.jobs"
        if only:
            done, total = runner.run_only(name, seeds, only, journal, workers=workers or None,
                                          threads=threads, device=device, progress=progress)
            typer.echo(f"{done} of {total} jobs are in {journal}; run `{command}` to run the "
                       "rest and write the results", err=True)
            return
        report = runner.reproduce(name, seeds, quick, progress, command,
                                  workers=workers or None, threads=threads, device=device,
                                  journal=journal)
        runner.write_atomically(report, folder, get(name).plots)
        if journal is not None:
            shutil.rmtree(journal, ignore_errors=True)
    except Exception as err:  # one line for the user; the traceback with --debug
        fail(err)
    typer.echo(report.markdown())
    typer.echo(f"wrote {folder}/", err=True)


@app.command()
def replot(folder: Path = typer.Argument(..., help="a results folder, e.g. results/synthetic"),
           tables: bool = typer.Option(False, help="also recompute the tables, notes and claims "
                                       "from the runs stored in results.json")):
    """Redraw the plots and results.md of a results folder from its results.json."""
    from experiments import get
    from experiments.harness.report import Report
    from experiments.harness.runner import retable, write_atomically

    try:
        report = Report.read(folder)
        experiment = get(report.experiment)  # an unknown one is refused before any write
        if tables:
            report = retable(folder)
            write_atomically(report, folder, experiment.plots)
        (folder / "results.md").write_text(report.markdown())
        experiment.plots(report, folder)
    except Exception as err:  # one line for the user; the traceback with --debug
        fail(err)
    typer.echo(f"redrew {folder}/")


@app.command()
def summary(
    readme: Path = typer.Option(Path("README.md"), help="file with a results block to rewrite"),
    results: Path = typer.Option(Path("results"), help="folder of OUT/NAME/results.json"),
):
    """Regenerate the README's and docs' results tables from the committed results files."""
    from experiments.harness.summary import update_readme

    try:
        changed = update_readme(readme, results)
    except Exception as err:  # one line for the user; the traceback with --debug
        fail(err)
    typer.echo(f"{readme} and the docs' generated tables: "
               f"{'updated' if changed else 'already up to date'}")


@app.command("list")
def list_experiments():
    """List the experiments `efa reproduce` knows."""
    for name, (_, summary_line) in EXPERIMENTS.items():
        typer.echo(f"{name:24s} {summary_line}")
