"""``make dry-run`` without PROM_URL: one dry-run cycle over the 21 September incident, served by
the Debian `prometheus`; extra arguments go to ``gpu-node-guard run`` (e.g. ``--output json``)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from guard.cli import cli
from guard.example.incident import CARD_PCI, DECISION_TICK, XID_ONSET, incident
from guard.example.promserver import PrometheusUnavailable, scenario_server

SNAPSHOT = Path(__file__).with_name("cluster-snapshot.yaml")


def main(argv: list[str]) -> int:
    scenario = incident()
    lag = DECISION_TICK - XID_ONSET
    minutes, seconds = divmod(int(lag.total_seconds()), 60)
    to_stderr = "json" in argv  # keep stdout one JSON object

    def say(text: str) -> None:
        click.echo(text, err=to_stderr)

    say(
        f"# Built-in example: the 21 September incident. gpu-node-b GPU 4 ({CARD_PCI}) logs "
        f"Xid 79 at {XID_ONSET:%H:%M:%S}Z and allocatable drops 8 -> 7."
    )
    say(
        f"# One guard cycle at the {DECISION_TICK:%H:%M}Z cron tick, {minutes}m{seconds:02d}s "
        "after the Xid (the write-up's guard needed 12m26s). Nothing is written."
    )
    try:
        with scenario_server(scenario) as prom:
            say(f"# Local Prometheus {prom.url} (Debian package), {len(scenario.nodes)} nodes.")
            args = ["run", "--dry-run", "--prometheus-url", prom.url]
            args += ["--cluster-snapshot", str(SNAPSHOT), "--at", DECISION_TICK.isoformat(), *argv]
            try:
                cli.main(args=args, prog_name="gpu-node-guard", standalone_mode=False)
            except SystemExit as exc:
                return int(exc.code or 0)
            except click.ClickException as exc:
                exc.show()
                return exc.exit_code
    except PrometheusUnavailable as exc:
        click.echo(f"error: {exc}", err=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
