"""The node agent's policy (guard/generate/policies/agent.py) against the agent as shipped: the argv
layouts hold the DaemonSet's command and the site flags docs/agent.md shows, and nothing that
would read or serve elsewhere; the pinned host paths are the manifest's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from guard.generate.policies import KUSTOMIZATION, POLICY_DIR, agent, documents, render
from guard.settings import Settings
from tests.argv_layouts import matches

ROOT = Path(__file__).resolve().parents[2]
HEAD = ["gpu-node-guard", "agent", "--root=/host", "--listen=0.0.0.0:9842", "--interval-s=120"]


def shipped() -> dict[str, Any]:
    text = (ROOT / "manifests" / "agent" / "daemonset.yaml").read_text(encoding="utf-8")
    spec: dict[str, Any] = yaml.safe_load(text)["spec"]["template"]["spec"]
    return spec


def test_the_shipped_command_is_a_layout() -> None:
    (container,) = shipped()["containers"]
    assert matches(agent.LAYOUTS, container["command"], "")


@pytest.mark.parametrize(
    "tail",
    [
        [
            "--platform=other",
            "--kube-proxy-mode=iptables",
            "--allowed-dns=10.20.0.0/16",
            "--resolv-conf=/run/systemd/resolve/resolv.conf",
        ],
        ["--platform=rke2", "--kube-proxy-mode=none", "--allowed-dns=10.0.0.0/8,fd00::/8"],
        ["--platform=auto", "--kube-proxy-mode=nftables", "--resolv-conf=/etc/resolv.conf"],
    ],
)
def test_the_site_flags_of_docs_agent_md_are_layouts(tail: list[str]) -> None:
    assert matches(agent.LAYOUTS, [*HEAD, *tail], "")


@pytest.mark.parametrize(
    "argv",
    [
        [*HEAD, "--platform=rke2", "--kube-proxy-mode=ipvs", "--once"],
        [*HEAD[:2], "--root=/", *HEAD[3:], "--platform=rke2", "--kube-proxy-mode=ipvs"],
        [*HEAD[:3], "--listen=0.0.0.0:22", HEAD[4], "--platform=rke2", "--kube-proxy-mode=ipvs"],
        [*HEAD, "--platform=rke2", "--kube-proxy-mode=ipvs", "--resolv-conf=/etc/shadow"],
        [*HEAD, "--platform=rke2", "--kube-proxy-mode=ipvs", "--allowed-dns=$(id)"],
        [*HEAD, "--kube-proxy-mode=ipvs", "--platform=rke2"],  # flags in another order
        [*HEAD[:4], "--interval-s=0", "--platform=rke2", "--kube-proxy-mode=ipvs"],
    ],
    ids=[
        "once",
        "root-slash",
        "listen-elsewhere",
        "resolv-conf-elsewhere",
        "dns-not-cidrs",
        "reordered",
        "interval-zero",
    ],
)
def test_nothing_else_is_a_layout(argv: list[str]) -> None:
    assert not matches(agent.LAYOUTS, argv, "")


def test_the_pinned_host_paths_and_mounts_are_the_manifests() -> None:
    spec = shipped()
    assert spec["volumes"] == agent.VOLUMES
    assert spec["containers"][0]["volumeMounts"] == agent.MOUNTS
    assert spec["containers"][0]["env"] == [
        {
            "name": "GUARD_AGENT_NODE",
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}},
        }
    ]


def test_the_policies_kustomization_lists_every_generated_file() -> None:
    files = render(Settings())
    listed = yaml.safe_load(files[POLICY_DIR / KUSTOMIZATION])["resources"]
    assert (
        listed
        == sorted(documents(Settings()))
        == sorted(p.name for p in files if p.name != KUSTOMIZATION)
    )
