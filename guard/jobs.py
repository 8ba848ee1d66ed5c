"""Render the guard's Jobs from the Jinja templates in jobs/ (pure: same input, same manifest)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jinja2
import yaml

JobKind = Literal["evidence", "loadtest", "conformance"]

TEMPLATE_FILES: dict[JobKind, str] = {
    "evidence": "evidence-job.yaml.j2",
    "loadtest": "loadtest-job.yaml.j2",
    "conformance": "conformance-job.yaml.j2",
}

# Job names become the `job-name` label of their Pods, so they must fit a 63-character label.
_NAME_BUDGET = 63
_SHORT = {"evidence": "ev", "loadtest": "lt", "conformance": "cf"}


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

    @property
    def node_label(self) -> str:
        return label_safe(self.node)


def label_safe(value: str) -> str:
    """A label value for `value` (≤ 63 chars, alphanumeric ends).

    >>> label_safe("gpu-node-b")
    'gpu-node-b'
    >>> len(label_safe("n" * 80))
    63
    """
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", value)
    if len(cleaned) > _NAME_BUDGET:
        digest = hashlib.sha256(value.encode()).hexdigest()[:8]
        cleaned = f"{cleaned[: _NAME_BUDGET - 9]}-{digest}"
    return cleaned.strip("-_.")


def job_name(kind: JobKind, node: str, key: str) -> str:
    """Deterministic Job name: one per (kind, node, key), e.g. key = cordon time or bootID.

    >>> job_name("loadtest", "gpu-node-b", "boot-1")
    'gng-lt-gpu-node-b-a011f911'
    """
    digest = hashlib.sha256(f"{kind}\0{node}\0{key}".encode()).hexdigest()[:8]
    head = f"gng-{_SHORT[kind]}-"
    room = _NAME_BUDGET - len(head) - len(digest) - 1
    stem = re.sub(r"[^a-z0-9-]", "-", node.lower())[:room].strip("-")
    return f"{head}{stem}-{digest}"


@cache
def _environment(templates_dir: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # YAML, not HTML; values are emitted through `tojson`.
    )


def render_job(spec: JobSpec, templates_dir: Path) -> dict[str, Any]:
    """Render `spec` and parse it; a broken template raises, never half-renders."""
    template = _environment(str(templates_dir)).get_template(TEMPLATE_FILES[spec.kind])
    manifest = yaml.safe_load(template.render(job=spec))
    if not isinstance(manifest, dict) or manifest.get("kind") != "Job":
        raise ValueError(f"template {TEMPLATE_FILES[spec.kind]} did not render a Job")
    return manifest


def default_templates_dir() -> Path:
    """jobs/ beside the package (source checkout or the image's /app)."""
    return Path(__file__).resolve().parent.parent / "jobs"
