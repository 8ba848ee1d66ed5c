"""`make image` (hack/build-images.sh) on a machine without an OCI builder: one line, exit 0; and
the tags it builds by default are the references manifests/base deploys."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

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
        " buildah)\n"
    )


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
