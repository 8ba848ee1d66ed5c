"""`python -m guard.generate.policies write|check` (see guard/generate/policies/__init__.py)."""

from __future__ import annotations

from pathlib import Path

import click

from guard.generate.policies import POLICY_DIR, render
from guard.settings import Settings


@click.group()
@click.option("--root", default=".", show_default=True, help="Checkout holding policies/")
@click.pass_context
def main(ctx: click.Context, root: str) -> None:
    """Write or check the generated admission policies."""
    base = Path(root)
    if not (base / POLICY_DIR).is_dir():
        raise click.UsageError(f"{base / POLICY_DIR} is not a directory; run from the repo root")
    ctx.obj = base


@main.command()
@click.pass_obj
def write(base: Path) -> None:
    """Write every policy file; remove .yaml files there that the generator no longer makes."""
    files = render(Settings())
    for stale in sorted((base / POLICY_DIR).glob("*.yaml")):
        if stale.relative_to(base) not in files:
            stale.unlink()
            click.echo(f"removed {stale.relative_to(base)}")
    for path, text in files.items():
        (base / path).write_text(text, encoding="utf-8")
        click.echo(f"wrote {path}")


@main.command()
@click.pass_obj
def check(base: Path) -> None:
    """Exit 1 when policies/ differs from what guard/generate/policies generates."""
    files = render(Settings())
    on_disk = {p.relative_to(base) for p in (base / POLICY_DIR).glob("*.yaml")}
    for path in sorted(on_disk - set(files)):
        raise click.ClickException(
            f"{path} is not generated; run `python -m guard.generate.policies write`"
        )
    for path, text in files.items():
        found = base / path
        if not found.is_file() or found.read_text(encoding="utf-8") != text:
            raise click.ClickException(
                f"{path} differs from guard/generate/policies; "
                "run `python -m guard.generate.policies write`"
            )


if __name__ == "__main__":
    main()
