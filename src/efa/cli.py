"""The ``efa`` command line."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from efa import experiments

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Exponential family attention")


@app.command()
def reproduce(
    name: str = typer.Argument(..., help=f"experiment: {', '.join(experiments.EXPERIMENTS)}"),
    seeds: int = typer.Option(5, min=1, help="number of seeds (0..N-1)"),
    out: Path = typer.Option(Path("results"), help="results go to OUT/NAME/"),
    quick: bool = typer.Option(False, help="tiny configuration exercising the same code path"),
    progress: bool = typer.Option(True, help="show progress bars"),
    threads: int = typer.Option(
        1,
        min=1,
        help="torch CPU threads; 1 is as fast for these small models and never "
        "thrashes when several runs share the cores",
    ),
):
    """Run an experiment and write OUT/NAME/results.json, results.md and plots."""
    import torch

    torch.set_num_threads(threads)
    try:
        module = experiments.get(name)
    except KeyError as e:
        raise typer.BadParameter(str(e.args[0])) from None
    command = " ".join(
        ["efa reproduce", name, f"--seeds {seeds}"]
        + ([f"--out {out}"] if out != Path("results") else [])
        + (["--quick"] if quick else [])
    )
    report = module.run(seeds=seeds, quick=quick, progress=progress, command=command)
    folder = report.write(out)
    module.write_plots(report, folder)
    typer.echo(report.markdown())
    typer.echo(f"wrote {folder}/", err=True)


@app.command()
def summary(
    readme: Path = typer.Option(Path("README.md"), help="file with a results block to rewrite"),
    results: Path = typer.Option(Path("results"), help="folder of OUT/NAME/results.json"),
):
    """Regenerate the README's results tables from the committed results files."""
    from efa.experiments.summary import update_readme

    changed = update_readme(readme, results)
    typer.echo(f"{readme}: {'updated' if changed else 'already up to date'}")


@app.command("list")
def list_experiments():
    """List the experiments `efa reproduce` knows."""
    for name, module in experiments.EXPERIMENTS.items():
        doc = (sys.modules.get(module) or experiments.get(name)).__doc__ or ""
        typer.echo(f"{name:24s} {doc.strip().splitlines()[0]}")


if __name__ == "__main__":
    app()
