#!/usr/bin/env python3
"""The node tier's images, built without a registry or a container engine (hack/node/build.sh).

    image.py dockerfile [Dockerfile]        what the Dockerfile's image holds, as JSON
    image.py guard --repo DIR --out DIR     the guard's image as an OCI archive (two layers)
    image.py loadtest --repo DIR --out DIR  the load-test image's CPU stand-in (two layers)
    image.py pause --binary F --out DIR     registry.k8s.io/pause:3.10 from our static binary
    image.py current --repo DIR --out DIR   exit 0 when both images are of these sources
    image.py retag ARCHIVE --name REF --out F   the same image under another name (`make image`)

The guard's image is the Dockerfile's, read from the Dockerfile itself (one source): its Debian
suite and Python version from FROM, its packages from `apt-get install`, its checks from the RUN
after `pip install .`, and ENV, USER, WORKDIR, ENTRYPOINT, CMD for the image's config. Debian's
python3 (bookworm: 3.11) in a venv stands in for the python image's own build of the same version.

Two layers, each rebuilt only when its inputs change: `deps` (mmdebstrap minbase, the
Dockerfile's packages, a venv holding the project's dependencies; keyed by pyproject.toml, the
Dockerfile and DEPS_RECIPE) and `guard` (the project's wheel installed into that venv; keyed by
the sources that go into the wheel). The archive is what `ctr -n k8s.io images import` reads:
oci-layout, index.json with the io.containerd.image.name annotation containerd 1.6's importer
keys on.

The load-test image's base is CUDA PyTorch from a registry, which no offline build can make: its
offline build is a CPU stand-in (STAND_INS, LOADTEST), read from Dockerfile.loadtest in the same
way. Debian bookworm's python3-torch 1.13.1, a CPU build linked with libgloo, stands in for the
base image's torch; the Dockerfile's check runs without its NCCL clause (a CPU build has none);
and `gpu-node-guard` is hack/node/loadtest_cpu.py, which runs the guard's command on the unit
tier's numpy backend (tests/numpy_backend.py): simulated GPUs, all-reduce ranks over gloo.
docs/architecture.md ("The node tier's images") lists every difference.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
GUARD_IMAGE = "ghcr.io/gpu-node-guard/gpu-node-guard:0.1.0"
LOADTEST_IMAGE = "ghcr.io/gpu-node-guard/gpu-node-guard-loadtest:0.1.0"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
VENV = "/opt/guard"
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
# The python image's PATH and locale; the Dockerfile's own ENV lines come after.
BASE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")
# Debian's python3 of each suite (the Dockerfile's FROM names the python image's version).
DEBIAN_PYTHON = {"bookworm": "3.11"}
# Part of the dependency layer's key: bump it when build_deps changes what the layer holds.
DEPS_RECIPE = 1
# The venv's python after /usr/local/bin: a Dockerfile check's `python` is the image's python.
_CHROOT_ENV = [
    "env",
    "-i",
    f"PATH=/usr/local/bin:{VENV}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
]
# The GPUs the load-test stand-in simulates: the node tier's GPU node advertises 8
# (tests/node/conftest.py, gpu_node), and the guard's Job expects what the node recorded.
CPU_GPUS = 8


class DockerfileError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class StandIn:
    """A base image no offline build can make, and what stands in for it: Debian packages of the
    suite, seen by the venv (--system-site-packages), and the edits its checks need."""

    suite: str
    python: str
    packages: tuple[str, ...]
    check_edits: tuple[tuple[str, str], ...]


# Dockerfile.loadtest's base: CUDA PyTorch and NCCL. Debian's python3-torch (bookworm: 1.13.1) is
# a CPU build linked with libgloo, and brings python3-numpy, which the numpy backend needs.
STAND_INS = {
    "pytorch/pytorch": StandIn(
        "bookworm",
        "3.11",
        ("python3-torch", "python3-numpy"),
        (("d.is_nccl_available() and ", ""),),
    )
}


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """What the Dockerfile's image holds and how it starts."""

    suite: str
    python: str
    packages: tuple[str, ...]
    checks: tuple[str, ...]
    env: tuple[str, ...] = ()
    user: str = ""
    workdir: str = ""
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    ignored: tuple[str, ...] = field(default=(), compare=False)
    pip: tuple[str, ...] = ()  # requirements installed beside the project
    stand_in: StandIn | None = None


def instructions(text: str) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) of each Dockerfile line, continuations joined, comments out."""
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        word, _, rest = logical.partition(" ")
        yield word.upper(), rest.strip()
        logical = ""
    if logical:
        raise DockerfileError("the last instruction ends with a continuation")


def _commands(run: str) -> list[str]:
    return [part.strip() for part in run.split("&&")]


def parse_dockerfile(text: str) -> ImageSpec:
    """The ImageSpec of the guard's Dockerfile or of Dockerfile.loadtest; any instruction not
    understood is an error, so the offline image cannot silently drift from it."""
    suite = python = user = workdir = ""
    args: dict[str, str] = {}
    stand_in: StandIn | None = None
    packages: list[str] = []
    pip: list[str] = []
    checks: list[str] = []
    env: list[str] = []
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    ignored: list[str] = []
    for word, rest in instructions(text):
        if word == "ARG":
            name, _, value = rest.partition("=")
            args[name] = value
        elif word == "FROM":
            ref = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m[1], m[0]), rest)
            suite, python, stand_in = _base(ref)
        elif word == "RUN":
            for command in _commands(rest):
                argv = shlex.split(command)
                if argv[:2] == ["apt-get", "install"]:
                    packages += [a for a in argv[2:] if not a.startswith("-")]
                elif (requirements := _pip_install(argv)) is not None:
                    pip += requirements
                elif argv[:1] == ["gpu-node-guard"] or argv[:2] == ["python", "-c"]:
                    checks.append(command)
                elif argv[:2] in (["apt-get", "update"], ["rm", "-rf"]):
                    ignored.append(command)
                else:
                    raise DockerfileError(f"RUN {command}: not reproduced by hack/node/image.py")
        elif word == "ENV":
            env += shlex.split(rest)
        elif word == "USER":
            user = rest
        elif word == "WORKDIR":
            workdir = rest  # the last one is the image's; the sources reach it as the wheel
        elif word == "ENTRYPOINT":
            entrypoint = tuple(json.loads(rest))
        elif word == "CMD":
            cmd = tuple(json.loads(rest))
        elif word == "COPY":
            ignored.append(f"COPY {rest}")  # the sources reach the image as the wheel
        else:
            raise DockerfileError(f"{word} {rest}: not reproduced by hack/node/image.py")
    if not suite or not checks:
        raise DockerfileError("no FROM the offline build knows, or no check after pip")
    if stand_in is not None:
        checks = _edited(checks, stand_in)
    return ImageSpec(
        suite,
        python,
        tuple(packages),
        tuple(checks),
        tuple(env),
        user,
        workdir,
        entrypoint,
        cmd,
        tuple(ignored),
        tuple(pip),
        stand_in,
    )


def _base(ref: str) -> tuple[str, str, StandIn | None]:
    """(Debian suite, python version, stand-in) of a FROM: the python image's slim Debian, or a
    base of STAND_INS."""
    found = re.fullmatch(r"python:(\d+\.\d+)-slim-(\w+)", ref)
    if found is not None:
        return found[2], found[1], None
    stand_in = STAND_INS.get(ref.partition(":")[0])
    if stand_in is None:
        raise DockerfileError(
            f"FROM {ref}: expected python:<version>-slim-<suite> or one of {sorted(STAND_INS)}"
        )
    return stand_in.suite, stand_in.python, stand_in


def _pip_install(argv: list[str]) -> list[str] | None:
    """The requirements beside the project of `[python -m] pip install [--no-cache-dir] . …`;
    None for any other command. Another option or no project is an error."""
    head = argv[2:] if argv[:3] == ["python", "-m", "pip"] else argv
    if head[:2] != ["pip", "install"]:
        return None
    rest = [a for a in head[2:] if a != "--no-cache-dir"]
    if rest[:1] != ["."] or any(a.startswith("-") for a in rest):
        raise DockerfileError(f"RUN {shlex.join(argv)}: expected the project and requirements")
    return rest[1:]


def _edited(checks: list[str], stand_in: StandIn) -> list[str]:
    """The checks with the stand-in's edits; an edit that no longer applies is an error (the
    Dockerfile changed: the stand-in must be looked at again)."""
    for old, new in stand_in.check_edits:
        if not any(old in check for check in checks):
            raise DockerfileError(f"no check holds {old!r}: update STAND_INS in image.py")
        checks = [check.replace(old, new) for check in checks]
    return checks


def debian_packages(spec: ImageSpec) -> tuple[str, ...]:
    """What mmdebstrap installs: Debian's python3 and venv, what stands in for the base image,
    then the Dockerfile's packages."""
    if DEBIAN_PYTHON.get(spec.suite) != spec.python:
        raise DockerfileError(
            f"Debian {spec.suite} has no python3 {spec.python} (it has "
            f"{DEBIAN_PYTHON.get(spec.suite, 'an unknown one')})"
        )
    stand_in = spec.stand_in.packages if spec.stand_in else ()
    return ("python3", "python3-venv", *stand_in, *spec.packages)


def project(repo: Path) -> dict[str, object]:
    return dict(tomllib.loads((repo / "pyproject.toml").read_text())["project"])


# ---------------------------------------------------------------- keys


def digest_of(paths: Iterable[Path], base: Path) -> str:
    """sha256 over each file's path (relative to `base`) and content, in a stable order."""
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.relative_to(base)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def wheel_sources(repo: Path) -> list[Path]:
    files = [repo / "pyproject.toml", repo / "README.md"]
    for top in ("guard", "jobs"):
        files += [
            p for p in (repo / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        ]
    return files


@dataclass(frozen=True, slots=True)
class Target:
    """One image the node tier builds: its Dockerfile, the name it is imported as, and what its
    thin layer adds beside the wheel: (file of the repository, path in the image, mode)."""

    name: str  # of its files in the cache: <name>.oci.tar, <name>.key, <name>-deps-<key>.tar
    dockerfile: str
    reference: str
    files: tuple[tuple[str, str, int], ...] = ()
    env: tuple[str, ...] = ()


GUARD = Target("guard", "Dockerfile", GUARD_IMAGE)
# The CPU stand-in: `gpu-node-guard` is the wrapper that hands the numpy backend to the command.
LOADTEST = Target(
    "loadtest",
    "Dockerfile.loadtest",
    LOADTEST_IMAGE,
    (
        ("tests/numpy_backend.py", f"{VENV}/lib/python3.11/site-packages/numpy_backend.py", 0o644),
        ("hack/node/loadtest_cpu.py", "/usr/local/bin/gpu-node-guard", 0o755),
    ),
    (f"GPU_NODE_GUARD_CPU_GPUS={CPU_GPUS}",),
)
TARGETS = {t.name: t for t in (GUARD, LOADTEST)}


def deps_key(repo: Path, target: Target = GUARD) -> str:
    return digest_of([repo / "pyproject.toml", repo / target.dockerfile], repo) + f"r{DEPS_RECIPE}"


def thin_key(repo: Path, target: Target = GUARD) -> str:
    return digest_of([*wheel_sources(repo), *(repo / f for f, _, _ in target.files)], repo)


# ---------------------------------------------------------------- OCI archives


def sha256_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest(), path.stat().st_size


def oci_config(
    spec: ImageSpec | None, entrypoint: tuple[str, ...] = (), env: tuple[str, ...] = ()
) -> dict[str, object]:
    if spec is None:
        return {"Env": list(BASE_ENV[:1]), "Entrypoint": list(entrypoint)}
    config: dict[str, object] = {"Env": [*BASE_ENV, *spec.env, *env]}
    for key, value in (
        ("User", spec.user),
        ("WorkingDir", spec.workdir),
        ("Entrypoint", list(spec.entrypoint)),
        ("Cmd", list(spec.cmd)),
    ):
        if value:
            config[key] = value
    return config


def pack(name: str, layers: list[Path], config: dict[str, object], out: Path) -> None:
    """An OCI image archive of uncompressed `layers` (rootfs.diff_ids are their digests)."""
    with tempfile.TemporaryDirectory(prefix="oci-pack-", dir=out.parent) as work:
        blobs = Path(work, "blobs", "sha256")
        blobs.mkdir(parents=True)

        def put(data: bytes) -> dict[str, object]:
            digest = hashlib.sha256(data).hexdigest()
            (blobs / digest).write_bytes(data)
            return {"digest": f"sha256:{digest}", "size": len(data)}

        described = []
        for layer in layers:
            digest, size = sha256_file(layer)
            if layer.stat().st_dev == blobs.stat().st_dev:
                os.link(layer, blobs / digest[7:])  # hundreds of MB: no copy where it can link
            else:
                shutil.copyfile(layer, blobs / digest[7:])
            described.append(
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": digest,
                    "size": size,
                }
            )
        image_config = {
            "architecture": "amd64",
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in described]},
            "history": [{"created_by": "hack/node/image.py"} for _ in layers],
        }
        cfg = put(json.dumps(image_config, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
            "layers": described,
        }
        man = put(json.dumps(manifest, sort_keys=True).encode())
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    **man,
                    "platform": {"architecture": "amd64", "os": "linux"},
                }
            ],
        }
        Path(work, "index.json").write_text(json.dumps(_named(index, name)))
        Path(work, "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
        tmp = out.with_suffix(".tmp")
        with tarfile.open(tmp, "w") as tar:
            for entry in ("oci-layout", "index.json", "blobs"):
                tar.add(Path(work, entry), arcname=entry)
        tmp.replace(out)


def _named(index: dict[str, object], name: str) -> dict[str, object]:
    """`index` (index.json of `pack`) with its one manifest named `name`."""
    (manifest,) = index["manifests"]  # type: ignore[misc]
    notes = {
        "io.containerd.image.name": name,
        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
    }
    return {**index, "manifests": [{**manifest, "annotations": notes}]}


def retag(archive: Path, name: str, out: Path) -> None:
    """A copy of `archive` whose image is named `name`: the same blobs (layers, config,
    manifest), only index.json changed."""
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(archive) as src, tarfile.open(tmp, "w") as dst:
        for member in src:
            if member.name == "index.json":
                stored = src.extractfile(member)
                assert stored is not None
                data = json.dumps(_named(json.load(stored), name)).encode()
                member.size = len(data)
                dst.addfile(member, io.BytesIO(data))
            else:
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    tmp.replace(out)


def archive_name(archive: Path) -> str:
    """The image name an archive of `pack` carries."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ValueError(f"{archive}: no index.json")
        index = json.load(member)
    return str(index["manifests"][0]["annotations"]["io.containerd.image.name"])


def layer_of_files(out: Path, files: list[tuple[Path, str, int]]) -> None:
    """A layer of single files: (source, path in the image, mode), parents made 0755."""
    made: set[str] = set()
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for source, dest, mode in files:
            parts = dest.strip("/").split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in made:
                    made.add(parent)
                    info = tarfile.TarInfo(parent)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            info = tar.gettarinfo(str(source), arcname="/".join(parts))
            info.mode, info.uid, info.gid, info.uname, info.gname, info.mtime = (
                mode,
                0,
                0,
                "",
                "",
                0,
            )
            with source.open("rb") as f:
                tar.addfile(info, f)


# ---------------------------------------------------------------- the guard's image


def say(message: str) -> None:
    print(f"node-images: {message}", file=sys.stderr, flush=True)


def run(argv: list[str], **kw: object) -> None:
    subprocess.run(argv, check=True, **kw)  # type: ignore[call-overload]


def pip_wheel(python: str, *args: str) -> None:
    """`pip wheel`; setuptools' pages of warnings shown only when it fails."""
    done = subprocess.run(
        [python, "-m", "pip", "wheel", "--quiet", *args], capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise subprocess.CalledProcessError(done.returncode, done.args)


def build_deps(repo: Path, spec: ImageSpec, python: str, out: Path) -> None:
    """Layer 1: Debian minbase with the Dockerfile's packages and a venv of the dependencies (and
    of the Dockerfile's other requirements); a stand-in's Debian packages are seen by the venv,
    which still holds every dependency itself, as the guard's does."""
    deps = [str(d) for d in project(repo)["dependencies"]]  # type: ignore[union-attr]
    deps += spec.pip
    venv, ignore = ["python3", "-m", "venv", VENV], []
    if spec.stand_in is not None:
        venv, ignore = [*venv[:3], "--system-site-packages", VENV], ["--ignore-installed"]
    partial = out.with_name(out.stem + ".partial.tar")
    with tempfile.TemporaryDirectory(prefix="node-deps-") as wheels:
        pip_wheel(python, "--wheel-dir", wheels, *deps)
        venv_pip = [*_CHROOT_ENV, f"{VENV}/bin/pip"]
        install = [
            *venv_pip,
            "install",
            "--quiet",
            "--no-index",
            "--no-cache-dir",
            "--find-links",
            "/tmp/wheels",
            *ignore,
            *deps,
        ]
        hooks = [
            'mkdir -p "$1/tmp/wheels"',
            f"sync-in {wheels} /tmp/wheels",
            f'chroot "$1" {shlex.join([*_CHROOT_ENV, *venv])}',
            f'chroot "$1" {shlex.join(install)}',
            'rm -rf "$1/tmp/wheels"',
        ]
        if spec.workdir:
            hooks.append(f'mkdir -p "$1{spec.workdir}"')
        argv = [
            "mmdebstrap",
            "--quiet",
            "--variant=minbase",
            f"--include={','.join(debian_packages(spec))}",
            *(f"--customize-hook={hook}" for hook in hooks),
            spec.suite,
            str(partial),  # mmdebstrap picks its output format by the name's ending
            MIRROR,
        ]
        run(argv, env={**os.environ, "SOURCE_DATE_EPOCH": "0"})
    partial.replace(out)


def _files(root: Path, tops: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    seen = {}
    for top in tops:
        for dirpath, dirs, files in os.walk(root / top.lstrip("/")):
            for name in files + dirs:
                path = Path(dirpath, name)
                st = path.lstat()
                seen[str(path.relative_to(root))] = (st.st_mtime_ns, st.st_size)
    return seen


def build_thin(
    repo: Path, target: Target, spec: ImageSpec, python: str, deps: Path, out: Path
) -> None:
    """Layer 2: the project's wheel installed into the venv of `deps` (in a chroot of it), the
    console scripts on PATH as the python image has them, the target's own files; then the
    Dockerfile's checks."""
    scripts = list(project(repo).get("scripts", {}))  # type: ignore[call-overload]
    with tempfile.TemporaryDirectory(prefix=f"node-{target.name}-") as work:
        root, wheels = Path(work, "root"), Path(work, "wheels")
        root.mkdir()
        run(["tar", "-xf", str(deps), "-C", str(root)])
        pip_wheel(python, "--no-deps", "-w", str(wheels), str(repo))
        (wheel,) = wheels.glob("*.whl")
        tops = (VENV, "/usr/local/bin")
        before = _files(root, tops)
        shutil.copy(wheel, root / "tmp")
        pip = [*_CHROOT_ENV, f"{VENV}/bin/pip", "install", "--quiet", "--no-index", "--no-deps"]
        run(["chroot", str(root), *pip, f"/tmp/{wheel.name}"])
        (root / "tmp" / wheel.name).unlink()
        for script in scripts:
            (root / "usr/local/bin" / script).symlink_to(f"{VENV}/bin/{script}")
        for source, dest, mode in target.files:
            placed = root / dest.lstrip("/")
            placed.unlink(missing_ok=True)
            shutil.copyfile(repo / source, placed)
            placed.chmod(mode)
        for check in spec.checks:
            run(["chroot", str(root), *_CHROOT_ENV, "sh", "-c", check])
        after = _files(root, tops)
        changed = sorted(p for p, stamp in after.items() if before.get(p) != stamp)
        tmp = out.with_suffix(".tmp")
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for rel in changed:
                tar.add(root / rel, arcname=rel, recursive=False)
        tmp.replace(out)


def image_key(repo: Path, target: Target = GUARD) -> str:
    """What <target>.key holds once <target>.oci.tar was built from these sources."""
    return f"{target.name}-deps-{deps_key(repo, target)}+{thin_key(repo, target)}"


def is_current(repo: Path, cache: Path, target: Target = GUARD) -> bool:
    stamp = cache / f"{target.name}.key"
    return (
        (cache / f"{target.name}.oci.tar").exists()
        and stamp.exists()
        and stamp.read_text() == image_key(repo, target)
    )


def build_image(repo: Path, cache: Path, python: str, target: Target = GUARD) -> Path:
    spec = parse_dockerfile((repo / target.dockerfile).read_text())
    cache.mkdir(parents=True, exist_ok=True)
    deps = cache / f"{target.name}-deps-{deps_key(repo, target)}.tar"
    if not deps.exists():
        started = time.monotonic()
        for stale in cache.glob(f"{target.name}-deps-*.tar"):
            stale.unlink()
        say(f"building the dependency layer (mmdebstrap {spec.suite}; minutes) -> {deps.name}")
        build_deps(repo, spec, python, deps)
        say(f"dependency layer built in {time.monotonic() - started:.0f} s")
    key = image_key(repo, target)
    archive, stamp = cache / f"{target.name}.oci.tar", cache / f"{target.name}.key"
    if is_current(repo, cache, target):
        say(f"cached: {archive}")
        return archive
    started = time.monotonic()
    thin = cache / f"{target.name}-layer.tar"
    build_thin(repo, target, spec, python, deps, thin)
    pack(target.reference, [deps, thin], oci_config(spec, env=target.env), archive)
    thin.unlink()
    stamp.write_text(key)
    say(f"{target.name} image built in {time.monotonic() - started:.0f} s: {archive}")
    return archive


def pause_image(binary: Path, cache: Path) -> Path:
    archive = cache / "pause.oci.tar"
    layer = cache / "pause-layer.tar"
    layer_of_files(layer, [(binary, "pause", 0o755)])
    pack(PAUSE_IMAGE, [layer], oci_config(None, ("/pause",)), archive)
    layer.unlink()
    return archive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    d = sub.add_parser("dockerfile")
    d.add_argument("path", nargs="?", default=str(HERE.parents[1] / "Dockerfile"))
    for name in TARGETS:
        g = sub.add_parser(name)
        g.add_argument("--repo", required=True, type=Path)
        g.add_argument("--out", required=True, type=Path)
        g.add_argument("--python", default=sys.executable)
    c = sub.add_parser("current")
    c.add_argument("--repo", required=True, type=Path)
    c.add_argument("--out", required=True, type=Path)
    r = sub.add_parser("retag")
    r.add_argument("archive", type=Path)
    r.add_argument("--name", required=True)
    r.add_argument("--out", required=True, type=Path)
    p = sub.add_parser("pause")
    p.add_argument("--binary", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    try:
        if args.what == "dockerfile":
            spec = parse_dockerfile(Path(args.path).read_text())
            print(json.dumps(_asdict(spec), indent=1))
        elif args.what == "current":
            current = all(is_current(args.repo.resolve(), args.out, t) for t in TARGETS.values())
            raise SystemExit(0 if current else 1)
        elif args.what in TARGETS:
            build_image(args.repo.resolve(), args.out, args.python, TARGETS[args.what])
        elif args.what == "retag":
            retag(args.archive, args.name, args.out)
            say(f"{args.out}: {args.name}")
        else:
            pause_image(args.binary, args.out)
    except (DockerfileError, subprocess.CalledProcessError, OSError, tarfile.TarError) as exc:
        raise SystemExit(f"node-images: {exc}") from None


def _asdict(spec: ImageSpec) -> dict[str, object]:
    fields = {name: getattr(spec, name) for name in spec.__slots__}
    stand_in = spec.stand_in
    if stand_in is not None:
        fields["stand_in"] = {name: getattr(stand_in, name) for name in stand_in.__slots__}
    return fields


if __name__ == "__main__":
    main()
