"""Node objects of the synthetic cluster, shaped like ``kubectl get nodes -o json`` returns them.

Real GPU nodes are not small: kubelet reports up to 50 images, gpu-feature-discovery and
node-feature-discovery add dozens of labels, the distribution adds annotations. Each node here is
about 14 KB of JSON (pods, in `bench.pods`, about 3 KB), so the memory and parse figures mean
something. Also the DaemonSets every GPU node runs, and the fake ids both modules use.
"""

from __future__ import annotations

import hashlib
from typing import Any

from bench.synthetic import (
    CORDONED_ROLES,
    FAULT_GPU,
    LOSS_ROLES,
    XID_OF,
    ClusterSpec,
    Role,
    pci_of,
    uuid_of,
)
from guard.names import Annotations
from guard.settings import Settings

STAMP = "2026-09-01T03:12:45Z"
DAEMONSETS = (
    ("gpu-operator", "nvidia-device-plugin-daemonset", "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"),
    (
        "gpu-operator",
        "nvidia-dcgm-exporter",
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.1-ubuntu22.04",
    ),
    ("monitoring", "node-exporter", "quay.io/prometheus/node-exporter:v1.9.1"),
    ("kube-system", "rke2-canal", "rancher/hardened-calico:v3.29.2-build20250306"),
)
# node-feature-discovery's cpu-cpuid labels of a Sapphire Rapids host
_CPU_FLAGS = str.split(
    "ADX AESNI AMXBF16 AMXINT8 AMXTILE AVX AVX2 AVX512BF16 AVX512BITALG AVX512BW AVX512CD AVX512DQ "
    "AVX512F AVX512FP16 AVX512IFMA AVX512VBMI AVX512VBMI2 AVX512VL AVX512VNNI AVX512VPOPCNTDQ "
    "AVXVNNI CETIBT CETSS CMPXCHG8 FMA3 FSRM FXSR FXSROPT GFNI HYPERVISOR IBPB LAHF MOVBE "
    "MOVDIR64B MOVDIRI OSXSAVE SERIALIZE SHA STIBP SYSCALL SYSEE TSXLDTRK VAES VMX VPCLMULQDQ "
    "WAITPKG X87 XGETBV1 XSAVE XSAVEC XSAVEOPT XSAVES"
)


def hex_digest(*parts: object, n: int = 64) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:n]


def fake_uid(*parts: object) -> str:
    h = hex_digest(*parts, n=32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def node_labels(name: str) -> dict[str, str]:
    nfd = "feature.node.kubernetes.io/"
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "rke2",
        "node-role.example.com/gpu": "true",
        "topology.kubernetes.io/zone": f"rack-{int(name[-5:]) // 32:03d}",
        "nvidia.com/cuda.driver-version.full": "570.124.06",
        "nvidia.com/cuda.driver.major": "570",
        "nvidia.com/cuda.driver.minor": "124",
        "nvidia.com/cuda.driver.rev": "06",
        "nvidia.com/cuda.runtime-version.full": "12.8",
        "nvidia.com/gfd.timestamp": "1756696365",
        "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.machine": "SYS-821GE-TNHR",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/vgpu.present": "false",
        **{
            f"nvidia.com/gpu.deploy.{c}": "true"
            for c in (
                "container-toolkit",
                "dcgm",
                "dcgm-exporter",
                "device-plugin",
                "driver",
                "gpu-feature-discovery",
                "node-status-exporter",
                "operator-validator",
            )
        },
        **{f"{nfd}cpu-cpuid.{flag}": "true" for flag in _CPU_FLAGS},
        f"{nfd}cpu-model.family": "6",
        f"{nfd}cpu-model.id": "143",
        f"{nfd}cpu-model.vendor_id": "Intel",
        f"{nfd}kernel-version.full": "5.15.0-139-generic",
        f"{nfd}pci-10de.present": "true",
        f"{nfd}system-os_release.ID": "ubuntu",
        f"{nfd}system-os_release.VERSION_ID": "22.04",
    }
    return labels


def node_object(spec: ClusterSpec, index: int, role: Role | None, s: Settings) -> dict[str, Any]:
    name = spec.name(index)
    labels = node_labels(name)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": fake_uid("node", name),
            "resourceVersion": str(1000 + index),
            "creationTimestamp": STAMP,
            "labels": labels,
            "annotations": {
                **_annotations(name, spec.ip(index), labels),
                **_guard_annotations(spec, index, role, s),
            },
        },
        "spec": _node_spec(name, index, role),
        "status": _node_status(name, spec.ip(index), spec.gpus, role),
    }


def _annotations(name: str, ip: str, labels: dict[str, str]) -> dict[str, str]:
    return {
        "nfd.node.kubernetes.io/feature-labels": ",".join(
            k.split("/", 1)[1] for k in labels if k.startswith("feature.")
        ),
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "projectcalico.org/IPv4Address": f"{ip}/16",
        "rke2.io/hostname": name,
        "rke2.io/internal-ip": ip,
        "rke2.io/node-config-hash": hex_digest(name, n=52).upper() + "====",
        "rke2.io/node-args": '["agent","--server","https://10.63.0.1:9345","--token","********",'
        f'"--node-ip","{ip}","--kubelet-arg","max-pods=110","--kubelet-arg",'
        '"system-reserved=cpu=2,memory=8Gi","--node-label","node-role.example.com/gpu=true"]',
    }


def _node_spec(name: str, index: int, role: Role | None) -> dict[str, Any]:
    node_spec: dict[str, Any] = {
        "podCIDR": f"10.42.{index % 256}.0/24",
        "providerID": f"rke2://{name}",
    }
    if role in CORDONED_ROLES:
        node_spec["unschedulable"] = True
        node_spec["taints"] = [
            {"effect": "NoSchedule", "key": "node.kubernetes.io/unschedulable", "timeAdded": STAMP}
        ]
    return node_spec


def _node_status(name: str, ip: str, gpus: int, role: Role | None) -> dict[str, Any]:
    capacity = {
        "cpu": "224",
        "ephemeral-storage": "3748936704Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "2113435604Ki",
        "nvidia.com/gpu": str(gpus),
        "pods": "110",
    }
    allocatable = {**capacity, "cpu": "222", "memory": "2105047004Ki"}
    if role in LOSS_ROLES:
        allocatable["nvidia.com/gpu"] = str(gpus - 1)
    return {
        "addresses": [{"address": ip, "type": "InternalIP"}, {"address": name, "type": "Hostname"}],
        "allocatable": allocatable,
        "capacity": capacity,
        "conditions": _conditions(),
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "images": _images(),
        "nodeInfo": _node_info(name),
    }


def _node_info(name: str) -> dict[str, str]:
    return {
        "architecture": "amd64",
        "bootID": fake_uid("boot", name),
        "containerRuntimeVersion": "containerd://2.0.4-k3s2",
        "kernelVersion": "5.15.0-139-generic",
        "kubeProxyVersion": "v1.34.4+rke2r1",
        "kubeletVersion": "v1.34.4+rke2r1",
        "machineID": hex_digest("machine", name, n=32),
        "operatingSystem": "linux",
        "osImage": "Ubuntu 22.04.5 LTS",
        "systemUUID": fake_uid("system", name),
    }


def _guard_annotations(
    spec: ClusterSpec, index: int, role: Role | None, s: Settings
) -> dict[str, str]:
    keys, name = Annotations(s.annotation_prefix), spec.name(index)
    # A guard that has run for a while: every GPU node's current boot passed its after-reboot
    # conformance check, so a steady-state cycle starts no conformance Job.
    checked = {keys.checked_boot: f"{fake_uid('boot', name)} 2026-09-14T03:00:00Z job/gng-cf-x-0"}
    if role not in ("guarded-a", "guarded-b"):
        return checked if spec.gpus else {}
    return {
        **checked,
        keys.reason: f"xid-{XID_OF[role]}",
        keys.at: "2026-09-21T05:05:00Z",
        keys.boot_id: fake_uid("boot", name),  # same boot: waiting for the power cycle
        keys.gpu_capacity: str(spec.gpus),
        keys.gpu: f"{pci_of(FAULT_GPU)} {uuid_of(name, FAULT_GPU)}",
    }


def _conditions() -> list[dict[str, str]]:
    rows = (
        (
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    )
    return [
        {
            "lastHeartbeatTime": "2026-09-21T06:58:12Z",
            "lastTransitionTime": STAMP,
            "message": m,
            "reason": r,
            "status": st,
            "type": t,
        }
        for t, st, r, m in rows
    ]


def _images() -> list[dict[str, Any]]:
    repos = [image for _, _, image in DAEMONSETS] + [
        f"registry.example.com/research/train-llm:2026.{week:02d}" for week in range(26)
    ]
    return [
        {
            "names": [f"{image.rsplit(':', 1)[0]}@sha256:{hex_digest(image)}", image],
            "sizeBytes": 1_000_000 + int(hex_digest(image, n=8), 16) % 9_000_000_000,
        }
        for image in repos
    ]
