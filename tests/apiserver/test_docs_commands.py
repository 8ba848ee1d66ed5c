"""Every shell command of README.md and docs/*.md runs as written.

The ```sh blocks are read in document order, one command per line (a trailing `\\` joins lines,
comment lines drop). Each is run with bash (`-o pipefail`: a `| grep` that finds nothing fails)
against a kube-apiserver v1.34.4 of this module's own, with the real kubectl v1.34.4 and the
real kustomize on PATH, `gpu-node-guard` and the `kubectl gpu-guard` plugin from this checkout,
after the example overlay is deployed (docs/deploy.md) and one guard cycle cordoned a faulted
node (its annotations, Event, ledger line and evidence Job), with the load-test and conformance
Jobs the guard renders. The doc's placeholders (`N`, `<node>`, `gng-lt-N-…`, `GPU-…`, …) take
the values of that cluster (`make_site`); a placeholder left over fails.

A command this tier cannot run is named in `NOT_RUN` with the reason; `kubectl` commands among
them are still parsed by kubectl (against no server), so an unknown flag fails here too.
Commands that change the cluster (delete a Job, uncordon) run too: the Jobs and the kube-proxy
Pod are made again before each command that needs them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.example.promserver import LocalPrometheus
from tests.apiserver.deploy import EXAMPLE, REPO, Kubectl, install_crds, kustomize_or_skip
from tests.apiserver.guard_run import (
    ISOLATE_AT,
    KEYS,
    faulted,
    finish,
    make_gpu_node,
    mine,
    run_guard,
    scenario_prometheus,
)
from tests.apiserver.kube import (
    GUARD_NS,
    GUARD_USER,
    JOBS_NS,
    ControlPlane,
    control_plane,
    create,
    required_assets,
)

pytestmark = pytest.mark.apiserver

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMENT = re.compile(r"\s+#\s.*$")  # a comment after a command
BLOCK = re.compile(r"^([ \t]*)```sh\n(.*?)^[ \t]*```", re.M | re.S)  # in a list item too
NODE = "gpu-node-b"  # the node docs/evidence.md names
GUARD = "registry.example.internal/mirror/gpu-node-guard:0.1.0"  # the example overlay's images
LOADTEST = "registry.example.internal/mirror/gpu-node-guard-loadtest:0.1.0"
PARSE_ERRORS = re.compile(
    r"unknown flag|unknown shorthand flag|unknown command|flag needs an argument|invalid argument"
)

# (pattern matched against the command, why this tier does not run it)
NOT_RUN: tuple[tuple[str, str], ...] = (
    (r"^make (test|dry-run)\b", "the whole suite and the local replay: CI runs both"),
    (r"^make image\b", "builds the images: needs docker, podman or buildah and pushes nowhere"),
    (r"^python -m pip ", "builds and installs the wheel: hack/wheel-check.sh does, in CI"),
    (
        r"^(journalctl|lspci|nvidia-smi|modprobe|systemctl) |^grep -H \. /sys/",
        "on the GPU node, as root",
    ),
    (r"^gpu-node-guard conformance ", "on the GPU node (reads its host)"),
    (
        r"^gpu-node-guard report --cluster-snapshot tests/",
        "a fixture of the repository's tests: tests/unit/test_figures.py reads the same episodes",
    ),
    (r"^gpu-node-guard evidence classify ", "reads the files taken on the GPU node (above it)"),
    (
        r"^gpu-node-guard (run|status) .*--prometheus-url (?!.*--at )",
        "reads the site's live series now; this tier's Prometheus holds a replay in the past "
        "(test_status_apiserver.py and the prometheus tier run both with --at)",
    ),
    (
        r"^kubectl delete -k ",
        "the uninstall: its namespaces never finish terminating without kube-controller-manager "
        "(test_deploy.py's test_uninstall_removes_the_policies_last runs both, --wait=false)",
    ),
    (r"\blogs\b", "Pod logs come from a node's kubelet; this tier has none (parsed only)"),
    (
        r"\bdevicetaintrules\b",
        "DeviceTaintRules are resource.k8s.io/v1 from Kubernetes 1.37; this tier's API server is "
        "v1.34.4 (tests/dra runs the guard's rules on a v1.37 control plane)",
    ),
    (
        r"\bresourceclaim\b",
        "a device load test's ResourceClaim exists only on a DRA node; this tier's guard cordons "
        "device-plugin nodes (tests/dra runs the device load test and its claim on v1.37)",
    ),
)


@dataclass(frozen=True, slots=True)
class Command:
    doc: str
    block: int  # the line of its block's fence
    line: int
    text: str


def commands() -> list[Command]:
    """Every command of every ```sh block, in document order."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for block in BLOCK.finditer(text):
            first = text[: block.start()].count("\n") + 2
            joined, start = "", first
            indent = len(block.group(1))
            for number, line in enumerate(block.group(2).splitlines(), first):
                line = line[indent:]
                if not joined:
                    start = number
                joined += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
                if line.endswith("\\"):
                    continue
                if joined.strip() and not joined.lstrip().startswith("#"):
                    found.append(Command(path.name, first - 1, start, joined.strip()))
                joined = ""
    return found


def not_run(command: str) -> str | None:
    return next((why for pattern, why in NOT_RUN if re.search(pattern, command)), None)


def test_the_docs_have_commands_and_every_skip_says_why() -> None:
    found = commands()
    assert len(found) > 90, len(found)
    for pattern, why in NOT_RUN:
        assert why and any(re.search(pattern, c.text) for c in found), f"unused: {pattern}"


# ── The cluster the commands run against ─────────────────────────────────────────────────────


@dataclass
class Site:
    plane: ControlPlane
    kubectl: Kubectl
    env: dict[str, str]
    checkout: Path  # a copy of manifests/ and policies/: `cd manifests/overlays/<site>` etc.
    values: dict[str, str]
    jobs: list[dict[str, Any]]
    pod: dict[str, Any]

    def ensure(self) -> None:
        """The Jobs and the kube-proxy Pod, made again where a command deleted them."""
        with self.plane.impersonating(GUARD_USER) as guard:
            for job in self.jobs:
                try:
                    create(guard, job)
                except ApiException as exc:
                    assert exc.status == 409, exc.body  # still there
        with self.plane.admin_client() as admin:
            try:
                create(admin, self.pod)
            except ApiException as exc:
                assert exc.status == 409, exc.body


def render(kind: str, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "guard",
            "render",
            kind,
            "--node",
            NODE,
        ],
        capture_output=True,
        text=True,
        env={**env, "GUARD_IMAGE": GUARD, "GUARD_LOADTEST_IMAGE": LOADTEST},
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    job: dict[str, Any] = yaml.safe_load(done.stdout)
    return job


def bin_dir(path: Path, kubectl: Path) -> Path:
    """kubectl, kustomize, gpu-node-guard and the kubectl plugin, as an operator's PATH has."""
    path.mkdir()
    (path / "kubectl").symlink_to(kubectl)
    (path / "kustomize").symlink_to(kustomize_or_skip())
    for name, call in (
        ("gpu-node-guard", "from guard.cli import main; main()"),
        ("kubectl-gpu_guard", "from guard.status.cli import plugin; plugin()"),
    ):
        script = path / name
        script.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{call}" "$@"\n')
        script.chmod(0o755)
    return path


def kubeconfig_with_context(source: Path, home: Path, context: str) -> Path:
    """The admin kubeconfig at ~/.kube/config, its context also named as the docs call it."""
    config = yaml.safe_load(source.read_text())
    (ctx,) = config["contexts"]
    config["contexts"].append({"name": context, "context": ctx["context"]})
    path = home / ".kube" / "config"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, kubectl_binary: Path) -> Iterator[Site]:
    assets = required_assets()
    tmp = tmp_path_factory.mktemp("docs")
    checkout = tmp / "checkout"
    for part in ("manifests", "policies"):
        shutil.copytree(REPO / part, checkout / part)
    (tmp / "plane").mkdir()
    with control_plane(assets, tmp / "plane") as plane, scenario_prometheus(faulted(NODE)) as prom:
        kubectl = Kubectl(kubectl_binary, plane.kubeconfig)
        install_crds(kubectl)
        kubectl.upgrade(EXAMPLE)  # docs/deploy.md, Install step 5
        yield make_site(plane, kubectl, prom, tmp, checkout, kubectl_binary)


def make_site(
    plane: ControlPlane,
    kubectl: Kubectl,
    prom: LocalPrometheus,
    tmp: Path,
    checkout: Path,
    kubectl_binary: Path,
) -> Site:
    with plane.admin_client() as admin:
        make_gpu_node(client.CoreV1Api(admin), NODE, boot="boot-1")
    guard_config = plane.service_account_kubeconfig(GUARD_NS, "gpu-node-guard")
    images = {"GUARD_IMAGE": GUARD, "GUARD_LOADTEST_IMAGE": LOADTEST}
    run = run_guard(prom, guard_config, ISOLATE_AT, env=images)
    assert mine(run.plan, NODE)[0] == ("cordon", "xid-79"), run.plan
    home = tmp / "home"
    config = kubeconfig_with_context(plane.kubeconfig, home, "prod")
    env = {
        "PATH": f"{bin_dir(tmp / 'bin', kubectl_binary)}:/usr/bin:/bin",
        "HOME": str(home),
        "KUBECONFIG": str(config),
        "PYTHONPATH": str(REPO),
        "USER": "oncall",
    }
    jobs = [render(kind, env) for kind in ("loadtest", "conformance", "fence")]
    with plane.admin_client() as admin:
        (evidence,) = client.BatchV1Api(admin).list_namespaced_job(JOBS_NS).items
        gpu = client.CoreV1Api(admin).read_node(NODE).metadata.annotations[KEYS.gpu]
    pci, uuid = gpu.split()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"kube-proxy-{NODE}", "namespace": "kube-system"},
        # No kubelet here confirms a graceful delete: a grace period of 0 deletes at once.
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "kube-proxy", "image": "kube-proxy"}],
        },
    }
    values = {
        "gng-lt-N-…": jobs[0]["metadata"]["name"],
        "gng-cf-N-…": jobs[1]["metadata"]["name"],
        "gng-fn-N-…": jobs[2]["metadata"]["name"],
        "<job_name>": evidence.metadata.name,
        "<name>": evidence.metadata.name,
        "<your site>": "example",
        "<site>": "example",
        "GPU-…": uuid,
        "0000:…": pci,
        "<ticket>": "RMA-1",
        "<namespace>": "kube-system",
        "<pod>": pod["metadata"]["name"],
        "<node>": NODE,
        "DIR": "manifests/overlays/example",
        "sha256:…": "sha256:" + "ab" * 32,
    }
    for name in ("prometheus.token", "prometheus-ca.crt"):  # the site's, for its Secret
        (checkout / name).write_text("not a real credential\n")
    made = Site(plane, kubectl, env, checkout, values, jobs, pod)
    made.ensure()
    with plane.admin_client() as admin:  # the conformance Job failed: its Pod says how
        stored = client.BatchV1Api(admin).read_namespaced_job(
            jobs[1]["metadata"]["name"], JOBS_NS, _preload_content=False
        )
        finish(plane, admin, json.loads(stored.data), "dns: failed", ok=False)
    return made


def as_written(text: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return re.sub(r"(?<![\w.])N(?![\w])", NODE, text)  # the runbook's N, node/N, =N, proxy-N


def parses(command: str, site: Site, tmp: Path) -> str:
    """What kubectl says about the command's flags, against no server at all."""
    nowhere = tmp / "nowhere"
    nowhere.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            }
        )
    )
    env = {**site.env, "KUBECONFIG": str(nowhere)}
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        timeout=60,
        check=False,
    )
    return "\n".join(line for line in done.stderr.splitlines() if PARSE_ERRORS.search(line))


def test_every_command_runs_as_written(site: Site, tmp_path: Path) -> None:
    """Block by block (a `cd` holds for the rest of its block), each block one bash script with
    -e and pipefail; the first failing command of a block is reported with its line."""
    failed, ran, skipped = [], 0, 0
    blocks: dict[tuple[str, int], list[Command]] = {}
    for command in commands():
        blocks.setdefault((command.doc, command.block), []).append(command)
    for block in blocks.values():
        script = ["set -eo pipefail", "trap 'echo \"failed: $BASH_COMMAND\" >&2' ERR"]
        for command in block:
            text = as_written(command.text, site.values)
            where = f"{command.doc}:{command.line}: {command.text}"
            if not_run(text) is not None:
                skipped += 1
                if text.startswith("kubectl") and (problem := parses(text, site, tmp_path)):
                    failed.append(f"{where}\n  {problem}")
            elif "…" in (bare := COMMENT.sub("", text)) or re.search(r"<(?!none>|\()", bare):
                failed.append(f"{where}\n  a placeholder with no value: {text}")
            else:
                ran += 1
                script.append(text)
        if len(script) == 2:
            continue
        site.ensure()
        # A block that edits files in place (`cd …; kustomize edit …`) gets a copy of its own:
        # the next blocks apply the site as deployed (its Jobs carry the deployed images).
        cwd = site.checkout
        if block[0].text.startswith("cd "):
            cwd = tmp_path / f"edit-{block[0].doc}-{block[0].line}"
            shutil.copytree(site.checkout, cwd)
        try:
            done = subprocess.run(
                ["bash", "-c", "\n".join(script)],
                capture_output=True,
                text=True,
                env=site.env,
                cwd=cwd,
                timeout=120,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            failed.append(f"{block[0].doc}:{block[0].line} (block): no end in 120 s: {exc.cmd}")
            continue
        if done.returncode != 0:
            first = block[0]
            failed.append(
                f"{first.doc}:{first.line} (block): exit {done.returncode}: "
                f"{done.stderr.strip()[-800:]}"
            )
    print(f"docs commands: {ran} run, {skipped} not run (NOT_RUN), {len(failed)} failed")
    assert not failed, "\n".join(failed)
