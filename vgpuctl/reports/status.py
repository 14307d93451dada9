"""`vgpuctl status`'s document: hosts, GPUs (model, mode, NVLink, used/free), a GPU map per host, the VMs' vGPUs,
the VM classes with vGPUs, and its text for people:

a layout for the terminal's width, and plain lines when it is not a terminal.

- wide (a terminal of WIDE_COLUMNS or more): a hosts table, a GPU map per host, the VMs with vGPUs;
- narrow (less, e.g. 80 columns): fewer columns, host names without the domain they all share, PCI ids
  without the `0000:` domain they all share, so hosts and GPUs stay told apart; cells wrap, never cut;
- plain (a pipe or a file): one line per host, GPU and VM, nothing truncated, no table borders.
A GPU assignment vSphere does not report exactly (a VM mixing profiles) is marked `?` with a note. The VM
classes with vGPUs and their namespaces follow the VMs when a supervisor was read; warnings come last.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field
from typing import TYPE_CHECKING, Any, ClassVar

from vgpuctl.capacity.stranded import ClusterStranded, HostStranded, stranded_by_cluster, stranded_by_host
from vgpuctl.domain import TIME_SLICED_MODES, GpuMode, GpuVgpuMode
from vgpuctl.farm.usage import UsageFigures
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed, ObservedGpu, ObservedHost
from vgpuctl.profiles import BOARDS, BoardInfo, board_for_device, try_parse
from vgpuctl.records.classes import SupervisorState
from vgpuctl.records.perf import UsageRead
from vgpuctl.records.work import WORK_FIELD, describe_record, read_record, record_problem
from vgpuctl.reports.base import TERMINAL, Rendered, Report, TextLayout, VgpuCount, optional, vgpu_counts, whole
from vgpuctl.reports.host import MANAGER_KEY, HostReport, SettingValue, mig_label
from vgpuctl.reports.plan import sorted_counts
from vgpuctl.reports.profiles import KB_PER_GB, gpu_gb, profile_fb
from vgpuctl.reports.usage import UsageRow, WindowRow, read_warnings, usage_cell, usage_row, window_row
from vgpuctl.visible import lines_text, visible

if TYPE_CHECKING:
    pass


@dataclass
class GpuVm:
    vm: str
    profile: str
    guessed: bool = False  # vSphere names the VMs on a GPU, not which of a VM's vGPUs: a VM mixing profiles
    fb_gb: float = 0  # the vGPU's framebuffer (0: the profile is not known)
    mig_slots: int | None = optional()  # a MIG vGPU: the memory slices its GPU instance takes


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
    nvlink_peers: list[str] | None = optional()
    mig_capable: bool | None = optional()  # the board supports MIG (the catalogue); None: board unknown
    stranded_gb: float | None = optional()  # free framebuffer no offered profile can use (capacity.stranded)
    stranded_why: str | None = optional()
    usage: UsageRow | None = field(default=None, metadata={"omit_none": True})  # with --usage
    mig_slots: int | None = optional()  # a GPU in MIG mode: the memory slices its board has (the catalogue)


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
class HostWork:
    """What an unfinished apply left on the host (its work record in vCenter): the run that wrote it and what it
    left to do, or, for a value that is no work record, what is wrong with it (`readable` false)."""

    run: str | None
    left: str
    readable: bool


def host_work(host: str, record: str) -> HostWork | None:
    """The host's `vgpuctl.work` value as the documents show it (None: no record, or only the SSH service)."""
    parsed, problem = read_record(host, record)
    if problem is not None:
        return HostWork(None, record_problem(host, problem), False)
    if parsed is None or parsed.only_ssh:
        return None
    return HostWork(parsed.run or None, describe_record(parsed), True)


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
    settings: list[SettingValue] | None = optional()
    vgpu_manager: str | None = optional()  # the NVIDIA vGPU Manager it runs (its GPUs' driver), where known
    vgpu_manager_after_reboot: str | None = optional()  # installed, running after the next reboot
    held: HostLease | None = field(default=None, metadata={"omit_none": True})  # another run works on it
    free_gb: float | None = optional()  # free framebuffer over its GPUs; None: the host takes no vGPUs now
    stranded_gb: float | None = optional()  # of it, what no offered profile can use in the GPUs' current modes
    work: HostWork | None = field(default=None, metadata={"omit_none": True})  # an unfinished apply's record


@dataclass
class StatusCluster:
    """A cluster's free and stranded framebuffer over its hosts that take vGPUs now."""

    cluster: str
    hosts: int
    gpus: int
    free_gb: float
    stranded_gb: float


@dataclass
class StatusVm:
    vm: str
    host: str | None
    cluster: str | None
    folder: str | None
    power_state: str
    vgpus: list[VgpuCount]
    guest_driver: str | None = optional()  # the NVIDIA driver its guest reports (read on its host), where known


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
    clusters: list[StatusCluster] = field(default_factory=list)
    usage_window: WindowRow | None = field(default=None, metadata={"omit_none": True})  # with --usage

    def render_text(self, layout: TextLayout = TERMINAL) -> Rendered:
        """Hosts, a GPU map per host, the VMs with vGPUs, the VM classes: laid out for the terminal's width,
        or plain lines (render_status, below)."""
        return render_status(self, layout.width, layout.plain)


# ------------------------------------------------------------------------------------------ building it


def gpu_mode(gpu: ObservedGpu) -> str:
    if gpu.vgpu_mode == GpuVgpuMode.MIG:
        return str(GpuMode.MIG)
    if gpu.vgpu_mode in TIME_SLICED_MODES:
        return f"{GpuMode.TIME_SLICED} ({gpu.vgpu_mode})"
    return str(GpuMode.TIME_SLICED)


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
            profile = profiles[i] if i < len(profiles) else ""
            occupancy[pci].append(GpuVm(vm_name, profile, guessed, profile_fb(profile, host) if profile else 0))
    return occupancy


def _status_gpu(index: int, gpu: ObservedGpu, held: list[GpuVm], host: ObservedHost) -> StatusGpu:
    used_gb = whole(sum(v.fb_gb for v in held))
    board = _board(gpu, host)
    slots = None
    if board is not None and board.mig_capable and gpu.vgpu_mode == GpuVgpuMode.MIG:
        slots = board.mig_slots
        for v in held:
            v.mig_slots = mig_slots_of(v.profile, board)
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
        mig_slots=slots,
    )


def _board(gpu: ObservedGpu, host: ObservedHost) -> BoardInfo | None:
    """The GPU's board in the catalogue; None when the board is not known."""
    board = board_for_device(gpu.device_name, gpu.memory_kb / KB_PER_GB or None, gpu.device_id,
                             host.offered_profiles)
    return BOARDS[board] if board is not None and board in BOARDS else None


def mig_capable(gpu: ObservedGpu, host: ObservedHost) -> bool | None:
    """Whether the GPU's board supports MIG (catalogue); None when the board is not known."""
    board = _board(gpu, host)
    return board.mig_capable if board is not None else None


def mig_slots_of(profile: str, board: BoardInfo) -> int | None:
    """The memory slices a MIG vGPU's GPU instance takes on `board` (the catalogue's GPU instance profiles);
    None for a profile the catalogue does not place."""
    parsed = try_parse(profile)
    gi = board.gi(parsed.gi_profile) if parsed is not None and parsed.gi_profile else None
    return gi.size if gi is not None else None


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
        work=host_work(host.name, host.custom_values.get(WORK_FIELD, "")),
    )


def status_report(observed: Observed, round_trips: int | None = None) -> StatusReport:
    """Hosts with their GPU maps, and every VM (templates left out) with its vGPUs."""
    vms = [
        StatusVm(vm.name, vm.host, vm.cluster, vm.folder, str(vm.power_state), vgpu_counts(d.profile for d in vm.vgpus))
        for vm in sorted(observed.vms.values(), key=lambda v: v.name)
        if not vm.is_template
    ]
    hosts = [_status_host(observed, h) for h in sorted(observed.hosts.values(), key=lambda h: h.name)]
    report = StatusReport(observed.datacenter, observed.api_version, hosts, vms, round_trips)
    stranded = stranded_by_host(observed)
    return with_stranded(report, stranded, stranded_by_cluster(stranded))


def with_stranded(report: StatusReport, hosts: list[HostStranded], clusters: list[ClusterStranded]) -> StatusReport:
    """Free and stranded framebuffer per GPU, host and cluster (vgpuctl.capacity.stranded)."""
    by_host = {h.host: h for h in hosts}
    for h in report.hosts:
        s = by_host.get(h.host)
        if s is None:
            continue
        h.free_gb, h.stranded_gb = gb(s.free_gb), gb(s.stranded_gb)
        by_gpu = {g.gpu: g for g in s.stranded}
        for g in h.gpus:
            if (gs := by_gpu.get(g.gpu)) is not None:
                g.stranded_gb, g.stranded_why = gb(gs.stranded_gb), gs.why
    report.clusters = [StatusCluster(c.cluster, c.hosts, c.gpus, gb(c.free_gb), gb(c.stranded_gb))
                       for c in clusters]
    return report


def gb(value: float) -> float:
    return whole(round(value, 1))


def with_usage(report: StatusReport, figures: UsageFigures, read: UsageRead) -> StatusReport:
    """`status --usage`: each GPU's figures over the window, and what kept some from being read."""
    report.usage_window = window_row(read.window)
    for h in report.hosts:
        for g in h.gpus:
            u = figures.gpus.get((h.host, g.gpu))
            g.usage = usage_row(u) if u is not None else None
    report.warnings += read_warnings(read, figures)
    return report


# ------------------------------------------------------------------------------------------ profiles


# ------------------------------------------------------------------------------------------ host facts

# the settings `host show` and `status` have fields of their own for (every setting is in `settings` too)


def merge_status(report: StatusReport, rows: dict[str, HostReport]) -> StatusReport:
    """Add host facts (hosts.status.collect_host_facts, host_status) to `vgpuctl status`'s report: per host NVLink,
    scheduler and vGPU Manager, per GPU MIG current/pending and NVLink links, per running vGPU VM its guest driver;
    `mig` is a short label for tables."""
    drivers = {d.vm: d.version for row in rows.values() for d in row.guest_drivers or []}
    for vm in report.vms:
        vm.guest_driver = drivers.get(vm.vm)
    for host in report.hosts:
        row = rows.get(host.host)
        if row is None:
            continue
        host.nvlink, host.nvlink_after_reboot = row.nvlink, row.nvlink_after_reboot
        host.scheduler, host.scheduler_after_reboot = row.scheduler, row.scheduler_after_reboot
        host.shell_error = row.shell_error
        host.settings = list(row.settings)
        manager = next((v for v in row.settings if v.setting == MANAGER_KEY), None)
        if manager is not None:
            host.vgpu_manager, host.vgpu_manager_after_reboot = manager.value, manager.after_reboot
        by_gpu = {g.gpu: g for g in row.gpus}
        for gpu in host.gpus:
            facts = by_gpu.get(gpu.gpu)
            if facts is None:
                continue
            gpu.mig_current, gpu.mig_pending = facts.mig_current, facts.mig_pending
            gpu.nvlink_links, gpu.nvlink_active = facts.nvlink_links, facts.nvlink_active
            gpu.nvlink_peers = list(facts.nvlink_peers)
            if gpu.mig_capable is not False:  # a board without MIG has no MIG state to show
                gpu.mig = mig_label(facts.mig_current, facts.mig_pending, gpu.vgpu_mode)
    return report


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


# ------------------------------------------------------------------------------------------ the text

WIDE_COLUMNS = 140
GUESS_MARK = "?"
GUESS_NOTE = (
    "? = GPU guessed: vSphere names the VMs on each GPU, not which of a VM's vGPUs; a VM mixing profiles is "
    "matched largest vGPU first"
)
NO_MANAGER = "no vGPU types offered: NVIDIA vGPU Manager missing?"


def render_status(report: StatusReport, width: int = 200, plain: bool = False) -> Any:
    """The status for a terminal `width` columns wide (rich renderables), or `plain` text lines."""
    if plain:
        return plain_status(report)
    return wide_status(report) if width >= WIDE_COLUMNS else narrow_status(report)


# ------------------------------------------------------------------------------------------ shared bits


def vgpu_summary(vgpus: Iterable[VgpuCount]) -> str:
    return ", ".join(f"{v.count} x {v.profile}" if v.count > 1 else v.profile for v in vgpus)


def held_by(vms: list[GpuVm], short_profile: bool = False) -> str:
    parts = []
    for v in vms:
        profile = v.profile.removeprefix("grid_") if short_profile else v.profile
        mark = GUESS_MARK if v.guessed else ""
        parts.append(f"{v.vm} ({profile}{mark})" if v.profile else v.vm)
    return ", ".join(parts) or "-"


def host_state(h: StatusHost) -> str:
    state = "maintenance" if h.in_maintenance else h.connection_state
    if h.work is not None:
        state += f"; {h.work.left}"
    if h.held is not None:
        return f"{state}; {h.held.describe()}"
    return f"{state}; {NO_MANAGER}" if h.gpus and not h.vgpu_types else state


def nvlink_cell(g: StatusGpu) -> str:
    if g.nvlink_links:
        return f"{g.nvlink_active}/{g.nvlink_links} up"
    return "-" if g.nvlink_group is None else f"set {g.nvlink_group}"


def manager_cell(h: StatusHost) -> str:
    if not h.vgpu_manager:
        return "-"
    return h.vgpu_manager + (f" ({h.vgpu_manager_after_reboot} next boot)" if h.vgpu_manager_after_reboot else "")


def used(h: StatusHost) -> str:
    return f"{whole(sum(g.used_gb for g in h.gpus))}/{sum(g.fb_gb for g in h.gpus)}"


def common_suffix(names: list[str]) -> str:
    """The domain every host name shares (".gpu.example.com"), to leave out where columns are few."""
    domains = {n.split(".", 1)[1] if "." in n else "" for n in names}
    if len(domains) != 1 or not next(iter(domains)):
        return ""
    return "." + next(iter(domains))


def short_pci(pci_ids: list[str]) -> int:
    """How many leading characters all PCI ids share as their domain ("0000:"), to leave out."""
    domains = {p.split(":", 1)[0] for p in pci_ids}
    if len(domains) == 1 and all(p.count(":") == 2 for p in pci_ids):
        return len(next(iter(domains))) + 1
    return 0


def free_stranded(h: StatusHost) -> str:
    return "-" if h.free_gb is None else f"{h.free_gb}/{h.stranded_gb}"


def stranded_note(g: StatusGpu) -> str:
    return f" (stranded {g.stranded_gb}: {g.stranded_why})" if g.stranded_gb else ""


def cluster_line(c: StatusCluster) -> str:
    return f"cluster {c.cluster}  hosts {c.hosts}  gpus {c.gpus}  free/stranded GB {c.free_gb}/{c.stranded_gb}"


FREE_TITLE = "Free framebuffer (stranded: free, but no offered profile can use it in the GPUs' current modes)"


STRANDED_NOTE = "stranded = free framebuffer no offered profile can use in the GPUs' current modes"
USAGE_NOTE = "usage = GPU utilization avg/peak % and memory used GB over"


def guessed(report: StatusReport) -> bool:
    return any(v.guessed for h in report.hosts for g in h.gpus for v in g.vms)


# ------------------------------------------------------------------------------------------ plain


def plain_status(report: StatusReport) -> str:
    """One line per host, GPU and VM with vGPUs; full names and ids, nothing cut."""
    lines = []
    for h in report.hosts:
        sched = h.scheduler or "-"
        nvlink = (h.nvlink or "-") + (f" ({h.nvlink_after_reboot} next boot)" if h.nvlink_after_reboot else "")
        lines.append(
            f"host {h.host}  cluster {h.cluster or '-'}  state {host_state(h)}  graphics {h.default_graphics_type}"
            f"/{h.assignment_policy}  nvlink {nvlink}  scheduler {sched}  gpus {len(h.gpus)}"
            f"  vgpus {sum(v.count for g in h.gpus for v in g.vgpus)}  used/total GB {used(h)}"
            f"  free/stranded GB {free_stranded(h)}"
            + (f"  vgpu manager {manager_cell(h)}" if h.vgpu_manager else "")
        )
        for g in h.gpus:
            mig = "" if g.mig_capable is False else f"  mig {g.mig or '-'}"  # a board without MIG: nothing to say
            usage = f"  usage {usage_cell(g.usage)}" if report.usage_window else ""
            lines.append(
                f"  gpu {g.index} {g.gpu} {g.model}  type {g.graphics_type}  mode {g.mode}{mig}"
                f"  nvlink {nvlink_cell(g)}  used/total GB {g.used_gb}/{g.fb_gb}{stranded_note(g)}{usage}"
                f"  vms {held_by(g.vms)}"
            )
    lines += [cluster_line(c) for c in report.clusters]
    if report.clusters:
        lines.append(STRANDED_NOTE)
    if report.usage_window:
        lines.append(f"{USAGE_NOTE} {report.usage_window.describe()}")
    with_vgpus = [v for v in report.vms if v.vgpus]
    for v in with_vgpus:
        driver = f"  guest driver {v.guest_driver}" if v.guest_driver else ""
        lines.append(f"vm {v.vm}  host {v.host or '-'}  power {v.power_state}  vgpus {vgpu_summary(v.vgpus)}{driver}")
    if not with_vgpus:
        lines.append("No VM holds a vGPU.")
    others = len(report.vms) - len(with_vgpus)
    if others:
        lines.append(f"{others} VM(s) without vGPUs not listed (see --output json).")
    if guessed(report):
        lines.append(GUESS_NOTE)
    if report.supervisor_clusters:
        lines += [_class_line(c) for c in report.vm_classes] or [NO_GPU_CLASS]
    lines += [f"warning: {w}" for w in report.warnings]
    return lines_text(lines)


# ------------------------------------------------------------------------------------------ VM classes

NO_GPU_CLASS = "No VM class has vGPUs."


def _class_line(c: StatusVmClass) -> str:
    return (f"vm class {c.vm_class}  vgpus {vgpu_summary(c.vgpus)}  cpus {c.cpus}  memory MB {c.memory_mb}"
            f"  namespaces {', '.join(c.namespaces) or '-'}")


def _classes_table(report: StatusReport) -> list[Any]:
    """VM classes with vGPUs (when a supervisor was read) and the warnings, below the VMs."""
    from rich.text import Text

    out: list[Any] = []
    if report.supervisor_clusters:
        table = _table(f"VM classes with vGPUs (supervisor clusters: {', '.join(report.supervisor_clusters)})",
                       ("VM class", "vGPUs", "CPUs", "memory MB", "namespaces"))
        for c in report.vm_classes:
            used_by = ", ".join(c.namespaces) or "-"
            _row(table, c.vm_class, vgpu_summary(c.vgpus), str(c.cpus), str(c.memory_mb), used_by)
        out.append(table if report.vm_classes else Text(NO_GPU_CLASS))
    out += [Text(visible(f"warning: {w}", False)) for w in report.warnings]
    return out


# ------------------------------------------------------------------------------------------ tables


def _table(title: str, columns: Iterable[str], wrapping: Iterable[str] | None = None) -> Any:
    """A table whose cells fold, never cut; with `wrapping`, only those columns wrap and the others keep their
    width (the wide layout: a GPU row stays one line while it fits)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    keep = None if wrapping is None else set(wrapping)
    for col in columns:
        table.add_column(col, overflow="fold", no_wrap=keep is not None and col not in keep)
    return table


def _row(table: Any, *cells: str) -> None:
    from rich.text import Text

    table.add_row(*(Text(visible(cell, False)) for cell in cells))


def _vms_table(report: StatusReport, host_name: Any = str) -> list[Any]:
    from rich.text import Text

    with_vgpus = [v for v in report.vms if v.vgpus]
    drivers = any(v.guest_driver for v in with_vgpus)
    table = _table("VMs with vGPUs", ("VM", "host", "power", "vGPUs", *(["guest driver"] if drivers else [])))
    for v in with_vgpus:
        _row(table, v.vm, host_name(v.host) if v.host else "-", v.power_state, vgpu_summary(v.vgpus),
             *([v.guest_driver or "-"] if drivers else []))
    out: list[Any] = [table if with_vgpus else Text("No VM holds a vGPU.")]
    others = len(report.vms) - len(with_vgpus)
    if others:
        out.append(Text(f"{others} VM(s) without vGPUs not listed (see --output json)."))
    if guessed(report):
        out.append(Text(GUESS_NOTE))
    return out


def shows_mig(h: StatusHost) -> bool:
    """A MIG column only for hosts with a board that has MIG (or one the catalogue does not know)."""
    return any(g.mig_capable is not False for g in h.gpus)


def shared_model(h: StatusHost) -> str:
    return h.gpus[0].model if h.gpus and len({g.model for g in h.gpus}) == 1 else ""


def wide_status(report: StatusReport) -> list[Any]:
    managers = any(h.vgpu_manager for h in report.hosts)
    hosts = _table(
        "Hosts",
        ("host", "cluster", "state", "graphics/policy", "NVLink", "scheduler", *(["vGPU Manager"] if managers else []),
         "GPUs", "vGPUs", "GB used"),
        wrapping=("state", "NVLink", "vGPU Manager"),
    )
    for h in report.hosts:
        nvlink = (h.nvlink or "-") + (f" ({h.nvlink_after_reboot} next boot)" if h.nvlink_after_reboot else "")
        vgpus = str(sum(v.count for g in h.gpus for v in g.vgpus))
        _row(hosts, h.host, h.cluster or "-", host_state(h), f"{h.default_graphics_type}/{h.assignment_policy}",
             nvlink, h.scheduler or "-", *([manager_cell(h)] if managers else []), str(len(h.gpus)), vgpus,
             used(h))  # fmt: skip
    out: list[Any] = [hosts, *_free_table(report)]
    out += [_gpu_map(h, report.usage_window) for h in report.hosts if h.gpus]
    return out + _vms_table(report) + _classes_table(report)


def _free_table(report: StatusReport, host_name: Any = str) -> list[Any]:
    """Free and stranded framebuffer per host and cluster, with the usage window's note when usage was read."""
    from rich.text import Text

    out: list[Any] = []
    if report.clusters:
        table = _table(FREE_TITLE, ("host / cluster", "GPUs", "GB free", "GB stranded"))
        for h in report.hosts:
            if h.free_gb is not None:
                _row(table, host_name(h.host), str(len(h.gpus)), str(h.free_gb), str(h.stranded_gb))
        for c in report.clusters:
            hosts = f"{c.hosts} host" + ("" if c.hosts == 1 else "s")
            _row(table, f"cluster {c.cluster} ({hosts})", str(c.gpus), str(c.free_gb), str(c.stranded_gb))
        out.append(table)
    if report.usage_window:
        out.append(Text(f"{USAGE_NOTE} {report.usage_window.describe()}"))
    return out


def _gpu_map(h: StatusHost, usage: WindowRow | None = None) -> Any:
    """One host's GPUs, one line each while the terminal is wide enough: the model in the title when the GPUs
    share it, a MIG column only where a board has MIG, a usage column with --usage; only the VMs column wraps."""
    model, mig = shared_model(h), shows_mig(h)
    columns = ["#", "PCI", *([] if model else ["model"]), "type", "mode", *(["MIG"] if mig else []), "NVLink",
               "GB used", *(["usage"] if usage else []), "VMs (profile)"]  # fmt: skip
    gpus = _table(f"GPU map: {h.host}" + (f" ({model})" if model else ""), columns, wrapping=("VMs (profile)",))
    for g in h.gpus:
        cells = [str(g.index), g.gpu, *([] if model else [g.model]), g.graphics_type, g.mode]
        cells += [g.mig or ("n/a" if g.mig_capable is False else "-")] if mig else []
        cells += [nvlink_cell(g), used_cell(g), *([usage_cell(g.usage)] if usage else [])]
        _row(gpus, *cells, held_by(g.vms))
    return gpus


def used_cell(g: StatusGpu) -> str:
    return f"{g.used_gb}/{g.fb_gb}" + (f" ({g.stranded_gb} stranded)" if g.stranded_gb else "")


def narrow_status(report: StatusReport) -> list[Any]:
    from rich.text import Text

    names = [h.host for h in report.hosts]
    suffix = common_suffix(names)

    def short(name: str) -> str:
        return name.removesuffix(suffix) if suffix else name

    title = "Hosts" + (f" (*{suffix})" if suffix else "")
    hosts = _table(title, ("host", "state", "NVLink", "sched", "GPUs", "vGPUs", "GB used"))
    for h in report.hosts:
        vgpus = str(sum(v.count for g in h.gpus for v in g.vgpus))
        _row(hosts, short(h.host), host_state(h), h.nvlink or "-", h.scheduler or "-", str(len(h.gpus)), vgpus,
             used(h))  # fmt: skip
    out: list[Any] = [hosts, *_free_table(report, short)]
    for h in report.hosts:
        if not h.gpus:
            continue
        cut = short_pci([g.gpu for g in h.gpus])
        model = h.gpus[0].model if len({g.model for g in h.gpus}) == 1 else ""
        about = ", ".join(([model] if model else []) + ([f"vGPU Manager {manager_cell(h)}"] if h.vgpu_manager else []))
        gpus = _table(f"GPU map: {short(h.host)}" + (f" ({about})" if about else ""),
                      ("#", "PCI", "mode", "NVLink", "GB used", *(["usage"] if report.usage_window else []),
                       "VMs (profile)"))  # fmt: skip
        for g in h.gpus:
            mode = g.mode.replace("time-sliced", "ts").replace("(sameSize)", "same").replace("(mixedSize)", "mixed")
            usage = [usage_cell(g.usage)] if report.usage_window else []
            _row(gpus, str(g.index), g.gpu[cut:], mode, nvlink_cell(g), used_cell(g), *usage,
                 held_by(g.vms, short_profile=True))  # fmt: skip
        out.append(gpus)
    if report.hosts and not any(h.gpus for h in report.hosts):
        out.append(Text("No host has a GPU."))
    return out + _vms_table(report, short) + _classes_table(report)
