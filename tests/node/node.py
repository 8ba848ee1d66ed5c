"""One real node: containerd + kubelet v1.34.4 inside the node's own namespace (tests/node/host.py),
registered with a control plane of tests/apiserver/kube.py that runs the Job, DaemonSet,
ServiceAccount and garbage-collector controllers and kube-scheduler. Images are never pulled:
hack/node/build.sh builds them and each run imports them (`ctr -n k8s.io images import`)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from guard.example.promserver import free_port
from tests.apiserver.kube import ControlPlane, control_plane, process
from tests.node import host, pki

CONTROLLERS = (
    "job-controller,serviceaccount-controller,serviceaccount-token-controller,"
    "daemonset-controller,garbage-collector-controller"
)
SOCKET = host.RUN_DIR / "containerd.sock"
READY_TIMEOUT_S = 120.0
# Imported beside the first tests rather than before them: the load-test stand-in (1.5 GB) is
# run only by the incident's load test, which waits for it (`wait_for_images`).
BESIDE_THE_TESTS = ("loadtest.oci.tar",)
IMPORT_TIMEOUT_S = 600.0
# What the node offers Pods, whatever the machine's cores: the load test's 2 CPUs do not fit
# (the kubelet refuses it, OutOfcpu), the other Jobs and the agent (50m and 5m) do.
ALLOCATABLE_CPU_MILLIS = 1500
# What it offers once it has room for the load test (`restart_kubelet`): its request, 2 CPUs.
ROOM_CPU_MILLIS = 2000


def system_reserved_cpu(cores: int, millis: int = ALLOCATABLE_CPU_MILLIS) -> str:
    """The kubelet's systemReserved CPU that leaves `millis` (or all of a smaller machine) to
    Pods.

    >>> system_reserved_cpu(2), system_reserved_cpu(64), system_reserved_cpu(1)
    ('500m', '62500m', '0m')
    >>> system_reserved_cpu(2, ROOM_CPU_MILLIS)
    '0m'
    """
    return f"{max(0, cores * 1000 - millis)}m"


def cpu_millis(quantity: str) -> int:
    """A CPU quantity as the API writes it, in millicores.

    >>> cpu_millis("2"), cpu_millis("1500m")
    (2000, 1500)
    """
    return int(quantity[:-1]) if quantity.endswith("m") else int(quantity) * 1000


CONTAINERD_TOML = """\
version = 2
root = "{root}"
state = "/run/containerd"
[grpc]
  address = "{socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  # no CAP_SYS_RESOURCE on these machines: oom_score_adj may only go up
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
"""

CNI_CONFLIST = {
    "cniVersion": "1.0.0",
    "name": "gpu-node-guard-node",
    "plugins": [
        {
            "type": "bridge",
            "bridge": host.BRIDGE,
            "isGateway": True,
            "ipMasq": False,
            "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.244.0.0/24"}]],
                "routes": [{"dst": "0.0.0.0/0"}],
            },
        },
        {"type": "loopback"},
    ],
}


@dataclass(frozen=True, slots=True)
class Binaries:
    assets: Path  # etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
    images: Path  # pause (the binary) and the *.oci.tar of hack/node/build.sh


@dataclass(slots=True)
class Node:
    """A Ready node and its control plane; `timings` in seconds, for docs/benchmarks.md."""

    plane: ControlPlane
    name: str
    pid: int  # PID 1 of the node's namespace, as the machine numbers it
    workdir: Path
    timings: dict[str, float] = field(default_factory=dict)
    kubelet: host.InNode | None = None
    kubelet_argv: list[str] = field(default_factory=list)
    importing: list[subprocess.Popen[str]] = field(default_factory=list)


def _ctr(*args: str) -> list[str]:
    return ["ctr", "-a", str(SOCKET), "-n", "k8s.io", *args]


def ctr(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_ctr(*args), check=check, capture_output=True, text=True, timeout=300)


def wait_for_images(node: Node) -> None:
    """Returns once the images imported beside the tests are in containerd (BESIDE_THE_TESTS)."""
    began = time.monotonic()
    while node.importing:
        proc = node.importing.pop()
        out, _ = proc.communicate(timeout=IMPORT_TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, proc.args))}: {out.strip()}")
    node.timings.setdefault("the test waited for the images imported beside the tests", 0.0)
    node.timings["the test waited for the images imported beside the tests"] += (
        time.monotonic() - began
    )


def _stop_imports(node: Node) -> None:
    for proc in node.importing:
        proc.kill()
        proc.wait()


@contextmanager
def containerd(node_pid: int, work: Path) -> Iterator[host.InNode]:
    (work / "host" / "etc-cni-net.d" / "10-node.conflist").write_text(json.dumps(CNI_CONFLIST))
    host.RUN_DIR.mkdir(parents=True, exist_ok=True)
    config = work / "containerd.toml"
    config.write_text(CONTAINERD_TOML.format(root=work / "containerd", socket=SOCKET))
    started = time.monotonic()
    proc = host.InNode(node_pid, ["containerd", "--config", str(config)], work / "containerd.log")
    try:
        while ctr("version", check=False).returncode != 0:
            if not proc.alive() or time.monotonic() - started > 30:
                raise RuntimeError(f"containerd did not start; see {proc.log}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.stop()


def kubelet_config(work: Path, port: int, healthz_port: int) -> Path:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": host.NODE_IP,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(work / "pki" / f"{pki.CA}.crt")},
        },
        # its one client is the API server (logs, exec), authenticated by x509
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{SOCKET}",
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "failCgroupV1": False,
        # no CAP_SYS_RESOURCE: oom_score_adj may not go below 0, nofile not above 20000
        "oomScoreAdj": 0,
        "maxOpenFiles": 20000,
        "resolvConf": "/etc/resolv.conf",
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "registerNode": True,
        "systemReserved": {"cpu": system_reserved_cpu(os.cpu_count() or 1)},
        # never pulled, so never collected
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "podPidsLimit": -1,
        # no KUBE-FIREWALL and canary chains in the machine's iptables (they serve kube-proxy)
        "makeIPTablesUtilChains": False,
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "nodeStatusReportFrequency": "10s",
        "containerLogMaxSize": "10Mi",
        "staticPodPath": "",
    }
    path = work / "kubelet-config.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def kubelet_kubeconfig(work: Path, plane: ControlPlane) -> Path:
    certs = work / "pki"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "node",
                "cluster": {"server": plane.url, "certificate-authority": str(plane.ca_file)},
            }
        ],
        "users": [
            {
                "name": "kubelet",
                "user": {
                    "client-certificate": str(certs / f"{pki.KUBELET_CLIENT}.crt"),
                    "client-key": str(certs / f"{pki.KUBELET_CLIENT}.key"),
                },
            }
        ],
        "contexts": [{"name": "node", "context": {"cluster": "node", "user": "kubelet"}}],
        "current-context": "node",
    }
    path = work / "kubeconfig-kubelet"
    path.write_text(json.dumps(doc))
    return path


def wait_ready(plane: ControlPlane, name: str, kubelet: host.InNode) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "not registered"
    with plane.admin_client() as api:
        core = client.CoreV1Api(api)
        while True:
            if not kubelet.alive():
                raise RuntimeError(f"the kubelet exited; see {kubelet.log}")
            try:
                conditions = core.read_node(name).status.conditions or []
            except ApiException as exc:
                if exc.status != 404:
                    raise
                conditions = []
            ready = [c for c in conditions if c.type == "Ready"]
            if ready and ready[0].status == "True":
                return
            if ready:
                last = f"{ready[0].reason}: {ready[0].message}"
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {name} not Ready after {READY_TIMEOUT_S:.0f} s: {last}")
            time.sleep(0.5)


def _log(work: Path) -> Path:
    """kubelet.log, then kubelet-2.log, … for each restart."""
    n = len(list(work.glob("kubelet*.log")))
    return work / ("kubelet.log" if n == 0 else f"kubelet-{n + 1}.log")


def boot_id(plane: ControlPlane, name: str) -> str:
    """The boot ID the kubelet reports in the Node's status."""
    with plane.admin_client() as api:
        return str(client.CoreV1Api(api).read_node(name).status.node_info.boot_id)


def pod_cpu(plane: ControlPlane, name: str) -> int:
    """The CPU the Node offers Pods (its allocatable), in millicores."""
    with plane.admin_client() as api:
        return cpu_millis(client.CoreV1Api(api).read_node(name).status.allocatable["cpu"])


def reboot(node: Node, new_boot_id: str, millis: int = ALLOCATABLE_CPU_MILLIS) -> None:
    """What a power cycle shows the control plane: the kubelet stops, and starts again on a
    machine with a new boot ID (offering Pods `millis` of CPU). The kubelet reads
    /proc/sys/kernel/random/boot_id (cAdvisor's machine info); inside the node's mount namespace
    (its own /proc) a file bind-mounted over it says `new_boot_id`, and leaves with the
    namespace. Returns once the Node reports it."""
    answer = node.workdir / "boot_id"
    answer.write_text(new_boot_id + "\n")
    over_boot_id = ["mount", "--bind", str(answer), "/proc/sys/kernel/random/boot_id"]

    def new_boot() -> None:
        subprocess.run(
            ["nsenter", "-t", str(node.pid), "-m", "--", *over_boot_id],
            check=True,
            capture_output=True,
            timeout=30,
        )

    restart_kubelet(node, millis, new_boot)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while boot_id(node.plane, node.name) != new_boot_id:
        if time.monotonic() > deadline:
            raise RuntimeError(f"node {node.name} reports no boot {new_boot_id}")
        time.sleep(0.2)
    wait_ready(node.plane, node.name, node.kubelet)  # type: ignore[arg-type]


def restart_kubelet(node: Node, millis: int, meanwhile: Callable[[], None] = lambda: None) -> None:
    """The kubelet stopped (`meanwhile` done while it is down) and started again offering Pods
    `millis` of CPU (or all of a smaller machine); returns once the Node says so and is Ready."""
    assert node.kubelet is not None, "the node has no kubelet"
    node.kubelet.stop()
    node.kubelet = None
    config = node.workdir / "kubelet-config.json"
    settings = json.loads(config.read_text())
    reserved = system_reserved_cpu(os.cpu_count() or 1, millis)
    config.write_text(json.dumps({**settings, "systemReserved": {"cpu": reserved}}, indent=1))
    meanwhile()
    node.kubelet = host.InNode(node.pid, node.kubelet_argv, _log(node.workdir))
    offered = min(millis, (os.cpu_count() or 1) * 1000)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while pod_cpu(node.plane, node.name) != offered:
        if not node.kubelet.alive():
            raise RuntimeError(f"the kubelet exited; see {node.kubelet.log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"node {node.name} does not offer Pods {offered}m of CPU")
        time.sleep(0.2)
    wait_ready(node.plane, node.name, node.kubelet)


@contextmanager
def running_node(
    binaries: Binaries, work: Path, name: str, labels: str, host_bin: Path | None
) -> Iterator[Node]:
    """The control plane, then the node; yields once the Node is Ready. Everything stops on the
    way out, and `host.restore` puts the machine back whatever happened; what it could not put
    back fails the run."""
    saved = host.machine_state()
    began = time.monotonic()
    problems: list[str] = []
    try:
        with ExitStack() as stack:
            certs = work / "pki"
            pki.write_certs(certs, name)
            extra = (
                f"--client-ca-file={certs / f'{pki.CA}.crt'}",
                f"--kubelet-client-certificate={certs / f'{pki.APISERVER_CLIENT}.crt'}",
                f"--kubelet-client-key={certs / f'{pki.APISERVER_CLIENT}.key'}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
            )
            plane = stack.enter_context(
                control_plane(binaries.assets, work, True, CONTROLLERS, extra)
            )
            scheduler = [
                str(binaries.assets / "kube-scheduler"),
                f"--kubeconfig={plane.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
            ]
            stack.enter_context(process(scheduler, work / "kube-scheduler.log"))
            node = Node(plane, name, 0, work, {"control plane ready": plane.started_in_s})
            host.add_node_ip()
            node.pid = stack.enter_context(
                host.node_namespace(binaries.images / "pause", work, host_bin)
            )
            stack.enter_context(containerd(node.pid, work))
            started = time.monotonic()
            archives = sorted(binaries.images.glob("*.oci.tar"))
            for archive in (a for a in archives if a.name not in BESIDE_THE_TESTS):
                ctr("images", "import", str(archive))
            node.timings["images imported"] = time.monotonic() - started
            node.importing = [
                subprocess.Popen(
                    _ctr("images", "import", str(archive)),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                for archive in archives
                if archive.name in BESIDE_THE_TESTS
            ]
            stack.callback(_stop_imports, node)
            argv = [
                str(binaries.assets / "kubelet"),
                f"--config={kubelet_config(work, free_port(), free_port())}",
                f"--kubeconfig={kubelet_kubeconfig(work, plane)}",
                f"--hostname-override={name}",
                f"--node-ip={host.NODE_IP}",
                f"--node-labels={labels}",
                "--v=2",
            ]
            started = time.monotonic()
            node.kubelet, node.kubelet_argv = host.InNode(node.pid, argv, _log(work)), argv
            stack.callback(lambda: node.kubelet.stop() if node.kubelet else None)
            wait_ready(plane, name, node.kubelet)
            node.timings["node Ready after kubelet start"] = time.monotonic() - started
            node.timings["node Ready after start"] = time.monotonic() - began
            yield node
    finally:
        problems = host.restore(saved)
    if problems:
        raise RuntimeError("the node run could not put back: " + "; ".join(problems))
