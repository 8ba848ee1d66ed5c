"""Names the guard writes or reads on the cluster: one place for every key and label."""

from __future__ import annotations

from dataclasses import dataclass

# Value of the app.kubernetes.io/name label on everything the guard makes or ships.
APP_NAME = "gpu-node-guard"
GPU_RESOURCE = "nvidia.com/gpu"
RECORDER = "gpu-node-guard"
MANUAL_RECORDER = "manual"
APP_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"
FIELD_MANAGER = "gpu-node-guard"
# Events about cluster-scoped objects (Nodes) must live in `default` (API validation).
NODE_EVENT_NAMESPACE = "default"


@dataclass(frozen=True, slots=True)
class Annotations:
    """The guard's node annotation keys under a prefix (default ``gpu-node-guard.io/``).

    >>> Annotations("gpu-node-guard.io/").reason
    'gpu-node-guard.io/auto-cordon-reason'
    """

    prefix: str

    @property
    def reason(self) -> str:
        return f"{self.prefix}auto-cordon-reason"

    @property
    def at(self) -> str:
        return f"{self.prefix}auto-cordon-at"

    @property
    def boot_id(self) -> str:
        return f"{self.prefix}auto-cordon-boot-id"

    @property
    def gpu_capacity(self) -> str:
        return f"{self.prefix}auto-cordon-gpu-capacity"

    @property
    def gpu(self) -> str:
        return f"{self.prefix}auto-cordon-gpu"

    @property
    def loadtest_result(self) -> str:
        return f"{self.prefix}loadtest-result"

    @property
    def conformance_result(self) -> str:
        return f"{self.prefix}conformance-result"

    @property
    def cancelled(self) -> str:
        """`<bootID> <GPU-UUID> xid-<n> <RFC3339>`: a person's uncordon cancelled this incident."""
        return f"{self.prefix}cancelled"

    @property
    def returned(self) -> str:
        """`<RFC3339> job/<name>`: the node came back after a passed load test."""
        return f"{self.prefix}returned"

    @property
    def hold(self) -> str:
        return f"{self.prefix}hold"

    @property
    def reset_done(self) -> str:
        return f"{self.prefix}reset-done"

    @property
    def node_label(self) -> str:
        """Label on the guard's Jobs naming the node they run on."""
        return f"{self.prefix}node"

    @property
    def cordon_keys(self) -> tuple[str, ...]:
        """Keys the guard sets when it cordons and clears when the node returns."""
        return (self.reason, self.at, self.boot_id, self.gpu_capacity, self.gpu)

    @property
    def guard_keys(self) -> tuple[str, ...]:
        """Every key the guard itself may remove; never `hold` or `reset-done`, a person's keys
        (the node-scope admission policy refuses the guard any change to them)."""
        return (*self.cordon_keys, self.loadtest_result, self.conformance_result)
