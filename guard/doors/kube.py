"""The one door to the Kubernetes API: plain JSON dicts over HTTP (the kubernetes package only
loads the credentials), typed errors; 429, 5xx, resets and timeouts retried until the part's
deadline (guard.doors.retry), then `Unavailable`; the authorizer's 403 for FORBIDDEN_GRACE_S.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import requests

from guard.doors.kube_errors import AlreadyExists as AlreadyExists
from guard.doors.kube_errors import Conflict as Conflict
from guard.doors.kube_errors import Forbidden as Forbidden
from guard.doors.kube_errors import KubeError as KubeError
from guard.doors.kube_errors import NotFound as NotFound
from guard.doors.kube_errors import Refused as Refused
from guard.doors.kube_errors import Unavailable as Unavailable
from guard.doors.kube_errors import decode, first_line, socket_reason, status_text, typed
from guard.doors.retry import FORBIDDEN_GRACE_S, Backoff
from guard.names import FIELD_MANAGER

if TYPE_CHECKING:
    from kubernetes.client import Configuration

PAGE = 500  # the default of Settings.api_page_size
# A list longer than this is not a cluster the guard was built for, and an API (or a proxy)
# that hands out `continue` tokens forever must not grow the guard's memory until it is killed.
MAX_PAGES = 400
MAX_LIST_ITEMS = 100_000
MERGE_PATCH = "application/merge-patch+json"
TRANSIENT = frozenset({429, 500, 502, 503, 504})
CONNECT_TIMEOUT_S = 5.0
CORE, BATCH = "/api/v1", "/apis/batch/v1"
EVENTS = "/apis/events.k8s.io/v1"
LEASES = "/apis/coordination.k8s.io/v1"
RESOURCE = "/apis/resource.k8s.io/v1"
_Json = dict[str, Any] | None
# What the client's loader raises on a malformed kubeconfig.
_BAD = (OSError, TypeError, ValueError, KeyError, AttributeError)


@dataclass
class Kube:
    session: requests.Session
    base_url: str
    backoff: Backoff = field(default_factory=lambda: Backoff.for_seconds(60.0))
    request_timeout_s: float = 10.0
    requests_made: int = 0
    # Requests by HTTP status ("200", "409", …), "error" where no answer came (the pushed
    # gpu_node_guard_last_run_requests, docs/metrics.md).
    codes: Counter[str] = field(default_factory=Counter)
    refresh: Any = field(default=None, repr=False)  # re-reads an expiring token (exec, in-cluster)

    @classmethod
    def connect(
        cls,
        kubeconfig: str,
        in_cluster: bool | None = None,
        backoff: Backoff | None = None,
        request_timeout_s: float = 10.0,
        context: str = "",
    ) -> Kube:
        """kubectl's rule: `kubeconfig`, else ``$KUBECONFIG``, else the ServiceAccount in a cluster
        (`in_cluster`, default: KUBERNETES_SERVICE_HOST is set), else ``~/.kube/config``."""
        import yaml
        from kubernetes import client, config

        from guard.doors import kube_exec

        kube_exec.install()
        cfg = client.Configuration()
        try:
            if in_cluster is None:
                in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
            if kubeconfig or context or os.environ.get("KUBECONFIG") or not in_cluster:
                for path in _kubeconfig_files(kubeconfig):
                    check_kubeconfig(path)
                config.load_kube_config(
                    # $KUBECONFIG and HOME now, not as the client read them at import
                    config_file=kubeconfig
                    or os.environ.get("KUBECONFIG")
                    or os.path.expanduser("~/.kube/config"),
                    context=context or None,
                    client_configuration=cfg,
                )
            else:
                config.load_incluster_config(client_configuration=cfg)
        except (config.ConfigException, yaml.YAMLError, kube_exec.ExecPluginFailed, *_BAD) as exc:
            where = kubeconfig or ("in-cluster service account" if in_cluster else "kubeconfig")
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise KubeError(f"cannot load Kubernetes config from {where}: {first}") from None
        kube = cls.from_configuration(cfg, backoff or Backoff.for_seconds(60.0))
        kube.request_timeout_s = request_timeout_s
        return kube

    @classmethod
    def from_configuration(cls, cfg: Configuration, backoff: Backoff) -> Kube:
        session = requests.Session()
        # The kubeconfig decides trust, proxy and credentials: REQUESTS_CA_BUNDLE would replace
        # the cluster's CA (psf/requests#3829), a ~/.netrc entry the bearer token.
        session.trust_env = False
        session.verify = (cfg.ssl_ca_cert or True) if cfg.verify_ssl else False
        if cfg.cert_file:
            session.cert = (cfg.cert_file, cfg.key_file)
        if cfg.proxy:
            session.proxies = {"https": cfg.proxy, "http": cfg.proxy}
        kube = cls(session, cfg.host.rstrip("/"), backoff)
        kube.refresh = lambda: _authorize(session, cfg)
        kube.refresh()
        return kube

    # The door ---------------------------------------------------------------------------------
    def call(
        self,
        method: str,
        path: str,
        what: str,
        *,
        params: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """Every request goes through here: counted, retried while transient, errors typed."""
        attempt = 0
        grace = math.inf  # until when a 403 is retried: set at the first
        while True:
            attempt += 1
            try:
                problem = self._send(method, path, what, params, body, content_type)
            except Forbidden as exc:
                if exc.by_admission:
                    raise
                if grace == math.inf:
                    grace = self.backoff.clock() + FORBIDDEN_GRACE_S
                if self.backoff.wait(attempt, until=grace):
                    continue
                raise
            if isinstance(problem, dict):
                return problem
            if not self.backoff.wait(attempt):
                tries = "1 try" if attempt == 1 else f"{attempt} tries"
                raise Unavailable(f"{what}: {problem} (gave up after {tries})")

    def _send(
        self, method: str, path: str, what: str, params: _Json, body: _Json, content_type: str
    ) -> dict[str, Any] | str:
        """The decoded answer, or the reason a retry may help; raises when it cannot."""
        remaining = self.backoff.remaining_s()
        if remaining <= 0:
            return f"the {self.backoff.part}'s deadline has passed"
        if self.refresh is not None:
            from guard.doors.kube_exec import ExecPluginFailed

            try:
                self.refresh()
            except ExecPluginFailed as exc:
                raise KubeError(f"{what}: {exc}") from None
        self.requests_made += 1
        timeout = (min(CONNECT_TIMEOUT_S, remaining), min(self.request_timeout_s, remaining))
        try:
            answer = self.session.request(
                method,
                self.base_url + path,
                params={k: v for k, v in (params or {}).items() if v not in (None, "")},
                data=None if body is None else json.dumps(body),
                headers={"Content-Type": content_type, "Accept": "application/json"},
                timeout=timeout,
            )
            content = answer.content
        except requests.RequestException as exc:
            self.codes["error"] += 1
            if isinstance(exc, requests.Timeout):
                return f"no answer within {timeout[1]:g} s"
            cut = (requests.ConnectionError, requests.exceptions.ChunkedEncodingError)
            if isinstance(exc, cut) and not isinstance(exc, requests.exceptions.SSLError):
                return f"cannot reach the API server: {socket_reason(exc)}"  # reset, refused
            raise KubeError(f"{what}: {first_line(exc)}") from None  # no retry mends these
        self.codes[str(answer.status_code)] += 1
        if answer.status_code in TRANSIENT:
            return status_text(answer.status_code, answer.reason, content)
        if answer.status_code >= 400:
            raise typed(what, answer.status_code, answer.reason, content)
        return decode(what, content)

    def list_all(
        self, path: str, what: str, page_size: int | None = None, **params: Any
    ) -> Iterator[dict[str, Any]]:
        """Every item of a list, `page_size` (default PAGE) per request; KubeError past MAX_PAGES
        or MAX_LIST_ITEMS, or when a used `continue` token comes back."""
        token = None
        pages = count = 0
        tokens: set[str] = set()
        limit = page_size or PAGE
        max_pages = max(MAX_PAGES, -(-MAX_LIST_ITEMS // limit))  # small pages: as many items
        while True:
            page = self.call(
                "GET", path, what, params={**params, "limit": limit, "continue": token}
            )
            pages += 1
            items = page.get("items") or []
            if not isinstance(items, list):
                raise KubeError(f"{what}: the answer's items are not a list")
            count += len(items)
            token = (page.get("metadata") or {}).get("continue")
            if token and (not isinstance(token, str) or token in tokens):
                raise KubeError(f"{what}: the API server repeated a continue token (page {pages})")
            if token and (pages >= max_pages or count > MAX_LIST_ITEMS):
                raise KubeError(
                    f"{what}: more than {max_pages} pages or {MAX_LIST_ITEMS} items; refusing"
                    " to read further"
                )
            if token:
                tokens.add(token)
            del page  # hand items out one by one and let each go: at most one page is alive
            items.reverse()
            while items:
                yield items.pop()
            if not token:
                return

    def _get(self, path: str, what: str, kind: str = "") -> dict[str, Any] | None:
        try:
            found = self.call("GET", path, what)
        except NotFound:
            return None
        return _kinded(found, kind) if kind else found

    def _items(
        self, path: str, what: str, kind: str, page_size: int | None = None, **params: Any
    ) -> Iterator[dict[str, Any]]:
        return (_kinded(x, kind) for x in self.list_all(path, what, page_size, **params))

    def _dra(self, path: str, what: str, kind: str, **params: Any) -> list[dict[str, Any]]:
        """DRA (resource.k8s.io/v1): none where the API server does not serve it."""
        try:
            return list(self._items(f"{RESOURCE}{path}", what, kind, **params))
        except NotFound:
            return []

    # Reads ------------------------------------------------------------------------------------
    def nodes(self, page_size: int | None = None) -> Iterator[dict[str, Any]]:
        """Every Node, page by page, so a caller can keep only what it needs of each."""
        return self._items(f"{CORE}/nodes", "list nodes", "Node", page_size)

    def node(self, name: str) -> dict[str, Any]:
        return _kinded(self.call("GET", f"{CORE}/nodes/{_q(name)}", f"get node {name}"), "Node")

    def jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        path = _path(BATCH, "jobs", namespace)
        return list(self._items(path, f"list jobs in {namespace}", "Job", labelSelector=selector))

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One Job, None when there is none (a create answered 409: whose Job is it?)."""
        return self._get(
            _path(BATCH, "jobs", namespace, name), f"get job {namespace}/{name}", "Job"
        )

    def pods(self, namespace: str, selector: str, field_selector: str) -> Iterator[dict[str, Any]]:
        """Pods of one namespace, page by page (the guard's Job Pods: their results)."""
        path, what = _path(CORE, "pods", namespace), f"list pods in {namespace}"
        return self._items(path, what, "Pod", labelSelector=selector, fieldSelector=field_selector)

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        path = _path(CORE, "configmaps", namespace, name)
        return self._get(path, f"get configmap {namespace}/{name}", "ConfigMap")

    def configmaps(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        path, what = _path(CORE, "configmaps", namespace), f"list configmaps in {namespace}"
        return list(self._items(path, what, "ConfigMap", labelSelector=selector))

    def events(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        path, what = _path(EVENTS, "events", namespace), f"list events in {namespace}"
        return list(self._items(path, what, "Event", labelSelector=selector))

    def event(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(_path(EVENTS, "events", namespace, name), f"get event {namespace}/{name}")

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(_path(LEASES, "leases", namespace, name), f"get lease {namespace}/{name}")

    def resource_slices(self, driver: str) -> list[dict[str, Any]]:
        what = "list resourceslices"
        selector = f"spec.driver={driver}"
        return self._dra("/resourceslices", what, "ResourceSlice", fieldSelector=selector)

    def device_taint_rules(self, selector: str) -> list[dict[str, Any]]:
        what = "list devicetaintrules"
        return self._dra("/devicetaintrules", what, "DeviceTaintRule", labelSelector=selector)

    def device_taint_rule(self, name: str) -> dict[str, Any] | None:
        return self._get(f"{RESOURCE}/devicetaintrules/{_q(name)}", f"get devicetaintrule {name}")

    def create_device_taint_rule(self, body: dict[str, Any]) -> dict[str, Any]:
        what = f"create devicetaintrule {body['metadata']['name']}"
        return self._write("POST", f"{RESOURCE}/devicetaintrules", what, body)

    def delete_device_taint_rule(self, name: str, uid: str) -> dict[str, Any]:
        """Delete exactly the rule read (a uid precondition): never one made again by others."""
        path = f"{RESOURCE}/devicetaintrules/{_q(name)}"
        return self._delete(path, f"delete devicetaintrule {name}", uid)

    def create_resource_claim(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        path = _path(RESOURCE, "resourceclaims", namespace)
        what = f"create resourceclaim {namespace}/{body['metadata']['name']}"
        return self._write("POST", path, what, body)

    def resource_claims(self, namespace: str) -> list[dict[str, Any]]:
        """Every ResourceClaim of the namespace, labelled or not: a claim named as the guard's
        is seen whoever made it."""
        path = f"/namespaces/{_q(namespace)}/resourceclaims"
        return self._dra(path, f"list resourceclaims {namespace}", "ResourceClaim")

    def resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        path = _path(RESOURCE, "resourceclaims", namespace, name)
        return self._get(path, f"get resourceclaim {namespace}/{name}")

    def delete_resource_claim(self, namespace: str, name: str, uid: str = "") -> dict[str, Any]:
        """With `uid`, exactly the claim read (a uid precondition)."""
        path = _path(RESOURCE, "resourceclaims", namespace, name)
        return self._delete(path, f"delete resourceclaim {namespace}/{name}", uid)

    def _delete(self, path: str, what: str, uid: str) -> dict[str, Any]:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}}
        return self.call("DELETE", path, what, body=body if uid else None)

    # Writes -----------------------------------------------------------------------------------
    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        what = f"create lease {namespace}/{body['metadata']['name']}"
        return self._write("POST", _path(LEASES, "leases", namespace), what, body)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """With the body's resourceVersion: a Lease changed since the read is a `Conflict`."""
        path = _path(LEASES, "leases", namespace, name)
        return self._write("PUT", path, f"update lease {namespace}/{name}", body)

    def patch_node(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._write("PATCH", f"{CORE}/nodes/{_q(name)}", f"patch node {name}", body)

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        what = f"create job {namespace}/{manifest['metadata']['name']}"
        return self._write("POST", _path(BATCH, "jobs", namespace), what, manifest)

    def create_configmap(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        what = f"create configmap {namespace}/{body['metadata']['name']}"
        return self._write("POST", _path(CORE, "configmaps", namespace), what, body)

    def replace_configmap(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        path = _path(CORE, "configmaps", namespace, name)
        return self._write("PUT", path, f"update configmap {namespace}/{name}", body)

    def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        path = _path(EVENTS, "events", namespace)
        return self._write("POST", path, f"create event {body['metadata']['name']}", body)

    def patch_event(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        path = _path(EVENTS, "events", namespace, name)
        return self._write("PATCH", path, f"patch event {name}", body)

    def _write(self, method: str, path: str, what: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.call(
            method,
            path,
            what,
            params={"fieldManager": FIELD_MANAGER},
            body=body,
            content_type=MERGE_PATCH if method == "PATCH" else "application/json",
        )


def _kubeconfig_files(kubeconfig: str) -> list[str]:
    """The files the client will read: the given one, else $KUBECONFIG's, else ~/.kube/config."""
    if kubeconfig:
        return [kubeconfig]
    listed = os.environ.get("KUBECONFIG", "")
    found = [p for p in listed.split(os.pathsep) if p] or [os.path.expanduser("~/.kube/config")]
    return [p for p in found if os.path.exists(p)]


def check_kubeconfig(path: str) -> None:
    """Refuse a kubeconfig that is not a regular file, is over the size limit, nests too deep
    or is an alias bomb, before the client reads it (its merge would expand every alias)."""
    from guard import files

    if not os.path.exists(path):
        return  # the client's own line says so
    try:
        doc = files.load_yaml(
            files.read_text_bounded(path, files.KUBECONFIG_MAX_BYTES, "file"), "it"
        )
    except files.FileSyntaxError:
        return  # not YAML: the client's own line says where
    except files.FileInputError as exc:
        raise ValueError(str(exc).replace(f"file {path} ", "it ")) from None
    if doc is not None and not isinstance(doc, dict):  # the client: "'str' object does not …"
        raise ValueError(f"it is a YAML {type(doc).__name__}, not a kubeconfig (a mapping)")


def _authorize(session: requests.Session, cfg: Configuration) -> None:
    """The credentials as the client would send them, refreshed (exec plugins, projected tokens)."""
    if cfg.refresh_api_key_hook is not None:
        cfg.refresh_api_key_hook(cfg)
    for auth in cfg.auth_settings().values():
        if auth.get("in") == "header" and str(auth.get("value") or "").strip():
            # A token file may end in a newline; a header value must not (requests refuses it).
            session.headers[str(auth["key"])] = str(auth["value"]).strip()


def _q(name: str) -> str:
    return quote(name, safe="")


def _path(api: str, plural: str, namespace: str, name: str = "") -> str:
    path = f"{api}/namespaces/{_q(namespace)}/{plural}"
    return f"{path}/{_q(name)}" if name else path


def _kinded(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    obj.setdefault("kind", kind)  # list items carry no kind
    return obj
