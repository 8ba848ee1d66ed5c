"""The wheel's package list (pyproject.toml) is every package under guard/ plus the Job
templates of the top-level jobs/, shipped as guard.jobtemplates."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_lists_every_package_and_the_job_templates():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "guard").rglob("__init__.py")
    }
    assert set(project["packages"]) == found | {"guard.jobtemplates"}
    assert project["package-dir"] == {"guard.jobtemplates": "jobs"}
    assert sorted(p.name for p in (REPO / "jobs").glob("*.j2")) == [
        "_macros.j2",
        "conformance-job.yaml.j2",
        "device-claim.yaml.j2",
        "evidence-job.yaml.j2",
        "fence-job.yaml.j2",
        "loadtest-job.yaml.j2",
    ]
