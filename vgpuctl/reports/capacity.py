"""The `capacity` documents: what fits now (per host and cluster), and the answer to a demand file."""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, ClassVar

from vgpuctl.capacity.fitnow import VGPU_COUNTS
from vgpuctl.capacity.stranded import stranded_by_cluster
from vgpuctl.domain import GpuVgpuMode
from vgpuctl.lazyclass import dataclass
from vgpuctl.reports.base import TERMINAL, Report, TextLayout, optional
from vgpuctl.visible import lines_text

if TYPE_CHECKING:
    from vgpuctl.capacity.answer import CapacityAnswer
    from vgpuctl.capacity.drain import DrainAnswer
    from vgpuctl.capacity.fitnow import FitReport

MODE_LABELS: dict[str, str] = {
    GpuVgpuMode.SAME_SIZE: "time-sliced same-size",
    GpuVgpuMode.MIXED_SIZE: "time-sliced mixed-size",
    GpuVgpuMode.MIG: "MIG",
}


# ------------------------------------------------------------------------------------------ what fits now


@dataclass
class CapacityFit:
    """How many more VMs of `vgpus` x `profile` (NVLink-connected or not) the planner would place."""

    profile: str
    vgpus: int
    nvlink: bool
    vms: int


@dataclass
class StrandedGpu:
    """Free framebuffer on a GPU that no offered profile can use, and why."""

    gpu: str
    free_gb: float
    stranded_gb: float
    why: str
    mode: str  # the GPU's vGPU mode: sameSize | mixedSize | multiInstanceGpu


@dataclass
class ClusterStrandedRow:
    """A cluster's free and stranded framebuffer, over its hosts that take vGPUs now."""

    cluster: str
    hosts: int
    gpus: int
    free_gb: float
    stranded_gb: float


@dataclass
class Blocked:
    """What keeps a host (or some of its GPUs) from taking vGPUs, and how to fix it."""

    what: str
    fix: str


@dataclass
class NicFree:
    """A physical NIC's free SR-IOV virtual functions (`sriov`), or whether it is free for passthrough."""

    nic: str  # PCI id
    model: str
    type: str  # sriov | passthrough
    total: int
    free: int


@dataclass
class HostCapacity:
    host: str
    cluster: str | None
    skipped: str | None  # why the host is left out (not connected, in maintenance mode, powered off)
    fits: list[CapacityFit]
    stranded_gb: float
    stranded: list[StrandedGpu]
    blocked: list[Blocked] = field(default_factory=list)
    nics: list[NicFree] = field(default_factory=list)
    free_gb: float = 0.0  # free framebuffer over its GPUs, stranded included


@dataclass
class CapacityReport(Report):
    """`capacity`: per host and per cluster, how many more VMs of each offered profile fit without a change."""

    kind: ClassVar[str] = "capacity"
    hosts: list[HostCapacity]
    clusters: dict[str, list[CapacityFit]]
    stranded_clusters: list[ClusterStrandedRow] = field(default_factory=list)

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        if not self.hosts and not self.clusters:
            return "no host with GPUs: no vGPU fits (hosts without GPUs are left out)"
        lines = []
        for h in self.hosts:
            if h.skipped:
                left = [f"{h.host}: left out ({b.what}; fix: {b.fix})" for b in h.blocked]
                lines += left or [f"{h.host}: left out ({h.skipped})"]
                continue
            lines.append(f"{h.host} ({h.cluster or 'no cluster'}): {h.free_gb:g} GB free, stranded "
                         f"{h.stranded_gb:g} GB")
            lines += [f"  not usable now: {b.what}; fix: {b.fix}" for b in h.blocked]
            for s in h.stranded:
                lines.append(f"  GPU {s.gpu}: {s.stranded_gb:g} of {s.free_gb:g} GB free unusable ({s.why})")
            lines += [_nic_line(n) for n in h.nics]
            lines += _fits_table(h.fits)
        stranded = {c.cluster: c for c in self.stranded_clusters}
        for cluster, fits in self.clusters.items():
            c = stranded.get(cluster)
            summary = f" {c.free_gb:g} GB free, stranded {c.stranded_gb:g} GB" if c else ""
            lines.append(f"cluster {cluster}:{summary}")
            lines += _fits_table(fits)
        return lines_text(lines)


def _nic_line(n: NicFree) -> str:
    if n.type == "sriov":
        return f"  NIC {n.nic} {n.model}: {n.free} of {n.total} SR-IOV virtual functions free"
    return f"  NIC {n.nic} {n.model}: passthrough, {'free' if n.free else 'in use'}"


def _fits_table(fits: list[CapacityFit]) -> list[str]:
    """One row per profile; a column per vGPUs per VM, then the NVLink-connected ones ('-': not counted)."""
    by_profile: dict[str, dict[tuple[int, bool], int]] = {}
    for f in fits:
        by_profile.setdefault(f.profile, {})[(f.vgpus, f.nvlink)] = f.vms
    head = "  " + f"{'profile':<22}" + "".join(f"{f'x{n}':>7}" for n in VGPU_COUNTS) + "".join(
        f"{f'x{n} nvl':>9}" for n in VGPU_COUNTS[1:])
    out = [head]
    for profile, cells in sorted(by_profile.items()):
        plain = "".join(f"{cells.get((n, False), '-'):>7}" for n in VGPU_COUNTS)
        nvl = "".join(f"{cells.get((n, True), '-'):>9}" for n in VGPU_COUNTS[1:])
        out.append(f"  {profile:<22}{plain}{nvl}")
    return out


def capacity_report(fit: FitReport) -> CapacityReport:
    hosts = [
        HostCapacity(h.host, h.cluster, h.skipped, [CapacityFit(r.profile, r.vgpus, r.nvlink, r.vms) for r in h.rows],
                     h.stranded_gb, [StrandedGpu(s.gpu, s.free_gb, s.stranded_gb, s.why, s.mode) for s in h.stranded],
                     [Blocked(b.what, b.fix) for b in h.blocked],
                     [NicFree(n.nic, n.model, n.kind, n.total, n.free) for n in h.nics], h.free_gb)
        for h in fit.hosts
    ]
    clusters = {c: [CapacityFit(p, n, nv, v) for (p, n, nv), v in table.items()]
                for c, table in fit.clusters().items()}
    stranded = [ClusterStrandedRow(c.cluster, c.hosts, c.gpus, c.free_gb, c.stranded_gb)
                for c in stranded_by_cluster(fit.host_stranded())]
    return CapacityReport(hosts, clusters, stranded)


# ------------------------------------------------------------------------------------------ a demand's answer


@dataclass
class ShapeAnswer:
    """One demand entry: how many of its VMs were placed, and why not all when they were not."""

    name: str
    wanted: int
    placed: int
    priority: int
    reason: str | None  # framebuffer | geometry | nvlink | per-VM limit | order
    detail: str


@dataclass
class GpuModeChange:
    host: str
    gpu: str
    old: str  # vGPU mode: sameSize | mixedSize | multiInstanceGpu
    new: str
    needs_reboot: bool
    old_graphics_type: str | None = optional()  # set when the graphics type changes (to Shared Direct)
    new_graphics_type: str | None = optional()


@dataclass
class BlockedHost:
    """What keeps a host (or some of its GPUs) out of the answer, and how to fix it."""

    host: str
    what: str
    fix: str


@dataclass
class PlacedVmAnswer:
    name: str
    shape: str  # the demand entry it is one of
    host: str
    profile: str
    vgpus: int
    nvlink: bool


@dataclass
class CapacityDemandReport(Report):
    """`capacity --demand`: the best GPU layout found for a demand file, what it places and what not."""

    kind: ClassVar[str] = "capacity-demand"
    fits: bool
    method: str  # cp-sat | greedy
    status: str  # optimal | feasible | greedy
    gap: float | None
    seconds: float
    placed: int
    greedy_placed: int
    demand: list[ShapeAnswer]
    host_changes: list[GpuModeChange]
    running_vms_on_changed_hosts: dict[str, list[str]]
    vms: list[PlacedVmAnswer]
    skipped_hosts: dict[str, str]
    blocked: list[BlockedHost] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        lines = [f"demand {'fits' if self.fits else 'does not fit'}: {self.placed} VMs placed ({self.how()})"]
        for s in self.demand:
            mark = "ok" if s.placed == s.wanted else f"SHORT ({s.reason})"
            lines.append(f"  {s.name:<20} priority {s.priority}  {s.placed:>5}/{s.wanted:<5} {mark}")
            if s.detail:
                lines.append(f"      {s.detail}")
        lines += self._change_lines()
        per_host: dict[str, list[str]] = {}
        for vm in self.vms:
            per_host.setdefault(vm.host, []).append(vm.name)
        lines += [f"  {host}: {len(names)} VMs" for host, names in sorted(per_host.items())]
        for b in self.blocked:
            state = "left out" if b.host in self.skipped_hosts else "partly usable"
            lines.append(f"  {b.host}: {state} ({b.what}; fix: {b.fix})")
        lines += [f"warning: {w}" for w in self.warnings]
        return lines_text(lines)

    def how(self) -> str:
        """How the layout was found, in words: the method, how good, how long."""
        if self.method == "greedy":
            return f"first-fit decreasing only, {self.seconds:.1f} s"
        if self.status == "optimal":
            quality = "proven optimal"
        else:
            quality = "the best found in the time limit" + (f", within {self.gap:.1%} of the bound"
                                                             if self.gap is not None else "")
        return f"CP-SAT solver, {quality}, {self.seconds:.1f} s; first-fit decreasing alone placed {self.greedy_placed}"

    def _change_lines(self) -> list[str]:
        if not self.host_changes:
            return ["host changes: none"]
        lines = ["host changes:"]
        for c in self.host_changes:
            reboot = ", reboot" if c.needs_reboot else ""
            what = [f"graphics type {c.old_graphics_type} -> {c.new_graphics_type}"] if c.new_graphics_type else []
            if c.old != c.new or not what:
                what.append(f"{_mode(c.old)} -> {_mode(c.new)}")
            lines.append(f"  {c.host} GPU {c.gpu}: {'; '.join(what)}{reboot}")
        for host, vms in sorted(self.running_vms_on_changed_hosts.items()):
            more = ", ..." if len(vms) > 5 else ""
            lines.append(f"  {host}: maintenance mode needs its {len(vms)} running VMs moved or powered off "
                         f"({', '.join(vms[:5])}{more}); their GPUs keep their mode")
        return lines


def _mode(mode: str) -> str:
    return MODE_LABELS.get(mode, mode)


def capacity_demand_report(answer: CapacityAnswer) -> CapacityDemandReport:
    return CapacityDemandReport(
        fits=answer.all_fit,
        method=answer.method,
        status=answer.status,
        gap=answer.gap,
        seconds=round(answer.seconds, 3),
        placed=answer.placed,
        greedy_placed=answer.greedy_placed,
        demand=[ShapeAnswer(s.name, s.wanted, s.placed, s.priority, s.reason, s.detail) for s in answer.shapes],
        host_changes=[GpuModeChange(c.host, c.gpu, c.old, c.new, c.needs_reboot, c.old_graphics_type,
                                    c.new_graphics_type) for c in answer.changes],
        running_vms_on_changed_hosts={h: list(vms) for h, vms in answer.running_on_changed.items()},
        vms=[PlacedVmAnswer(v.name, v.shape, v.host, v.profile, v.vgpus, v.nvlink) for v in answer.vms],
        skipped_hosts=dict(answer.skipped_hosts),
        blocked=[BlockedHost(h, b.what, b.fix) for h, bs in sorted(answer.blocked.items()) for b in bs],
        warnings=list(answer.warnings),
    )


# ------------------------------------------------------------------------------------------ draining hosts


@dataclass
class DrainVm:
    """A running VM of a host leaving service: the host of its cluster it would go to, or why none."""

    vm: str
    host: str
    vgpus: list[str]
    to: str | None
    why: str | None = optional()


@dataclass
class DrainStepReport:
    """Hosts leaving service together (max_unavailable), after the steps before them, and their VMs."""

    step: int
    hosts: list[str]
    vms: list[DrainVm]
    skipped: dict[str, str] = field(default_factory=dict)  # host -> why it is left out of the step


@dataclass
class CapacityDrainReport(Report):
    """`capacity --drain`: whether the hosts can be emptied for maintenance, step by step (the evacuation a driver
    upgrade window proves before it starts), without an inventory change."""

    kind: ClassVar[str] = "capacity-drain"
    fits: bool  # every step's running VMs have a host to go to
    vgpu_migration: bool  # vCenter allows vMotion of running vGPU VMs
    max_unavailable: int
    steps: list[DrainStepReport]

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        lines = []
        for s in self.steps:
            leaving = [h for h in s.hosts if h not in s.skipped]
            lines.append(f"step {s.step}: {', '.join(leaving) or 'no host'} into maintenance mode")
            lines += [f"  {h}: left out ({why})" for h, why in s.skipped.items()]
            for v in s.vms:
                what = f"{v.vm} ({', '.join(v.vgpus)})" if v.vgpus else v.vm
                lines.append(f"  {what} on {v.host} -> {v.to}" if v.to else
                             f"  {what} on {v.host} cannot move: {v.why}")
            if not s.vms and leaving:
                lines.append("  no running VM")
        stuck = [v.vm for s in self.steps for v in s.vms if v.to is None]
        lines.append("every step can be emptied" if self.fits else
                     f"{len(stuck)} running VM(s) cannot be moved: {', '.join(stuck)}")
        if not self.vgpu_migration and any(v.vgpus for s in self.steps for v in s.vms):
            lines.append("vCenter does not allow vMotion of running vGPU VMs (vgpu.hotmigrate.enabled)")
        return lines_text(lines)


def capacity_drain_report(answer: DrainAnswer, max_unavailable: int) -> CapacityDrainReport:
    steps = [DrainStepReport(i, list(s.hosts), [DrainVm(m.vm, m.host, list(m.profiles), m.to, m.why or None)
                                                for m in s.moves], dict(s.skipped))
             for i, s in enumerate(answer.steps, start=1)]
    return CapacityDrainReport(answer.ok, answer.vgpu_migration, max_unavailable, steps)
