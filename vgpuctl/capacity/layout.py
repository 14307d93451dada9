"""A layout (per host: GPU mode changes and the demanded VMs put there), the greedy first-fit-decreasing
layout, and verification: the planner places the layout's VMs in the order `vgpuctl plan` places them and
`apply` powers them on (placement.power_on_key: largest first, then by name; each pinned to its host) on the
farm as it will be after the mode changes; what it refuses is dropped.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import field

from vgpuctl.capacity.kinds import in_mode, is_idle
from vgpuctl.capacity.problem import HostCtx, Problem, Shape, usable_options
from vgpuctl.domain import GpuVgpuMode, GraphicsType
from vgpuctl.farm.placement import Gpu, Placement, add_vgpu, clone_gpu, fits, place_vm, power_on_key
from vgpuctl.farm.state import FarmState, Request, farm_from_observed, place_farm
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed
from vgpuctl.profiles import parse_profile


@dataclass
class HostLayout:
    modes: dict[str, str] = field(default_factory=dict)  # PCI id -> new vGPU mode (changed GPUs only)
    vms: list[tuple[str, str]] = field(default_factory=list)  # (shape name, profile) per VM
    use: dict[str, Counter[tuple[str, str]]] = field(default_factory=dict)  # PCI id -> VMs per (shape, profile)
    graphics: set[str] = field(default_factory=set)  # PCI ids switched to Shared Direct (`allow: [graphics]`)


Layout = dict[str, HostLayout]


@dataclass
class PlacedVm:
    name: str
    shape: str
    host: str
    profile: str
    vgpus: int
    nvlink: bool


@dataclass
class Verified:
    placed: list[PlacedVm]
    dropped: list[tuple[str, str, str]]  # (shape, host, reason) the planner refused
    modes: dict[tuple[str, str], str]  # (host, PCI id) -> new mode, only GPUs the placed VMs need
    graphics: set[tuple[str, str]] = field(default_factory=set)  # (host, PCI id) switched to Shared Direct

    def count(self, shape: str) -> int:
        return sum(1 for v in self.placed if v.shape == shape)


# -------------------------------------------------------------------------------------------- greedy


def _size(shape: Shape) -> float:
    return shape.vgpus * max((parse_profile(o).fb_gb for o in shape.options), default=0)


def greedy(problem: Problem, *, largest_first: bool = True) -> Layout:
    """First-fit decreasing: VMs by priority, then size, each on the first host where it fits, switching an
    idle GPU's mode (when allowed) only when a VM needs it. `largest_first=False` takes the smallest VMs of
    a priority first instead (more VMs when not all fit; the solver's second starting point)."""
    work = {h.name: [clone_gpu(s.gpu) for s in h.gpus] for h in problem.hosts}
    layout: Layout = {h.name: HostLayout() for h in problem.hosts}
    failed: set[tuple[str, str, str]] = set()
    sign = -1 if largest_first else 1
    order = sorted(problem.shapes, key=lambda s: (-s.priority, sign * _size(s), s.name))
    for shape in order:
        for _ in range(shape.count):
            if not _place_one(problem, shape, work, layout, failed):
                break  # identical VMs: when one does not fit, the rest do not either
    return layout


def _place_one(problem: Problem, shape: Shape, work: dict[str, list[Gpu]], layout: Layout,
               failed: set[tuple[str, str, str]]) -> bool:
    for host in sorted(problem.hosts, key=lambda h: any(s.graphics_from for s in h.gpus)):  # switches last
        for opt in usable_options(problem, host, shape):
            if (host.name, shape.name, opt) in failed:
                continue
            if _try(host, shape, opt, work[host.name], layout[host.name]):
                return True
            failed.add((host.name, shape.name, opt))
    return False


def _try(host: HostCtx, shape: Shape, opt: str, gpus: list[Gpu], hl: HostLayout) -> bool:
    if host.spreads(opt) and _other_time_sliced_profile(hl, opt):
        return False
    profiles = [opt] * shape.vgpus
    res = None
    if _enough(gpus, opt, shape.vgpus):  # placement copies every GPU: ask it only when it may say yes
        res = place_vm(gpus, shape.name, profiles, host.policy, nvlink=shape.nvlink, host=host.name)
    trial = gpus
    if res is None or not res.ok:
        trial = _switched(host, gpus, opt)
        if trial is gpus or not _enough(trial, opt, shape.vgpus):
            return False
        res = place_vm(trial, shape.name, profiles, host.policy, nvlink=shape.nvlink, host=host.name)
        if not res.ok:
            return False
    by_id = {g.id: i for i, g in enumerate(gpus)}
    for p in res.placed:
        i = by_id[p.gpu]
        if trial[i] is not gpus[i]:
            gpus[i] = trial[i]
            hl.modes[p.gpu] = trial[i].vgpu_mode
        add_vgpu(gpus[i], p.profile)
        hl.use.setdefault(p.gpu, Counter())[(shape.name, opt)] += 1
    hl.vms.append((shape.name, opt))
    return True


def _enough(gpus: list[Gpu], profile: str, vgpus: int) -> bool:
    """At least as many GPUs take one more vGPU of `profile` as the VM has vGPUs (needed, not enough)."""
    return sum(1 for g in gpus if fits(g, profile)) >= vgpus


def _other_time_sliced_profile(hl: HostLayout, opt: str) -> bool:
    """A host that spreads `opt` over several GPUs gets new VMs of one time-sliced profile per board
    (HostCtx.spreads)."""
    p = parse_profile(opt)
    for _, other in hl.vms:
        q = parse_profile(other)
        if other != opt and q.board == p.board and not q.is_mig:
            return True
    return False


def _switched(host: HostCtx, gpus: list[Gpu], opt: str) -> list[Gpu]:
    """A trial copy where idle, untouched GPUs that may change take the mode `opt` needs."""
    want = GpuVgpuMode.MIG if parse_profile(opt).is_mig else GpuVgpuMode.SAME_SIZE
    out = list(gpus)
    changed = False
    for i, (slot, g) in enumerate(zip(host.gpus, gpus, strict=True)):
        needs = (g.vgpu_mode == GpuVgpuMode.MIG) != (want == GpuVgpuMode.MIG)
        if needs and is_idle(g) and slot.idle and want in slot.modes:
            out[i] = in_mode(g, want)
            changed = True
    return out if changed else gpus


# -------------------------------------------------------------------------------------- verification


def name_vms(problem: Problem, layout: Layout) -> list[PlacedVm]:
    """Names `<shape>-NNN` per shape, numbered over the hosts in name order."""
    shapes = {s.name: s for s in problem.shapes}
    counters: Counter[str] = Counter()
    out = []
    for host in sorted(layout):
        for shape_name, profile in sorted(layout[host].vms):
            shape = shapes[shape_name]
            counters[shape_name] += 1
            width = max(3, len(str(shape.count)))
            name = f"{shape_name}-{counters[shape_name]:0{width}d}"
            out.append(PlacedVm(name, shape_name, host, profile, shape.vgpus, shape.nvlink))
    return out


def verify(problem: Problem, observed: Observed, layout: Layout, rounds: int = 5) -> Verified:
    """Place the layout's VMs as `vgpuctl plan` will (in the power-on order, on their hosts, after the mode and
    graphics changes); VMs it refuses are dropped and the rest placed again until none is refused."""
    switchable = problem.switched()
    current = {h: HostLayout(dict(hl.modes), list(hl.vms), graphics={p for hh, p in switchable if hh == h})
               for h, hl in layout.items()}
    dropped: list[tuple[str, str, str]] = []
    vms, results = _drop_refused(problem, observed, current, dropped, rounds)
    used = {(r.host, p.gpu) for r in results.values() if r.ok for p in r.placed}
    every = {(h, pci): m for h, hl in current.items() for pci, m in hl.modes.items()}
    all_graphics = {(h, pci) for h, hl in current.items() for pci in hl.graphics}
    modes = {k: m for k, m in every.items() if k in used}
    graphics = all_graphics & used
    if modes != every or graphics != all_graphics:  # a change no VM lands on is left out, unless it steered
        lean = {h: HostLayout({pci: m for (hh, pci), m in modes.items() if hh == h}, list(hl.vms),
                              graphics={pci for hh, pci in graphics if hh == h})
                for h, hl in current.items()}
        again = _place(observed, lean, vms)
        if any(not r.ok for r in again.values()):
            modes, graphics = every, all_graphics
    return Verified(vms, dropped, modes, graphics)


def _drop_refused(problem: Problem, observed: Observed, current: Layout, dropped: list[tuple[str, str, str]],
                  rounds: int) -> tuple[list[PlacedVm], dict[str, Placement]]:
    """Place the layout; drop what the planner refuses (into `dropped`) and place the rest again, at most
    `rounds` times; then the VMs it placed and its results."""
    for _ in range(rounds):
        vms = name_vms(problem, current)
        results = _place(observed, current, vms)
        refused = [(vm, results[vm.name].reason or "") for vm in vms if not results[vm.name].ok]
        if not refused:
            return vms, results
        for vm, reason in refused:
            current[vm.host].vms.remove((vm.shape, vm.profile))
            dropped.append((vm.shape, vm.host, reason))
    vms = name_vms(problem, current)
    results = _place(observed, current, vms)
    return [vm for vm in vms if results[vm.name].ok], results


def _state(observed: Observed, layout: Layout) -> FarmState:
    state = farm_from_observed(observed)
    for host, hl in layout.items():
        gpus = state.gpus.get(host, [])
        for i, g in enumerate(gpus):
            if g.id in hl.graphics:
                g.graphics_type = GraphicsType.SHARED_DIRECT
            if g.id in hl.modes:
                gpus[i] = in_mode(g, hl.modes[g.id])
    return state


def _place(observed: Observed, layout: Layout, vms: list[PlacedVm]) -> dict[str, Placement]:
    state = _state(observed, layout)
    ordered = sorted(vms, key=lambda v: power_on_key(v.name, [v.profile] * v.vgpus))  # as plan places, apply powers on
    requests = [Request(v.name, [v.profile] * v.vgpus, [v.host], v.nvlink) for v in ordered]
    return place_farm(state, requests)
