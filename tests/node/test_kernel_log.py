"""The evidence Job's kernel log on a host whose journald keeps no journal (this machine's kind):
`journalctl -k` exits 0 with "No journal files were found.", which is no kernel log, so the Job
reads the kernel ring buffer with dmesg, which kernel.dmesg_restrict=1 allows only with
CAP_SYSLOG."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from guard.evidence.cli import JSON_MARK
from tests.apiserver.deploy import Kubectl, kubectl_or_skip
from tests.apiserver.kube import JOBS_NS
from tests.node import fake_host
from tests.node.jobs import record, render, run_job
from tests.node.node import Node

pytestmark = pytest.mark.node
DMESG_RESTRICT = Path("/proc/sys/kernel/dmesg_restrict")


@pytest.fixture
def dmesg_restricted() -> Iterator[None]:
    """kernel.dmesg_restrict=1 for the test (the node fixture checks it is put back)."""
    kept = DMESG_RESTRICT.read_text()
    DMESG_RESTRICT.write_text("1")
    try:
        yield
    finally:
        DMESG_RESTRICT.write_text(kept)


def evidence_record(node: Node, job: str) -> dict[str, Any]:
    """The EVIDENCE-JSON line of the Job's log, read with `kubectl logs`."""
    logs = Kubectl(kubectl_or_skip(), node.plane.kubeconfig).run(
        "-n", JOBS_NS, "logs", f"job/{job}"
    )
    (line,) = [x for x in logs.stdout.splitlines() if x.startswith(JSON_MARK)]
    return dict(json.loads(line.removeprefix(JSON_MARK)))


def test_an_empty_journal_sends_the_evidence_to_dmesg(
    node: Node, admin: client.ApiClient, guard_kubeconfig: Path, dmesg_restricted: None
) -> None:
    job = render("evidence", node.name, "--pci", fake_host.GPU)
    with fake_host.without_journal(node.workdir / fake_host.DIRECTORY):
        ran = record("evidence, dmesg", run_job(admin, guard_kubeconfig, job))
    found = evidence_record(node, job["metadata"]["name"])
    assert found["kernel_log_source"] == "dmesg --time-format iso", found["unknown"]
    assert [u["what"] for u in found["unknown"] if u["what"].startswith(("journal", "dmesg"))] == [
        "journalctl -k -b 0",
        "journalctl -k -b -1",
    ]
    assert ran.read.status == "succeeded"
