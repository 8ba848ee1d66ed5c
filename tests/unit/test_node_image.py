"""The node tier's images (hack/node/image.py) are read from their Dockerfiles, so the two cannot
drift: packages, requirements, checks and start-up come from there, and a Dockerfile line the
offline build does not reproduce stops the build instead of being left out. The load-test image's
CUDA base is the one thing replaced (a CPU stand-in), by a stated table (STAND_INS); its
`gpu-node-guard` runs the guard's command on the numpy backend."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
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
LOADTEST = (REPO / "Dockerfile.loadtest").read_text()


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
        "RUN pip install --pre . && gpu-node-guard --version",
        "RUN pip install extra-package",
    ],
)
def test_a_dockerfile_line_the_offline_build_cannot_reproduce_stops_it(line: str) -> None:
    with pytest.raises(image.DockerfileError):
        image.parse_dockerfile(DOCKERFILE + "\n" + line + "\n")


def test_the_load_test_stand_in_installs_what_its_dockerfile_installs_but_the_cuda_base() -> None:
    """Debian's CPU torch for the CUDA base, the Dockerfile's own requirement from PyPI, its
    check without the NCCL clause a CPU build cannot pass, and its start-up as written."""
    spec = image.parse_dockerfile(LOADTEST)
    assert spec.stand_in is image.STAND_INS["pytorch/pytorch"]
    assert image.debian_packages(spec) == (
        "python3",
        "python3-venv",
        "python3-torch",
        "python3-numpy",
    )
    assert spec.pip == ("nvidia-ml-py==13.615.71",)
    (check,) = spec.checks
    assert check.startswith('python -c "import guard.loadtest.cli, guard.loadtest.rank, pynvml')
    assert check.endswith('assert d.is_gloo_available()"')
    assert "nccl" not in check
    config = image.oci_config(spec, env=image.LOADTEST.env)
    assert (config["User"], config["WorkingDir"]) == ("65534:65534", "/tmp")
    assert (config["Entrypoint"], config["Cmd"]) == (
        ["gpu-node-guard"],
        ["loadtest", "run", "--help"],
    )
    assert {"HOME=/tmp", "PYTHONUNBUFFERED=1", "GPU_NODE_GUARD_CPU_GPUS=8"} <= set(config["Env"])


def test_a_load_test_check_the_stand_in_no_longer_edits_stops_the_build() -> None:
    changed = LOADTEST.replace("d.is_nccl_available() and ", "")
    with pytest.raises(image.DockerfileError, match="update STAND_INS"):
        image.parse_dockerfile(changed)


def test_a_base_image_without_a_stand_in_is_refused() -> None:
    changed = LOADTEST.replace("ARG BASE=pytorch/pytorch:", "ARG BASE=nvcr.io/nvidia/pytorch:")
    with pytest.raises(image.DockerfileError, match=r"FROM nvcr\.io/nvidia/pytorch:"):
        image.parse_dockerfile(changed)


def test_the_stand_ins_inputs_key_its_layers() -> None:
    """The numpy backend and the wrapper are in the load-test image's thin layer, so a change to
    either rebuilds it; the guard's image does not hold them."""
    sources = {f for f, _, _ in image.LOADTEST.files}
    assert sources == {"tests/numpy_backend.py", "hack/node/loadtest_cpu.py"}
    assert image.deps_key(REPO, image.LOADTEST) != image.deps_key(REPO, image.GUARD)
    assert image.thin_key(REPO, image.LOADTEST) != image.thin_key(REPO, image.GUARD)


def _stand_in(gpus: int, *argv: str) -> subprocess.CompletedProcess[str]:
    """The stand-in's `gpu-node-guard` (hack/node/loadtest_cpu.py) with `gpus` simulated GPUs."""
    return subprocess.run(
        [sys.executable, str(REPO / "hack/node/loadtest_cpu.py"), *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}",
            "GPU_NODE_GUARD_CPU_GPUS": str(gpus),
        },
    )


def test_the_cpu_stand_in_runs_the_guards_load_test_on_the_numpy_backend() -> None:
    """`gpu-node-guard loadtest run` of the stand-in: the guard's command and verdict on
    GPU_NODE_GUARD_CPU_GPUS simulated GPUs, the burn at the CPU's scale, said in one line."""
    done = _stand_in(
        3,
        *("loadtest", "run", "--backend", "torch", "--expected-gpus", "3", "--duration-s", "90"),
        *("--size", "8192", "--min-ratio", "0.8", "--no-allreduce", "--output", "json"),
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        "cpu stand-in: 3 simulated GPUs (numpy burn), all-reduce over gloo, not CUDA;"
        " --size 8192 -> 128, --duration-s 90 -> 2, --min-ratio 0.8 -> 0.25\n"
    )
    report = json.loads(done.stdout)
    assert (report["verdict"], report["backend"], report["visible_gpus"]) == ("pass", "numpy", 3)
    assert (report["size"], report["duration_s"], report["min_ratio"]) == (128, 2.0, 0.25)


def test_the_cpu_stand_in_fails_a_node_that_shows_fewer_gpus_than_recorded() -> None:
    done = _stand_in(
        2, "loadtest", "run", "--expected-gpus", "8", "--no-allreduce", "--output", "json"
    )
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["reasons"][0].startswith("gpu-count ")


def test_the_cpu_stand_in_leaves_every_other_command_alone() -> None:
    done = _stand_in(2, "--version")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("gpu-node-guard, version ")


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
