"""The generated admission policies: in sync with guard/generate/policies, driven by the settings,
and holding every argv the planners build (the same layouts the policies match in CEL)."""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from guard import ledger
from guard.generate.policies import POLICY_DIR, render
from guard.generate.policies import argv as layouts
from guard.generate.policies.__main__ import main
from guard.generate.policies.cel import lit, quote
from guard.generate.policies.kinds import KINDS, Kind, job_name_pattern
from guard.generate.policies.nodes import guard_keys
from guard.jobs import JobTemplates, job_name
from guard.names import REPORTING_CONTROLLER, Annotations
from guard.plan.common import (
    Incident,
    conformance_args,
    evidence_args,
    loadtest_args,
    trigger_evidence_args,
)
from guard.settings import Settings
from tests.argv_layouts import matches

ROOT = Path(__file__).resolve().parents[2]
UUID = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
AT = datetime(2026, 9, 21, 5, 0, tzinfo=UTC)


def test_committed_policies_are_what_the_generator_writes() -> None:
    generated = render(Settings())
    on_disk = {p.relative_to(ROOT) for p in (ROOT / POLICY_DIR).glob("*.yaml")}
    assert on_disk == set(generated)
    for path, text in generated.items():
        assert (ROOT / path).read_text(encoding="utf-8") == text, path


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / POLICY_DIR, tmp_path / POLICY_DIR)
    return tmp_path


def test_check_passes_on_a_clean_tree(checkout: Path) -> None:
    result = CliRunner().invoke(main, ["--root", str(checkout), "check"])
    assert result.exit_code == 0, result.output


def test_check_fails_on_a_hand_edit(checkout: Path) -> None:
    path = checkout / POLICY_DIR / "job-evidence.yaml"
    path.write_text(path.read_text().replace("SYS_CHROOT", "SYS_MODULE"))
    result = CliRunner().invoke(main, ["--root", str(checkout), "check"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: policies/job-evidence.yaml differs from guard/generate/policies; "
        "run `python -m guard.generate.policies write`"
    )


def test_check_fails_on_a_file_nobody_generates(checkout: Path) -> None:
    (checkout / POLICY_DIR / "params.yaml").write_text("kind: ConfigMap\n")
    result = CliRunner().invoke(main, ["--root", str(checkout), "check"])
    assert result.exit_code == 1
    assert "policies/params.yaml is not generated" in result.output


def test_write_restores_and_removes_stale_files(checkout: Path) -> None:
    (checkout / POLICY_DIR / "params.yaml").write_text("kind: ConfigMap\n")
    (checkout / POLICY_DIR / "node-hold.yaml").unlink()
    result = CliRunner().invoke(main, ["--root", str(checkout), "write"])
    assert result.exit_code == 0, result.output
    assert "removed policies/params.yaml" in result.output
    assert CliRunner().invoke(main, ["--root", str(checkout), "check"]).exit_code == 0


def test_the_settings_drive_every_name_in_the_policies() -> None:
    s = Settings(
        annotation_prefix="ops.example.com/",
        namespace="guardian",
        jobs_namespace="guardian-jobs",
        ledger_configmap="faults",
        job_service_account="guardian-runner",
        gpu_node_label="example.com/accelerator=h200",
        image="registry.example/guard@sha256:" + "a" * 64,
        loadtest_image="registry.example/burn:7",
        onboarding_taint="ops.example.com/admitted=no:NoExecute",
    )
    # The Events' reportingController is a constant of guard/apply/events.py, not a setting.
    text = "\n".join(render(s).values()).replace(REPORTING_CONTROLLER, "")
    for value in (
        "ops.example.com/auto-cordon-reason",
        "'guardian-jobs'",
        "system:serviceaccount:guardian:gpu-node-guard",
        "faults-archive-",
        "guardian-runner",
        "'example.com/accelerator': 'h200'",
        f"'{s.image}'",
        "'registry.example/burn:7'",
        # the params' default when the ConfigMap has no GUARD_ONBOARDING_TAINT
        "orValue('ops.example.com/admitted=no:NoExecute')",
    ):
        assert value in text, value
    for default in (
        "gpu-node-guard.io/",
        "'gpu-node-guard-jobs'",
        "gpu-fault-ledger",
        "metadata.name: gpu-node-guard-jobs\n",
        "namespace == 'gpu-node-guard'",
        "gpu-node-guard-job'",
        "nvidia.com/gpu.present",
        "ghcr.io/",
    ):
        assert default not in text, default


def test_node_scope_lets_the_guard_write_its_keys_and_no_persons() -> None:
    keys = Annotations("gpu-node-guard.io/")
    mine = guard_keys(keys)
    assert {keys.cancelled, keys.returned, keys.reason, keys.loadtest_result} <= set(mine)
    assert keys.reset_done not in mine and keys.hold not in mine
    assert keys.node_label not in mine  # a Job label, not a node annotation


def _incident(node: str = "gpu-node-b", pci: str = "0000:99:00.0", uuid: str = UUID) -> Incident:
    return Incident(node, AT, 79, pci, uuid)


@pytest.mark.parametrize(
    ("incident", "counts"),
    [
        pytest.param(_incident(), ledger.Counts(1, 1, None), id="first"),
        pytest.param(_incident("gpu-17.rack-3"), ledger.Counts(3, 4, AT), id="dotted-node"),
        pytest.param(_incident(uuid="unknown"), ledger.Counts(2, 2, None), id="no-uuid-label"),
    ],
)
def test_every_evidence_argv_the_planner_builds_is_in_the_policy(
    incident: Incident, counts: ledger.Counts
) -> None:
    argv = ("gpu-node-guard", *evidence_args(incident, counts))
    assert matches(layouts.evidence(), argv, incident.node)
    assert not matches(layouts.evidence(), argv, "another-node")


@pytest.mark.parametrize("reason", ledger.NODE_REASONS)
def test_a_node_triggers_evidence_argv_is_in_the_policy_and_nothing_wider(reason: str) -> None:
    argv = ("gpu-node-guard", *trigger_evidence_args("gpu-17.rack-3", reason, 8))
    assert matches(layouts.evidence(), argv, "gpu-17.rack-3")
    assert not matches(layouts.evidence(), argv, "another-node")
    wider = (
        (*argv, "--pci", "0000:99:00.0"),
        (*argv, "--xid", "79"),
        (*argv[:-1], "xid-79") if reason != ledger.GPU_SHORT else (*argv[:-1], "100"),
        (*argv[:6], "gpu-short") if reason != ledger.GPU_SHORT else argv[:7],
    )
    assert not any(matches(layouts.evidence(), w, "gpu-17.rack-3") for w in wider)


@pytest.mark.parametrize(
    "s",
    [
        Settings(),
        Settings(conformance_control_plane_version="v1.34.3+rke2r1"),
        Settings(conformance_allowed_dns="10.43.0.10/32, 192.0.2.53"),
        Settings(
            conformance_control_plane_version="1.34.3",
            conformance_allowed_dns="10.0.0.0/8,fd00::/8",
        ),
    ],
    ids=["plain", "version", "dns", "both"],
)
def test_every_conformance_argv_is_in_the_policy_and_fix_never(s: Settings) -> None:
    argv = ("gpu-node-guard", *conformance_args(s))
    assert matches(layouts.conformance(), argv, "n")
    assert not matches(layouts.conformance(), (*argv, "--fix"), "n")


@pytest.mark.parametrize(
    ("s", "gpus", "xid", "pci"),
    [
        (Settings(), 8, None, "0000:99:00.0"),
        (Settings(), 8, 79, "0000:99:00.0"),
        (Settings(), 4, 48, ledger.UNKNOWN_PCI),
        (Settings(loadtest_min_ratio=1.0, loadtest_duration_s=600), 1, 95, "0000:3b:00.0"),
        (Settings(loadtest_min_ratio=0.75, loadtest_matrix_size=4096), 16, 13, "0000:01:00.0"),
    ],
)
def test_every_loadtest_argv_is_in_the_policy(
    s: Settings, gpus: int, xid: int | None, pci: str
) -> None:
    argv = ("gpu-node-guard", *loadtest_args(s, gpus, xid, pci))
    assert matches(layouts.loadtest(), argv, "n")


@pytest.mark.parametrize("node", ["gpu-a", "GPU_Node.17", "n" * 80, "x." * 40 + "y", "-"])
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_job_name_the_guard_makes_is_a_name_the_policy_takes(kind: Kind, node: str) -> None:
    name = job_name(kind.name, node, "2026-09-21T05:00:00Z")  # type: ignore[arg-type]
    assert re.fullmatch(job_name_pattern(kind)[1:-1], name), name


def test_rendered_jobs_carry_the_settings_the_policy_pins() -> None:
    from guard.plan.common import render_example_job

    s = Settings(gpu_node_label="example.com/accelerator=h200", jobs_namespace="guardian-jobs")
    job = render_example_job(s, JobTemplates.load(), "evidence", ("n", "0000:99:00.0", 79, 8))
    pod = job["spec"]["template"]["spec"]
    assert job["metadata"]["namespace"] == "guardian-jobs"
    assert pod["nodeSelector"] == {"example.com/accelerator": "h200"}
    assert job["metadata"]["labels"]["app.kubernetes.io/name"] == "gpu-node-guard"


@pytest.mark.parametrize(
    ("value", "cel"),
    [
        ("it's \\ here", "'it\\'s \\\\ here'"),
        ({"a": 1, "b": "x"}, "{'a': dyn(1), 'b': dyn('x')}"),
        ([["A"], ["B"]], "[['A'], ['B']]"),
        ([["A"], []], "[dyn(['A']), dyn([])]"),
    ],
)
def test_cel_literals_cannot_break_out_of_their_quotes(value: object, cel: str) -> None:
    assert lit(value) == cel


def test_a_control_character_is_refused_not_embedded() -> None:
    with pytest.raises(ValueError, match="control character"):
        quote("line\nbreak")


MAX_EXPRESSION = 2000


def _expressions(doc: dict[str, object]) -> list[tuple[str, str]]:
    spec = doc["spec"]
    assert isinstance(spec, dict)
    out = [(f"variable {v['name']}", v["expression"]) for v in spec.get("variables", [])]
    out += [(f"condition {c['name']}", c["expression"]) for c in spec.get("matchConditions", [])]
    for v in spec["validations"]:
        out += [
            (f"validation {v['message'][:60]}", v["expression"]),
            (f"message of {v['message'][:60]}", v["messageExpression"]),
        ]
    return out


def test_no_policy_expression_is_longer_than_a_reviewer_reads() -> None:
    """Every CEL expression of every generated policy (variables, conditions, validations and
    their messages) is at most 2,000 characters: repeated parts live in variables and list
    macros, never unrolled."""
    from guard.generate.policies import documents

    seen = 0
    for name, docs in documents(Settings()).items():
        for doc in docs:
            if doc["kind"] != "ValidatingAdmissionPolicy":
                continue
            for what, expression in _expressions(doc):
                seen += 1
                assert len(expression) <= MAX_EXPRESSION, (name, what, len(expression))
    assert seen > 500


def test_the_guards_longest_records_fit_the_node_scope_bound() -> None:
    """The node-scope policy bounds every guard value at VALUE_MAX_BYTES, printable, one line:
    the longest records the guard writes (every conformance item failed, 16 PCIe links) fit."""
    from guard.codec.check_records import MAX_LINKS, failed_value, links_value
    from guard.conformance.checks import ITEMS
    from guard.generate.policies.nodes import PRINTABLE, VALUE_MAX_BYTES
    from guard.model import RecordedLink

    job = "gng-cf-" + "n" * 47 + "-1a2b3c4d"
    links = tuple(RecordedLink(f"0000:{i:02x}:1f.7", "2.5GT/s,x16") for i in range(MAX_LINKS))
    for value in (failed_value("2026-09-21T06:00:00Z", job, ITEMS), links_value(links)):
        assert len(value.encode()) <= VALUE_MAX_BYTES, value
        assert re.fullmatch(PRINTABLE[1:-1], value), value


def _reaches_others(policy: dict[str, object], s: Settings) -> bool:
    """Whether a policy's match reaches objects that are not the guard's: Nodes (every one in
    the cluster), or ConfigMaps of the guard's namespace (the settings ConfigMap itself)."""
    constraints = policy["spec"]["matchConstraints"]  # type: ignore[index]
    resources = {r for rule in constraints["resourceRules"] for r in rule["resources"]}
    namespaces = constraints.get("namespaceSelector", {}).get("matchLabels", {}).values()
    return "nodes" in resources or ("configmaps" in resources and s.namespace in namespaces)


@pytest.mark.parametrize("s", [Settings(), Settings(onboarding_taint="")], ids=["gate", "no-gate"])
def test_no_policy_that_reaches_others_refuses_them_when_the_settings_are_missing(
    s: Settings,
) -> None:
    """The API server resolves a binding's params before the policy's match conditions: a Deny
    binding on a policy that matches every Node refused every kubelet's, controller's and
    person's Node update once the settings ConfigMap was deleted or renamed, and the ledger's
    refused the settings' own re-creation. Such policies read no params, or Allow without them
    (tests/apiserver/test_settings_missing.py shows it on the real server)."""
    docs = [d for text in render(s).values() for d in yaml.safe_load_all(text) if d]
    bindings = {
        d["spec"]["policyName"]: d["spec"].get("paramRef")
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    reaching = [
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy" and _reaches_others(d, s)
    ]
    assert {"gpu-node-guard-node-scope", "gpu-node-guard-ledger"} <= set(reaching)
    for name in reaching:
        ref = bindings[name]
        assert ref is None or ref["parameterNotFoundAction"] == "Allow", name
    # What holds without the settings is in the paramless policies: node scope whole.
    assert bindings["gpu-node-guard-node-scope"] is None
    assert bindings["gpu-node-guard-ledger"] is None
