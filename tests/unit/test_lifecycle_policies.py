"""The policy side of the lifecycle checks: the load-test argv with the all-reduce stated and the
recorded links, the gate's toleration in every Job, and the node-scope rules generated from the
settings (the real apiserver holds them in tests/apiserver/test_lifecycle_e2e.py)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from guard.generate.policies import argv as layouts
from guard.generate.policies import render
from guard.generate.policies.kinds import KINDS, UNSCHEDULABLE
from guard.jobs import JobTemplates
from guard.loadtest import cli as loadtest_cli
from guard.loadtest.model import parse_expected_link
from guard.model import RecordedLink
from guard.plan.common import loadtest_args, render_example_job
from guard.settings import SITE_SETTINGS, Settings, SettingsError
from tests.argv_layouts import matches

LINKS = tuple(RecordedLink(f"0000:{0x18 + i:02x}:00.0", "32GT/s,x16") for i in range(16))


def argv(s: Settings, links: tuple[RecordedLink, ...] = (), xid: int | None = 79) -> tuple:
    return ("gpu-node-guard", *loadtest_args(s, 8, xid, "0000:99:00.0", links))


@pytest.mark.parametrize("count", [0, 1, 8, 16])
@pytest.mark.parametrize("xid", [None, 79, 48])
def test_every_loadtest_argv_with_links_is_in_the_policy(count: int, xid: int | None) -> None:
    assert matches(layouts.loadtest(), argv(Settings(), LINKS[:count], xid), "n")


@pytest.mark.parametrize(
    "words",
    [
        pytest.param(("--expect-link",), id="flag-without-value"),
        pytest.param(("--expect-link", "0000:18:00.0=16GT/s"), id="no-width"),
        pytest.param(("--expect-link", "18:00.0=16GT/s,x16"), id="pci-not-sysfs-form"),
        pytest.param(("--expect-link", "0000:18:00.0=16GT/s,x16;id"), id="trailing-text"),
        pytest.param(("--expect-link", "0000:18:00.0=16GT/s,x16") * 17, id="seventeen-links"),
        pytest.param(("--fix",), id="another-word"),
    ],
)
def test_no_other_tail_is_in_the_policy(words: tuple[str, ...]) -> None:
    assert not matches(layouts.loadtest(), (*argv(Settings()), *words), "n")


def test_the_links_go_last_so_no_word_moves() -> None:
    words = argv(Settings(), LINKS[:1])
    moved = (*words[:5], *words[-2:], *words[5:-2])
    assert not matches(layouts.loadtest(), moved, "n")
    assert words[6] == "8"  # the --expected-gpus word the GPU request is held to


def test_the_all_reduce_is_stated_from_the_settings() -> None:
    s = Settings(
        loadtest_allreduce=False,
        loadtest_allreduce_min_ratio=0.55,
        loadtest_allreduce_timeout_s=120,
    )
    words = argv(s)
    assert words[13:19] == (
        "--no-allreduce",
        "--allreduce-min-ratio",
        "0.55",
        "--allreduce-timeout-s",
        "120",
        "--xid",
    )
    assert matches(layouts.loadtest(), words, "n")


def test_the_settings_defaults_are_the_load_tests_own() -> None:
    options = {p.name: p.default for p in loadtest_cli.run_command.params}
    s = Settings()
    assert options["allreduce"] is s.loadtest_allreduce
    assert options["allreduce_min_ratio"] == s.loadtest_allreduce_min_ratio
    assert options["allreduce_timeout_s"] == s.loadtest_allreduce_timeout_s


def test_every_link_the_guard_passes_is_one_the_load_test_reads() -> None:
    for link in (*LINKS, RecordedLink("0000:18:00.0", "2.5GT/s,x1")):
        found = parse_expected_link(str(link))
        assert (found.pci, found.width) == (link.pci, int(link.link.split(",x")[1]))


def test_the_link_pattern_is_the_one_docs_loadtest_md_pins() -> None:
    pinned = (
        r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]=(2\.5|5|8|16|32|64)GT/s,x(1|2|4|8|12|16|32)$"
    )
    assert pinned == layouts.LINK
    docs = Path(__file__).resolve().parents[2] / "docs" / "loadtest.md"
    assert f"`{pinned}`" in docs.read_text(encoding="utf-8")


def job_tolerations(s: Settings) -> list[dict[str, str]]:
    """The template's tolerations as the Job policies' `tolerations` variable computes them: the
    cordon's, and the onboarding gate's taint when there is a gate."""
    gate = s.onboarding_gate
    if gate is None:
        return [UNSCHEDULABLE]
    key, value, effect = gate
    own = {"key": key, "operator": "Equal", "value": value, "effect": effect}
    return [UNSCHEDULABLE, own if value else {"key": key, "operator": "Exists", "effect": effect}]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
@pytest.mark.parametrize(
    "taint", ["gpu-node-guard.io/onboarding=pending:NoSchedule", "example.com/gate:NoExecute", ""]
)
def test_every_job_tolerates_exactly_what_its_policy_pins(kind: object, taint: str) -> None:
    s = Settings(onboarding_taint=taint)
    job = render_example_job(s, JobTemplates.load(), kind.name, ("n", "0000:99:00.0", 79, 8))  # type: ignore[attr-defined]
    assert job["spec"]["template"]["spec"]["tolerations"] == job_tolerations(s)
    assert len(job_tolerations(s)) == (2 if taint else 1)


def test_the_load_test_pod_gets_dev_shm_in_memory() -> None:
    job = render_example_job(Settings(), JobTemplates.load(), "loadtest", ("n", "", 79, 8))
    pod = job["spec"]["template"]["spec"]
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}} in pod["volumes"]
    assert {"name": "shm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]


def node_scope(s: Settings) -> str:
    return next(text for path, text in render(s).items() if path.name == "node-scope.yaml")


def test_the_node_scope_reads_the_gate_taint_from_the_sites_settings() -> None:
    """The gate is the params' GUARD_ONBOARDING_TAINT (the generator's value when absent);
    tests/apiserver/test_node_policies.py proves removal of exactly it, and no gate pinning
    every taint, on the real API server."""
    gated = node_scope(Settings(onboarding_taint="example.com/gate=new:NoExecute"))
    assert (
        "params.?data[?'GUARD_ONBOARDING_TAINT'].orValue('example.com/gate=new:NoExecute')" in gated
    )
    assert "t.key == variables.gateKey && t.?value.orValue('') == variables.gateValue" in gated
    assert "variables.gate != ''" in gated


def test_the_node_scope_rules_for_the_new_records() -> None:
    text = node_scope(Settings())
    assert "gpu-node-guard.io/checked-boot is written only on a schedulable node" in text
    assert "gpu-node-guard.io/auto-cordon-pcie-links is written only while the guard" in text


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"onboarding_taint": "gpu-node-guard.io/onboarding=pending"}, "onboarding_taint"),
        ({"onboarding_taint": "gate=pending:NoRun"}, "onboarding_taint"),
        ({"onboarding_taint": "bad key=x:NoSchedule"}, "onboarding_taint"),
        ({"boot_check_max_jobs": 0}, "boot_check_max_jobs"),
    ],
)
def test_a_bad_lifecycle_setting_is_refused(changes: dict[str, object], field: str) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings(**changes)  # type: ignore[arg-type]
    assert [name for name, _ in refused.value.problems] == [field]


def test_every_site_setting_has_help() -> None:
    """Each flag's help (`run --help`); the lifecycle ones among them, and no fixed value."""
    lifecycle = {
        "boot_check",
        "boot_check_max_jobs",
        "boot_check_return_loadtest",
        "onboarding_taint",
        "loadtest_allreduce",
    }
    helped = {f.name for f in fields(Settings) if f.metadata.get("help")}
    assert lifecycle <= set(SITE_SETTINGS) == helped
