"""Where `ledger count` reads the fault ledger from: a file or the cluster's ConfigMap.

A file may be a ConfigMap (YAML or JSON, e.g. ``kubectl get cm gpu-fault-ledger -o yaml``) or its
bare ``data`` mapping (``gpu-node-b: |`` …). Reading never changes the ledger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


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


def read_file(path: Path) -> dict[str, str]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise LedgerSourceError(f"{path}: cannot read: {err}") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        raise LedgerSourceError(f"{path}{at}: not YAML or JSON") from err
    return data_of(document, str(path))


def read_cluster(kubeconfig: str, namespace: str, name: str) -> dict[str, str]:
    """Read the ConfigMap through the guard's one API door (kubeconfig file, else in-cluster)."""
    from guard.kube import Kube, KubeError  # the client is only needed for this path

    where = f"configmap {namespace}/{name}"
    try:
        found = Kube.connect(kubeconfig).configmap(namespace, name)
    except KubeError as err:
        raise LedgerSourceError(str(err)) from err
    if found is None:
        raise LedgerSourceError(f"{where}: not found")
    return data_of(found, where)
