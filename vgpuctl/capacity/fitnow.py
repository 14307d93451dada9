"""What fits now, without changing any host: per host and cluster, for each offered profile and 1, 2, 4 or 8
vGPUs per VM (with and without NVLink), how many more VMs the planner would place; and the free and stranded
framebuffer, free memory that no offered profile can use on its GPU in the GPU's current mode with its
current occupants (vgpuctl.capacity.stranded, which `status` shows too).
"""

from __future__ import annotations

import copy
from dataclasses import field

from vgpuctl.capacity.blockers import Blocker, gpu_blockers, host_blocker, usable
from vgpuctl.capacity.kinds import capacity, gpu_kind_key
from vgpuctl.capacity.stranded import HostStranded, Stranded, host_stranded, offered_for
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
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed
from vgpuctl.profiles import max_vgpus_per_vm, parse_profile

VGPU_COUNTS = (1, 2, 4, 8)
MAX_COUNT = 10_000  # stop counting there (a farm that takes more is not short of capacity)


@dataclass(frozen=True)
class FitRow:
    profile: str
    vgpus: int
    nvlink: bool
    vms: int


@dataclass
class HostFit:
    host: str
    cluster: str | None
    rows: list[FitRow]
    stranded: list[Stranded] = field(default_factory=list)
    skipped: str | None = None  # why the host takes no vGPUs now
    blocked: list[Blocker] = field(default_factory=list)  # what keeps it (or some GPUs) out, with the fix
    nics: list[NicCapacity] = field(default_factory=list)  # free SR-IOV VFs and passthrough NICs
    free_gb: float = 0.0  # free framebuffer over its GPUs, stranded included
    gpus: int = 0

    @property
    def stranded_gb(self) -> float:
        return sum(s.stranded_gb for s in self.stranded)


@dataclass
class FitReport:
    hosts: list[HostFit]

    def host_stranded(self) -> list[HostStranded]:
        """The free and stranded framebuffer of the hosts that take vGPUs now (capacity.stranded's records)."""
        return [HostStranded(h.host, h.cluster, h.gpus, h.free_gb, h.stranded_gb, h.stranded)
                for h in self.hosts if h.skipped is None]

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
    cache: dict[tuple[object, ...], tuple[list[FitRow], HostStranded]] = {}
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
        sig = (tuple(gpu_kind_key(g) for g in gpus), oh.assignment_policy, limit, tuple(sorted(oh.offered_profiles)))
        if sig not in cache:
            rows = host_rows(gpus, oh.offered_profiles, oh.assignment_policy, limit)
            cache[sig] = (rows, host_stranded(name, oh.cluster, gpus, oh.offered_profiles))
        rows, strand = cache[sig]
        hosts.append(HostFit(name, oh.cluster, rows, [copy.copy(s) for s in strand.stranded], None, blockers,
                             nics.get(name, []), strand.free_gb, strand.gpus))
    return FitReport(hosts)


def host_rows(gpus: list[Gpu], offered: list[str], policy: str, limit: int) -> list[FitRow]:
    rows = []
    linkable = nvlink_types(gpus)
    for profile in offered_for(offered, gpus):
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
