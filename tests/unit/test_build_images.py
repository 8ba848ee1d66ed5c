"""`make image` (hack/build-images.sh) on a machine without an OCI builder: the guard's image built
offline (hack/node/image.py) where it can be, the load-test image left out with one line; one line
and exit 0 where neither can run; and the tags it builds by default are the references
manifests/base deploys."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "build-images.sh"


def _path_without_builders(tmp_path: Path) -> str:
    """A PATH holding only what the script needs besides a builder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sed", "dirname"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_without_a_builder_it_says_so_in_one_line_and_succeeds(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(SCRIPT)],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": _path_without_builders(tmp_path)},
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "make image: skipped, no OCI builder here (a docker daemon that answers, podman or"
        " buildah) and no offline build (it needs root and mmdebstrap: apt-get install"
        " mmdebstrap)\n"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the offline build is taken only as root")
def test_without_a_builder_root_builds_the_guards_image_offline(tmp_path: Path) -> None:
    """As root with mmdebstrap: hack/node/image.py builds the guard's image in the node tier's
    cache and names a copy as IMAGE in IMAGE_DIR; the load-test image is left out, saying why.
    PY stands in for the python that runs image.py and records what it was asked."""
    path = _path_without_builders(tmp_path)
    for tool in ("mkdir", "flock"):
        found = shutil.which(tool)
        assert found, tool
        (Path(path) / tool).symlink_to(found)
    (Path(path) / "mmdebstrap").write_text("#!/bin/bash\nexit 1\n")
    (Path(path) / "mmdebstrap").chmod(0o755)
    calls, py = tmp_path / "calls", tmp_path / "py"
    py.write_text(f'#!/bin/bash\necho "$*" >> {calls}\n')
    py.chmod(0o755)
    env = {
        "PATH": path,
        "PY": str(py),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "IMAGE_DIR": str(tmp_path / "out"),
        "IMAGE": "mirror.example/gng:1",
        "LOADTEST_IMAGE": "mirror.example/gng-loadtest:1",
    }
    done = subprocess.run([str(SCRIPT)], capture_output=True, text=True, check=False, env=env)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    cache = tmp_path / "cache" / "gpu-node-guard" / "node"
    archive = tmp_path / "out" / "gpu-node-guard.oci.tar"
    assert calls.read_text().splitlines() == [
        f"hack/node/image.py guard --repo . --out {cache} --python {py}",
        f"hack/node/image.py retag {cache}/guard.oci.tar --name mirror.example/gng:1"
        f" --out {archive}",
    ]
    built, left_out = done.stdout.splitlines()
    assert built.startswith("make image: built mirror.example/gng:1 offline (no OCI builder here)")
    assert built.endswith(f"skopeo copy oci-archive:{archive} docker://mirror.example/gng:1")
    assert left_out.startswith("make image: not built: mirror.example/gng-loadtest:1 (its CUDA")
    assert "pytorch/pytorch:" in left_out


def test_a_docker_cli_without_its_daemon_is_no_builder(tmp_path: Path) -> None:
    """A docker client whose daemon does not answer (`docker info` fails) is skipped."""
    path = _path_without_builders(tmp_path)
    docker = Path(path) / "docker"
    docker.write_text("#!/bin/bash\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    docker.chmod(0o755)
    done = subprocess.run(
        [str(SCRIPT)], capture_output=True, text=True, check=False, env={"PATH": path}
    )
    assert done.returncode == 0 and "skipped, no OCI builder here" in done.stdout


def test_the_default_tags_are_the_references_the_base_deploys() -> None:
    doc = yaml.safe_load((ROOT / "manifests" / "base" / "images.yaml").read_text())
    images = {c["name"]: c["image"] for c in doc["template"]["spec"]["containers"]}
    script = SCRIPT.read_text()
    for name in images:
        assert f"$(reference {name})" in script
    sed = subprocess.run(
        [
            "bash",
            "-c",
            'source <(sed -n "/^reference()/,/^}/p" hack/build-images.sh); '
            "reference guard; reference loadtest",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert sed.stdout.split() == [images["guard"], images["loadtest"]]
