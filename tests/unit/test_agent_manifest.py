"""The agent's DaemonSet keeps the shape docs/agent.md promises (and the admission policy pins):
read-only host paths that must exist, no capability, non-root, no token; the PodMonitor finds it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from guard.agent.cli import DEFAULT_PORT
from guard.settings import Settings

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
AGENT = MANIFESTS / "agent"
PODMONITOR = MANIFESTS / "components" / "agent-podmonitor" / "podmonitor.yaml"
JOBS_NAMESPACE = "gpu-node-guard-jobs"


def load(name: str) -> dict[str, Any]:
    path = PODMONITOR if name == PODMONITOR.name else AGENT / name
    doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return doc


def pod() -> dict[str, Any]:
    spec: dict[str, Any] = load("daemonset.yaml")["spec"]["template"]["spec"]
    return spec


# Host paths every supported distribution has (Debian, Ubuntu, RHEL-family, SLES; RKE2 or kubeadm,
# with or without systemd-resolved), and those only some have.
EVERYWHERE = {"/sys/module": "Directory", "/usr": "Directory", "/etc/resolv.conf": "File"}
SOMETIMES = {"/run/systemd/resolve"}  # systemd-resolved hosts only


def test_host_paths_are_read_only_exist_already_and_sit_under_host() -> None:
    spec = pod()
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert {m["name"] for m in container["volumeMounts"]} == set(volumes)
    for mount in container["volumeMounts"]:
        source = volumes[mount["name"]]["hostPath"]
        assert mount["readOnly"] is True, mount
        assert mount["mountPath"] == "/host" + source["path"], mount
        assert "mountPropagation" not in mount
    assert {v["hostPath"]["path"] for v in volumes.values()} == set(EVERYWHERE) | SOMETIMES


def test_the_pod_starts_on_every_supported_distribution() -> None:
    """A path every host has is Directory/File (never *OrCreate: the kubelet would create it);
    one only some hosts have is untyped, so the kubelet's type check cannot keep the pod from
    starting (`hostPath type check failed: /run/systemd/resolve is not a directory`)."""
    for volume in pod()["volumes"]:
        path, kind = volume["hostPath"]["path"], volume["hostPath"]["type"]
        assert kind == EVERYWHERE.get(path, ""), volume


def test_no_privilege_no_capability_no_token() -> None:
    spec = pod()
    (container,) = spec["containers"]
    assert spec["automountServiceAccountToken"] is False
    assert load("serviceaccount.yaml")["automountServiceAccountToken"] is False
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec)  # false: the default, unstored
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["securityContext"] == {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_the_agent_runs_the_guards_image_in_the_jobs_namespace() -> None:
    (container,) = pod()["containers"]
    assert container["image"] == Settings().image
    assert container["command"][:2] == ["gpu-node-guard", "agent"]
    for name in ("daemonset.yaml", "serviceaccount.yaml", "podmonitor.yaml"):
        assert load(name)["metadata"]["namespace"] == JOBS_NAMESPACE, name


def test_the_podmonitor_scrapes_the_agents_port() -> None:
    daemonset, monitor = load("daemonset.yaml"), load("podmonitor.yaml")
    (container,) = pod()["containers"]
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (port,) = container["ports"]
    assert (endpoint["port"], endpoint["path"]) == (port["name"], "/metrics")
    assert f"--listen=0.0.0.0:{port['containerPort']}" in container["command"]
    assert port["containerPort"] == DEFAULT_PORT
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
