"""How the door authenticates: in-cluster (the CronJob's path) and from a kubeconfig file."""

from __future__ import annotations

from pathlib import Path

import pytest
import responses
import yaml
from kubernetes.config import incluster_config

from guard.doors.kube import Kube, KubeError
from guard.doors.kube_errors import socket_reason


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
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [
            {
                "name": "k",
                "cluster": {"server": "https://api.test:6443", "insecure-skip-tls-verify": True},
            }
        ],
        "users": [{"name": "u", "user": {"token": "person-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    responses.add(
        responses.GET, "https://api.test:6443/api/v1/nodes/n", json={"metadata": {"name": "n"}}
    )
    assert Kube.connect(str(path), in_cluster=False).node("n")["kind"] == "Node"
    assert responses.calls[0].request.headers["Authorization"] == "Bearer person-token"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        pytest.param(None, "Invalid kube-config file", id="missing"),
        pytest.param(b"clusters: [unclosed\n", "while parsing a flow sequence", id="broken-yaml"),
        pytest.param(b"a: b: c\n", "mapping values are not allowed here", id="yaml-scanner"),
        pytest.param(b"\xff\xfe\x00garbage", "it is not a text file", id="binary"),
    ],
)
def test_an_unreadable_kubeconfig_is_one_line(tmp_path: Path, content, reason):
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_bytes(content)
    refused = r"^cannot load Kubernetes config from .*/kubeconfig: "
    with pytest.raises(KubeError, match=refused) as e:
        Kube.connect(str(path), in_cluster=False)
    assert reason in str(e.value) and "\n" not in str(e.value)


INSECURE = {"insecure-skip-tls-verify": True}


@responses.activate
def test_context_picks_another_kubeconfig_context_like_kubectl(tmp_path: Path):
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "staging",
        "clusters": [
            {"name": "s", "cluster": {"server": "https://staging.test", **INSECURE}},
            {"name": "p", "cluster": {"server": "https://prod.test", **INSECURE}},
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": "staging", "context": {"cluster": "s", "user": "u"}},
            {"name": "prod", "context": {"cluster": "p", "user": "u"}},
        ],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    responses.add(responses.GET, "https://prod.test/api/v1/nodes/n", json={"metadata": {}})
    kube = Kube.connect(str(path), in_cluster=True, context="prod")  # a flag beats in-cluster
    assert kube.base_url == "https://prod.test"
    kube.node("n")
    with pytest.raises(KubeError, match=r"cannot load Kubernetes config .*nope"):
        Kube.connect(str(path), in_cluster=False, context="nope")


@responses.activate
def test_requests_are_counted_by_status_code_and_error():
    import random

    import requests as http

    from guard.doors.retry import Backoff

    responses.add(responses.GET, "https://api.test/api/v1/nodes/a", json={"metadata": {}})
    responses.add(
        responses.GET,
        "https://api.test/api/v1/nodes/b",
        status=404,
        json={"kind": "Status", "code": 404, "message": "not found"},
    )
    responses.add(
        responses.GET, "https://api.test/api/v1/nodes/c", body=http.ConnectionError("refused")
    )
    # 1 ms left and a first delay of 134 ms: no retry, the refusal is the last answer.
    no_retry = Backoff(0.001, base_s=1.0, clock=lambda: 0.0, rng=random.Random(1))
    kube = Kube(http.Session(), "https://api.test", no_retry)
    kube.node("a")
    with pytest.raises(KubeError):
        kube.node("b")
    with pytest.raises(KubeError):
        kube.node("c")
    assert dict(kube.codes) == {"200": 1, "404": 1, "error": 1}
    assert kube.requests_made == 3


def _kubeconfig(path: Path, server: str) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "k", "cluster": {"server": server, **INSECURE}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            }
        )
    )
    return str(path)


@responses.activate
@pytest.mark.parametrize(
    ("flag", "env", "in_pod", "server"),
    [
        pytest.param(True, True, True, "https://flag.test", id="flag-beats-all"),
        pytest.param(False, True, True, "https://env.test", id="env-beats-in-cluster"),
        pytest.param(False, False, True, "https://10.0.0.1:443", id="in-cluster"),
        pytest.param(False, False, False, "https://home.test", id="home-out-of-a-pod"),
    ],
)
def test_one_kubeconfig_rule_as_kubectl(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flag: bool,
    env: bool,
    in_pod: bool,
    server: str,
) -> None:
    """--kubeconfig, else $KUBECONFIG, else in-cluster, else ~/.kube/config: the same for `run`,
    `status` and `ledger count --from-cluster` (all through Kube.connect, in_cluster unset)."""
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token\n")
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    (tmp_path / ".kube").mkdir()
    _kubeconfig(tmp_path / ".kube" / "config", "https://home.test")
    monkeypatch.setenv("HOME", str(tmp_path))
    for name, value in (
        ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
    ):
        if in_pod:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)
    if env:
        monkeypatch.setenv("KUBECONFIG", _kubeconfig(tmp_path / "env", "https://env.test"))
    else:
        monkeypatch.delenv("KUBECONFIG", raising=False)
    given = _kubeconfig(tmp_path / "flag", "https://flag.test") if flag else ""
    assert Kube.connect(given).base_url == server


def test_a_socket_error_is_named_by_the_oss_words() -> None:
    wrapped = OSError(
        "HTTPSConnectionPool(host='h', port=1): Max retries exceeded (Caused by "
        "NewConnectionError('<c>: Failed to establish a new connection: [Errno 111] Connection "
        "refused'))"
    )
    assert socket_reason(wrapped) == "[Errno 111] Connection refused"
