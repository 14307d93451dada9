"""The capacity problem as the greedy and the solver see it: hosts in scope, their GPUs with the modes each
may take, and the demand as VM shapes with the profiles each may use.

Rules (the mode-switch rules of the answer):
- a GPU that a running VM holds keeps its mode and its occupants; so does every GPU of a frozen host, of a
  host that is not connected, powered on and out of maintenance, and every GPU when `allow` says nothing;
- `mig` lets an idle MIG-capable GPU switch MIG on or off (off means time-sliced same-size);
- `vgpu-mode` lets an idle time-sliced GPU switch between same-size and mixed-size;
- `profile` lets idle same-size GPUs serve a profile that no GPU of the host serves yet; without it, new VMs on a
  host use the profiles its running VMs already use there (or any, on a host that runs none);
- `graphics` lets the GPUs of a host that runs no VM switch from another graphics type (vSGA `shared`) to Shared
  Direct, which vGPUs need; without it such GPUs take nothing, and the answer names them with the fix
  (vgpuctl.capacity.blockers), as it names hosts that are disconnected, powered off or in maintenance mode.
"""

from __future__ import annotations

from dataclasses import field

from vgpuctl.capacity.blockers import Blocker, gpu_blockers, host_blocker, usable
from vgpuctl.capacity.demand import Demand, DemandItem
from vgpuctl.capacity.kinds import MODES, in_mode, is_idle
from vgpuctl.domain import (
    TIME_SLICED_MODES,
    AssignmentPolicy,
    GpuVgpuMode,
    GraphicsType,
    NvlinkRequirement,
    PowerState,
)
from vgpuctl.errors import NotFound
from vgpuctl.farm.placement import Gpu, clone_gpu, group_refusal, nvlink_refusal, nvlink_sets
from vgpuctl.farm.predict import mig_profile_names, time_sliced_profile_names
from vgpuctl.farm.state import farm_from_observed
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed, ObservedHost
from vgpuctl.profiles import BOARDS, max_vgpus_per_vm, parse_profile


@dataclass
class GpuSlot:
    host: str
    gpu: Gpu  # as it is now, with the running VMs' vGPUs (Shared Direct already when `graphics_from` is set)
    modes: list[str]  # modes it may take; the first is the current one
    graphics_from: str | None = None  # its graphics type now, when `allow: [graphics]` switches it to Shared Direct

    @property
    def idle(self) -> bool:
        return is_idle(self.gpu)

    def as_mode(self, mode: str) -> Gpu:
        return self.gpu if mode == self.gpu.vgpu_mode else in_mode(self.gpu, mode)


@dataclass
class HostCtx:
    name: str
    cluster: str | None
    policy: str
    limit: int  # vGPUs per VM
    gpus: list[GpuSlot]
    offered: set[str]  # profiles the host offers now, or may offer after a mode change
    running_vms: list[str] = field(default_factory=list)
    frozen: bool = False

    def spreads(self, profile: str) -> bool:
        """Whether new VMs of this time-sliced profile spread over two or more of the host's GPUs that may serve
        it (the `performance` policy): the first of them would then lock same-size GPUs to their profile whatever
        the layout intended, so the answer keeps one time-sliced profile per board on such a host. MIG GPUs hold
        instances of any size, and on a single GPU nothing spreads: there the order apply powers on in is all
        that matters, and the answer is verified in it."""
        p = parse_profile(profile)
        if self.policy != AssignmentPolicy.PERFORMANCE or p.is_mig:
            return False
        serving = [s for s in self.gpus if s.gpu.board == p.board and any(m in TIME_SLICED_MODES for m in s.modes)]
        return len(serving) >= 2

    def nvlink_sets(self) -> dict[int, list[Gpu]]:
        """The host's NVLink sets as placement sees them for an NVLink VM (vgpuctl.farm.placement.nvlink_sets), with
        each GPU in a time-sliced mode it has or may switch to (a MIG GPU is in no device group)."""
        return {s[0].nvlink_set: s for s in nvlink_sets(self._time_sliced()) if s[0].nvlink_set is not None}

    def _time_sliced(self) -> list[Gpu]:
        out = []
        for s in self.gpus:
            switch = s.gpu.vgpu_mode == GpuVgpuMode.MIG and s.idle and GpuVgpuMode.SAME_SIZE in s.modes
            out.append(s.as_mode(GpuVgpuMode.SAME_SIZE) if switch else s.gpu)
        return out

    def nvlink_set_refusal(self, nvlink_set: int | None, vgpus: int, profile: str) -> str | None:
        """Why one NVLink set offers no device group for VMs of `vgpus` x `profile` (placement's rule)."""
        members = self.nvlink_sets().get(nvlink_set) if nvlink_set is not None else None
        if members is None:
            return "is in no NVLink-connected set with links up"
        return group_refusal(members, [profile] * vgpus)

    def nvlink_refusal(self, vgpus: int, profile: str) -> str | None:
        """Why no NVLink set of the host offers a device group for VMs of `vgpus` x `profile`, or None."""
        return nvlink_refusal(self._time_sliced(), [profile] * vgpus)


@dataclass
class Shape:
    """One demand entry: `count` identical VMs of `vgpus` vGPUs each, one profile out of `options`."""

    item: DemandItem
    options: list[str]

    @property
    def name(self) -> str:
        return self.item.name

    @property
    def count(self) -> int:
        return self.item.count

    @property
    def vgpus(self) -> int:
        return self.item.vgpus.count

    @property
    def nvlink(self) -> bool:
        return self.item.nvlink == NvlinkRequirement.REQUIRED

    @property
    def priority(self) -> int:
        return self.item.priority


@dataclass
class Problem:
    hosts: list[HostCtx]
    shapes: list[Shape]
    allow: set[str]
    skipped_hosts: dict[str, str] = field(default_factory=dict)  # host -> why it is out of the answer
    blocked: dict[str, list[Blocker]] = field(default_factory=dict)  # host -> what keeps it (or GPUs) out, and fix

    def host(self, name: str) -> HostCtx:
        return next(h for h in self.hosts if h.name == name)

    def switched(self) -> set[tuple[str, str]]:
        """(host, PCI id) of the GPUs the answer may switch to Shared Direct (`allow: [graphics]`)."""
        return {(h.name, s.gpu.id) for h in self.hosts for s in h.gpus if s.graphics_from is not None}


def build_problem(observed: Observed, demand: Demand) -> Problem:
    allow: set[str] = set(demand.allow)
    frozen = set(demand.frozen_hosts)
    scope = set(demand.clusters) if demand.clusters is not None else None
    unknown = sorted((scope or set()) - set(observed.clusters))
    if unknown:
        raise NotFound(f"demand names unknown cluster(s) {', '.join(unknown)} "
                       f"(clusters: {', '.join(sorted(observed.clusters)) or 'none'})")
    strangers = sorted(frozen - set(observed.hosts))
    if strangers:
        raise NotFound(f"frozen_hosts names unknown host(s) {', '.join(strangers)}")
    state = farm_from_observed(observed)
    problem = Problem([], [], allow)
    running_on = {vm.host for vm in observed.vms.values() if vm.power_state == PowerState.ON and vm.host}
    for name in sorted(observed.hosts):
        oh = observed.hosts[name]
        if scope is not None and oh.cluster not in scope:
            continue
        blocker = host_blocker(oh)
        if blocker is not None:
            problem.skipped_hosts[name], problem.blocked[name] = blocker.what, [blocker]
            continue
        is_frozen = name in frozen
        may_switch = "graphics" in allow and not is_frozen and name not in running_on
        slots = [_slot(name, g, allow, is_frozen, may_switch) for g in state.gpus.get(name, [])]
        blockers = gpu_blockers([s.gpu for s in slots])
        if blockers:
            problem.blocked[name] = blockers
        if not any(usable(s.gpu) for s in slots):
            problem.skipped_hosts[name] = "; ".join(b.what for b in blockers)
            continue
        running = sorted({vm for og in oh.gpus for vm in og.vms})
        problem.hosts.append(HostCtx(name, oh.cluster, oh.assignment_policy, _limit(oh), slots,
                                     _offered(oh, slots, allow), running, is_frozen))
    boards = sorted({s.gpu.board for h in problem.hosts for s in h.gpus if s.gpu.board})
    problem.shapes = [Shape(item, _options(item, boards)) for item in demand.demand]
    return problem


def _slot(host: str, gpu: Gpu, allow: set[str], frozen: bool, may_switch: bool) -> GpuSlot:
    """The GPU as the answer may use it: a GPU of another graphics type becomes Shared Direct on a host that runs
    no VM when `graphics` is allowed (and then takes the modes an idle GPU may take)."""
    if gpu.graphics_type == GraphicsType.SHARED_DIRECT or not may_switch or gpu.blocked:
        return GpuSlot(host, gpu, _modes(gpu, allow, frozen))
    switched = clone_gpu(gpu)
    switched.graphics_type = GraphicsType.SHARED_DIRECT
    return GpuSlot(host, switched, _modes(switched, allow, frozen), graphics_from=gpu.graphics_type)


def _limit(host: ObservedHost) -> int:
    by_version = max_vgpus_per_vm(host.api_version)
    return min(by_version, host.max_vgpus_per_vm) if host.max_vgpus_per_vm > 0 else by_version


def _modes(gpu: Gpu, allow: set[str], frozen: bool) -> list[str]:
    current = gpu.vgpu_mode
    if frozen or not is_idle(gpu) or gpu.graphics_type != GraphicsType.SHARED_DIRECT:
        return [current]
    info = BOARDS.get(gpu.board or "")
    out = [current]
    for mode in MODES:
        if mode == current:
            continue
        to_mig, from_mig = mode == GpuVgpuMode.MIG, current == GpuVgpuMode.MIG
        if to_mig or from_mig:
            ok = "mig" in allow and info is not None and info.mig_capable
            ok = ok and (mode == GpuVgpuMode.SAME_SIZE or to_mig or "vgpu-mode" in allow)  # MIG off lands in same-size
        else:
            ok = "vgpu-mode" in allow
        if ok:
            out.append(mode)
    return out


def _offered(host: ObservedHost, slots: list[GpuSlot], allow: set[str]) -> set[str]:
    offered = set(host.offered_profiles)
    for s in slots:
        board = s.gpu.board
        if board is None or (len(s.modes) == 1 and s.graphics_from is None):
            continue
        if any(m == GpuVgpuMode.MIG for m in s.modes):
            offered.update(mig_profile_names(board))
        if any(m in TIME_SLICED_MODES for m in s.modes):
            offered.update(time_sliced_profile_names(board))
    return offered


def _options(item: DemandItem, boards: list[str]) -> list[str]:
    v = item.vgpus
    if v.profile is not None:
        return [v.profile]
    names: list[str] = []
    for board in boards:
        for name in time_sliced_profile_names(board) + mig_profile_names(board):
            p = parse_profile(name)
            if p.fb_gb == v.fb_gb and p.series == v.series:
                names.append(name)
    # profiles with the same size but other series letters are never generated from the board tables
    return names


def host_profiles(host: HostCtx) -> set[str]:
    """Profiles that running VMs use on the host (what `profile` not allowed restricts new VMs to)."""
    return {p for s in host.gpus for p in s.gpu.vgpus}


def usable_options(problem: Problem, host: HostCtx, shape: Shape) -> list[str]:
    """The shape's profiles that this host offers (now or after allowed mode changes), within its limits."""
    if shape.vgpus > host.limit:
        return []
    out = [o for o in shape.options if o in host.offered]
    if "profile" not in problem.allow:
        used = host_profiles(host)
        if used:
            out = [o for o in out if o in used or parse_profile(o).is_mig]
    return out
