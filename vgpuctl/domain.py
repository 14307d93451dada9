"""Values with one meaning across vgpuctl, defined once: outcomes, limits, modes and policies.

The inventory schema, the planners, the CLI options and the reports import these. Each is a StrEnum, so a
member equals its string ("power-off" == Evacuate.POWER_OFF) and prints as it. Nothing here does I/O.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """What happened to one object (VM, host) in a run."""

    CHANGED = "changed"
    UNCHANGED = "unchanged"
    FAILED = "failed"
    SKIPPED = "skipped"
    NOT_STARTED = "not-started"  # an interrupted apply never began it


class GraphicsType(StrEnum):
    """Host default graphics type, or a GPU's graphics type (vGPU needs sharedDirect)."""

    SHARED = "shared"
    SHARED_DIRECT = "sharedDirect"


class AssignmentPolicy(StrEnum):
    """Where vSphere puts a new vGPU: spread over GPUs (performance) or packed (consolidation)."""

    PERFORMANCE = "performance"
    CONSOLIDATION = "consolidation"


class GpuMode(StrEnum):
    TIME_SLICED = "time-sliced"
    MIG = "mig"


class VgpuMode(StrEnum):
    """Time-sliced vGPU mode of a GPU: one size per GPU, or mixed sizes."""

    SAME_SIZE = "sameSize"
    MIXED_SIZE = "mixedSize"


class SchedulerPolicy(StrEnum):
    """The time-sliced vGPU scheduler (RmPVMRL)."""

    BEST_EFFORT = "best-effort"
    EQUAL_SHARE = "equal-share"
    FIXED_SHARE = "fixed-share"


class NvlinkState(StrEnum):
    ENABLED = "enabled"
    DISABLED = "disabled"


class NvlinkRequirement(StrEnum):
    """A VM's need: `required` places its vGPUs on NVLink-connected GPUs only."""

    REQUIRED = "required"
    NONE = "none"


class Evacuate(StrEnum):
    """Powered-on VMs when a host must enter maintenance mode: refuse (stop and list them), power them off
    (and on again afterwards) or migrate them to other hosts of the cluster."""

    REFUSE = "refuse"
    POWER_OFF = "power-off"
    MIGRATE = "migrate"  # vMotion to another host of the cluster that can run them, else power-off if allowed


class Power(StrEnum):
    """A VM's power after apply: restart (run it; off for a change), off, or keep (never touch)."""

    RESTART = "restart"
    OFF = "off"
    KEEP = "keep"


MAX_VGPUS_PER_VM = 8  # vSphere 8.0 (4 before); a host's own limit is ObservedHost.max_vgpus_per_vm


DEFAULT_PARALLEL = 8  # VMs changed at the same time unless --parallel says otherwise


class AdapterType(StrEnum):
    """A VM network adapter the inventory asks for (docs/multi-node.md): a paravirtual NIC, a paravirtual RDMA
    NIC (PVRDMA), an SR-IOV virtual function of a physical NIC, or a whole physical NIC by DirectPath I/O."""

    VMXNET3 = "vmxnet3"
    PVRDMA = "pvrdma"
    SRIOV = "sriov"
    PASSTHROUGH = "passthrough"

    @property
    def is_rdma(self) -> bool:
        return self is not AdapterType.VMXNET3

    @property
    def is_physical(self) -> bool:
        """Backed by a physical function the host hands out at power-on (counted like GPUs)."""
        return self in (AdapterType.SRIOV, AdapterType.PASSTHROUGH)


class RoceProtocol(StrEnum):
    """VirtualVmxnet3Vrdma.deviceProtocol (API 6.7 and later)."""

    ROCEV1 = "rocev1"
    ROCEV2 = "rocev2"


class NetworkKind(StrEnum):
    """A port group on a standard switch, or on a vSphere Distributed Switch."""

    STANDARD = "standard"
    DISTRIBUTED = "distributed"


class IdentityMethod(StrEnum):
    """How a clone learns its own hostname and addresses: vSphere guest customization (Linux prep in the clone
    spec), or cloud-init's VMware datasource reading guestinfo metadata from the VM's extraConfig."""

    CUSTOMIZATION = "customization"
    CLOUD_INIT = "cloud-init"
