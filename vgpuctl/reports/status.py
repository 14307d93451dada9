"""The status, host, profiles and `vm vgpu list` documents."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from vgpuctl.model import Observed, ObservedGpu, ObservedHost, ObservedVm
from vgpuctl.profiles import ProfileError, VgpuProfile, board_for_device, gi_geometry, parse_profile
from vgpuctl.reports.base import TERMINAL, Rendered, Report, TextLayout, VgpuCount, optional, vgpu_counts
from vgpuctl.reports.plan import sorted_counts
from vgpuctl.supervisor.vmclasses import SupervisorState

if TYPE_CHECKING:
    from rich.console import RenderableType


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

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        options = self.module_options
        next_boot = "" if options.configured == options.effective else f" (next boot: {options.configured or '(none)'})"
        nvlink_later = f" ({self.nvlink_after_reboot} after reboot)" if self.nvlink_after_reboot else ""
        scheduler_later = f" ({self.scheduler_after_reboot} after reboot)" if self.scheduler_after_reboot else ""
        lines = [
            f"host {self.host}: {self.connection_state}" + (", in maintenance mode" if self.in_maintenance else ""),
            f"  graphics: default {self.default_graphics_type}, assignment {self.assignment_policy}",
            f"  nvlink: {self.nvlink}{nvlink_later}",
            f"  scheduler: {self.scheduler}{scheduler_later}",
            f"  nvidia module options: {options.effective or '(none)'}{next_boot}",
            "  GPUs:",
        ]
        for g in self.gpus:
            links = "" if not g.nvlink_links else f", NVLink {g.nvlink_active}/{g.nvlink_links} up"
            peers = f" to {', '.join(g.nvlink_peers)}" if g.nvlink_peers else ""
            vms = f", VMs: {', '.join(g.vms)}" if g.vms else ""
            mig = mig_text(g.mig_current, g.mig_pending)
            lines.append(f"    {g.gpu} {g.device}: {g.graphics_type}, {g.vgpu_mode}, MIG {mig}{links}{peers}{vms}")
        return "\n".join(lines)


def mig_text(current: bool | None, pending: bool | None) -> str:
    if current is None:
        return "n/a"
    text = "on" if current else "off"
    if pending is not None and pending != current:
        text += f" ({'on' if pending else 'off'} pending)"
    return text


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

    def render_text(self, layout: TextLayout = TERMINAL) -> Rendered:
        """Hosts, a GPU map per host, the VMs with vGPUs, the VM classes: laid out for the terminal's width,
        or plain lines (vgpuctl.reports.statusview)."""
        from vgpuctl.reports.statusview import render_status

        return render_status(self, layout.width, layout.plain)


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

    def render_text(self, layout: TextLayout = TERMINAL) -> list[RenderableType]:
        """One table per distinct set of profiles, titled with the hosts that offer it (64 equal hosts: one)."""
        from rich.text import Text

        groups: dict[str, tuple[list[str], list[ProfileRow]]] = {}
        for h in self.hosts:
            groups.setdefault(repr(h.profiles), ([], h.profiles))[0].append(h.host)
        out: list[RenderableType] = []
        for names, rows in groups.values():
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            out.append(_profiles_table(shown, rows) if rows else Text(f"{shown}: no vGPU profiles offered"))
        return out


def _profiles_table(shown: str, rows: list[ProfileRow]) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"Profiles on {shown}", title_justify="left")
    for col in ("profile", "framebuffer", "series", "sharing", "max per GPU"):
        table.add_column(col)
    for r in rows:
        fb = f"{r.fb_gb} GB" if r.fb_gb is not None else "?"
        sharing = "MIG" if r.sharing == "mig" else "time-sliced"
        limit = str(r.max_per_gpu) if r.max_per_gpu is not None else "?"
        table.add_row(*map(Text, (r.profile, fb, r.series or "?", sharing, limit)))
    return table


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

    def render_text(self, layout: TextLayout = TERMINAL) -> Rendered:
        from rich.table import Table
        from rich.text import Text

        title = f"{self.vm} on {self.host or '-'} ({self.power_state})"
        if not self.devices:
            return Text(f"{title}: no vGPUs")
        table = Table(title=title, title_justify="left")
        for col in ("key", "profile", "framebuffer", "NVLink group"):
            table.add_column(col)
        for d in self.devices:
            group = "-" if d.nvlink_group is None else str(d.nvlink_group)
            table.add_row(*map(Text, (str(d.key), d.profile, f"{d.fb_gb} GB", group)))
        out: list[RenderableType] = [table]
        if self.gpus:
            out.append(Text(f"on GPUs: {', '.join(self.gpus)}"))
        return out


# ------------------------------------------------------------------------------------------ building it

KB_PER_GB = 1024 * 1024


def gpu_gb(gpu: ObservedGpu) -> int:
    return round(gpu.memory_kb / KB_PER_GB)


def gpu_mode(gpu: ObservedGpu) -> str:
    if gpu.vgpu_mode == "multiInstanceGpu":
        return "mig"
    if gpu.vgpu_mode in ("sameSize", "mixedSize"):
        return f"time-sliced ({gpu.vgpu_mode})"
    return "time-sliced"


def whole(gb: float) -> float:
    """20.0 -> 20 for the documents; fractions (0.5 GB profiles) stay."""
    return int(gb) if float(gb).is_integer() else gb


def profile_fb(name: str, host: ObservedHost | None) -> float:
    """A profile's framebuffer as the host describes it, else from its name (0 when neither knows)."""
    if host is not None and name in host.profiles:
        return whole(host.profiles[name].fb_gb)
    try:
        return whole(parse_profile(name).fb_gb)
    except ProfileError:
        return 0


def gpu_occupancy(observed: Observed, host: ObservedHost) -> dict[str, list[GpuVm]]:
    """(vm, profile) per GPU pci id. graphicsInfo says which VMs sit on a GPU, not which of a VM's vGPUs:
    each vGPU of a VM is on its own GPU, so a VM's vGPUs (largest first) are matched to its GPUs in PCI order,
    which is exact whenever a VM's vGPUs share one profile; otherwise each pairing is marked `guessed`."""
    by_vm: dict[str, list[str]] = {}
    for gpu in sorted(host.gpus, key=lambda g: g.pci_id):
        for held_by in gpu.vms:
            by_vm.setdefault(held_by, []).append(gpu.pci_id)
    occupancy: dict[str, list[GpuVm]] = {g.pci_id: [] for g in host.gpus}
    for vm_name, pci_ids in by_vm.items():
        vm = observed.vms.get(vm_name)
        profiles = sorted((d.profile for d in vm.vgpus), key=lambda p: -profile_fb(p, host)) if vm else []
        guessed = len(set(profiles)) > 1
        for i, pci in enumerate(pci_ids):
            occupancy[pci].append(GpuVm(vm_name, profiles[i] if i < len(profiles) else "", guessed))
    return occupancy


def _status_gpu(index: int, gpu: ObservedGpu, held: list[GpuVm], host: ObservedHost) -> StatusGpu:
    used_gb = whole(sum(profile_fb(v.profile, host) for v in held))
    return StatusGpu(
        index=index,
        gpu=gpu.pci_id,
        model=gpu.device_name,
        graphics_type=gpu.graphics_type,
        vgpu_mode=gpu.vgpu_mode,
        mode=gpu_mode(gpu),
        nvlink_group=gpu.nvlink_set,
        fb_gb=gpu_gb(gpu),
        used_gb=used_gb,
        free_gb=whole(max(gpu_gb(gpu) - used_gb, 0)),
        vgpus=vgpu_counts(v.profile for v in held if v.profile),
        vms=held,
    )


def _status_host(observed: Observed, host: ObservedHost) -> StatusHost:
    occupancy = gpu_occupancy(observed, host)
    gpus = sorted(host.gpus, key=lambda g: g.pci_id)
    return StatusHost(
        host=host.name,
        cluster=host.cluster,
        connection_state=host.connection_state,
        in_maintenance=host.in_maintenance,
        power_state=host.power_state,
        default_graphics_type=host.default_graphics_type,
        assignment_policy=host.assignment_policy,
        gpus=[_status_gpu(i, g, occupancy.get(g.pci_id, []), host) for i, g in enumerate(gpus)],
        vgpu_types=len(host.offered_profiles),
    )


def status_report(observed: Observed, round_trips: int | None = None) -> StatusReport:
    """Hosts with their GPU maps, and every VM (templates left out) with its vGPUs."""
    vms = [
        StatusVm(vm.name, vm.host, vm.cluster, vm.folder, str(vm.power_state), vgpu_counts(d.profile for d in vm.vgpus))
        for vm in sorted(observed.vms.values(), key=lambda v: v.name)
        if not vm.is_template
    ]
    hosts = [_status_host(observed, h) for h in sorted(observed.hosts.values(), key=lambda h: h.name)]
    return StatusReport(observed.datacenter, observed.api_version, hosts, vms, round_trips)


def vm_vgpus_report(observed: Observed, vm: ObservedVm, round_trips: int | None = None) -> VmVgpusReport:
    """One VM's vGPUs: each device with its framebuffer and NVLink group, and the GPUs of its host it sits on."""
    host = observed.hosts.get(vm.host or "")
    return VmVgpusReport(
        vm=vm.name,
        host=vm.host,
        power_state=str(vm.power_state),
        vgpus=vgpu_counts(d.profile for d in vm.vgpus),
        devices=[VmDevice(d.key, d.profile, profile_fb(d.profile, host), d.device_group_key) for d in vm.vgpus],
        gpus=sorted(g.pci_id for g in (host.gpus if host else []) if vm.name in g.vms),
        round_trips=round_trips,
    )


# ------------------------------------------------------------------------------------------ profiles


def max_per_gpu(profile: VgpuProfile, sharing: str, host: ObservedHost) -> int | None:
    """How many vGPUs of this profile one GPU of the host can hold (MIG: placements of its GI profile)."""
    boards = {board_for_device(g.device_name, gpu_gb(g)): g for g in host.gpus}
    gpu = boards.get(profile.board)
    if sharing == "mig" or profile.is_mig:
        geometry = gi_geometry(profile.board, profile.gi_profile or "")
        return len(geometry.starts) if geometry else None
    if gpu is None or not profile.fb_gb:
        return None
    return int(gpu_gb(gpu) // profile.fb_gb)


def _profile_row(name: str, host: ObservedHost) -> ProfileRow:
    info = host.profiles.get(name)
    try:
        parsed: VgpuProfile | None = parse_profile(name)
    except ProfileError:
        parsed = None
    sharing = info.sharing if info else ("mig" if parsed and parsed.is_mig else "timeSliced")
    return ProfileRow(
        profile=name,
        fb_gb=profile_fb(name, host) if info or parsed else None,
        series=parsed.series.upper() if parsed else None,
        board=parsed.board if parsed else None,
        sharing=sharing,
        profile_class=info.profile_class if info else None,
        max_per_gpu=max_per_gpu(parsed, sharing, host) if parsed else None,
    )


def host_profiles(host: ObservedHost) -> list[ProfileRow]:
    """The profiles the host's GPUs offer in their current modes."""
    return [_profile_row(name, host) for name in sorted(host.offered_profiles)]


def profiles_report(hosts: list[ObservedHost], round_trips: int | None = None) -> ProfilesReport:
    return ProfilesReport([HostProfiles(h.name, host_profiles(h)) for h in hosts], round_trips)


# ------------------------------------------------------------------------------------------ VM classes


def status_vm_classes(state: SupervisorState) -> list[StatusVmClass]:
    """The VM classes that have vGPUs, each with the namespaces allowed to use it (classes without vGPUs left out)."""
    rows = []
    for name in sorted(state.classes):
        c = state.classes[name]
        if not c.vgpus:
            continue
        users = sorted(n.name for n in state.namespaces.values() if name in n.vm_classes)
        rows.append(StatusVmClass(name, sorted_counts(c.vgpus), c.cpus, c.memory_mb, users))
    return rows


def with_supervisor(report: StatusReport, state: SupervisorState | None, problem: str | None = None) -> StatusReport:
    """`status` with the VM classes read over REST, or with the reason they could not be read as a warning."""
    if state is not None:
        report.vm_classes = status_vm_classes(state)
        report.supervisor_clusters = sorted(state.supervisor_clusters.values())
    if problem:
        report.warnings.append(f"VM classes not read: {problem}")
    return report
