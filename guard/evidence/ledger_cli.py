"""`gpu-node-guard ledger count`: how often a card and a slot have failed, and what the next
request would say about it. It counts what the guard counts: the ledger with its archives
(guard.evidence.ledger_source). Read-only; lines the ledger cannot parse are listed, never
dropped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from guard import ledger as fault_ledger
from guard.cli_options import (
    FILE,
    OUTPUT,
    name_callback,
    node_callback,
    pci_callback,
    uuid_callback,
)
from guard.evidence.ledger_source import LedgerRead, LedgerSourceError, read_cluster, read_file
from guard.names import is_dns_label, is_dns_subdomain
from guard.settings import KUBECONFIG_HELP, setting_default


def next_incident(counts: fault_ledger.Counts) -> fault_ledger.Counts:
    """Counts as they will be once one more incident of this card in this slot is recorded
    (`guard.ledger.history` expects counts that include the incident being reported).

    >>> next_incident(fault_ledger.Counts(2, 2, None))
    Counts(same_card=3, same_slot=3, last_card_incident=None)
    """
    card, slot = counts.same_card + 1, counts.same_slot + 1
    return fault_ledger.Counts(card, slot, counts.last_card_incident)


def summary(read: LedgerRead, uuid: str, node: str, pci: str) -> dict[str, Any]:
    """The counts of the ledger as it is, plus the history of a next incident."""
    lines = read.lines
    counts = fault_ledger.count(lines, uuid, node, pci)
    upcoming = next_incident(counts)
    last = counts.last_card_incident
    return {
        "uuid": uuid,
        "node": node,
        "pci": pci,
        "same_card": counts.same_card,
        "same_slot": counts.same_slot,
        "last_card_incident": fault_ledger.format_time(last) if last else None,
        "next_history": fault_ledger.history(upcoming).value,
        "next_sentence": fault_ledger.history_sentence(upcoming, uuid, node, pci),
        "parsed_lines": len(fault_ledger.entries(lines)),
        "unparsed": [{"node": u.node, "line": u.raw} for u in fault_ledger.unparsed(lines)],
        "archives": list(read.archives),
    }


def _text(s: dict[str, Any]) -> str:
    out = [
        f"same card {s['uuid']}: {s['same_card']} incident(s), any node"
        + (f" (last {s['last_card_incident']})" if s["last_card_incident"] else ""),
        f"same slot {s['node']} {s['pci']}: {s['same_slot']} incident(s)",
        f"next incident ({s['next_history']}): {s['next_sentence']}",
        f"lines: {s['parsed_lines']} parsed, {len(s['unparsed'])} not parsed (kept as they are)",
    ]
    out.extend(f"  not parsed [{u['node']}]: {u['line']}" for u in s["unparsed"])
    if s["archives"]:
        out.append(f"archives counted with the ledger: {', '.join(s['archives'])}")
    return "\n".join(out)


_namespace = name_callback(is_dns_label, "namespace (a DNS-1123 label)")
_configmap = name_callback(is_dns_subdomain, "ConfigMap name (a DNS-1123 subdomain)")


@click.command()
@click.option("--uuid", required=True, callback=uuid_callback, help="GPU UUID of the card (GPU-…).")
@click.option(
    "--node", required=True, callback=node_callback, help="Node name: the ledger key of the slot."
)
@click.option("--pci", required=True, callback=pci_callback, help="PCI address of the slot.")
@click.option("--ledger", "ledger_file", type=FILE, help="ConfigMap YAML/JSON or node: text map.")
@click.option(
    "--from-cluster",
    is_flag=True,
    help="Read the ledger ConfigMap and its archives from the cluster.",
)
@click.option("--kubeconfig", default="", envvar="GUARD_KUBECONFIG", help=KUBECONFIG_HELP)
@click.option(
    "--namespace",
    default=setting_default("namespace"),
    envvar="GUARD_NAMESPACE",
    show_default=True,
    callback=_namespace,
)
@click.option(
    "--configmap",
    default=setting_default("ledger_configmap"),
    envvar="GUARD_LEDGER_CONFIGMAP",
    show_default=True,
    callback=_configmap,
)
@click.option("--output", type=OUTPUT, default="text", show_default=True)
def count(**opts: Any) -> None:
    """Count incidents of a card (by UUID, all nodes) and a slot (by PCI, this node)."""
    ledger_file: Path | None = opts["ledger_file"]
    if (ledger_file is None) == (not opts["from_cluster"]):
        raise click.UsageError("give exactly one of --ledger FILE and --from-cluster")
    try:
        if ledger_file is not None:
            read = read_file(ledger_file, opts["configmap"])
        else:
            read = read_cluster(opts["kubeconfig"], opts["namespace"], opts["configmap"])
    except LedgerSourceError as err:
        raise click.ClickException(str(err)) from err
    result = summary(read, opts["uuid"], opts["node"], opts["pci"])
    if opts["output"] == "json":
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(_text(result))
