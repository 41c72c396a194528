"""The ``efa`` command line: ``train`` for the library; ``reproduce``, ``replot``, ``summary`` and
``list`` hand over to the repository's experiments (``experiments/harness/cli.py``), which a
checkout has and the installed library does not. Heavy imports happen inside the commands, so
``efa --help`` and ``efa --version`` answer at once.

Errors print one line; ``--debug`` (or ``EFA_DEBUG=1``) shows the traceback."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from efa import __version__ as VERSION

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Exponential family attention")
state = {"debug": os.environ.get("EFA_DEBUG", "") not in ("", "0")}


def _version(value: bool):
    if value:
        typer.echo(f"efa {VERSION}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the version and exit"),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks (or EFA_DEBUG=1)"),
) -> None:
    if debug:
        state["debug"] = True


def fail(err: BaseException) -> None:
    """One line for the user (exit status 2); the traceback with --debug or EFA_DEBUG=1."""
    if state["debug"]:
        raise err
    typer.echo(f"efa: error: {type(err).__name__}: {err}", err=True)
    raise typer.Exit(2)


def _out_folder(out: str) -> Path:
    """``--out`` as a folder; an empty one is refused, since ``Path("")`` is the current
    directory (which ``--force`` would replace)."""
    if not out.strip():
        raise ValueError(f"--out is empty ({out!r}): give the folder to write into")
    return Path(out)


def _trained(hist, validated: bool) -> str:
    """What a fit did and which weights it kept, in words: ``best_epoch`` is -1 both without
    validation data (the last weights) and when no epoch beat the starting weights (those)."""
    done = f"trained {hist.epochs_run} epoch{'' if hist.epochs_run == 1 else 's'}"
    if hist.best_epoch >= 0:
        return f"{done}; kept epoch {hist.best_epoch + 1}, the best on the validation data"
    if not validated:
        return f"{done}; no validation data: the last weights are kept"
    return (f"{done}; no epoch improved on the starting weights' validation loss: the "
            "starting weights are kept")


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
    out: str = typer.Option(..., help="folder for the trained model"),
    val: Path = typer.Option(None, help="validation sequences for early stopping"),
    config: Path = typer.Option(None, help="training settings: TrainConfig fields as JSON"),
    checkpoint_dir: Path = typer.Option(None, help="resume from / save to this folder"),
    device: str = typer.Option(None, help="cpu, cuda, cuda:1 (with torchrun: cuda = the "
                               "local rank's GPU)"),
    force: bool = typer.Option(False, help="replace a model already in OUT"),
) -> None:
    """Train a saved model on saved sequences; under torchrun, data-parallel (one process per
    device: `torchrun --nproc_per_node 2 -m efa.cli train DATA --model M --out OUT`)."""
    import os

    import efa
    from efa.training import distributed

    try:
        folder = _out_folder(out)
        if folder.exists() and any(folder.iterdir()) and not force:
            raise FileExistsError(f"{folder} is not empty; pass --force to replace its model")
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
            efa.save(net, folder, overwrite=force, history=hist)
            typer.echo(f"{_trained(hist, val_data is not None)}; wrote {folder}/", err=True)
    except Exception as err:  # one line for the user; the traceback with --debug
        fail(err)


def _experiments():
    """The repository's experiments app. The papers' reproductions are not part of the installed
    library: they live in ``experiments/`` of a checkout, so these commands run from its root
    (where ``make demo`` runs them)."""
    try:
        from experiments.harness.cli import app as experiments_app
    except ModuleNotFoundError as err:
        if err.name not in ("experiments", "experiments.harness.cli"):
            raise
        here = Path.cwd()
        if not (here / "experiments" / "harness" / "cli.py").is_file():
            raise FileNotFoundError(
                "the reproductions of the papers are not part of the installed efa: they live "
                "in experiments/ of the repository. Run this command from the root of a "
                "checkout (git clone the repository; `make demo` runs one), or there "
                "`python -m experiments --help`") from None
        sys.path.insert(0, str(here))
        from experiments.harness.cli import app as experiments_app
    return experiments_app


def _forward(command: str, ctx: typer.Context) -> None:
    try:
        experiments_app = _experiments()
    except Exception as err:  # one line for the user; the traceback with --debug
        fail(err)
    try:  # the experiments' app shares this module's --debug state and one-line errors
        experiments_app([command, *ctx.args], prog_name="efa")
    except SystemExit as done:  # the inner app ends the way a command line does
        if done.code not in (None, 0):
            raise typer.Exit(done.code if isinstance(done.code, int) else 2) from None


_PASS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


@app.command(context_settings=_PASS, add_help_option=False)
def reproduce(ctx: typer.Context) -> None:
    """Run a paper's experiment into results/NAME/ (from a checkout; `efa reproduce --help`)."""
    _forward("reproduce", ctx)


@app.command(context_settings=_PASS, add_help_option=False)
def replot(ctx: typer.Context) -> None:
    """Redraw a results folder's plots and results.md (from a checkout)."""
    _forward("replot", ctx)


@app.command(context_settings=_PASS, add_help_option=False)
def summary(ctx: typer.Context) -> None:
    """Regenerate the README's results tables from results/ (from a checkout)."""
    _forward("summary", ctx)


@app.command("list", context_settings=_PASS, add_help_option=False)
def list_experiments(ctx: typer.Context) -> None:
    """List the experiments `efa reproduce` knows (from a checkout)."""
    _forward("list", ctx)


if __name__ == "__main__":
    sys.exit(app())
