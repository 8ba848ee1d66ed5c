"""Where `ledger count` reads the fault ledger from: a file (a ConfigMap, its bare ``data``
mapping, or a List of the ledger and its archives) or the cluster. The lines counted are the
guard's own (`guard.doors.ledger_store.ledger_lines`). Reading never changes the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guard.doors import ledger_store
from guard.files import LEDGER_FILE_MAX_BYTES, FileInputError, load_yaml, read_text_bounded
from guard.ledger import LedgerLine


class LedgerSourceError(ValueError):
    """The ledger could not be read; one line naming the source."""


def data_of(document: Any, where: str) -> dict[str, str]:
    """The node → text mapping of a ConfigMap or of a bare data mapping.

    >>> data_of({"kind": "ConfigMap", "data": {"gpu-node-b": "x"}}, "f")
    {'gpu-node-b': 'x'}
    >>> data_of({"kind": "ConfigMap", "data": None}, "f")
    {}
    >>> data_of(["a"], "f")
    Traceback (most recent call last):
    ...
    guard.evidence.ledger_source.LedgerSourceError: f: not a ConfigMap or a node: text mapping
    """
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
    if not ledgers and not archives:
        raise LedgerSourceError(f"{where}: a List without ConfigMap {name} or its archives")
    data = data_of(ledgers[0], where) if ledgers else {}
    return _read(data, archives, name, where)


def _read(
    data: dict[str, str], archives: list[dict[str, Any]], name: str, where: str
) -> LedgerRead:
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
    if found is None and not archives:
        raise LedgerSourceError(f"{where}: not found")
    return _read(data_of(found, where) if found else {}, archives, name, where)
