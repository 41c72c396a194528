"""The ``efa`` command line. Heavy imports (torch, matplotlib, the experiments) happen inside
the commands, so ``efa --help``, ``efa --version`` and ``efa list`` answer at once.

Errors print one line; ``--debug`` (or ``EFA_DEBUG=1``) shows the traceback."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import typer

from efa import __version__ as VERSION
from efa.experiments import EXPERIMENTS

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Exponential family attention")
_state = {"debug": os.environ.get("EFA_DEBUG", "") not in ("", "0")}


def _version(value: bool):
    if value:
        typer.echo(f"efa {VERSION}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the version and exit"),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks (or EFA_DEBUG=1)"),
):
    if debug:
        _state["debug"] = True


def _fail(err: BaseException) -> None:
    if _state["debug"]:
        raise err
    typer.echo(f"efa: error: {type(err).__name__}: {err}", err=True)
    raise typer.Exit(2)


@app.command()
def reproduce(
    name: str = typer.Argument(..., help=f"experiment: {', '.join(EXPERIMENTS)}"),
    seeds: int = typer.Option(5, min=1, help="number of seeds (0..N-1)"),
    out: Path = typer.Option(Path("results"), help="results go to OUT/NAME/"),
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
        _fail(KeyError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}"))
    if only and quick:
        _fail(ValueError("--only fills the journal of a full run; it cannot go with --quick"))
    command = " ".join(
        ["efa reproduce", name, f"--seeds {seeds}"]
        + ([f"--out {out}"] if out != Path("results") else [])
        + (["--quick"] if quick else [])
        # numbers depend on the thread count: a non-default layout is part of the command
        + ([f"--workers {workers}"] if workers else [])
        + ([f"--threads {threads}"] if threads != 1 else [])
    )
    from efa.experiments import get, runner

    folder = out / name
    try:
        runner.check_destination(folder, command, force)  # before any work
        if device is not None:
            from efa.train import _check_device

            _check_device(device)
        # Full runs keep a journal of finished jobs: run the same command again to resume.
        journal = None if quick else out / f".{name}.jobs"
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
        _fail(err)
    typer.echo(report.markdown())
    typer.echo(f"wrote {folder}/", err=True)


def _train_settings(path: Path) -> dict:
    """TrainConfig fields from a JSON file (fit refuses names TrainConfig does not know)."""
    import json

    try:
        settings = json.loads(path.read_text())
    except ValueError as err:
        raise ValueError(f"--config {path} is not valid JSON: {err}") from None
    if not isinstance(settings, dict):
        raise ValueError(f"--config {path} must hold a JSON object of TrainConfig fields "
                         f'(e.g. {{"lr": 0.001, "max_epochs": 20}}), got a '
                         f"{type(settings).__name__}")
    return settings


@app.command()
def train(
    data: Path = typer.Argument(..., help="training sequences (written by Sequences.save)"),
    model: Path = typer.Option(..., help="a model folder written by efa.save: its config, and "
                               "its weights as the starting point"),
    out: Path = typer.Option(..., help="folder for the trained model"),
    val: Path = typer.Option(None, help="validation sequences for early stopping"),
    config: Path = typer.Option(None, help="training settings: TrainConfig fields as JSON"),
    checkpoint_dir: Path = typer.Option(None, help="resume from / save to this folder"),
    device: str = typer.Option(None, help="cpu, cuda, cuda:1 (with torchrun: cuda = the "
                               "local rank's GPU)"),
    force: bool = typer.Option(False, help="replace a model already in OUT"),
):
    """Train a saved model on saved sequences; under torchrun, data-parallel (one process per
    device: `torchrun --nproc_per_node 2 -m efa.cli train DATA --model M --out OUT`)."""
    import os

    import efa
    from efa import distributed

    try:
        if out.exists() and any(out.iterdir()) and not force:
            raise FileExistsError(f"{out} is not empty; pass --force to replace its model")
        settings = _train_settings(config) if config else {}
        if device == "cuda" and "LOCAL_RANK" in os.environ:
            device = f"cuda:{os.environ['LOCAL_RANK']}"
        distributed.init_from_environment(device)
        rank, _ = distributed.world()
        net = efa.load(model)
        train_data = efa.Sequences.load(data)
        val_data = efa.Sequences.load(val) if val else None
        settings.setdefault("progress", rank == 0)
        if checkpoint_dir is not None:
            settings["checkpoint_dir"] = str(checkpoint_dir)
        if device is not None:
            settings["device"] = device
        hist = efa.fit(net, train_data, val_data, **settings)
        if rank == 0:
            efa.save(net, out, overwrite=force)
            typer.echo(f"trained {hist.epochs_run} epochs (best {hist.best_epoch + 1}); "
                       f"wrote {out}/", err=True)
    except Exception as err:  # one line for the user; the traceback with --debug
        _fail(err)


@app.command()
def replot(folder: Path = typer.Argument(..., help="a results folder, e.g. results/synthetic"),
           tables: bool = typer.Option(False, help="also recompute the tables, notes and claims "
                                       "from the runs stored in results.json")):
    """Redraw the plots and results.md of a results folder from its results.json."""
    from efa.experiments import get
    from efa.experiments.report import Report
    from efa.experiments.runner import retable, write_atomically

    try:
        report = Report.read(folder)
        experiment = get(report.experiment)  # an unknown one is refused before any write
        if tables:
            report = retable(folder)
            write_atomically(report, folder, experiment.plots)
        (folder / "results.md").write_text(report.markdown())
        experiment.plots(report, folder)
    except Exception as err:  # one line for the user; the traceback with --debug
        _fail(err)
    typer.echo(f"redrew {folder}/")


@app.command()
def summary(
    readme: Path = typer.Option(Path("README.md"), help="file with a results block to rewrite"),
    results: Path = typer.Option(Path("results"), help="folder of OUT/NAME/results.json"),
):
    """Regenerate the README's results tables from the committed results files."""
    from efa.experiments.summary import update_readme

    try:
        changed = update_readme(readme, results)
    except Exception as err:  # one line for the user; the traceback with --debug
        _fail(err)
    typer.echo(f"{readme}: {'updated' if changed else 'already up to date'}")


@app.command("list")
def list_experiments():
    """List the experiments `efa reproduce` knows."""
    for name, (_, summary_line) in EXPERIMENTS.items():
        typer.echo(f"{name:24s} {summary_line}")


if __name__ == "__main__":
    sys.exit(app())
