"""The status, host, profiles and `vm vgpu list` documents."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from vgpuctl.domain import TIME_SLICED_MODES, GpuMode, GpuVgpuMode, ProfileSharing, VgpuMode
from vgpuctl.model import Observed, ObservedGpu, ObservedHost, ObservedVm
from vgpuctl.profiles import ProfileError, VgpuProfile, board_for_device, observed_profile, parse_profile, try_parse
from vgpuctl.profiles import max_per_gpu as profiles_max
from vgpuctl.reports.base import TERMINAL, Rendered, Report, TextLayout, VgpuCount, optional, vgpu_counts, whole
from vgpuctl.reports.plan import sorted_counts
from vgpuctl.supervisor.vmclasses import SupervisorState

if TYPE_CHECKING:
    from rich.console import RenderableType


@dataclass
class ModuleOptions:
    configured: str  # for the next boot
    effective: str  # of the loaded module


@dataclass
class SettingValue:
    """One host setting's value (vgpuctl.hosts.settings), and what it will be after the next reboot when that
    differs (a module option written but not yet loaded)."""

    setting: str  # display key: nvlink, scheduler, graphics.default_type, ...
    value: str
    after_reboot: str | None = optional()


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
    settings: list[SettingValue] = field(default_factory=list)  # every host-wide setting, in registry order

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
        ]
        shown = {"graphics.default_type", "graphics.assignment_policy", "nvlink", "scheduler"}  # the lines above
        for v in self.settings:
            if v.setting not in shown:
                later = f" ({v.after_reboot} after reboot)" if v.after_reboot else ""
                lines.append(f"  {v.setting}: {v.value}{later}")
        lines += [f"  nvidia module options: {options.effective or '(none)'}{next_boot}", "  GPUs:"]
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
    mig_capable: bool | None = optional()  # the board supports MIG (the catalogue); None: board unknown


@dataclass
class HostLease:
    """Another vgpuctl run that holds the host now (its live lease): the run's id, who runs it, since when and
    until when unless it renews the lease (UTC, ISO 8601)."""

    run: str
    holder: str
    since: str
    until: str

    def describe(self) -> str:
        return f"held by run {self.run} of {self.holder} since {self.since}, lease until {self.until}"


def host_lease(run: str, holder: str, since: float, renewed: float, ttl_s: float) -> HostLease:
    """A lease as the documents show it (times are vCenter's clock, seconds since the epoch)."""
    from datetime import UTC, datetime

    def stamp(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")

    return HostLease(run, holder, stamp(since), stamp(renewed + ttl_s))


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
    settings: list[SettingValue] | None = optional()  # noqa: RUF009 - with the host facts: every host-wide setting
    held: HostLease | None = field(default=None, metadata={"omit_none": True})  # another run works on it


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

    def render_text(self, layout: TextLayout = TERMINAL) -> Rendered:
        """One table per distinct set of profiles, titled with the hosts that offer it (64 equal hosts: one); in
        a pipe, one plain line per host and profile (every host named, nothing cut)."""
        from rich.text import Text

        if layout.plain:
            return "\n".join(f"host {h.host}  " + _profile_line(r) for h in self.hosts for r in h.profiles) or \
                "no vGPU profiles offered"
        groups: dict[str, tuple[list[str], list[ProfileRow]]] = {}
        for h in self.hosts:
            groups.setdefault(repr(h.profiles), ([], h.profiles))[0].append(h.host)
        out: list[RenderableType] = []
        for names, rows in groups.values():
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            out.append(_profiles_table(shown, rows) if rows else Text(f"{shown}: no vGPU profiles offered"))
        return out


def _profile_cells(r: ProfileRow) -> tuple[str, str, str, str, str]:
    fb = f"{r.fb_gb} GB" if r.fb_gb is not None else "?"
    sharing = "MIG" if r.sharing == ProfileSharing.MIG else "time-sliced"
    limit = str(r.max_per_gpu) if r.max_per_gpu is not None else "?"
    return r.profile, fb, r.series or "?", sharing, limit


def _profile_line(r: ProfileRow) -> str:
    profile, fb, series, sharing, limit = _profile_cells(r)
    return f"profile {profile}  framebuffer {fb}  series {series}  sharing {sharing}  max per GPU {limit}"


def _profiles_table(shown: str, rows: list[ProfileRow]) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"Profiles on {shown}", title_justify="left")
    for col in ("profile", "framebuffer", "series", "sharing", "max per GPU"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(*map(Text, _profile_cells(r)))
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
        if layout.plain:
            return self.plain_text()
        if not self.devices:
            return Text(f"{title}: no vGPUs")
        table = Table(title=title, title_justify="left")
        for col in ("key", "profile", "framebuffer", "NVLink group"):
            table.add_column(col, overflow="fold")
        for d in self.devices:
            group = "-" if d.nvlink_group is None else str(d.nvlink_group)
            table.add_row(*map(Text, (str(d.key), d.profile, f"{d.fb_gb} GB", group)))
        out: list[RenderableType] = [table]
        if self.gpus:
            out.append(Text(f"on GPUs: {', '.join(self.gpus)}"))
        return out

    def plain_text(self) -> str:
        """One line for the VM, one per vGPU device, one for its GPUs."""
        lines = [f"vm {self.vm}  host {self.host or '-'}  power {self.power_state}  vgpus {len(self.devices)}"]
        for d in self.devices:
            group = "-" if d.nvlink_group is None else str(d.nvlink_group)
            lines.append(f"  vgpu key {d.key}  profile {d.profile}  framebuffer {d.fb_gb} GB  nvlink group {group}")
        if self.gpus:
            lines.append(f"  on GPUs {', '.join(self.gpus)}")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------ building it

KB_PER_GB = 1024 * 1024


def gpu_gb(gpu: ObservedGpu) -> int:
    return round(gpu.memory_kb / KB_PER_GB)


def gpu_mode(gpu: ObservedGpu) -> str:
    if gpu.vgpu_mode == GpuVgpuMode.MIG:
        return str(GpuMode.MIG)
    if gpu.vgpu_mode in TIME_SLICED_MODES:
        return f"{GpuMode.TIME_SLICED} ({gpu.vgpu_mode})"
    return str(GpuMode.TIME_SLICED)


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
        mig_capable=mig_capable(gpu, host),
    )


def mig_capable(gpu: ObservedGpu, host: ObservedHost) -> bool | None:
    """Whether the GPU's board supports MIG (catalogue); None when the board is not known."""
    from vgpuctl.profiles import BOARDS, board_for_device

    board = board_for_device(gpu.device_name, gpu.memory_kb / KB_PER_GB or None, gpu.device_id,
                             host.offered_profiles)
    return BOARDS[board].mig_capable if board is not None and board in BOARDS else None


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
    """How many vGPUs of this profile one GPU of the host holds at most in its current mode: what the host reports
    for the type, else NVIDIA's maximum from the catalogue (profiles.max_per_gpu) for the mode of the host's GPUs
    of the type's board that can serve it (MIG ones for a MIG-backed type, time-sliced ones otherwise). GPUs in
    both equal-size and mixed-size mode: the smaller maximum."""
    reported = host.profiles.get(profile.name)
    if reported is not None and reported.max_per_gpu is not None:
        return reported.max_per_gpu
    mig = sharing == ProfileSharing.MIG or profile.is_mig
    gpus = [g for g in host.gpus if (g.vgpu_mode == GpuVgpuMode.MIG) == mig
            and board_for_device(g.device_name, gpu_gb(g), g.device_id, host.offered_profiles) == profile.board]
    maxima = {profiles_max(profile, g.vgpu_mode, gpu_gb(g)) for g in gpus}
    maxima = maxima or {profiles_max(profile, VgpuMode.SAME_SIZE)}
    known = [m for m in maxima if m is not None]
    return min(known) if known and len(known) == len(maxima) else None


def _profile_row(name: str, host: ObservedHost) -> ProfileRow:
    info = host.profiles.get(name)
    try:
        parsed: VgpuProfile | None = parse_profile(name)
    except ProfileError:
        parsed = None
    mig = parsed is not None and parsed.is_mig
    sharing = info.sharing if info else str(ProfileSharing.MIG if mig else ProfileSharing.TIME_SLICED)
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
    """The profiles the host's GPUs offer in their current modes, by board and sharing, then by size (5, 10,
    20, 40 GB, not as the names sort); names no table explains last."""
    rows = [_profile_row(name, host) for name in host.offered_profiles]
    return sorted(rows, key=lambda r: (r.board is None, r.board or "", r.sharing, r.fb_gb is None, r.fb_gb or 0,
                                       r.series or "", r.profile))


def with_reported_maxima(host: ObservedHost, instance_totals: dict[str, int]) -> None:
    """Record what the host reports as the most vGPUs of its offered MIG-backed types per GPU: the total
    instances of each type's GPU instance profile (`nvidia-smi mig -lgip`, GPU instance name -> total, the
    smallest over the host's MIG GPUs). The host's figure then wins over the catalogue's in `profiles`."""
    for name in host.offered_profiles:
        parsed = try_parse(name)
        gi = parsed.gi_profile if parsed is not None and parsed.is_mig else None
        if gi is None or gi not in instance_totals:
            continue
        known = host.profiles.get(name) or observed_profile(name)
        host.profiles[name] = dataclasses.replace(known, max_per_gpu=instance_totals[gi])


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


def with_leases(report: StatusReport, leases: dict[str, HostLease]) -> StatusReport:
    """The hosts another run holds now, named as held (a host that run reboots is not broken)."""
    for h in report.hosts:
        h.held = leases.get(h.host)
    return report


def with_supervisor(report: StatusReport, state: SupervisorState | None, problem: str | None = None) -> StatusReport:
    """`status` with the VM classes read over REST, or with the reason they could not be read as a warning."""
    if state is not None:
        report.vm_classes = status_vm_classes(state)
        report.supervisor_clusters = sorted(state.supervisor_clusters.values())
    if problem:
        report.warnings.append(f"VM classes not read: {problem}")
    return report
