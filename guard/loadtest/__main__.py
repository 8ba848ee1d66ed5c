"""`python -m guard.loadtest run …`: the load test without the rest of the CLI."""

from guard.loadtest.cli import loadtest

loadtest(prog_name="gpu-node-guard loadtest")
