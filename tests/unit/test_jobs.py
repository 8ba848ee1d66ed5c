"""Job templates: strict, pinned, bounded, and safe against hostile strings."""

from __future__ import annotations

import dataclasses

import jinja2
import pytest

from guard.jobs import (
    JobSpec,
    JobTemplates,
    TemplateLoadError,
    job_name,
    node_label,
    shipped_loader,
    spec_digest,
)
from guard.names import is_label_pair

TEMPLATES = JobTemplates.load()

SPEC = JobSpec(
    kind="evidence",
    name="gng-ev-x",
    namespace="gpu-node-guard",
    node="gpu-node-b",
    reason="xid-79",
    prefix="gpu-node-guard.io/",
    image="registry.example/gng:1",
    command=("gpu-node-guard", "evidence", "collect"),
    deadline_s=600,
    ttl_s=3600,
    workload_service_account="gpu-node-guard-job",
    gpus=8,
)


@pytest.mark.parametrize("kind", ["evidence", "loadtest", "conformance", "fence"])
def test_every_template_renders_a_pinned_bounded_job(kind):
    job = TEMPLATES.render(dataclasses.replace(SPEC, kind=kind))
    pod = job["spec"]["template"]["spec"]
    assert job["kind"] == "Job" and job["metadata"]["namespace"] == "gpu-node-guard"
    assert pod["nodeName"] == "gpu-node-b"
    assert job["spec"]["activeDeadlineSeconds"] == 600
    assert job["spec"]["ttlSecondsAfterFinished"] == 3600
    assert job["spec"]["backoffLimit"] == 0
    assert len(pod["containers"]) == 1
    assert pod["containers"][0]["securityContext"]["privileged"] is False
    assert pod["automountServiceAccountToken"] is False
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == kind
    assert ("hostPID" in pod) is (kind != "loadtest")
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits.get("nvidia.com/gpu") == ("8" if kind == "loadtest" else None)


@pytest.mark.parametrize(
    ("kind", "added"),
    [
        # dmesg, the kernel log where journald keeps none, needs SYSLOG under dmesg_restrict=1.
        ("evidence", ["SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT", "SYSLOG"]),
        ("conformance", ["SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT"]),
        ("fence", ["SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT"]),
        ("loadtest", None),
    ],
)
def test_each_kind_adds_exactly_its_capabilities(kind, added):
    job = TEMPLATES.render(dataclasses.replace(SPEC, kind=kind))
    capabilities = job["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "capabilities"
    ]
    assert capabilities.get("add") == added
    assert capabilities["drop"] == ["ALL"]


@pytest.mark.parametrize(
    "hostile",
    [
        pytest.param('say "hi": {now}\n- item', id="yaml-specials-and-newline"),
        pytest.param("{{ 7*7 }} {% raw %}", id="template-syntax"),
        pytest.param("'; rm -rf / #", id="shell-ish"),
        pytest.param("0000:99:00.0", id="colon-number"),
        pytest.param("yes", id="yaml-boolean-word"),
    ],
)
def test_command_arguments_survive_verbatim(hostile):
    spec = dataclasses.replace(SPEC, command=("gpu-node-guard", "evidence", "collect", hostile))
    command = TEMPLATES.render(spec)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-1] == hostile


def _templates(loader: jinja2.BaseLoader) -> list[str]:
    return [n for n in loader.list_templates() if n.endswith(".j2")]  # not the package's .py


def _loader(**overrides: str) -> jinja2.BaseLoader:
    shipped = shipped_loader()
    env = jinja2.Environment(loader=shipped)
    sources = {name: shipped.get_source(env, name)[0] for name in _templates(shipped)}
    sources.update(overrides)
    return jinja2.DictLoader({k: v for k, v in sources.items() if v is not None})


def test_missing_template_variable_fails_at_load_instead_of_rendering_blank():
    broken = _loader(**{"evidence-job.yaml.j2": "kind: Job\nname: {{ job.nonexistent }}\n"})
    with pytest.raises(TemplateLoadError, match=r"evidence-job\.yaml\.j2"):
        JobTemplates.load(broken)


def test_a_missing_template_fails_at_load_naming_the_file():
    shipped = shipped_loader()
    names = [n for n in _templates(shipped) if n != "loadtest-job.yaml.j2"]
    env = jinja2.Environment(loader=shipped)
    partial = jinja2.DictLoader({n: shipped.get_source(env, n)[0] for n in names})
    with pytest.raises(TemplateLoadError, match=r"loadtest-job\.yaml\.j2 not found"):
        JobTemplates.load(partial)


def test_a_template_that_is_not_a_job_fails_at_load():
    with pytest.raises(TemplateLoadError, match="did not render a Job"):
        JobTemplates.load(_loader(**{"conformance-job.yaml.j2": "kind: Pod\n"}))


@pytest.mark.parametrize("node", ["gpu-node-b", "n" * 250, "Node.With.Dots_and_CAPS"])
def test_job_names_fit_a_label_and_are_stable(node):
    name = job_name("loadtest", node, "boot")
    assert len(name) <= 57  # + "-" is the Pods' generateName, which the API cuts at 58
    assert name == job_name("loadtest", node, "boot")
    assert name != job_name("loadtest", node, "boot-2")
    assert name[0].isalnum() and name[-1].isalnum()
    assert name == name.lower()
    assert len(node_label(node)) <= 63


@pytest.mark.parametrize("length", [1, 63, 64, 92, 253])
def test_node_labels_fit_and_stay_the_name_while_it_fits(length):
    node = ("g." * 127)[: length - 1] + "z" if length > 1 else "z"
    label = node_label(node)
    assert len(label) <= 63 and is_label_pair(f"k={label}")
    if length <= 63:
        assert label == node
    else:
        assert label.startswith(node[:54] + "-") and label != node_label(node[:-1] + "y")


@pytest.mark.parametrize("length", [92, 253])
def test_a_long_node_names_jobs_carry_the_full_name_where_it_counts(length):
    node = ("a" * 60 + ".") * 5
    node = node[: length - 1] + "b"
    name = job_name("evidence", node, "2026-09-21T05:55:00Z")
    manifest = TEMPLATES.render(dataclasses.replace(SPEC, node=node, name=name))
    meta, pod = manifest["metadata"], manifest["spec"]["template"]
    key = f"{SPEC.prefix}node"
    assert len(name) <= 57 and len(node) == length
    assert meta["annotations"][key] == node
    assert meta["labels"][key] == node_label(node)
    assert pod["metadata"]["labels"][key] == node_label(node)
    assert pod["spec"]["nodeName"] == node


def test_the_spec_digest_follows_what_runs_not_what_the_api_defaults():
    c = {"name": "loadtest", "image": "i", "command": ["a"], "resources": {"limits": {"x": 1}}}

    def job(container: dict) -> dict:
        return {"spec": {"template": {"spec": {"containers": [container]}}}}

    assert spec_digest(job(c)) == spec_digest(job({**c, "imagePullPolicy": "Always"}))
    assert spec_digest(job(c)) != spec_digest(job({**c, "command": ["b"]}))
