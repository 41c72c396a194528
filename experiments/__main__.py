"""``python -m experiments reproduce NAME`` (the same as ``efa reproduce NAME`` in a checkout)."""

from experiments.harness.cli import app

app(prog_name="python -m experiments")
