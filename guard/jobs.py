"""The guard's Job templates, loaded once at start, and the pure rendering of a Job from them.

The templates are the repository's ``jobs/*.yaml.j2``, the package ``guard.jobtemplates`` in the
wheel (pyproject.toml). `JobTemplates.load()` renders each once with a probe spec: a broken
template stops the program at start, not at the first fault.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Literal, get_args

import jinja2
import yaml

from guard.files import first_line

JobKind = Literal["evidence", "loadtest", "conformance", "fence"]

TEMPLATE_FILES: dict[JobKind, str] = {kind: f"{kind}-job.yaml.j2" for kind in get_args(JobKind)}

# The ResourceClaim of a load test on one DRA device (guard.plan.device_taint).
CLAIM_FILE = "device-claim.yaml.j2"

# Label values (the node label) fit 63 characters. Job names become the `job-name` label of
# their Pods and, with '-', the Pods' generateName, whose base the API server cuts to 58
# characters: a Job name of at most 57 keeps every Pod named `<job>-<5 random>` (what the Pod
# policies check), whatever the node name's length.
_NAME_BUDGET = 63
JOB_NAME_BUDGET = 57
_SHORT = {"evidence": "ev", "loadtest": "lt", "conformance": "cf", "fence": "fn"}


@dataclass(frozen=True, slots=True)
class JobSpec:
    """Everything a Job template needs; `command` is the full argv of the container."""

    kind: JobKind
    name: str
    namespace: str
    node: str
    reason: str
    prefix: str
    image: str
    command: tuple[str, ...]
    deadline_s: int
    ttl_s: int
    workload_service_account: str
    gpus: int = 0
    # The pod's nodeSelector, (key, value) pairs: the GPU-node label the kubelet checks even
    # though nodeName bypasses the scheduler (so a Job cannot run on a CPU or control-plane node).
    node_selector: tuple[tuple[str, str], ...] = ()
    # Tolerations beside the cordon's, (key, value, effect): the onboarding gate's taint, so the
    # conformance and burn-in Jobs run on a node that is not admitted yet ("" value: Exists).
    tolerations: tuple[tuple[str, str, str], ...] = ()
    # A load test on one DRA device: the ResourceClaim (in the Job's namespace) its Pod uses
    # instead of `gpus` nvidia.com/gpu; the scheduler places it (no nodeName: it allocates the
    # claim), on this node by its hostname label.
    claim: str = ""

    @property
    def node_label(self) -> str:
        return node_label(self.node)


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """The ResourceClaim of a device load test: exactly the GPU `uuid` of `driver`, tolerating
    only the guard's taint (`taint_key` = `taint_value`, NoSchedule)."""

    name: str
    namespace: str
    node: str
    prefix: str
    device_class: str
    driver: str
    uuid: str
    device: str  # <driver>/<pool>/<device>, for people reading the claim
    taint_key: str
    taint_value: str

    @property
    def node_label(self) -> str:
        return node_label(self.node)


# The full node name is in the Job's annotation and its nodeName; the policies
# (guard.generate.policies.kinds) check the label against the same rule.
NODE_LABEL_KEEP = _NAME_BUDGET - 9  # "-" and an 8-digit hex digest
NODE_LABEL_DIGEST = 8


def node_label(node: str) -> str:
    """The value of the guard's node label on its Jobs and Pods for `node`: the name itself when
    it fits a label (≤ 63), else its first 54 characters, '-' and 8 hex digits of its SHA-256."""
    if len(node) <= _NAME_BUDGET:
        return node
    digest = hashlib.sha256(node.encode()).hexdigest()[:NODE_LABEL_DIGEST]
    return f"{node[:NODE_LABEL_KEEP]}-{digest}"


def job_name(kind: JobKind, node: str, key: str) -> str:
    """Deterministic Job name: one per (kind, node, key), e.g. key = cordon time or bootID."""
    digest = hashlib.sha256(f"{kind}\0{node}\0{key}".encode()).hexdigest()[:8]
    head = f"gng-{_SHORT[kind]}-"
    room = JOB_NAME_BUDGET - len(head) - len(digest) - 1
    stem = re.sub(r"[^a-z0-9-]", "-", node.lower())[:room].strip("-")
    return f"{head}{stem}-{digest}"


def shipped_loader() -> jinja2.PackageLoader:
    """The Job templates as shipped: jobs/ of the repository, guard.jobtemplates in the wheel."""
    return jinja2.PackageLoader("guard.jobtemplates", ".")


class TemplateLoadError(Exception):
    """A Job template is missing or broken; the message is one line naming the file."""


@dataclass(frozen=True, slots=True)
class JobTemplates:
    """Compiled Job templates by kind: a value the planners receive, never a file they read."""

    templates: Mapping[JobKind, jinja2.Template]
    claim: jinja2.Template

    @classmethod
    def load(cls, loader: jinja2.BaseLoader | None = None) -> JobTemplates:
        """Compile and probe every template (default: the ones shipped in the package)."""
        env = jinja2.Environment(
            loader=loader or shipped_loader(),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            autoescape=False,  # YAML, not HTML; values are emitted through `tojson`.
        )
        compiled: dict[JobKind, jinja2.Template] = {}
        for kind, filename in TEMPLATE_FILES.items():
            try:
                compiled[kind] = env.get_template(filename)
            except jinja2.TemplateNotFound:
                raise TemplateLoadError(f"Job template {filename} not found") from None
            except jinja2.TemplateError as exc:
                raise TemplateLoadError(f"Job template {filename}: {first_line(exc)}") from None
        try:
            claim = env.get_template(CLAIM_FILE)
        except jinja2.TemplateError as exc:
            raise TemplateLoadError(f"template {CLAIM_FILE}: {first_line(exc)}") from None
        templates = cls(MappingProxyType(compiled), claim)
        for kind in TEMPLATE_FILES:
            templates.render(_probe(kind))
        templates.render(replace(_probe("loadtest"), claim="gng-probe-claim"))
        words = "gng-probe-claim probe probe-node probe.io/ probe probe.io GPU-0 probe.io/p/d k v"
        templates.render_claim(ClaimSpec(*words.split()))
        return templates

    def render(self, spec: JobSpec) -> dict[str, Any]:
        """Render `spec` and parse it; a broken template raises, never half-renders."""
        what = f"Job template {TEMPLATE_FILES[spec.kind]}"
        return _manifest(self.templates[spec.kind], what, "Job", job=spec)

    def render_claim(self, spec: ClaimSpec) -> dict[str, Any]:
        """Render a device load test's ResourceClaim (the template is loaded with the Jobs')."""
        return _manifest(self.claim, f"template {CLAIM_FILE}", "ResourceClaim", claim=spec)


def _manifest(template: jinja2.Template, what: str, kind: str, **spec: object) -> dict[str, Any]:
    try:
        manifest = yaml.safe_load(template.render(**spec))
    except jinja2.TemplateError as exc:
        raise TemplateLoadError(f"{what}: {first_line(exc)}") from None
    except yaml.YAMLError as exc:
        raise TemplateLoadError(f"{what} renders bad YAML: {first_line(exc)}") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != kind:
        raise TemplateLoadError(f"{what} did not render a {kind}")
    return manifest


def _probe(kind: JobKind) -> JobSpec:
    words = ("probe", "probe-node", "probe", "probe.io/", "probe/image:0")
    return JobSpec(kind, f"gng-probe-{kind}", *words, ("gpu-node-guard",), 1, 1, "probe", gpus=1)


# ---- What the guard made: the digests it records and compares (docs/lifecycle.md) ----------

DIGEST_CHARS = 16  # hex characters of sha256 kept: a short value, far beyond a forger's guess


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _containers(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = pod_spec.get("containers")
    return [_mapping(c) for c in found] if isinstance(found, list) else []


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def run_spec(pod_spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What each container runs (name, image, command, args): the part a Pod keeps exactly as its
    Job's template had it (resources are defaulted on Pods, so they are left to the Job digest)."""
    return [
        {
            "name": str(c.get("name", "")),
            "image": str(c.get("image", "")),
            "command": _strings(c.get("command")),
            "args": _strings(c.get("args")),
        }
        for c in _containers(pod_spec)
    ]


def _resources(container: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    res = _mapping(container.get("resources"))
    return {
        part: {str(k): str(v) for k, v in _mapping(res.get(part)).items()}
        for part in ("limits", "requests")
        if _mapping(res.get(part))
    }


def _digest(doc: object) -> str:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def spec_digest(job: Mapping[str, Any]) -> str:
    """The digest of a Job's pod template containers: what they run and the resources they get.
    The same for the manifest the guard renders and the Job the API gives back."""
    pod_spec = _mapping(_mapping(_mapping(job.get("spec")).get("template")).get("spec"))
    runs = run_spec(pod_spec)
    for run, c in zip(runs, _containers(pod_spec), strict=True):
        run["resources"] = _resources(c)
    return _digest(runs)


def run_digest(pod_spec: Mapping[str, Any]) -> str:
    """The digest of what a Pod's (or a Job template's) containers run; "" when there are none."""
    runs = run_spec(pod_spec)
    return _digest(runs) if runs else ""
