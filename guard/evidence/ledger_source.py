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
    """Read the ConfigMap through the API (kubeconfig file, else in-cluster, else default)."""
    from kubernetes import client
    from kubernetes import config as kube_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    where = f"configmap {namespace}/{name}"
    config: Any = kube_config  # the package's partial annotations leave these untyped
    try:
        configuration = client.Configuration()
        configuration.retries = 1  # one read by a person: fail fast, say why
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            _load_default(config, configuration, ConfigException)
        with client.ApiClient(configuration) as api_client:
            found = client.CoreV1Api(api_client).read_namespaced_config_map(
                name, namespace, _request_timeout=10
            )
    except ApiException as err:
        raise LedgerSourceError(f"{where}: HTTP {err.status} {err.reason}") from err
    except (ConfigException, HTTPError, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise LedgerSourceError(f"{where}: {first}") from err
    return data_of({"kind": "ConfigMap", "data": found.data}, where)


def _load_default(config: Any, configuration: Any, config_error: type[Exception]) -> None:
    """In-cluster credentials inside a Pod, else the default kubeconfig."""
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config_error:
        config.load_kube_config(client_configuration=configuration)
