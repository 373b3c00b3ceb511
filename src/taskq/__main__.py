"""`python -m taskq` runs the taskq command."""

from taskq.cli import run

run()
