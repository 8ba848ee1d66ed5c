"""Placeholder until conformance lands."""
import click


@click.command()
def conformance() -> None:
    """Node conformance checks."""
