"""The node tier's guard image (hack/node/image.py) is read from the Dockerfile, so the two cannot
drift: its packages, checks and start-up come from there, and a Dockerfile line the offline build
does not reproduce stops the build instead of being left out."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _image() -> ModuleType:
    spec = importlib.util.spec_from_file_location("node_image", REPO / "hack/node/image.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


image = _image()
DOCKERFILE = (REPO / "Dockerfile").read_text()


def test_the_offline_image_installs_what_the_dockerfile_installs() -> None:
    spec = image.parse_dockerfile(DOCKERFILE)
    assert (spec.suite, spec.python) == ("bookworm", "3.11")
    assert spec.packages == ("util-linux",)
    assert image.debian_packages(spec) == ("python3", "python3-venv", "util-linux")
    assert spec.checks == (
        "gpu-node-guard --version",
        "gpu-node-guard render evidence --node image-build-check >/dev/null",
    )


def test_the_offline_image_starts_as_the_dockerfiles() -> None:
    config = image.oci_config(image.parse_dockerfile(DOCKERFILE))
    assert config["User"] == "65532:65532"
    assert (config["Entrypoint"], config["Cmd"]) == (["gpu-node-guard"], ["run"])
    assert config["WorkingDir"] == "/app"
    assert "PYTHONUNBUFFERED=1" in config["Env"]


def test_a_package_added_to_the_dockerfile_reaches_the_offline_image() -> None:
    changed = DOCKERFILE.replace("util-linux", "util-linux pciutils")
    assert image.parse_dockerfile(changed).packages == ("util-linux", "pciutils")


@pytest.mark.parametrize(
    "line",
    [
        "RUN curl -fsSL https://example.invalid/x | sh",
        "ADD x.tar /",
        "FROM debian:bookworm",
        "RUN pip install . extra-package && gpu-node-guard --version",
    ],
)
def test_a_dockerfile_line_the_offline_build_cannot_reproduce_stops_it(line: str) -> None:
    with pytest.raises(image.DockerfileError):
        image.parse_dockerfile(DOCKERFILE + "\n" + line + "\n")


def test_a_python_debian_does_not_ship_is_refused() -> None:
    spec = image.parse_dockerfile(DOCKERFILE.replace("python:3.11-", "python:3.12-"))
    with pytest.raises(image.DockerfileError, match=r"no python3 3\.12"):
        image.debian_packages(spec)
