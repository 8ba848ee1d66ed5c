"""The Names settings the admission policies are generated from: a bad one is one usage line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from guard.cli import cli
from guard.doors.ledger_store import archive_index, archive_name
from guard.names import is_dns_subdomain
from guard.settings import LEDGER_NAME_MAX, Settings


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param(
            {"gpu_node_label": "nvidia.com/gpu.present"},
            "must be key=value",
            id="label-without-value",
        ),
        pytest.param(
            {"gpu_node_label": "a b=c"},
            "gpu_node_label: must be key=value",
            id="label-key-with-space",
        ),
        pytest.param(
            {"jobs_namespace": "gpu-node-guard"},
            "jobs_namespace: must differ",
            id="jobs-in-the-guard-namespace",
        ),
        pytest.param(
            {"jobs_namespace": "Jobs"},
            "jobs_namespace: must be a DNS-1123 label",
            id="namespace-not-dns",
        ),
        pytest.param(
            {"annotation_prefix": "gpu'guard/"},
            "annotation_prefix: must be a DNS subdomain",
            id="prefix-with-quote",
        ),
    ],
)
def test_a_bad_name_setting_is_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings(**overrides)  # type: ignore[arg-type]


def test_the_defaults_are_valid_and_split_the_label() -> None:
    s = Settings()
    assert s.gpu_node_selector == ("nvidia.com/gpu.present", "true")
    assert s.jobs_namespace == "gpu-node-guard-jobs"


def test_a_bad_name_setting_is_one_usage_line_at_the_command_line() -> None:
    result = CliRunner().invoke(
        cli, ["render", "evidence", "--node", "n"], env={"GUARD_NAMESPACE": "Bad_NS"}
    )
    assert result.exit_code == 2
    assert "bad setting: GUARD_NAMESPACE must be a DNS-1123 label" in result.output
    assert "Traceback" not in result.output


def test_the_longest_ledger_name_leaves_room_for_its_last_archive() -> None:
    longest = "l" * LEDGER_NAME_MAX
    last = archive_name(Settings(ledger_configmap=longest).ledger_configmap, 999_999)
    assert is_dns_subdomain(last) and archive_index(longest, last) == 999_999
    with pytest.raises(ValueError, match="ledger_configmap: must be a DNS-1123 subdomain"):
        Settings(ledger_configmap=longest + "l")
