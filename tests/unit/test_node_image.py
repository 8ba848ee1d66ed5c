"""The node tier's guard image (hack/node/image.py) is read from the Dockerfile, so the two cannot
drift: its packages, checks and start-up come from there, and a Dockerfile line the offline build
does not reproduce stops the build instead of being left out."""

from __future__ import annotations

import importlib.util
import json
import sys
import tarfile
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


def test_an_image_named_again_keeps_its_blobs_and_takes_the_new_name(tmp_path: Path) -> None:
    """`make image` without a builder names the node tier's guard image as IMAGE: only
    index.json changes, every blob (layers, config, manifest) is the same byte for byte."""
    payload = tmp_path / "hello"
    payload.write_text("hello\n")
    layer, first, second = tmp_path / "layer.tar", tmp_path / "a.tar", tmp_path / "b.tar"
    image.layer_of_files(layer, [(payload, "hello", 0o644)])
    image.pack("ghcr.io/x/guard:0.1.0", [layer], image.oci_config(None, ("/hello",)), first)
    image.retag(first, "mirror.example/site/guard:7", second)
    assert image.archive_name(first) == "ghcr.io/x/guard:0.1.0"
    assert image.archive_name(second) == "mirror.example/site/guard:7"

    def blobs(archive: Path) -> dict[str, bytes]:
        with tarfile.open(archive) as tar:
            return {
                m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar
                if m.isfile() and m.name != "index.json"
            }

    assert blobs(first) == blobs(second) and len(blobs(first)) == 4  # oci-layout + 3 blobs
    with tarfile.open(second) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
    assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "7"
