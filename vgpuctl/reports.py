"""The documents vgpuctl prints: one dataclass per report, `to_dict()` for JSON, a text renderer beside it.

One vocabulary in every document (snake_case): `kind` names the report; `vm`, `folder`, `host`, `cluster`,
`gpu` (PCI id), `profile`, `fb_gb`, `vgpus` (a list of {profile, count}), `nvlink_group`. Errors are
`{"error": {"type", "message", "details": [...]}}`. Fields marked `optional()` are left out when None
(diagnostics such as round trips appear only with -v). docs/schemas/ holds the JSON Schemas generated from
these types (vgpuctl.schemas).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from vgpuctl.domain import Outcome
from vgpuctl.hosts.apply import HostOutcome
from vgpuctl.vms.apply import VmOutcome

Scalar = str | int | float | bool | None


def optional(default: Any = None) -> Any:
    """A field left out of the JSON document while it is None."""
    return field(default=default, metadata={"omit_none": True})


def to_json(value: Any) -> Any:
    """Dataclasses, enums, lists and dicts to plain JSON data; optional() fields dropped while None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = to_json(item)
        return out
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


class Report:
    """Base of the printed documents: `kind` first, then the fields."""

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **to_json(self)}


@dataclass
class VgpuCount:
    profile: str
    count: int


def vgpu_counts(profiles: Iterable[str]) -> list[VgpuCount]:
    """Profiles in the order they first appear, with how many of each."""
    return [VgpuCount(p, n) for p, n in Counter(profiles).items()]


# ------------------------------------------------------------------------------------------ errors


@dataclass
class ErrorDetail:
    message: str
    file: str | None = optional()
    line: int | None = optional()
    col: int | None = optional()
    path: str | None = optional()  # key path in the inventory, e.g. vms[2].vgpus


@dataclass
class ErrorInfo:
    type: str
    message: str
    details: list[ErrorDetail] = field(default_factory=list)


@dataclass
class ErrorReport:
    """`{"error": {...}}`: the only document of a command that failed."""

    error: ErrorInfo

    def to_dict(self) -> dict[str, Any]:
        return {"error": to_json(self.error)}


# ------------------------------------------------------------------------------------------ validate


@dataclass
class ValidateReport(Report):
    kind: ClassVar[str] = "validate"
    file: str
    valid: bool
    hosts: int  # host entries
    vms: int  # VMs after name ranges are expanded
    vm_classes: int = 0
    namespaces: int = 0


# ------------------------------------------------------------------------------------------ plan


@dataclass
class HostDiff:
    """One host setting that changes; `gpu` is None for host-wide settings."""

    host: str
    setting: str  # graphics kinds, mig, nvlink, scheduler, resume
    gpu: str | None
    old: Scalar
    new: Scalar
    disruptive: bool
    needs_reboot: bool


@dataclass
class FieldDiff:
    field: str
    op: str  # + ~ -
    old: Scalar
    new: Scalar


@dataclass
class DeviceDiff:
    op: str  # + or -
    profile: str
    key: int | None  # the existing device of a removal
    nvlink_group: int | None  # adds with the same number form one NVLink device group


@dataclass
class CloneDiff:
    template: str
    cluster: str | None
    host: str | None
    folder: str | None
    cpus: int | None
    memory_mb: int | None


@dataclass
class VmDiff:
    vm: str
    steps: list[str]  # clone, power-off, reconfigure, power-on
    clone: CloneDiff | None
    fields: list[FieldDiff]
    devices: list[DeviceDiff]
    extra_config: dict[str, str | None]  # None removes the key
    power_off: bool
    power_on: bool
    depends_on_hosts: list[str]


@dataclass
class Disruption:
    """A disruptive step apply will take: a host entering maintenance mode or rebooting, or a running VM powered
    off (to evacuate its host, or for its own change), and whether the VM runs again afterwards."""

    action: str  # maintenance | reboot | power-off
    host: str | None  # the host changed (None: a VM powered off for its own change)
    vm: str | None  # the VM powered off (None: a host step)
    cause: str  # host change | evacuation | own change
    comes_back: bool  # host out of maintenance / VM powered on again by this apply
    detail: str


@dataclass
class PlanSummary:
    create: int
    change: int
    power_off: int  # VMs powered off, for their own change or to evacuate a host
    power_on: int
    host_changes: int
    maintenance: int  # hosts entering maintenance mode
    reboots: int
    errors: int
    warnings: int
    vm_classes: int = 0  # VM classes to create, update or delete
    namespaces: int = 0  # supervisor namespaces whose VM classes change


@dataclass
class VmClassDiff:
    """A VM class created (+), updated (~) or deleted (-); `fields` are its sizes and reservations (old None on a
    create), `vgpus_added`/`vgpus_removed` its vGPU devices."""

    vm_class: str
    op: str  # + ~ -
    fields: list[FieldDiff]
    vgpus_added: list[VgpuCount]
    vgpus_removed: list[VgpuCount]
    extra_config: dict[str, str | None]  # None removes the key


@dataclass
class NamespaceDiff:
    """VM classes associated with (`add`) and taken from (`remove`) a supervisor namespace."""

    namespace: str
    add: list[str]
    remove: list[str]


@dataclass
class PlanReport(Report):
    kind: ClassVar[str] = "plan"
    host_changes: list[HostDiff]
    vm_changes: list[VmDiff]
    disruptions: list[Disruption]
    errors: list[str]
    warnings: list[str]
    summary: PlanSummary
    round_trips: int | None = optional()
    vm_classes: list[VmClassDiff] = field(default_factory=list)  # in apply order: after hosts and VMs
    namespaces: list[NamespaceDiff] = field(default_factory=list)


@dataclass
class ExplainedValue:
    setting: str  # graphics.default_type, gpus[all].mode, scheduler.policy, ...
    value: str  # as the merged entries say
    source: str  # FILE:LINE (cluster X | host Y): the entry that set it last
    vcenter: str | None  # what vCenter or the host reports now; None for vgpuctl's own settings (ssh, ...)


@dataclass
class ExplainReport(Report):
    """`plan --explain HOST`: the host's merged entry against vCenter, and what the plan changes there."""

    kind: ClassVar[str] = "explain"
    host: str
    cluster: str | None
    entries: list[str]  # the inventory entries that apply to the host, merged in this order
    settings: list[ExplainedValue]
    changes: list[HostDiff]
    errors: list[str]


# ------------------------------------------------------------------------------------------ apply


@dataclass
class ApplyReport(Report):
    """What an apply did: the plan it confirmed, each host and VM, and the VM plan's errors after the hosts."""

    kind: ClassVar[str] = "apply"
    plan: PlanReport
    hosts: list[HostOutcome]
    vms: list[VmOutcome]
    changed: list[str]
    failed: list[str]
    skipped: list[str]
    unchanged: list[str]
    not_started: list[str]  # an interrupted apply, or a VM plan after the hosts that failed, never began them
    hosts_not_ready: list[str]
    vm_errors: list[str]
    interrupted: bool
    vm: str | None = optional()  # `vm vgpu add/remove`: the VM changed
    round_trips: int | None = optional()


def vm_names(vms: Iterable[VmOutcome], status: Outcome) -> list[str]:
    return [o.vm for o in vms if o.status == status]


# ------------------------------------------------------------------------------------------ hosts


@dataclass
class AffectedVm:
    vm: str
    vgpus: list[VgpuCount]


@dataclass
class HostChangeReport(Report):
    """`host graphics/mig/nvlink/scheduler`: the changes, the running VMs they affect, and the outcome."""

    kind: ClassVar[str] = "host-change"
    host: str
    changes: list[HostDiff]
    affected_vms: list[AffectedVm]
    result: HostOutcome | None


@dataclass
class ModuleOptions:
    configured: str  # for the next boot
    effective: str  # of the loaded module


@dataclass
class HostGpu:
    gpu: str
    device: str
    graphics_type: str
    vgpu_mode: str
    mig_current: bool | None  # None: not MIG-capable, or the shell was not read
    mig_pending: bool | None
    nvlink_links: int | None
    nvlink_active: int | None
    nvlink_peers: list[str]
    vms: list[str]


@dataclass
class HostReport(Report):
    """`host show`: one host's GPU state from the API and the ESXi shell."""

    kind: ClassVar[str] = "host"
    host: str
    connection_state: str
    in_maintenance: bool
    default_graphics_type: str
    assignment_policy: str
    module_options: ModuleOptions
    nvlink: str
    scheduler: str
    gpus: list[HostGpu]
    nvlink_after_reboot: str | None = optional()
    scheduler_after_reboot: str | None = optional()
    shell_error: str | None = optional()


# ------------------------------------------------------------------------------------------ status


@dataclass
class GpuVm:
    vm: str
    profile: str
    guessed: bool = False  # vSphere names the VMs on a GPU, not which of a VM's vGPUs: a VM mixing profiles


@dataclass
class StatusGpu:
    index: int
    gpu: str
    model: str
    graphics_type: str
    vgpu_mode: str
    mode: str  # time-sliced (sameSize|mixedSize) or mig
    nvlink_group: int | None  # the NVLink-connected set the GPU belongs to
    fb_gb: int
    used_gb: float
    free_gb: float
    vgpus: list[VgpuCount]
    vms: list[GpuVm]
    mig: str | None = optional()  # on / off / "off (on pending)"
    mig_current: bool | None = optional()
    mig_pending: bool | None = optional()
    nvlink_links: int | None = optional()
    nvlink_active: int | None = optional()
    nvlink_peers: list[str] | None = optional()  # noqa: RUF009 - None, not a shared list


@dataclass
class StatusHost:
    host: str
    cluster: str | None
    connection_state: str
    in_maintenance: bool
    power_state: str
    default_graphics_type: str
    assignment_policy: str
    gpus: list[StatusGpu]
    vgpu_types: int = 0  # vGPU types the host offers; 0 on a GPU host: no NVIDIA vGPU Manager (or not Shared Direct)
    nvlink: str | None = optional()
    nvlink_after_reboot: str | None = optional()
    scheduler: str | None = optional()
    scheduler_after_reboot: str | None = optional()
    shell_error: str | None = optional()


@dataclass
class StatusVm:
    vm: str
    host: str | None
    cluster: str | None
    folder: str | None
    power_state: str
    vgpus: list[VgpuCount]


@dataclass
class StatusVmClass:
    """A VM class with vGPUs and the supervisor namespaces that may use it."""

    vm_class: str
    vgpus: list[VgpuCount]
    cpus: int
    memory_mb: int
    namespaces: list[str]


@dataclass
class StatusReport(Report):
    kind: ClassVar[str] = "status"
    datacenter: str
    api_version: str
    hosts: list[StatusHost]
    vms: list[StatusVm]
    round_trips: int | None = optional()
    vm_classes: list[StatusVmClass] = field(default_factory=list)
    supervisor_clusters: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. VM classes that could not be read


# ------------------------------------------------------------------------------------------ profiles


@dataclass
class ProfileRow:
    profile: str
    fb_gb: float | None
    series: str | None
    board: str | None
    sharing: str  # timeSliced | mig
    profile_class: str | None  # compute | quadro
    max_per_gpu: int | None


@dataclass
class HostProfiles:
    host: str
    profiles: list[ProfileRow]


@dataclass
class ProfilesReport(Report):
    kind: ClassVar[str] = "profiles"
    hosts: list[HostProfiles]
    round_trips: int | None = optional()


# ------------------------------------------------------------------------------------------ one VM


@dataclass
class VmDevice:
    key: int
    profile: str
    fb_gb: float
    nvlink_group: int | None  # the device group instance key, for NVLink-grouped vGPUs


@dataclass
class VmVgpusReport(Report):
    """`vm vgpu list`: one VM's vGPUs, their devices and the GPUs they sit on."""

    kind: ClassVar[str] = "vm-vgpus"
    vm: str
    host: str | None
    power_state: str
    vgpus: list[VgpuCount]
    devices: list[VmDevice]
    gpus: list[str]
    round_trips: int | None = optional()


# ------------------------------------------------------------------------------------------ guests


@dataclass
class GuestResult:
    vm: str
    group: str
    status: str  # ok | changed | failed | unreachable
    ok: int
    changed: int
    failed: int
    unreachable: int
    skipped: int
    message: str


@dataclass
class GuestRunReport(Report):
    """`guest deploy`: each guest's playbook result."""

    kind: ClassVar[str] = "guests"
    guests: list[GuestResult]
    check: bool
    runner_status: str
    rc: int
    artifacts: str | None


@dataclass
class ProvisionReport(Report):
    kind: ClassVar[str] = "provision"
    apply: ApplyReport
    guests: GuestRunReport | None  # None: no VM has a guest group


REPORTS: tuple[type[Any], ...] = (
    GuestRunReport,
    ProvisionReport,
    ValidateReport,
    PlanReport,
    ExplainReport,
    ApplyReport,
    HostChangeReport,
    HostReport,
    StatusReport,
    ProfilesReport,
    VmVgpusReport,
    ErrorReport,
)
