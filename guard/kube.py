"""The one door to the Kubernetes API: raw JSON in and out, typed errors, a request counter.

Responses are read as plain dicts (``_preload_content=False``) so the snapshot code sees the same
shape as a ``kubectl get -o json`` file, and 5,000 nodes do not become 5,000 model objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from urllib3.exceptions import HTTPError

if TYPE_CHECKING:
    from kubernetes import client

PAGE = 500


class KubeError(Exception):
    """An API call failed; the message is one line."""


class Conflict(KubeError):
    """409: the object changed since it was read."""


class NotFound(KubeError):
    pass


class Forbidden(KubeError):
    pass


@dataclass
class Kube:
    api: client.ApiClient  # the kubernetes package is imported on first use: it costs ~0.4 s
    requests_made: int = 0
    _core: Any = field(init=False, repr=False)
    _batch: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(self.api)
        self._batch = client.BatchV1Api(self.api)

    @classmethod
    def connect(cls, kubeconfig: str, in_cluster: bool = True) -> Kube:
        """`kubeconfig` when given; else the pod's ServiceAccount inside a cluster, else the
        user's default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``), as kubectl does."""
        from kubernetes import client, config

        try:
            if kubeconfig or not in_cluster:
                api = config.new_client_from_config(config_file=kubeconfig or None)
            else:
                config.load_incluster_config()
                api = client.ApiClient()
        except (config.ConfigException, OSError, TypeError, ValueError) as exc:
            where = kubeconfig or ("in-cluster service account" if in_cluster else "kubeconfig")
            raise KubeError(f"cannot load Kubernetes config from {where}: {exc}") from None
        return cls(api)

    def call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Every request goes through here: counted, JSON-decoded, errors typed."""
        from kubernetes.client.rest import ApiException

        self.requests_made += 1
        try:
            response = fn(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            raise _typed(what, exc) from None
        except (HTTPError, OSError) as exc:
            raise KubeError(f"{what}: cannot reach the API server: {exc}") from None
        except ValueError as exc:  # the client validates bodies locally (pydantic) before sending
            first = (str(exc).strip().splitlines() or [""])[0]
            raise KubeError(f"{what}: request refused by the client: {first}") from None
        data = response.data
        return json.loads(data) if data else {}

    def list_all(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        token = None
        while True:
            page = self.call(what, fn, *args, limit=PAGE, _continue=token, **kwargs)
            items: list[dict[str, Any]] = page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            del page  # hand items out one by one and let each go: at most one page is alive
            items.reverse()
            while items:
                yield items.pop()
            if not token:
                return

    # Reads ------------------------------------------------------------------------------------
    def nodes(self) -> Iterator[dict[str, Any]]:
        """Every Node, page by page, so a caller can keep only what it needs of each."""
        return (_kinded(n, "Node") for n in self.list_all("list nodes", self._core.list_node))

    def node(self, name: str) -> dict[str, Any]:
        return _kinded(self.call(f"get node {name}", self._core.read_node, name), "Node")

    def running_pods_on(self, node: str) -> list[dict[str, Any]]:
        """Running pods of one node (asked only for the few nodes the guard cordoned)."""
        pods = self.list_all(
            f"list pods on {node}",
            self._core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={node},status.phase=Running",
        )
        return [_kinded(p, "Pod") for p in pods]

    def jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        jobs = self.list_all(
            f"list jobs in {namespace}",
            self._batch.list_namespaced_job,
            namespace,
            label_selector=selector,
        )
        return [_kinded(j, "Job") for j in jobs]

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found = self.call(
                f"get configmap {namespace}/{name}",
                self._core.read_namespaced_config_map,
                name,
                namespace,
            )
        except NotFound:
            return None
        return _kinded(found, "ConfigMap")

    # Writes -----------------------------------------------------------------------------------
    def patch_node(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(
            self.call(
                f"patch node {name}",
                self._core.patch_node,
                name,
                body,
                _content_type="application/merge-patch+json",
                field_manager="gpu-node-guard",
            )
        )

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> None:
        self.call(
            f"create job {namespace}/{manifest['metadata']['name']}",
            self._batch.create_namespaced_job,
            namespace,
            manifest,
            field_manager="gpu-node-guard",
        )

    def create_configmap(self, namespace: str, body: dict[str, Any]) -> None:
        self.call(
            f"create configmap {namespace}/{body['metadata']['name']}",
            self._core.create_namespaced_config_map,
            namespace,
            body,
        )

    def replace_configmap(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.call(
            f"update configmap {namespace}/{name}",
            self._core.replace_namespaced_config_map,
            name,
            namespace,
            body,
        )

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.call("create event", self._core.create_namespaced_event, namespace, body)


def _kinded(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    obj.setdefault("kind", kind)  # list items carry no kind
    return obj


def _typed(what: str, exc: Any) -> KubeError:
    message = ""
    try:
        message = json.loads(exc.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = ""
    text = f"{what}: HTTP {exc.status} {exc.reason}" + (f": {message}" if message else "")
    kinds = {409: Conflict, 404: NotFound, 403: Forbidden}
    return kinds.get(exc.status or 0, KubeError)(text.splitlines()[0] if text else what)
