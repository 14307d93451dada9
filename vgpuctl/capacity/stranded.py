"""Stranded framebuffer: free GPU memory that no offered profile can use on its GPU in the GPU's current mode with
its current occupants. One computation for `capacity` (what fits now), `status` (a line per host and cluster) and
the records an exporter reads (`HostStranded`, `ClusterStranded`).

What is usable is what placement (vgpuctl.farm.placement, docs/gpu-rules.md) lets the GPU still take: the largest
framebuffer of the addition patterns (capacity.kinds) of the host's offered profiles of the GPU's board; the rest
of the free memory is stranded. So, per mode:
- time-sliced same-size: a GPU holding vGPUs takes only their size (or their type) up to NVIDIA's maximum; free
  memory that is no multiple of that size, or beyond the maximum, is stranded ("same-size GPU locked to ...");
- time-sliced mixed-size: vGPUs sit at placement ids; free memory no offered size's free placement id reaches is
  stranded ("no offered size fits the gap");
- MIG: GPU instances sit at placement starts; free memory slices no GPU instance profile's placement fits are
  stranded ("MIG slots that no instance placement fits").
A GPU that takes no vGPUs at all (graphics type not Shared Direct) or no more (placement blocked it: a vGPU of
unknown profile, or occupants whose MIG instances or mixed-size placement ids placement cannot lay out again) has
all its free memory stranded, with that reason. Hosts that take no vGPUs now (disconnected, in maintenance
mode, powered off) are left out, as `capacity` leaves them out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field

from vgpuctl.capacity.blockers import host_blocker
from vgpuctl.capacity.kinds import addition_patterns
from vgpuctl.domain import GpuVgpuMode, GraphicsType
from vgpuctl.farm.placement import Gpu
from vgpuctl.farm.state import farm_from_observed
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed
from vgpuctl.profiles import ProfileError, parse_profile

NO_CLUSTER = "(no cluster)"


@dataclass
class Stranded:
    """One GPU's free framebuffer that no offered profile can use, and why."""

    gpu: str
    free_gb: float
    stranded_gb: float
    why: str
    mode: str = GpuVgpuMode.SAME_SIZE  # the GPU's vGPU mode (a GpuVgpuMode)


@dataclass
class HostStranded:
    """A host's free and stranded framebuffer over its GPUs (the GPUs with any stranded listed)."""

    host: str
    cluster: str | None
    gpus: int
    free_gb: float
    stranded_gb: float
    stranded: list[Stranded] = field(default_factory=list)


@dataclass
class ClusterStranded:
    """A cluster's free and stranded framebuffer: the sum over its hosts that take vGPUs now."""

    cluster: str
    hosts: int
    gpus: int
    free_gb: float
    stranded_gb: float


def used_gb(gpu: Gpu) -> float:
    """Framebuffer the GPU's vGPUs take: MIG memory slices in use, else the vGPUs' sizes (a vGPU of unknown size
    takes the whole GPU). A blocked MIG GPU's slices are all marked used (placement takes nothing more on it), so
    its vGPUs' sizes tell what they take."""
    if gpu.vgpu_mode == GpuVgpuMode.MIG and not gpu.blocked:
        return sum(size for _, size in gpu.mig_used) * gpu.fb_gb / gpu.mig_slots
    total = 0.0
    for name in gpu.vgpus:
        try:
            total += parse_profile(name).fb_gb
        except ProfileError:
            return gpu.fb_gb
    return total


def free_gb(gpu: Gpu) -> float:
    return max(0.0, gpu.fb_gb - used_gb(gpu)) if gpu.board is not None else 0.0


def offered_for(offered: Iterable[str], gpus: Iterable[Gpu]) -> list[str]:
    """The offered profiles of the GPUs' boards, sorted."""
    boards = {g.board for g in gpus}
    out = []
    for name in sorted(offered):
        try:
            if parse_profile(name).board in boards:
                out.append(name)
        except ProfileError:
            continue
    return out


def stranded(gpu: Gpu, offered: list[str]) -> Stranded | None:
    """Free framebuffer on `gpu` that no offered profile can use, or None when there is none."""
    if gpu.board is None:
        return None
    free = free_gb(gpu)
    if free <= 0:
        return None
    mode = gpu.vgpu_mode
    if gpu.graphics_type != GraphicsType.SHARED_DIRECT:
        return Stranded(gpu.id, free, free, f"graphics type {gpu.graphics_type}: vGPUs need Shared Direct", mode)
    if gpu.blocked:
        return Stranded(gpu.id, free, free, f"takes no more vGPUs: {gpu.blocked_reason or 'blocked'}", mode)
    profiles = offered_for(offered, [gpu])
    if not profiles:
        return Stranded(gpu.id, free, free, "the host offers no vGPU type of its board", mode)
    usable = max((sum(parse_profile(p).fb_gb * k for p, k in pat.items())
                  for pat in addition_patterns(gpu, profiles)), default=0.0)
    left = free - usable
    if left <= 0:
        return None
    if mode == GpuVgpuMode.MIG:
        why = "MIG slots that no instance placement fits"
    elif mode == GpuVgpuMode.MIXED_SIZE:
        why = "no offered size fits the gap"
    else:
        why = f"same-size GPU locked to {gpu.vgpus[0]}" if gpu.vgpus else "no offered profile divides it"
    return Stranded(gpu.id, free, left, why, mode)


def host_stranded(host: str, cluster: str | None, gpus: list[Gpu], offered: list[str]) -> HostStranded:
    """One host's free and stranded framebuffer, GPU by GPU."""
    strand = [s for g in gpus if (s := stranded(g, offered))]
    return HostStranded(host, cluster, len(gpus), sum(free_gb(g) for g in gpus),
                        sum(s.stranded_gb for s in strand), strand)


def stranded_by_host(observed: Observed) -> list[HostStranded]:
    """Every GPU host that takes vGPUs now, by name."""
    state = farm_from_observed(observed)
    out = []
    for name in sorted(observed.hosts):
        host = observed.hosts[name]
        if not host.gpus or host_blocker(host) is not None:
            continue
        out.append(host_stranded(name, host.cluster, state.gpus.get(name, []), host.offered_profiles))
    return out


def stranded_by_cluster(hosts: Iterable[HostStranded]) -> list[ClusterStranded]:
    """The hosts' figures summed per cluster (hosts outside a cluster under NO_CLUSTER), by name."""
    sums: dict[str, ClusterStranded] = {}
    for h in hosts:
        key = h.cluster or NO_CLUSTER
        c = sums.setdefault(key, ClusterStranded(key, 0, 0, 0.0, 0.0))
        c.hosts, c.gpus = c.hosts + 1, c.gpus + h.gpus
        c.free_gb, c.stranded_gb = c.free_gb + h.free_gb, c.stranded_gb + h.stranded_gb
    return [sums[k] for k in sorted(sums)]
