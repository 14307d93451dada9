"""What fits now, without changing any host: per host and cluster, for each offered profile and 1, 2, 4 or 8
vGPUs per VM (with and without NVLink), how many more VMs the planner would place; and the stranded
framebuffer, free memory that no offered profile can use on its GPU in the GPU's current mode with its
current occupants (a same-size GPU locked to another profile, MIG slots no instance placement fits).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from vgpuctl.capacity.blockers import Blocker, gpu_blockers, host_blocker, usable
from vgpuctl.capacity.kinds import _key, addition_patterns, capacity
from vgpuctl.domain import GpuVgpuMode, GraphicsType
from vgpuctl.farm.nics import NicCapacity, nic_capacity
from vgpuctl.farm.placement import (
    Gpu,
    add_vgpu,
    clone_gpu,
    group_profiles,
    nvlink_sets,
    place_vm,
    whole_gpu_compute_types,
)
from vgpuctl.farm.state import farm_from_observed
from vgpuctl.model import Observed
from vgpuctl.profiles import ProfileError, max_vgpus_per_vm, parse_profile

VGPU_COUNTS = (1, 2, 4, 8)
MAX_COUNT = 10_000  # stop counting there (a farm that takes more is not short of capacity)


@dataclass(frozen=True)
class FitRow:
    profile: str
    vgpus: int
    nvlink: bool
    vms: int


@dataclass
class Stranded:
    gpu: str
    free_gb: float
    stranded_gb: float
    why: str


@dataclass
class HostFit:
    host: str
    cluster: str | None
    rows: list[FitRow]
    stranded: list[Stranded] = field(default_factory=list)
    skipped: str | None = None  # why the host takes no vGPUs now
    blocked: list[Blocker] = field(default_factory=list)  # what keeps it (or some GPUs) out, with the fix
    nics: list[NicCapacity] = field(default_factory=list)  # free SR-IOV VFs and passthrough NICs

    @property
    def stranded_gb(self) -> float:
        return sum(s.stranded_gb for s in self.stranded)


@dataclass
class FitReport:
    hosts: list[HostFit]

    def clusters(self) -> dict[str, dict[tuple[str, int, bool], int]]:
        out: dict[str, dict[tuple[str, int, bool], int]] = {}
        for h in self.hosts:
            table = out.setdefault(h.cluster or "(no cluster)", {})
            for r in h.rows:
                key = (r.profile, r.vgpus, r.nvlink)
                table[key] = table.get(key, 0) + r.vms
        return out


def what_fits(observed: Observed, cluster: str | None = None, host: str | None = None) -> FitReport:
    state = farm_from_observed(observed)
    nics: dict[str, list[NicCapacity]] = {}
    for row in nic_capacity(observed, host):
        nics.setdefault(row.host, []).append(row)
    hosts = []
    cache: dict[tuple[object, ...], tuple[list[FitRow], list[Stranded]]] = {}
    for name in sorted(observed.hosts):
        oh = observed.hosts[name]
        if (cluster is not None and oh.cluster != cluster) or (host is not None and name != host) or not oh.gpus:
            continue
        blocker = host_blocker(oh)
        if blocker is not None:
            hosts.append(HostFit(name, oh.cluster, [], [], blocker.what, [blocker]))
            continue
        gpus = state.gpus.get(name, [])
        blockers = gpu_blockers(gpus)
        if not any(usable(g) for g in gpus):
            hosts.append(HostFit(name, oh.cluster, [], [], "; ".join(b.what for b in blockers), blockers))
            continue
        limit = min(max_vgpus_per_vm(oh.api_version), oh.max_vgpus_per_vm or 8)
        sig = (tuple(_key(g) for g in gpus), oh.assignment_policy, limit, tuple(sorted(oh.offered_profiles)))
        if sig not in cache:
            rows = host_rows(gpus, oh.offered_profiles, oh.assignment_policy, limit)
            cache[sig] = (rows, [s for g in gpus if (s := stranded(g, oh.offered_profiles))])
        rows, strand = cache[sig]
        hosts.append(HostFit(name, oh.cluster, rows, [copy.copy(s) for s in strand], None, blockers,
                             nics.get(name, [])))
    return FitReport(hosts)


def _profiles(offered: list[str], gpus: list[Gpu]) -> list[str]:
    boards = {g.board for g in gpus}
    out = []
    for name in sorted(offered):
        try:
            if parse_profile(name).board in boards:
                out.append(name)
        except ProfileError:
            continue
    return out


def host_rows(gpus: list[Gpu], offered: list[str], policy: str, limit: int) -> list[FitRow]:
    rows = []
    linkable = nvlink_types(gpus)
    for profile in _profiles(offered, gpus):
        whole = parse_profile(profile).type_name in linkable
        for n in VGPU_COUNTS:
            if n > limit:
                continue
            rows.append(FitRow(profile, n, False, count_vms(gpus, [profile] * n, policy, nvlink=False)))
            if whole and n >= 2:
                rows.append(FitRow(profile, n, True, count_vms(gpus, [profile] * n, policy, nvlink=True)))
    return rows


def nvlink_types(gpus: list[Gpu]) -> set[str]:
    """The vGPU types NVLink rows are counted for: those the host's device groups are offered for (placement's
    rule), else its boards' whole-GPU C-series types (the rows then show what a host without NVLink takes: 0)."""
    offered = {t for s in nvlink_sets(gpus) for t in group_profiles(s)[0]}
    return offered or {t for g in gpus for t in whole_gpu_compute_types(g.board)}


def count_vms(gpus: list[Gpu], profiles: list[str], policy: str, *, nvlink: bool) -> int:
    """How many more VMs of these vGPUs the planner places, one after the other."""
    if len(set(profiles)) == 1:
        room = [capacity(g, profiles[0]) for g in gpus]
        if len(profiles) == 1 and not nvlink:  # one vGPU per VM: every GPU fills on its own
            return min(MAX_COUNT, sum(room))
        if sum(1 for r in room if r) < len(profiles):
            return 0  # fewer GPUs than vGPUs per VM can take the profile at all
    work = [clone_gpu(g) for g in gpus]
    by_id = {g.id: g for g in work}
    n = 0
    while n < MAX_COUNT:
        res = place_vm(work, "probe", profiles, policy, nvlink=nvlink)
        if not res.ok:
            break
        for pl in res.placed:
            add_vgpu(by_id[pl.gpu], pl.profile)
        n += 1
    return n


def _used_gb(gpu: Gpu) -> float:
    if gpu.vgpu_mode == GpuVgpuMode.MIG:
        slots = gpu.mig_slots
        return sum(size for _, size in gpu.mig_used) * gpu.fb_gb / slots
    total = 0.0
    for name in gpu.vgpus:
        try:
            total += parse_profile(name).fb_gb
        except ProfileError:
            return gpu.fb_gb
    return total


def stranded(gpu: Gpu, offered: list[str]) -> Stranded | None:
    """Free framebuffer on `gpu` that no offered profile can use, or None when there is none."""
    if gpu.board is None:
        return None
    free = max(0.0, gpu.fb_gb - _used_gb(gpu))
    if free <= 0:
        return None
    if gpu.graphics_type != GraphicsType.SHARED_DIRECT:
        return Stranded(gpu.id, free, free, f"graphics type {gpu.graphics_type}: vGPUs need Shared Direct")
    if gpu.blocked:
        return Stranded(gpu.id, free, free, "held by a vGPU of unknown profile")
    profiles = _profiles(offered, [gpu])
    usable = max((sum(parse_profile(p).fb_gb * k for p, k in pat.items())
                  for pat in addition_patterns(gpu, profiles)), default=0.0)
    left = free - usable
    if left <= 0:
        return None
    if gpu.vgpu_mode == GpuVgpuMode.MIG:
        why = "MIG slots that no instance placement fits"
    elif gpu.vgpu_mode == GpuVgpuMode.MIXED_SIZE:
        why = "no offered size fits the gap"
    else:
        why = f"same-size GPU locked to {gpu.vgpus[0]}" if gpu.vgpus else "no offered profile divides it"
    return Stranded(gpu.id, free, left, why)
