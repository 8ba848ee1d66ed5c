"""Placeholder until the load test lands."""
import click


@click.group()
def loadtest() -> None:
    """GPU load test."""
