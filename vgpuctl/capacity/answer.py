"""Answer a demand: greedy layout, CP-SAT layout started from it, both verified by the planner; the better
one is the answer. Reasons for what does not fit, host changes, and the inventory fragment (its text and JSON:
vgpuctl.reports.capacity).
"""

from __future__ import annotations

import time
from dataclasses import field
from typing import Any

from vgpuctl import yamlout
from vgpuctl.capacity import DEFAULT_TIME_LIMIT_S, cpsat
from vgpuctl.capacity.blockers import Blocker
from vgpuctl.capacity.demand import Demand, DemandItem
from vgpuctl.capacity.kinds import MAX_PATTERNS, capacity, in_mode
from vgpuctl.capacity.layout import PlacedVm, Verified, greedy, verify
from vgpuctl.capacity.problem import Problem, Shape, build_problem, usable_options
from vgpuctl.domain import GpuVgpuMode, GraphicsType
from vgpuctl.inventory.schema import API_VERSION
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed
from vgpuctl.profiles import BOARDS, parse_profile

FRAMEBUFFER, GEOMETRY, NVLINK, PER_VM_LIMIT, ORDER = "framebuffer", "geometry", "nvlink", "per-VM limit", "order"


@dataclass
class ShapeResult:
    name: str
    wanted: int
    placed: int
    priority: int
    reason: str | None = None  # framebuffer | geometry | nvlink | per-VM limit | order
    detail: str = ""


@dataclass
class GpuChange:
    host: str
    gpu: str
    old: str  # vGPU mode
    new: str
    needs_reboot: bool
    old_graphics_type: str | None = None  # set when the graphics type changes (to Shared Direct)
    new_graphics_type: str | None = None


@dataclass
class CapacityAnswer:
    shapes: list[ShapeResult]
    vms: list[PlacedVm]
    changes: list[GpuChange]
    method: str  # cp-sat | greedy
    status: str  # optimal | feasible | greedy
    gap: float | None
    seconds: float
    greedy_placed: int
    skipped_hosts: dict[str, str] = field(default_factory=dict)
    blocked: dict[str, list[Blocker]] = field(default_factory=dict)  # host -> what keeps it (or GPUs) out, fix
    running_on_changed: dict[str, list[str]] = field(default_factory=dict)  # host -> running VMs
    greedy: Verified | None = None  # the verified first-fit-decreasing layout it was compared with
    timings: Timings | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def all_fit(self) -> bool:
        return all(s.placed == s.wanted for s in self.shapes)

    @property
    def placed(self) -> int:
        return len(self.vms)


VERIFY_RESERVE = 2.0  # verifying the solver's layout may take this many times as long as verifying greedy's


@dataclass
class Timings:
    """Seconds per stage of one answer (the benchmark prints them)."""

    greedy: float = 0.0  # the problem, both greedy orders and their verification
    model: float = 0.0  # importing OR-Tools and building the model
    search: float = 0.0  # CP-SAT's search
    verify: float = 0.0  # verifying the solver's layout
    total: float = 0.0  # from `started` to the answer


def plan_capacity(observed: Observed, demand: Demand, *, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                  workers: int | None = None, use_solver: bool = True, started: float | None = None,
                  ) -> CapacityAnswer:
    """The better verified layout of greedy and CP-SAT. `time_limit_s` is the budget of the whole answer,
    counted from `started` (time.monotonic(); default now): the solver searches for what the greedy layouts,
    importing OR-Tools and building the model leave, less a reserve for verifying its layout."""
    start = time.monotonic() if started is None else started
    times = Timings()
    warnings: list[str] = []
    problem = build_problem(observed, demand)
    first = greedy(problem)
    verify_started = time.monotonic()
    greedy_verified = verify(problem, observed, first)
    verify_s = time.monotonic() - verify_started
    best, method, status, gap = greedy_verified, "greedy", "greedy", None
    if use_solver:
        hint = first
        smallest = greedy(problem, largest_first=False)
        if _score(problem, verify(problem, observed, smallest)) > _score(problem, greedy_verified):
            hint = smallest
        times.greedy = time.monotonic() - start

        deadline = start + time_limit_s - VERIFY_RESERVE * verify_s
        layout, stats = cpsat.solve(problem, hint, time_limit_s, workers, deadline=deadline)
        times.model, times.search = stats.build_seconds, stats.seconds
        warnings += [f"the solver's vGPU patterns for {kind} GPUs stopped at {MAX_PATTERNS} (too many profile "
                     "sizes at once): it may miss packings; ask for fewer sizes per demand file"
                     for kind in stats.truncated]
        if layout:
            verify_started = time.monotonic()
            solved = verify(problem, observed, layout)
            times.verify = time.monotonic() - verify_started
            if _score(problem, solved) >= _score(problem, greedy_verified):
                best, method = solved, "cp-sat"
            status, gap = stats.status, stats.gap
    else:
        times.greedy = time.monotonic() - start
    shapes = [_shape_result(problem, s, best) for s in problem.shapes]
    changes = _changes(problem, best)
    running = {c.host: problem.host(c.host).running_vms for c in changes if problem.host(c.host).running_vms}
    times.total = time.monotonic() - start
    return CapacityAnswer(shapes, best.placed, changes, method, status, gap, times.total,
                          len(greedy_verified.placed), dict(problem.skipped_hosts), dict(problem.blocked), running,
                          greedy=greedy_verified, timings=times, warnings=warnings)


def _score(problem: Problem, v: Verified) -> tuple[int, ...]:
    prios = sorted({s.priority for s in problem.shapes}, reverse=True)
    by_shape = {s.name: s.priority for s in problem.shapes}
    per = [sum(1 for vm in v.placed if by_shape[vm.shape] == p) for p in prios]
    return (*per, -len(v.modes), -len({h for h, _ in v.modes}))


def _changes(problem: Problem, v: Verified) -> list[GpuChange]:
    out = []
    for host, pci in sorted(set(v.modes) | v.graphics):
        slot = next(s for s in problem.host(host).gpus if s.gpu.id == pci)
        old = slot.gpu.vgpu_mode
        mode = v.modes.get((host, pci), old)
        mig_switch = (old == GpuVgpuMode.MIG) != (mode == GpuVgpuMode.MIG)
        info = BOARDS.get(slot.gpu.board or "")
        reboot = mig_switch and (info is None or info.mig_needs_reboot)  # the catalogue's `mig.apply`
        change = GpuChange(host, pci, old, mode, reboot)
        if (host, pci) in v.graphics:  # a graphics type change takes a host reboot (vgpuctl.hosts.plan)
            change.old_graphics_type, change.new_graphics_type = slot.graphics_from, GraphicsType.SHARED_DIRECT
            change.needs_reboot = True
        out.append(change)
    return out


# ------------------------------------------------------------------------------------------ reasons


def _shape_result(problem: Problem, shape: Shape, v: Verified) -> ShapeResult:
    placed = v.count(shape.name)
    res = ShapeResult(shape.name, shape.count, placed, shape.priority)
    if placed < shape.count:
        res.reason, res.detail = why_short(problem, shape, v)
    return res


def why_short(problem: Problem, shape: Shape, v: Verified) -> tuple[str, str]:
    """Why the rest of a shape does not fit: the first rule that rules it out, else framebuffer."""
    missing = shape.count - v.count(shape.name)
    what = f"{missing} of {shape.count} VMs of {shape.vgpus} x {'/'.join(shape.options) or 'no known profile'}"
    if not shape.options:
        return GEOMETRY, f"{what}: no GPU in scope has a profile of that size and series"
    limits = [h.limit for h in problem.hosts]
    if limits and all(shape.vgpus > lim for lim in limits):
        return PER_VM_LIMIT, f"{what}: {shape.vgpus} vGPUs per VM exceed every host's limit ({max(limits)})"
    hosts = [h for h in problem.hosts if usable_options(problem, h, shape)]
    if not hosts:
        return GEOMETRY, f"{what}: no host offers the profile in a mode it has or may switch to{_blocked(problem)}"
    if shape.nvlink:
        refusals = [(h.name, h.nvlink_refusal(shape.vgpus, opt)) for h in hosts
                    for opt in usable_options(problem, h, shape)]
        if all(r is not None for _, r in refusals):
            why = "; ".join(sorted({f"{name} {r}" for name, r in refusals}))
            return NVLINK, f"{what}: no host offers an NVLink device group for them ({why})"
    capable = 0
    for h in hosts:
        for slot in h.gpus:
            for opt in usable_options(problem, h, shape):
                if parse_profile(opt).board == slot.gpu.board and any(
                        capacity(slot.as_mode(m) if slot.idle else slot.gpu, opt) for m in slot.modes):
                    capable += 1
                    break
    if capable < shape.vgpus:
        return GEOMETRY, f"{what}: only {capable} GPUs could take the profile in any allowed mode{_blocked(problem)}"
    dropped = [d for d in v.dropped if d[0] == shape.name]
    if dropped and len(dropped) >= missing:
        return ORDER, f"{what}: the planner's placement order refuses them ({dropped[0][2]})"
    return FRAMEBUFFER, f"{what}: the GPUs that can take them are full{_blocked(problem)}"


def _blocked(problem: Problem, limit: int = 3) -> str:
    """The hosts (or GPUs) that take no vGPUs now, with the fix, as a tail for a shortfall's reason."""
    items = [f"{h}: {b.text()}" for h, bs in sorted(problem.blocked.items()) for b in bs]
    if not items:
        return ""
    more = f"; and {len(items) - limit} more" if len(items) > limit else ""
    return "; not usable now: " + "; ".join(items[:limit]) + more


# ------------------------------------------------------------------------------------------ the fragment


def fragment(answer: CapacityAnswer, demand: Demand) -> str:
    """An inventory (apiVersion vgpuctl/v1) with the host changes and the placed VMs pinned to their hosts, written
    by the YAML emitter (vgpuctl.yamlout): a demand or host name is a value, never structure."""
    items = {d.name: d for d in demand.demand}
    by_host: dict[str, list[GpuChange]] = {}
    for c in answer.changes:
        by_host.setdefault(c.host, []).append(c)
    hosts = [{"name": host, "gpus": [_gpu_entry(c) for c in changes]} for host, changes in sorted(by_host.items())]
    vms = [_vm_entry(vm, items[vm.shape], demand) for vm in sorted(answer.vms, key=lambda v: v.name)]
    return (yamlout.comment("Written by `vgpuctl capacity --demand`: host GPU modes and new VMs pinned to hosts.")
            + yamlout.dump({"apiVersion": API_VERSION, "hosts": hosts, "vms": vms}))  # fmt: skip


def _gpu_entry(change: GpuChange) -> dict[str, str]:
    entry = {"select": change.gpu}
    if change.new_graphics_type:
        entry["graphics_type"] = str(change.new_graphics_type)
    if change.new == GpuVgpuMode.MIG:
        entry["mode"] = "mig"
    elif change.old != change.new:
        entry |= {"mode": "time-sliced", "vgpu_mode": str(change.new)}
    return entry


def _vm_entry(vm: PlacedVm, item: DemandItem, demand: Demand) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": vm.name, "host": vm.host}
    template = item.template or demand.template
    if template:
        entry["template"] = template
    if item.cpus:
        entry["cpus"] = item.cpus
    if item.memory_gb:
        entry["memory_gb"] = item.memory_gb
    entry["vgpus"] = {"profile": vm.profile, "count": vm.vgpus}
    if vm.nvlink:
        entry["nvlink"] = "required"
    return entry


__all__ = ["CapacityAnswer", "fragment", "in_mode", "plan_capacity"]
