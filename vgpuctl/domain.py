"""Values with one meaning across vgpuctl, defined once: outcomes, limits, modes, policies, vSphere's spellings.

The inventory schema, the planners, the CLI options and the reports import these. Each is a StrEnum, so a
member equals its string ("power-off" == Evacuate.POWER_OFF) and prints as it; code compares members, never
the strings. vSphere's own spellings (graphicsInfo, runtime states) are here too, as vSphere writes them: what
vCenter reports is kept as it is (a value missing here is still carried), and compared with these members.
Nothing here does I/O.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar


class Outcome(StrEnum):
    """What happened to one object (VM, host) in a run."""

    CHANGED = "changed"
    UNCHANGED = "unchanged"
    FAILED = "failed"
    SKIPPED = "skipped"
    NOT_STARTED = "not-started"  # an interrupted apply never began it


class VmStep(StrEnum):
    """A step of a VM's apply: what the plan lists, what an outcome says was done or left."""

    CLONE = "clone"
    SHUTDOWN = "shutdown"  # the guest shut down (a power-off step done gracefully)
    POWER_OFF = "power-off"
    RECONFIGURE = "reconfigure"
    REVERT = "reconfigure (revert)"  # the VM given back its previous vGPUs
    POWER_ON = "power-on"
    CUSTOMIZE = "customize"  # the clone's guest customization, at its first boot
    DESTROY = "destroy"
    REMOVE_CLONE = "remove clone"  # this run's clone removed: it could not power on where the plan put it


class GraphicsType(StrEnum):
    """Host default graphics type, or a GPU's graphics type, as the inventory sets it (vGPU needs sharedDirect)."""

    SHARED = "shared"
    SHARED_DIRECT = "sharedDirect"


class GpuGraphicsType(StrEnum):
    """A GPU's graphics type as vSphere reports it (HostGraphicsInfo.graphicsType): the two settable ones, plus
    `basic` (no 3D) and `direct` (passthrough)."""

    BASIC = "basic"
    SHARED = "shared"
    DIRECT = "direct"
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


class GpuVgpuMode(StrEnum):
    """A GPU's vGPU mode as vSphere reports it (HostGraphicsInfo.vgpuMode): the time-sliced ones, MIG, or none."""

    NONE = "none"
    SAME_SIZE = "sameSize"
    MIXED_SIZE = "mixedSize"
    MIG = "multiInstanceGpu"


TIME_SLICED_MODES = (VgpuMode.SAME_SIZE, VgpuMode.MIXED_SIZE)


class ProfileSharing(StrEnum):
    """How a vGPU profile shares its GPU (VirtualMachineVgpuProfileInfo.profileSharing)."""

    TIME_SLICED = "timeSliced"
    MIG = "mig"


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


class PowerState(StrEnum):
    """A VM's power state as vSphere reports it (runtime.powerState)."""

    ON = "poweredOn"
    OFF = "poweredOff"
    SUSPENDED = "suspended"


class ToolsStatus(StrEnum):
    """Whether VMware Tools run in a VM's guest, as vSphere reports it (guest.toolsRunningStatus)."""

    RUNNING = "guestToolsRunning"
    NOT_RUNNING = "guestToolsNotRunning"
    EXECUTING_SCRIPTS = "guestToolsExecutingScripts"


class HostPowerState(StrEnum):
    """A host's power state as vSphere reports it (HostSystem runtime.powerState)."""

    ON = "poweredOn"
    OFF = "poweredOff"
    STANDBY = "standBy"
    UNKNOWN = "unknown"


class ConnectionState(StrEnum):
    """A host's connection to vCenter (HostSystem runtime.connectionState)."""

    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    NOT_RESPONDING = "notResponding"


class Firmware(StrEnum):
    """A VM's firmware (VirtualMachineConfigInfo.firmware); C-series vGPUs (large BAR) need EFI."""

    BIOS = "bios"
    EFI = "efi"


class Power(StrEnum):
    """A VM's power after apply: restart (run it; off for a change), off, or keep (never touch)."""

    RESTART = "restart"
    OFF = "off"
    KEEP = "keep"


class SshService(StrEnum):
    """A host entry's `ssh.service`: leave the ESXi SSH service as it is, or manage it: start it through the API
    for the run when it is stopped and stop it again afterwards (lockdown mode is never touched)."""

    LEAVE = "leave"
    MANAGE = "manage"


class Keep(StrEnum):
    """What an existing VM keeps as it is although vgpuctl would set it for its vGPUs (a VM made by hand, adopted
    as it is): 64-bit MMIO, the locked memory reservation, BIOS firmware, an old hardware version."""

    MMIO = "mmio"
    MEMORY_LOCK = "memory-lock"
    EFI = "efi"
    HARDWARE_VERSION = "hardware-version"


class VmState(StrEnum):
    """A VM entry's `state`: present (create or change it) or absent (power it off and destroy it)."""

    PRESENT = "present"
    ABSENT = "absent"


class CheckStatus(StrEnum):
    """A preflight check's result: pass, warn (the run goes on), fail (the run is refused), skip (not applicable)."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class ChangeKind(str):
    """What a host change changes: a host setting's own kind (each setting declares its kinds in its module,
    vgpuctl.settings), or the orchestration around the settings: a VM's evacuation (EVACUATE) and the resumption
    of unfinished work (RESUME). The part before a dot names the setting group in documents ("graphics")."""

    __slots__ = ()
    EVACUATE: ClassVar[ChangeKind]
    RESUME: ClassVar[ChangeKind]

    @property
    def category(self) -> str:
        return self.split(".", 1)[0]

    def __repr__(self) -> str:
        return f"ChangeKind({str(self)!r})"


ChangeKind.EVACUATE = ChangeKind("evacuate")
ChangeKind.RESUME = ChangeKind("maintenance")


class Phase(StrEnum):
    """When a host change can be made: with the host running its VMs (online), in maintenance mode, or in
    maintenance mode followed by a reboot before it takes effect."""

    ONLINE = "online"
    MAINTENANCE = "maintenance"
    REBOOT = "reboot"

    @property
    def disruptive(self) -> bool:
        return self is not Phase.ONLINE


class WindowStage(StrEnum):
    """When a driver upgrade window moves a guest driver: before any host leaves service (to a release both vGPU
    Managers accept), or after every host has its new one (to the guest group's own release)."""

    BEFORE = "before"
    AFTER = "after"


class EvacuationKind(StrEnum):
    """What happens to a running VM when its host enters maintenance mode."""

    RESTORE_AFTER = "restore-after"  # powered off, on again after the host change
    HAND_OVER = "hand-over"  # powered off, reconfigured and powered on by its own VM change
    MIGRATE = "migrate"  # vMotion to another host
    STAYS_OFF = "stays-off"  # powered off for good: its inventory entry says power: off


class StopReason(StrEnum):
    """Why an apply started no further host or VM although work was left (a change window's limits)."""

    DEADLINE = "deadline"  # apply --deadline passed
    MAX_FAILURES = "max-failures"  # maintenance.max_failures hosts failed


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


class ClusterKind(StrEnum):
    """The Kubernetes cluster object `k8s render` writes for a supervisor namespace (one, never both)."""

    CLUSTER = "cluster"  # Cluster API Cluster, cluster.x-k8s.io/v1beta1 (ClusterClass topology)
    TKC = "tkc"  # TKG TanzuKubernetesCluster, run.tanzu.vmware.com/v1alpha3

    @property
    def object_kind(self) -> str:
        return "Cluster" if self == ClusterKind.CLUSTER else "TanzuKubernetesCluster"

    @property
    def file_name(self) -> str:
        return "cluster.yaml" if self == ClusterKind.CLUSTER else "tanzukubernetescluster.yaml"
