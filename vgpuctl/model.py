"""Typed data shared by observe (vsphere/), the planners and apply: what vCenter has, what a plan changes, what
each apply stage did.

Observed* is what vCenter has, read in bulk by vgpuctl.vsphere.observe; it is plain data so the planner is
a pure function testable from fixtures (see `Observed.from_dict` / `to_dict`). Plan* is what the planner
decides; apply executes it. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, field
from enum import StrEnum
from typing import Any

from vgpuctl.domain import (
    MAX_VGPUS_PER_VM,
    AssignmentPolicy,
    ChangeKind,
    ConnectionState,
    EvacuationKind,
    Firmware,
    GpuGraphicsType,
    GpuVgpuMode,
    GraphicsType,
    HostPowerState,
    Outcome,
    Phase,
    PowerState,
    ProfileSharing,
    StopReason,
    VmStep,
    WindowStage,
)
from vgpuctl.lazyclass import dataclass


@dataclass(frozen=True)
class ObservedProfile:
    """One vGPU profile as the host describes it (RetrieveVgpuProfileInfo / QueryConfigTarget)."""

    name: str  # vSphere string, e.g. grid_a100-3-20c
    fb_gb: int
    sharing: str = ProfileSharing.TIME_SLICED
    profile_class: str = "compute"  # compute | quadro
    # The most vGPUs of the type one GPU holds, when the host says (it wins over the catalogue's maximum).
    # RetrieveVgpuProfileInfo has no such field; `profiles --shell` reads MIG instance totals (nvidia-smi mig -lgip).
    max_per_gpu: int | None = None


@dataclass
class ObservedGpu:
    """One physical GPU of a host (config.graphicsInfo joined with hardware.pciDevice)."""

    pci_id: str  # 0000:3b:00.0
    device_name: str  # e.g. "NVIDIA A100-PCIE-40GB" as the host reports it
    vendor_id: int = 0x10DE
    device_id: int = 0
    memory_kb: int = 0
    graphics_type: str = GpuGraphicsType.SHARED  # a GpuGraphicsType as vSphere reports it
    vgpu_mode: str = GpuVgpuMode.NONE  # a GpuVgpuMode as vSphere reports it
    vms: list[str] = field(default_factory=list)  # names of VMs holding a vGPU on this GPU
    nvlink_set: int | None = None  # index of the NVLink-connected set it belongs to (links up), if any
    nvlink_groups: list[int] = field(default_factory=list)  # device group sizes the host reports for that set
    nvlink_profiles: list[str] = field(default_factory=list)  # profiles those device groups are offered for
    numa_node: int | None = None  # hardware.numaInfo (API 6.7)
    pci_root: str | None = None  # the topmost bridge above it (GPUDirect RDMA wants the NIC under the same one)
    # the host's driver runs time-sliced vGPUs of different types on it at once (nvidia-smi -q, read from the
    # ESXi shell); None: not read, the vSphere version alone decides
    types_may_mix: bool | None = None


@dataclass
class ObservedHostNic:
    """A physical NIC of a host (hardware.pciDevice joined with config.network.pnic, config.pciPassthruInfo and
    hardware.numaInfo): what SR-IOV and passthrough adapters are placed on."""

    pci_id: str
    device_name: str = ""  # e.g. "MT2910 Family [ConnectX-7]"
    vendor_name: str = ""
    vendor_id: int = 0
    device_id: int = 0
    vmnic: str | None = None  # the host's name for it, when it is an uplink (config.network.pnic)
    numa_node: int | None = None
    pci_root: str | None = None  # the topmost bridge above it (hardware.pciDevice parentBridge chain)
    sriov_capable: bool = False
    sriov_enabled: bool = False
    sriov_active: bool = False  # enabled and in effect (rebooted)
    num_vf: int = 0  # virtual functions present
    num_vf_requested: int = 0
    max_vf: int = 0
    passthru_capable: bool = False
    passthru_enabled: bool = False
    passthru_active: bool = False


@dataclass
class ObservedNetwork:
    """A port group: `standard` (a Network) or `distributed` (a DistributedVirtualPortgroup, with its key and
    its switch's uuid), and the hosts that reach it."""

    name: str
    moid: str = ""
    kind: str = "standard"  # standard | distributed
    key: str | None = None
    switch_uuid: str | None = None
    switch: str | None = None
    hosts: list[str] = field(default_factory=list)


@dataclass
class ObservedNic:
    """A VM network adapter: a VirtualEthernetCard, or a PCI passthrough device that is not a vGPU."""

    key: int
    kind: str  # vmxnet3 | pvrdma | sriov | passthrough | another card's type in lower case (e1000e, ...)
    network: str = ""  # its port group's name ("" when not known)
    mac: str = ""
    mac_manual: bool = False
    protocol: str | None = None  # pvrdma: deviceProtocol
    device: str | None = None  # sriov: the physical function's PCI id; passthrough: the device's PCI id
    allowed: list[list[int]] = field(default_factory=list)  # Dynamic DirectPath: [vendor id, device id] pairs
    slot: int | None = None  # PCI slot number (guest customization maps adapters in this order)


@dataclass(frozen=True)
class ObservedDeviceGroup:
    """An NVLink vendor device group the host offers (QueryConfigTarget): its name and its members' profiles."""

    name: str
    profiles: tuple[str, ...]


@dataclass
class ObservedHost:
    name: str
    moid: str = ""
    cluster: str | None = None
    connection_state: str = ConnectionState.CONNECTED
    in_maintenance: bool = False
    power_state: str = HostPowerState.ON
    api_version: str = "8.0.3.0"
    default_graphics_type: str = GraphicsType.SHARED
    assignment_policy: str = AssignmentPolicy.PERFORMANCE
    gpus: list[ObservedGpu] = field(default_factory=list)
    offered_profiles: list[str] = field(default_factory=list)  # config.sharedPassthruGpuTypes
    profiles: dict[str, ObservedProfile] = field(default_factory=dict)  # name -> info
    max_vgpus_per_vm: int = MAX_VGPUS_PER_VM
    module_options: str = ""  # configured nvidia module option string
    resource_pool_moid: str = ""  # root resource pool of the host's cluster / compute resource (clone target)
    graphics_manager_moid: str = ""  # configManager.graphicsManager
    image_config_manager_moid: str = ""  # configManager.imageConfigManager (the installed packages)
    environment_browser_moid: str = ""  # of the host's cluster / compute resource (QueryConfigTarget)
    custom_values: dict[str, str] = field(default_factory=dict)  # custom attribute name -> value (non-empty)
    device_groups: list[ObservedDeviceGroup] | None = None  # NVLink device groups, when they were read
    nics: list[ObservedHostNic] = field(default_factory=list)  # physical NICs (class network)
    properties: dict[str, Any] = field(default_factory=dict)  # bulk-read values a host setting reads for itself
    nvlink_from_shell: bool = False  # its GPUs' NVLink sets were read in the ESXi shell (vCenter named none)

    @property
    def usable(self) -> bool:
        """Connected, powered on and not in maintenance mode: VMs can run here."""
        return (self.connection_state == ConnectionState.CONNECTED and not self.in_maintenance
                and self.power_state == HostPowerState.ON)


@dataclass
class ObservedVgpu:
    """A VirtualPCIPassthrough device whose backing IS a VmiopBackingInfo (checked with isinstance)."""

    key: int
    profile: str
    device_group_key: int | None = None  # deviceGroupInfo.groupInstanceKey when part of an NVLink group


@dataclass
class ObservedVm:
    name: str
    moid: str = ""
    is_template: bool = False
    host: str | None = None
    cluster: str | None = None
    folder: str | None = None
    power_state: str = PowerState.OFF
    cpus: int = 1
    memory_mb: int = 1024
    memory_reservation_locked: bool = False
    memory_reservation_mb: int = 0
    firmware: str = Firmware.BIOS  # Firmware
    hardware_version: str = "vmx-20"
    extra_config: dict[str, str] = field(default_factory=dict)
    vgpus: list[ObservedVgpu] = field(default_factory=list)
    other_passthrough: int = 0  # PCI passthrough devices that are not vGPUs; never touched
    guest_ips: list[str] = field(default_factory=list)
    guest_state: str = "notRunning"
    tools_running: bool = False
    change_version: str = ""  # config.changeVersion: a reconfigure names it, so vCenter refuses it once it moved
    nics: list[ObservedNic] = field(default_factory=list)  # network adapters, passthrough NICs included
    guest_hostname: str = ""

    @property
    def path(self) -> str:
        """Its folder path and name from the datacenter's VM folder: `/teamB/inv-01`, `/inv-01` at the root."""
        return f"/{self.folder}/{self.name}" if self.folder else f"/{self.name}"

    def in_folder(self, folder: str | None) -> bool:
        """Whether it is in this folder (a path as `folder_path` gives it, "" the root); None matches any."""
        return folder is None or (self.folder or "") == folder


def folder_path(text: str | None) -> str | None:
    """An inventory folder as observe writes paths: `/ml/train/` -> `ml/train`, `/` -> `` (the root), None stays."""
    if text is None:
        return None
    return "/".join(part for part in text.split("/") if part)


def folder_label(folder: str | None) -> str:
    """How messages name a folder: `/` for the root."""
    return folder or "/"


@dataclass
class Observed:
    """Everything one observe pass read from vCenter."""

    api_version: str = "8.0.3.0"
    about: str = ""
    datacenter: str = ""
    hosts: dict[str, ObservedHost] = field(default_factory=dict)
    clusters: dict[str, list[str]] = field(default_factory=dict)  # cluster -> host names
    # templates included (is_template=True). Keyed by name; VMs that share a name (in different folders) are
    # keyed by their path (ObservedVm.path) instead, and `same_name` lists those keys by name.
    vms: dict[str, ObservedVm] = field(default_factory=dict)
    same_name: dict[str, list[str]] = field(default_factory=dict)  # name -> keys of the VMs of that name
    folders: list[str] = field(default_factory=list)  # VM folder paths relative to the datacenter
    round_trips: int = 0
    moids: dict[str, str] = field(default_factory=dict)  # "datacenter", "vm_folder" -> moid
    cluster_moids: dict[str, str] = field(default_factory=dict)  # cluster name -> moid
    cluster_pool_moids: dict[str, str] = field(default_factory=dict)  # cluster name -> root resource pool moid
    folder_moids: dict[str, str] = field(default_factory=dict)  # VM folder path -> moid
    networks: list[ObservedNetwork] = field(default_factory=list)  # port groups of the datacenter
    warnings: list[str] = field(default_factory=list)  # e.g. NVLink sets that could not be read

    def host_usable(self, name: str) -> bool:
        """The host is known and VMs can run there (ObservedHost.usable)."""
        host = self.hosts.get(name)
        return host is not None and host.usable

    def named(self, name: str, folder: str | None = None) -> list[str]:
        """Keys of the VMs called `name`, in `folder` when it is not None (a path as `folder_path` gives it)."""
        keys = self.same_name.get(name) or ([name] if name in self.vms else [])
        return [k for k in keys if self.vms[k].in_folder(folder)]

    def vm_for(self, change: VmChange) -> ObservedVm | None:
        """The VM a planned change is for (by the key the planner matched, else by name); None when it is not
        there, or is not in the folder a clone would create it in."""
        vm = self.vms.get(change.observed_key or change.vm)
        if vm is not None and change.clone is not None and not vm.in_folder(folder_path(change.clone.folder)):
            return None
        return vm

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Observed:
        hosts = {}
        for name, h in (data.get("hosts") or {}).items():
            h = dict(h)
            h.setdefault("name", name)
            h["gpus"] = [ObservedGpu(**g) for g in h.get("gpus", [])]
            h["nics"] = [ObservedHostNic(**n) for n in h.get("nics", [])]
            if h.get("device_groups") is not None:
                h["device_groups"] = [ObservedDeviceGroup(g["name"], tuple(g["profiles"])) for g in h["device_groups"]]
            h["profiles"] = {
                pname: ObservedProfile(**{"name": pname, **p}) for pname, p in (h.get("profiles") or {}).items()
            }
            hosts[name] = ObservedHost(**h)
        vms = {}
        for name, v in (data.get("vms") or {}).items():
            v = dict(v)
            v.setdefault("name", name)
            v["vgpus"] = [ObservedVgpu(**d) for d in v.get("vgpus", [])]
            v["nics"] = [ObservedNic(**n) for n in v.get("nics", [])]
            vms[name] = ObservedVm(**v)
        rest = {k: v for k, v in data.items() if k not in ("hosts", "vms", "networks")}
        networks = [ObservedNetwork(**n) for n in data.get("networks") or []]
        return cls(hosts=hosts, vms=vms, networks=networks, **rest)

    def networks_named(self, name: str) -> list[ObservedNetwork]:
        return [n for n in self.networks if n.name == name]


# ----------------------------------------------------------------------------------------------- plan


class Op(StrEnum):
    ADD = "+"
    CHANGE = "~"
    REMOVE = "-"


@dataclass
class FieldChange:
    """One field of a VM that changes: memoryReservationLockedToMax, firmware, numCPUs, memoryMB, ..."""

    field: str
    old: Any
    new: Any
    op: Op = Op.CHANGE


@dataclass
class DeviceChange:
    """Add or remove one vGPU. `key` is the existing device key for a removal."""

    op: Op  # ADD or REMOVE
    profile: str
    key: int | None = None
    # ADD only: vGPUs with the same group number are attached together as one NVLink vendor device group
    # (ConfigSpec.deviceGroups + deviceGroupInfo on each member); None = a plain vGPU.
    group: int | None = None


@dataclass
class NicChange:
    """Add, change or remove one network adapter. `key` is the existing device's (change, remove); `device` the
    physical NIC's PCI id an SR-IOV (its physical function) or passthrough adapter uses, once placement chose it;
    `allowed` the [vendor id, device id] pairs of a Dynamic DirectPath adapter."""

    op: Op
    kind: str  # AdapterType
    portgroup: str | None = None
    key: int | None = None
    protocol: str | None = None  # pvrdma
    device: str | None = None
    select: str | None = None  # what the inventory asked for: a PCI id, vmnic name or model
    allowed: list[list[int]] = field(default_factory=list)
    mac: str | None = None  # a fixed MAC address
    old: str | None = None  # change: what it was ("on mgmt", "rocev1")

    @property
    def label(self) -> str:
        parts = [self.kind]
        if self.select:
            parts.append(self.select)
        if self.portgroup:
            parts.append(f"on {self.portgroup}")
        if self.protocol:
            parts.append(f"({self.protocol})")
        return " ".join(parts)


@dataclass
class IdentityAdapter:
    """One ethernet adapter of a clone as its identity sets it up, in the VM's PCI slot order."""

    portgroup: str
    address: str | None = None  # None: DHCP
    prefix: int | None = None
    gateway: str | None = None
    dns: list[str] = field(default_factory=list)


@dataclass
class GuestIdentity:
    """What a new VM's guest is told about itself: by guest customization (in the clone spec) or by cloud-init
    guestinfo metadata (extraConfig in the reconfigure after the clone)."""

    method: str  # IdentityMethod
    hostname: str
    domain: str
    adapters: list[IdentityAdapter] = field(default_factory=list)

    @property
    def dns(self) -> list[str]:
        return list(dict.fromkeys(d for a in self.adapters for d in a.dns))


@dataclass
class CloneSpec:
    template: str
    cluster: str | None = None
    host: str | None = None
    folder: str | None = None
    cpus: int | None = None
    memory_mb: int | None = None
    nics: list[NicChange] = field(default_factory=list)  # adapters added (or template ones removed) by the clone
    identity: GuestIdentity | None = None


@dataclass
class VmChange:
    """Everything to do to one VM; apply turns it into at most one clone and one ReconfigVM_Task."""

    vm: str
    clone: CloneSpec | None = None
    fields: list[FieldChange] = field(default_factory=list)
    devices: list[DeviceChange] = field(default_factory=list)
    extra_config: dict[str, str | None] = field(default_factory=dict)  # None removes the key
    power_off: bool = False  # the VM runs now and must be powered off for this change (disruptive)
    power_on: bool = False  # power the VM on at the end
    depends_on_hosts: list[str] = field(default_factory=list)  # host changes that must land first
    observed_key: str | None = None  # its key in Observed.vms when that is not `vm` (a name VMs share)
    # Its place in the plan's placement order (placement.power_on_key); apply powers on the VMs of one host in
    # this order. None for a VM that is not powered on or has no vGPUs.
    power_on_rank: int | None = None
    destroy: bool = False  # `state: absent`: powered off (power_off) and destroyed; `devices` list its vGPUs
    nics: list[NicChange] = field(default_factory=list)  # network adapters, in the same reconfigure

    @property
    def identity(self) -> GuestIdentity | None:
        return self.clone.identity if self.clone is not None else None

    @property
    def cloud_init(self) -> bool:
        """The clone learns its identity from guestinfo metadata, written by the reconfigure after the clone."""
        identity = self.identity
        return identity is not None and identity.method == "cloud-init"

    @property
    def needs_reconfigure(self) -> bool:
        return not self.destroy and bool(
            self.fields or self.devices or self.extra_config or self.nics or self.cloud_init
        )

    @property
    def is_empty(self) -> bool:
        return not (self.clone or self.needs_reconfigure or self.power_off or self.power_on or self.destroy)

    def planned_steps(self) -> list[VmStep]:
        """The steps this change asks of the VM, in order."""
        if self.destroy:
            return [*([VmStep.POWER_OFF] if self.power_off else []), VmStep.DESTROY]
        steps = [VmStep.CLONE] if self.clone is not None else []
        steps += [VmStep.POWER_OFF] if self.power_off else []
        steps += [VmStep.RECONFIGURE] if self.needs_reconfigure else []
        steps += [VmStep.POWER_ON] if self.power_on else []
        return steps


HOST_TARGET = "host"  # HostChange.target of a host-wide setting


@dataclass(frozen=True)
class EvacuationAction:
    """What happens to one running VM when its host enters maintenance mode (HostChange.new of an evacuation)."""

    kind: EvacuationKind
    destination: str | None = None  # MIGRATE: the host it moves to

    def __str__(self) -> str:
        if self.kind == EvacuationKind.MIGRATE:
            return f"migrate to {self.destination}"
        if self.kind == EvacuationKind.HAND_OVER:
            return "powered off, reconfigured and powered on by its VM change"
        if self.kind == EvacuationKind.STAYS_OFF:
            return "powered off for good (its entry has power: off)"
        return "powered off, on again after the host change"


@dataclass
class HostChange:
    """One host-side change: a host setting (graphics config, MIG mode, module options), a VM's evacuation, or
    the resumption of unfinished work. Host changes run first."""

    host: str
    kind: ChangeKind
    target: str  # GPU bus id, the VM an evacuation moves, or HOST_TARGET
    old: Any
    new: Any  # the setting's new value; an EvacuationAction for EVACUATE
    phase: Phase = Phase.MAINTENANCE

    @property
    def disruptive(self) -> bool:
        """The host enters maintenance mode for it."""
        return self.phase.disruptive

    @property
    def needs_reboot(self) -> bool:
        return self.phase == Phase.REBOOT

    @property
    def label(self) -> str:
        """`mig 0000:3b:00.0`, `nvlink`: the kind and, when it is not host-wide, its target."""
        return str(self.kind) if self.target == HOST_TARGET else f"{self.kind} {self.target}"


@dataclass(frozen=True)
class Problem:
    """One reason a plan cannot be applied: about one VM (`vm`), one host (`host`: a change planned there cannot be
    carried out, or the host cannot be planned) or the run as a whole (neither); `at` is the FILE:LINE:COL of the
    inventory key it is about, when one is. A host's messages name the host themselves."""

    message: str
    vm: str | None = None
    at: str | None = None
    host: str | None = None

    def __str__(self) -> str:
        text = f"vm {self.vm}: {self.message}" if self.vm is not None else self.message
        return f"{self.at}: {text}" if self.at else text


@dataclass(frozen=True)
class GuestDriverMove:
    """A guest driver a driver upgrade window installs in a running VM (through its guest group's driver role):
    from the version it reports (or its group declares) to `new`, from the group's file `src` (a controller path as
    the group's vars give it) with its `sha256`; `why` names the versions and NVIDIA's rule that ask for it."""

    vm: str
    group: str
    stage: WindowStage
    old: str
    new: str
    src: str
    sha256: str
    why: str


@dataclass(frozen=True)
class GuestDriverOutcome:
    """What a guest driver move of a window did in its VM: changed, or failed and why."""

    vm: str
    stage: WindowStage
    new: str
    status: Outcome
    message: str = ""


@dataclass
class UpgradeWindow:
    """A driver upgrade of hosts' vGPU Managers in the order NVIDIA allows (vgpuctl.hosts.window): guest drivers
    the new managers would refuse moved first, then the hosts in `batches` (max_unavailable at a time, the order
    apply takes them), then guest drivers to their group's release. `managers`: host -> [before, after]."""

    batches: list[list[str]] = field(default_factory=list)
    managers: dict[str, list[str]] = field(default_factory=dict)
    before: list[GuestDriverMove] = field(default_factory=list)
    after: list[GuestDriverMove] = field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        return [h for batch in self.batches for h in batch]

    @property
    def is_empty(self) -> bool:
        return not self.batches and not self.before and not self.after


@dataclass
class Plan:
    vm_changes: list[VmChange] = field(default_factory=list)
    host_changes: list[HostChange] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # the plan cannot be applied: one per reason
    warnings: list[str] = field(default_factory=list)
    # the hosts with changes in the waves apply changes them in (maintenance.max_unavailable at a time)
    host_waves: list[list[str]] = field(default_factory=list)
    window: UpgradeWindow | None = None  # a driver upgrade of vGPU Managers, with the guest drivers around it

    @property
    def errors(self) -> list[str]:
        """The problems as lines for people (`vm NAME: reason` for a VM's own)."""
        return [str(p) for p in self.problems]

    def refuse(self, messages: Iterable[str | Problem]) -> None:
        """Problems that name no single VM (lines, or problems of hosts), added before the plan's own."""
        self.problems[:0] = [m if isinstance(m, Problem) else Problem(m) for m in messages]

    @property
    def changes(self) -> list[VmChange]:
        return [c for c in self.vm_changes if not c.is_empty]

    @property
    def is_empty(self) -> bool:
        return not self.changes and not self.host_changes and (self.window is None or self.window.is_empty)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "host_changes": [asdict(c) for c in self.host_changes],
            "vm_changes": [asdict(c) for c in self.changes],
            "errors": list(self.errors),
            "warnings": list(self.warnings),
        }
        if self.window is not None and not self.window.is_empty:
            out["window"] = asdict(self.window)
        return out


def queue_order(changes: Sequence[VmChange]) -> list[int]:
    """The order apply's workers take VMs in: those that power on no vGPUs first (plan order), then by power-on
    rank (VmChange.power_on_rank)."""
    return sorted(range(len(changes)), key=lambda i: (changes[i].power_on_rank is not None,
                                                       changes[i].power_on_rank or 0, i))


# ----------------------------------------------------------------------------------------------- outcomes

INTERRUPTED = "interrupted"  # HostOutcome.phase of a host Ctrl-C stopped before a forward step
REFUSED_ERROR = "RefusedError"  # HostOutcome.error_type when `evacuate: refuse` stopped the host


@dataclass
class VmOutcome:
    vm: str
    status: Outcome = Outcome.UNCHANGED
    steps: list[VmStep] = field(default_factory=list)  # steps completed, in order
    fault_type: str | None = None
    message: str = ""
    left: list[VmStep] = field(default_factory=list)  # planned steps not done because the apply was interrupted
    stopped_by: StopReason | None = None  # not started: the change window's deadline had passed


class _NamesByOutcome:
    """The names of a result's entries by outcome; a result says how it reads them (`_names`)."""

    def _names(self, status: Outcome) -> list[str]:
        raise NotImplementedError

    @property
    def changed(self) -> list[str]:
        return self._names(Outcome.CHANGED)

    @property
    def failed(self) -> list[str]:
        return self._names(Outcome.FAILED)

    @property
    def skipped(self) -> list[str]:
        return self._names(Outcome.SKIPPED)

    @property
    def not_started(self) -> list[str]:
        return self._names(Outcome.NOT_STARTED)


@dataclass
class ApplyResult(_NamesByOutcome):
    vms: list[VmOutcome] = field(default_factory=list)
    interrupted: bool = False
    hosts_not_ready: list[str] = field(default_factory=list)  # host changes failed or not applied
    round_trips: int = 0
    elapsed_s: float = 0.0

    def _names(self, status: Outcome) -> list[str]:
        return [o.vm for o in self.vms if o.status == status]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.interrupted and not self.hosts_not_ready

    def to_dict(self) -> dict[str, Any]:
        return {
            "vms": [o.__dict__ for o in self.vms],
            "changed": self.changed,
            "failed": self.failed,
            "skipped": self.skipped,
            "not_started": self.not_started,
            "interrupted": self.interrupted,
            "hosts_not_ready": self.hosts_not_ready,
            "round_trips": self.round_trips,
            "elapsed_s": round(self.elapsed_s, 3),
        }


@dataclass
class HostOutcome:
    host: str
    status: Outcome = Outcome.UNCHANGED
    steps: list[str] = field(default_factory=list)
    phase: str = ""  # where it stopped (failed) or "done"
    message: str = ""
    error_type: str | None = None
    in_maintenance: bool | None = None
    vms_to_restore: list[str] = field(default_factory=list)
    powered_off: list[str] = field(default_factory=list)
    powered_on: list[str] = field(default_factory=list)
    not_restored: dict[str, str] = field(default_factory=dict)  # VM -> why it is still off
    handed_over: list[str] = field(default_factory=list)  # powered off for their own VM change
    migrated: list[str] = field(default_factory=list)  # "vm -> destination host"
    rebooted: bool = False
    stopped_by: StopReason | None = None  # not started: the deadline passed, or maintenance.max_failures was reached

    @property
    def configured(self) -> bool:
        """The host's GPU configuration is done (also when only powering VMs on again failed)."""
        return self.status in (Outcome.CHANGED, Outcome.UNCHANGED) or self.phase == "power-on"

    def describe(self) -> str:
        if self.phase == INTERRUPTED:
            return f"{self.host}: {self.message}\n  to continue: run the same apply again"
        if self.status == Outcome.NOT_STARTED:
            return f"{self.host}: not started" + (f" ({self.message})" if self.message else "")
        if self.status != Outcome.FAILED:
            return f"{self.host}: {self.status}" + (f" ({', '.join(self.steps)})" if self.steps else "")
        lines = [f"{self.host}: failed at {self.phase}: {self.message}"]
        state = []
        if self.in_maintenance:
            state.append("left in maintenance mode")
        elif self.in_maintenance is False:
            state.append("not in maintenance mode")
        if self.steps:
            state.append("done before: " + ", ".join(self.steps))
        if self.vms_to_restore:
            state.append("VMs to power on again: " + ", ".join(self.vms_to_restore))
        if self.not_restored:
            state.append("still off: " + "; ".join(f"{vm} ({why})" for vm, why in sorted(self.not_restored.items())))
        if state:
            lines.append(f"  state: {'; '.join(state)}")
        if self.error_type != REFUSED_ERROR:
            lines.append("  run apply again to continue from there")
        return "\n".join(lines)


@dataclass
class HostApplyResult(_NamesByOutcome):
    hosts: list[HostOutcome] = field(default_factory=list)

    def _names(self, status: Outcome) -> list[str]:
        return [o.host for o in self.hosts if o.status == status]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.skipped and not self.not_started

    @property
    def done_hosts(self) -> set[str]:
        """Hosts whose GPU configuration is done (their VMs can be planned against them as they are)."""
        return {o.host for o in self.hosts if o.configured}

    def to_dict(self) -> dict[str, Any]:
        return {
            "hosts": [asdict(o) for o in self.hosts],
            "changed": self.changed,
            "failed": self.failed,
            "skipped": self.skipped,
            "not_started": self.not_started,
        }


@dataclass
class ChangeOutcome:
    """One VM-class or namespace change as applied."""

    target: str  # "vm class NAME" or "namespace NAME"
    action: str  # create | update | delete | associate
    status: str  # changed | failed | skipped
    message: str = ""


@dataclass
class SupervisorApplyResult:
    outcomes: list[ChangeOutcome] = field(default_factory=list)

    @property
    def failed(self) -> list[ChangeOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]
