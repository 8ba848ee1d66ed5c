"""Placeholder until the evidence commands land."""
import click


@click.group()
def evidence() -> None:
    """Evidence collection and classification."""


@click.group()
def ledger() -> None:
    """Fault-ledger tools."""
