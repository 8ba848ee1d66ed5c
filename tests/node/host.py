"""The node's own namespace and what a node run changes on the machine, put back afterwards.

On these machines PID 1 belongs to the machine and every /proc/1/ns/* and /proc/1/root is refused
even to root, so the Jobs' `nsenter -t 1 -m` could not work against it. containerd and the kubelet
therefore run inside a private PID + mount namespace whose PID 1 is our pause binary: a hostPID
Pod sees that PID 1, and `nsenter -t 1 -m` lands in the node's mount namespace (a private copy of
the machine's mounts: the same files, kernel log and /sys). Leaving the namespace (SIGTERM to its
PID 1) makes the kernel SIGKILL everything left in it (shims, containers) and drops its private
mounts (overlay rootfs, netns pins, tmpfs volumes, the bind mounts below) with it.

What lives outside the namespace and is put back by `restore`: the kernel sysctls the kubelet and
the CNI bridge set, the node IP on lo, the CNI bridge, the pod cgroups, containerd's socket
directory; `leftovers` says what of that is still there (the tier's teardown check).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# The kubelet refuses a loopback node IP ("nodeIP can't be loopback address"; the Node then has no
# address and `kubectl logs` none to reach). A /32 on lo is as local as 127.0.0.1 and passes.
NODE_IP = "10.255.0.1"
BRIDGE = "gng-node0"
RUN_DIR = Path("/run/gpu-node-guard-node")
# setupKernelTunables of the kubelet sets the first six (protectKernelDefaults: false); the CNI
# bridge plugin (isGateway) net.ipv4.ip_forward; a test kernel.dmesg_restrict.
SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    "kernel/dmesg_restrict",  # set by tests/node/test_kernel_log.py
)
# Paths the kubelet, containerd and its shims write to whatever their flags say (/var/log/containers
# is fixed in the kubelet, /run/containerd holds the shims' sockets and runc's state, /var/lib/cni
# the CNI cache and IP allocations). In the node's mount namespace each is a bind mount of a
# directory of the run, so nothing reaches the machine's own.
NODE_BINDS = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
    "/run/containerd",
    "/etc/cni/net.d",
)
# hostPaths of type "" that containerd makes when the machine lacks them (the agent's
# /run/systemd/resolve, on a host without systemd-resolved): removed again if the run made them.
CREATED_BY_PODS = (Path("/run/systemd/resolve"),)
PR_SET_PDEATHSIG = 1
CGROUP_TOPS = ("kubepods", "k8s.io")
RUNTIMES = ("containerd", "containerd-shim", "kubelet", "pause")  # comm: 15 characters


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def first_child(pid: int, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while not (kids := children(pid)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} started no child in {timeout_s:.0f} s")
        time.sleep(0.02)
    return kids[0]


class InNode:
    """A program started in the node's PID and mount namespaces by nsenter, which forks: signals
    go to its child, the program (nsenter forwards none)."""

    def __init__(self, node_pid: int, argv: list[str], log: Path) -> None:
        self.log = log
        self._out = log.open("wb")
        self.nsenter = subprocess.Popen(
            ["nsenter", "-t", str(node_pid), "-p", "-m", "--", *argv],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.pid = first_child(self.nsenter.pid)

    def alive(self) -> bool:
        return self.nsenter.poll() is None

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after `grace_s`; waits for it."""
        try:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if self.nsenter.poll() is not None:
                    break
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, sig)
                try:
                    self.nsenter.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    continue
        finally:
            if self.nsenter.poll() is None:
                self.nsenter.kill()
                self.nsenter.wait()
            self._out.close()


@contextmanager
def node_namespace(pause: Path, work: Path, host_bin: Path | None) -> Iterator[int]:
    """`unshare --pid --fork --mount-proc` around `pause`, after bind-mounting NODE_BINDS from
    work/host/ (and `host_bin` over /usr/local/bin: the fake host tools the Jobs reach with
    `nsenter -t 1 -m`, first in PATH and seen by the node's mount namespace only). Yields pause's
    PID. Mount points the machine lacked are made for the run and removed afterwards."""
    made: list[Path] = []
    script = ["set -e"]
    for target in NODE_BINDS:
        source = work / "host" / target.strip("/").replace("/", "-")
        source.mkdir(parents=True, exist_ok=True)
        if not os.path.isdir(target):
            missing = Path(target)
            while not missing.parent.exists():
                missing = missing.parent
            made.append(missing)
            os.makedirs(target)
        script.append(f"mount --bind {source} {target}")
    if host_bin is not None:
        script.append(f"mount --bind {host_bin} /usr/local/bin")
    script.append(f"exec {pause}")
    log = (work / "node-init.log").open("wb")
    unshare = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child=SIGKILL",
            "--",
            "sh",
            "-c",
            "\n".join(script),
        ],
        preexec_fn=_die_with_parent,  # dies with this process, and the namespace with it
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        node_pid = first_child(unshare.pid)
        deadline = time.monotonic() + 10
        while _comm(node_pid) != "pause":
            if unshare.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the node namespace did not start; see {work}/node-init.log")
            time.sleep(0.02)
        yield node_pid
    finally:
        _leave(unshare)
        log.close()
        for path in reversed(made):
            subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _leave(unshare: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the namespace's PID 1 (the kernel then kills the rest), SIGKILL to unshare
    after 15 s (--kill-child takes pause with it)."""
    if unshare.poll() is None:
        for pid in children(unshare.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            unshare.wait(timeout=15)
        except subprocess.TimeoutExpired:
            unshare.kill()
            unshare.wait()


# ---------------------------------------------------------------- the machine's state


@dataclass(frozen=True, slots=True)
class MachineState:
    """What a node run may change outside its namespace, read before it starts."""

    sysctls: dict[str, str]
    lo_addresses: str
    links: frozenset[str]
    mounts: frozenset[str]
    runtimes: frozenset[int]  # containerd and kubelet processes the machine already had
    absent: frozenset[Path]  # of CREATED_BY_PODS
    cgroups: frozenset[Path]  # a kubelet's or containerd's the machine already had


def machine_state() -> MachineState:
    return MachineState(
        {key: Path("/proc/sys", key).read_text().strip() for key in SYSCTLS},
        _ip("-o", "addr", "show", "dev", "lo"),
        frozenset(_links()),
        frozenset(Path("/proc/self/mounts").read_text().splitlines()),
        frozenset(_by_name(RUNTIMES)),
        frozenset(p for p in CREATED_BY_PODS if not p.exists()),
        frozenset(pod_cgroups()),
    )


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    return done.stdout


def _links() -> list[str]:
    return [line.split(":")[1].strip().split("@")[0] for line in _ip("-o", "link").splitlines()]


def add_node_ip() -> None:
    subprocess.run(["ip", "addr", "replace", f"{NODE_IP}/32", "dev", "lo"], check=True)


def pod_cgroups() -> set[Path]:
    """The cgroups under the kubelet's and containerd's tops, in every v1 hierarchy (or v2's)."""
    found = set()
    for hierarchy in [Path("/sys/fs/cgroup"), *Path("/sys/fs/cgroup").iterdir()]:
        if hierarchy.is_symlink():  # cpu -> cpu,cpuacct: the same cgroups once
            continue
        for top in CGROUP_TOPS:
            if (hierarchy / top).is_dir():
                found |= {Path(dirpath) for dirpath, _dirs, _files in os.walk(hierarchy / top)}
    return found


def restore(saved: MachineState) -> list[str]:
    """Put back what a run changed (each step on its own: one failing keeps the others); what
    could not be put back, one line each."""
    problems = []
    for made in sorted(pod_cgroups() - saved.cgroups, key=lambda p: -len(p.parts)):
        try:
            made.rmdir()  # the deepest first
        except OSError as exc:
            problems.append(f"cgroup {made}: {exc.strerror}")
    if BRIDGE in _links():
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
    if f" {NODE_IP}/32 " in _ip("-o", "addr", "show", "dev", "lo"):
        subprocess.run(
            ["ip", "addr", "del", f"{NODE_IP}/32", "dev", "lo"], capture_output=True, check=False
        )
    for made in saved.absent:
        if made.is_dir():
            try:
                made.rmdir()
            except OSError as exc:
                problems.append(f"{made}: {exc.strerror}")
    for path in RUN_DIR.glob("*"):
        path.unlink(missing_ok=True)
    if RUN_DIR.exists():
        RUN_DIR.rmdir()
    for key, value in saved.sysctls.items():
        path = Path("/proc/sys", key)
        try:
            if path.read_text().strip() != value:
                path.write_text(value)
        except OSError as exc:
            problems.append(f"sysctl {key}: {exc.strerror}")
    return problems


def leftovers(saved: MachineState, workdir: Path) -> list[str]:
    """What a run left on the machine, compared with `saved`: one line per thing (empty: none)."""
    now = machine_state()
    found = [
        f"sysctl {k} is {now.sysctls[k]}, was {v}"
        for k, v in saved.sysctls.items()
        if now.sysctls[k] != v
    ]
    if now.lo_addresses != saved.lo_addresses:
        found.append(f"lo addresses changed: {now.lo_addresses!r}")
    found += [f"network link {link} left" for link in sorted(now.links - saved.links)]
    found += [f"mount left: {m}" for m in sorted(now.mounts - saved.mounts)]
    found += [f"cgroup left: {p}" for p in sorted(pod_cgroups() - saved.cgroups)]
    if RUN_DIR.exists():
        found.append(f"{RUN_DIR} left")
    found += [f"{path} left" for path in sorted(saved.absent) if path.exists()]
    found += [f"process left: {pid} {_comm(pid)}" for pid in processes_under(workdir)]
    found += [
        f"process left: {pid} {_comm(pid)}"
        for pid in sorted(set(_by_name(RUNTIMES)) - saved.runtimes)
    ]
    return found


def processes_under(workdir: Path) -> list[int]:
    """PIDs whose command line names `workdir` (what a run started: its servers and shims)."""
    mine = str(workdir).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if mine in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _by_name(names: tuple[str, ...]) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _comm(int(entry.name)) in names:
            found.append(int(entry.name))
    return found
