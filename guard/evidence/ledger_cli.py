"""`gpu-node-guard ledger count`: how often a card and a slot have failed, and what the next
request would say, counted as the guard counts (`ledger_store.ledger_lines`) from a file or the
cluster. Read-only; lines the ledger cannot parse are listed, never dropped."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
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
from guard.doors import ledger_store
from guard.files import LEDGER_FILE_MAX_BYTES, FileInputError, load_yaml, read_text_bounded
from guard.ledger import LedgerLine
from guard.names import is_dns_label, is_dns_subdomain
from guard.settings import KUBECONFIG_HELP, setting_default


class LedgerSourceError(ValueError):
    """The ledger could not be read; one line naming the source."""


def data_of(document: Any, where: str) -> dict[str, str]:
    """The node → text mapping of a ConfigMap (no data: empty) or of a bare data mapping."""
    if not isinstance(document, dict):
        raise LedgerSourceError(f"{where}: not a ConfigMap or a node: text mapping")
    if document.get("kind") == "ConfigMap" or "apiVersion" in document:
        document = document.get("data") or {}
        if not isinstance(document, dict):
            raise LedgerSourceError(f"{where}: ConfigMap data is not a mapping")
    for key, value in document.items():
        if not isinstance(value, str):
            raise LedgerSourceError(f"{where}: node {key!r}: value is not text")
    return {str(k): v for k, v in document.items()}


@dataclass(frozen=True, slots=True)
class LedgerRead:
    """The lines to count and the archives they include (names, oldest first)."""

    lines: tuple[LedgerLine, ...]
    archives: tuple[str, ...] = ()


def read_file(path: Path, name: str) -> LedgerRead:
    """`name`: the ledger ConfigMap's name, to find it and its archives in a List."""
    try:
        text = read_text_bounded(path, LEDGER_FILE_MAX_BYTES, "ledger file")
        document = load_yaml(text, f"ledger file {path}")  # JSON is YAML
    except FileInputError as err:
        raise LedgerSourceError(str(err)) from None
    if isinstance(document, dict) and document.get("kind") == "List":
        return _from_list(document.get("items"), name, str(path))
    return LedgerRead(ledger_store.ledger_lines(data_of(document, str(path)), ()))


def _from_list(items: Any, name: str, where: str) -> LedgerRead:
    found = [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
    ledgers = [i for i in found if i.get("kind") == "ConfigMap" and _name(i) == name]
    archives = [i for i in found if ledger_store.is_archive(i, name)]
    missing = f"a List without ConfigMap {name} or its archives"
    return _read(ledgers[0] if ledgers else None, archives, name, where, missing)


def _read(
    ledger: Any, archives: list[dict[str, Any]], name: str, where: str, missing: str
) -> LedgerRead:
    if ledger is None and not archives:
        raise LedgerSourceError(f"{where}: {missing}")
    data = data_of(ledger, where) if ledger else {}
    for cm in archives:
        data_of(cm, f"{where}: configmap {_name(cm)}")  # text values only, as the ledger's
    ordered = sorted(archives, key=lambda cm: ledger_store.archive_index(name, _name(cm)) or 0)
    return LedgerRead(ledger_store.ledger_lines(data, ordered), tuple(map(_name, ordered)))


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


READ_RETRY_S = 10.0  # how long `ledger count --from-cluster` retries an unreachable API server


def read_cluster(kubeconfig: str, namespace: str, name: str) -> LedgerRead:
    """Read the ledger and its archives through the guard's one API door (kubectl's rule:
    --kubeconfig, else $KUBECONFIG, else in-cluster)."""
    from guard.doors.kube import Kube, KubeError  # the client is only needed for this path
    from guard.doors.retry import Backoff

    where = f"configmap {namespace}/{name}"
    try:
        # A person waits at the prompt: ride out a short blip, not the CronJob's full minute.
        kube = Kube.connect(kubeconfig, backoff=Backoff.for_seconds(READ_RETRY_S))
        found = kube.configmap(namespace, name)
        archives = ledger_store.read_archives(kube, namespace, name)
    except KubeError as err:
        raise LedgerSourceError(str(err)) from err
    return _read(found, archives, name, where, "not found")


def summary(read: LedgerRead, uuid: str, node: str, pci: str) -> dict[str, Any]:
    """The counts of the ledger as it is, plus the history of a next incident."""
    counts = fault_ledger.count(read.lines, uuid, node, pci)
    last = counts.last_card_incident
    # `guard.ledger.history` counts the incident being reported: the next one is one more.
    upcoming = fault_ledger.Counts(counts.same_card + 1, counts.same_slot + 1, last)
    return {
        "uuid": uuid,
        "node": node,
        "pci": pci,
        "same_card": counts.same_card,
        "same_slot": counts.same_slot,
        "last_card_incident": fault_ledger.format_time(last) if last else None,
        "next_history": fault_ledger.history(upcoming).value,
        "next_sentence": fault_ledger.history_sentence(upcoming, uuid, node, pci),
        "parsed_lines": len(fault_ledger.entries(read.lines)),
        "unparsed": [{"node": u.node, "line": u.raw} for u in fault_ledger.unparsed(read.lines)],
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
