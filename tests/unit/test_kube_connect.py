"""How the door authenticates: in-cluster (the CronJob's path) and from a kubeconfig file."""

from __future__ import annotations

from pathlib import Path

import pytest
import responses
import yaml
from kubernetes.config import incluster_config

from guard.kube import Kube, KubeError


@responses.activate
def test_in_cluster_requests_carry_the_service_account_token_and_trust_its_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token-1\n")
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    responses.add(responses.GET, "https://10.0.0.1:443/api/v1/nodes", json={"items": []})
    kube = Kube.connect("", in_cluster=True)
    assert list(kube.nodes()) == []
    (call,) = responses.calls
    assert call.request.headers["Authorization"].lower() == "bearer sa-token-1"
    assert call.request.headers["Content-Type"] == "application/json"
    assert kube.session.verify == str(ca), "the cluster's CA, not REQUESTS_CA_BUNDLE"


@responses.activate
def test_kubeconfig_token_user(tmp_path: Path):
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://api.test:6443",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "person-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }  # fmt: skip
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    responses.add(responses.GET, "https://api.test:6443/api/v1/nodes/n",
                  json={"metadata": {"name": "n"}})  # fmt: skip
    assert Kube.connect(str(path), in_cluster=False).node("n")["kind"] == "Node"
    assert responses.calls[0].request.headers["Authorization"] == "Bearer person-token"


def test_an_unreadable_kubeconfig_is_one_line(tmp_path: Path):
    with pytest.raises(KubeError, match=r"^cannot load Kubernetes config from .*/nope: "):
        Kube.connect(str(tmp_path / "nope"), in_cluster=False)
