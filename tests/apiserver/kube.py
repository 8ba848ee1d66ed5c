"""A real etcd + kube-apiserver on 127.0.0.1 for the apiserver tier, envtest-style.

The binaries come from ``KUBEBUILDER_ASSETS`` or the cache that ``hack/envtest/build.sh`` fills.
`control_plane(..., as_clusters_run=True)` adds kube-controller-manager with only the controllers
named (ServiceAccounts, and the Job controller unless a tier plays it itself); no other
controller reconciles: namespaces stay Terminating after delete, nothing collects garbage.
Admission (ValidatingAdmissionPolicy, ServiceAccount and NodeRestriction included), RBAC,
dry-run, TokenRequest and optimistic concurrency are all real.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from guard.example.promserver import free_port, stop
from guard.jobs import JobKind, JobTemplates
from guard.plan.common import render_example_job
from guard.settings import Settings
from tests.tiers import unavailable

ENVTEST_VERSION = "v1.34.4"
HOW_TO_ENABLE = "run `make envtest` (or set KUBEBUILDER_ASSETS)"
GUARD_NS = "gpu-node-guard"
JOBS_NS = "gpu-node-guard-jobs"
GUARD_USER = f"system:serviceaccount:{GUARD_NS}:gpu-node-guard"
JOB_USER = f"system:serviceaccount:{JOBS_NS}:gpu-node-guard-job"
# Who creates a Job's Pods (kube-controller-manager --use-service-account-credentials); the shared
# control plane runs no Job controller, so tests create those Pods themselves under this name.
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
# Who creates the node agent's Pods; tests create them under this name, as for the Job controller.
DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
ADMIN_TOKEN = "gpu-node-guard-tests-admin"  # test-only credential of a throwaway server
MERGE_PATCH = "application/merge-patch+json"
_START_TIMEOUT_S = 90.0


def required_assets(*, controller_manager: bool = False) -> Path:
    """The directory of the envtest binaries (`assets_dir`); without them the tier is skipped
    (a failure under CI=true). `controller_manager`: kube-controller-manager is needed too."""
    assets = assets_dir(os.environ)
    if assets is None or (
        controller_manager and not os.access(assets / "kube-controller-manager", os.X_OK)
    ):
        what = (
            "kube-apiserver, etcd or kube-controller-manager"
            if controller_manager
            else ("kube-apiserver and etcd")
        )
        unavailable("apiserver", f"{what} not found", HOW_TO_ENABLE)
        raise AssertionError("unreachable: unavailable() skips or fails")
    return assets


def assets_dir(env: Mapping[str, str]) -> Path | None:
    """The directory holding both binaries, as ``hack/envtest/build.sh --print-path`` picks it."""
    candidates = [env.get("KUBEBUILDER_ASSETS", "")]
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".cache")
    version = env.get("ENVTEST_VERSION", ENVTEST_VERSION)
    candidates.append(str(Path(cache) / "gpu-node-guard" / "envtest" / version))
    for candidate in filter(None, candidates):
        path = Path(candidate)
        if all(os.access(path / name, os.X_OK) for name in ("etcd", "kube-apiserver")):
            return path
    return None


def write_signing_key(path: Path) -> None:
    """An RSA key for service-account tokens (kube-apiserver cannot generate one itself)."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
    except ImportError:  # not a dependency of the guard; Debian's openssl does the same
        subprocess.run(
            ["openssl", "genrsa", "-out", str(path), "2048"], check=True, capture_output=True
        )
        return
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )


@dataclass(frozen=True, slots=True)
class ControlPlane:
    """A running API server: where it is, how to reach it as admin or as anyone else."""

    url: str
    ca_file: Path
    kubeconfig: Path
    workdir: Path
    started_in_s: float
    etcd_url: str = ""  # the plane's etcd, for a bench that seeds objects below the API

    def admin_client(self) -> client.ApiClient:
        """An ApiClient for the admin (group system:masters), from the admin kubeconfig."""
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def impersonating(self, user: str, group: str | None = None) -> client.ApiClient:
        """The admin's client acting as `user`; a ServiceAccount gets its groups from the server."""
        api = self.admin_client()
        api.set_default_header("Impersonate-User", user)
        if group is not None:
            api.set_default_header("Impersonate-Group", group)
        return api

    def service_account_kubeconfig(self, namespace: str, name: str, ttl_s: int = 3600) -> Path:
        """A kubeconfig holding a real token of the ServiceAccount (TokenRequest), as in-cluster."""
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": ttl_s},
        }
        with self.admin_client() as api:
            answer = client.CoreV1Api(api).create_namespaced_service_account_token(
                name, namespace, request
            )
        path = self.workdir / f"kubeconfig-{namespace}-{name}"
        write_kubeconfig(path, self.url, self.ca_file, answer.status.token)
        return path


def write_kubeconfig(path: Path, url: str, ca_file: Path, token: str) -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "envtest", "cluster": {"server": url, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": "user", "user": {"token": token}}],
        "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "user"}}],
        "current-context": "envtest",
    }
    path.write_text(yaml.safe_dump(doc))


@contextmanager
def process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run `argv` with output to `log`; terminate it (then kill) on the way out, even on failure."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            yield proc
        finally:
            stop(proc)


def wait_until(ready: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path) -> None:
    """Poll `ready` until true; a dead process or the deadline fails with the log's last lines."""
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            state = f"exited with {proc.returncode}" if proc.poll() is not None else "not ready"
            raise RuntimeError(f"{log.stem} {state} (log {log}):\n{tail}")
        time.sleep(0.2)


def http_ok(url: str, **kwargs: Any) -> bool:
    try:
        return requests.get(url, timeout=2, **kwargs).status_code == 200
    except requests.RequestException:
        return False


def etcd_argv(
    binary: Path, data_dir: Path, client_port: int, peer_port: int, extra: tuple[str, ...] = ()
) -> list[str]:
    client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    return [
        str(binary),
        "--name=default",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=default={peer_url}",
        "--unsafe-no-fsync=true",  # throwaway data: durability only costs time
        "--log-level=warn",
        *extra,
    ]


def apiserver_argv(
    binary: Path,
    workdir: Path,
    etcd_port: int,
    port: int,
    as_clusters_run: bool = False,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """Envtest's flags (controller-runtime pkg/internal/testing/controlplane) with a token admin.

    `as_clusters_run`: ServiceAccount admission and NodeRestriction on, as every real cluster
    runs them (a controller-manager then creates the ServiceAccounts); otherwise ServiceAccount
    admission is off, since without a controller-manager nothing creates `default`."""
    admission = (
        "--enable-admission-plugins=NodeRestriction"
        if as_clusters_run
        else "--disable-admission-plugins=ServiceAccount"
    )
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        f"--cert-dir={workdir / 'certs'}",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--allow-privileged=true",
        admission,
        "--authorization-mode=Node,RBAC",
        f"--token-auth-file={workdir / 'tokens.csv'}",
        f"--service-account-issuer=https://127.0.0.1:{port}/",
        f"--service-account-key-file={workdir / 'sa.key'}",
        f"--service-account-signing-key-file={workdir / 'sa.key'}",
        *extra,
    ]


# The controllers a cluster's own Jobs need: Pods made and adopted by the real Job controller,
# ServiceAccounts (and their pull secrets) made as a cluster makes them.
CONTROLLERS = "job-controller,serviceaccount-controller,serviceaccount-token-controller"
# Only the ServiceAccounts: what ServiceAccount admission needs, for a tier whose tests play the
# Job controller themselves (a real one would make and adopt Pods besides theirs).
ACCOUNT_CONTROLLERS = "serviceaccount-controller,serviceaccount-token-controller"


def controller_manager_argv(
    binary: Path, plane: ControlPlane, controllers: str = CONTROLLERS
) -> list[str]:
    """kube-controller-manager with only `controllers`, each under its own ServiceAccount's
    credentials (as kubeadm runs it), serving nothing."""
    return [
        str(binary),
        f"--kubeconfig={plane.kubeconfig}",
        f"--controllers={controllers}",
        "--use-service-account-credentials=true",
        "--leader-elect=false",
        f"--service-account-private-key-file={plane.workdir / 'sa.key'}",
        f"--root-ca-file={plane.ca_file}",
        "--secure-port=0",
        "--concurrent-job-syncs=2",
        "--v=1",
    ]


@contextmanager
def control_plane(
    assets: Path,
    workdir: Path,
    as_clusters_run: bool = False,
    controllers: str = CONTROLLERS,
    extra: tuple[str, ...] = (),
    etcd_extra: tuple[str, ...] = (),
) -> Iterator[ControlPlane]:
    """Start etcd, then kube-apiserver; yield once /readyz answers; stop both afterwards.

    `as_clusters_run`: also kube-controller-manager (`controllers`), with ServiceAccount
    admission and NodeRestriction on; yields once the `default` ServiceAccount exists. `extra`:
    more kube-apiserver flags (the DRA tier's newer release); `etcd_extra`: more etcd flags."""
    started = time.monotonic()
    etcd_port, port = free_port(), free_port()
    (workdir / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n')
    write_signing_key(workdir / "sa.key")
    with ExitStack() as stack:
        log = workdir / "etcd.log"
        argv = etcd_argv(assets / "etcd", workdir / "etcd", etcd_port, free_port(), etcd_extra)
        etcd = stack.enter_context(process(argv, log))
        wait_until(lambda: http_ok(f"http://127.0.0.1:{etcd_port}/health"), etcd, log)
        log = workdir / "kube-apiserver.log"
        argv = apiserver_argv(
            assets / "kube-apiserver", workdir, etcd_port, port, as_clusters_run, extra
        )
        apiserver = stack.enter_context(process(argv, log))
        url, ca_file = f"https://127.0.0.1:{port}", workdir / "certs" / "apiserver.crt"
        auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        wait_until(
            lambda: (
                ca_file.exists() and http_ok(f"{url}/readyz", headers=auth, verify=str(ca_file))
            ),
            apiserver,
            log,
        )
        kubeconfig = workdir / "kubeconfig-admin"
        write_kubeconfig(kubeconfig, url, ca_file, ADMIN_TOKEN)
        plane = ControlPlane(
            url,
            ca_file,
            kubeconfig,
            workdir,
            time.monotonic() - started,
            f"http://127.0.0.1:{etcd_port}",
        )
        if as_clusters_run:
            log = workdir / "kube-controller-manager.log"
            argv = controller_manager_argv(assets / "kube-controller-manager", plane, controllers)
            manager = stack.enter_context(process(argv, log))
            wait_until(lambda: _has_default_account(plane), manager, log)
            plane = replace(plane, started_in_s=time.monotonic() - started)
        yield plane


def _has_default_account(plane: ControlPlane) -> bool:
    with plane.admin_client() as api:
        try:
            client.CoreV1Api(api).read_namespaced_service_account("default", "default")
        except ApiException:
            return False
    return True


def refusal(call: Callable[[], object]) -> tuple[int, str]:
    """Run `call`, which must be refused; the status and message it was refused with."""
    with pytest.raises(ApiException) as caught:
        call()
    return api_error(caught.value)


def api_error(exc: ApiException) -> tuple[int, str]:
    """The HTTP status and the server's message of a refused request."""
    try:
        message = str(json.loads(exc.body or "{}").get("message", exc.body))
    except ValueError:
        message = str(exc.body)
    return int(exc.status or 0), message


def guard_job(kind: JobKind, node: str, key: str) -> dict[str, Any]:
    """A Job exactly as the guard's planners build it with default settings."""
    return render_example_job(
        Settings(), JobTemplates.load(), kind, (node, "0000:99:00.0", 79, 8), key=key
    )


def guard_device_job(node: str, key: str) -> dict[str, Any]:
    """The load test of one DRA device exactly as guard.plan.device_taint builds it."""
    return render_example_job(
        Settings(),
        JobTemplates.load(),
        "loadtest",
        (node, "0000:99:00.0", 79, 8),
        key=key,
        device=True,
    )


def controller_pod(job: Mapping[str, Any]) -> dict[str, Any]:
    """The Pod the Job controller makes from a stored Job (pkg/controller/job: the template's
    labels, annotations and spec, the Job as controlling owner, the job-tracking finalizer)."""
    template = job["spec"]["template"]
    labels = dict(template["metadata"].get("labels") or {})
    spec = json.loads(json.dumps(template["spec"]))
    finalizers = ["batch.kubernetes.io/job-tracking"]
    return _pod_from_template(job, ("batch/v1", "Job"), labels, spec, finalizers)


def _pod_from_template(
    owner: Mapping[str, Any],
    kind: tuple[str, str],
    labels: dict[str, str],
    spec: dict[str, Any],
    finalizers: list[str] | None = None,
) -> dict[str, Any]:
    """pkg/controller GetPodFromTemplate, which both controllers use: a name generated from the
    owner's, its namespace, the template's annotations, the owner (`kind`: apiVersion, kind) as
    controlling owner; `labels` and `spec` as the controller made them."""
    meta, template = owner["metadata"], owner["spec"]["template"]
    pod_meta: dict[str, Any] = {
        "generateName": meta["name"] + "-",
        "namespace": meta["namespace"],
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": kind[0],
                "kind": kind[1],
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if finalizers:
        pod_meta["finalizers"] = finalizers
    if template["metadata"].get("annotations"):
        pod_meta["annotations"] = dict(template["metadata"]["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


# pkg/controller/daemon/util AddOrUpdateDaemonPodTolerations (no hostNetwork: no
# network-unavailable).
DAEMONSET_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)


def daemonset_pod(daemonset: Mapping[str, Any], node: str) -> dict[str, Any]:
    """The Pod the DaemonSet controller makes from a stored DaemonSet for `node`
    (pkg/controller/daemon: CreatePodTemplate adds pod-template-generation and
    controller-revision-hash and its tolerations, syncNodes the one-node affinity,
    GetPodFromTemplate the controlling owner and the generated name)."""
    meta, template = daemonset["metadata"], daemonset["spec"]["template"]
    spec = json.loads(json.dumps(template["spec"]))
    tolerations = spec.setdefault("tolerations", [])
    for key, effect in DAEMONSET_TOLERATIONS:
        tolerations[:] = [t for t in tolerations if t.get("key") != key]
        tolerations.append({"key": key, "operator": "Exists", "effect": effect})
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    labels = dict(template["metadata"].get("labels") or {})
    labels["pod-template-generation"] = str(meta.get("generation", 1))
    labels["controller-revision-hash"] = "5d8f6b7c9d"
    return _pod_from_template(daemonset, ("apps/v1", "DaemonSet"), labels, spec)


def as_dict(obj: Any) -> dict[str, Any]:
    """A dynamic-client answer as plain JSON data."""
    return dict(json.loads(json.dumps(obj.to_dict())))


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kustomize_documents(root: Path) -> list[dict[str, Any]]:
    """What `kubectl kustomize root` emits for a kustomization that only lists resources (the
    generated policies/). Anything more (manifests/base: generators, replacements) is built by
    the real kubectl: tests/apiserver/deploy.py."""
    kustomization = yaml.safe_load((root / "kustomization.yaml").read_text())
    unsupported = sorted(set(kustomization) - {"apiVersion", "kind", "resources"})
    if unsupported:
        raise ValueError(f"{root}/kustomization.yaml: fields {unsupported} are not reproduced here")
    docs: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = root / entry
        docs += kustomize_documents(path) if path.is_dir() else yaml_documents(path)
    return docs


def create(api: client.ApiClient, doc: dict[str, Any], dry_run: bool = False) -> Any:
    """POST `doc` as the JSON it is, like kubectl. The typed client's models would reject some
    valid manifests before sending them (integer quantities, MicroTime without fraction)."""
    resource = DynamicClient(api).resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    namespace = doc["metadata"].get("namespace")
    return resource.create(body=doc, namespace=namespace, dry_run="All" if dry_run else None)


def create_all(api: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    """Create every object, Namespaces first (kustomize and kubectl order them the same way)."""
    for doc in sorted(docs, key=lambda d: d["kind"] != "Namespace"):
        create(api, doc)


def grant_create_only(admin: client.ApiClient, user: str, role: str) -> None:
    """`user` may create Jobs and Pods in the jobs namespace, nothing else (a Role `role`)."""
    rbac = client.RbacAuthorizationV1Api(admin)
    rule = [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
    ]
    rbac.create_namespaced_role(JOBS_NS, {"metadata": {"name": role}, "rules": rule})
    subject = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role}
    rbac.create_namespaced_role_binding(
        JOBS_NS, {"metadata": {"name": role}, "roleRef": role_ref, "subjects": [subject]}
    )
