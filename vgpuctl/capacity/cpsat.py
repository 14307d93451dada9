"""The exact layout: an OR-Tools CP-SAT model (imported only here; `pip install vgpuctl[capacity]`).

Identical GPUs of a host (same kind, state, allowed modes and NVLink set) form one class; identical VMs form one
shape. Per class c, n[c,j] counts its GPUs that take choice j, a (mode, pattern) pair where the patterns are the
maximal vGPU multisets placement admits on such a GPU in that mode (vgpuctl.capacity.kinds); u[c,s,p] counts
the vGPUs of shape s with profile p in the class, at most one per GPU and VM (u <= |c| y). Per host, y[h,s,p]
counts the VMs of shape s with profile p; their vGPUs fill the classes (sum of u = vGPUs per VM x y), NVLink
VMs inside one NVLink set (w per set) that offers a device group of their size for their profile (placement's
rule), on that many of its GPUs with room. Identical hosts are ordered by load to remove symmetric solutions.
The framebuffer the vGPUs take, per class, per host and over the farm, is at most what the patterns hold: sums of
the per-profile constraints, which bound the relaxation by the framebuffer (without them it places every VM).
On hosts that spread a board's time-sliced vGPUs over several GPUs (performance policy) new VMs of that board
use one time-sliced profile (HostCtx.spreads); MIG-backed profiles and single GPUs are not restricted: the
layout is verified in the order apply powers VMs on (placement.power_on_key).
Objective: placed VMs by priority (a higher priority outweighs everything below it), then fewest GPU and
host changes. The greedy layout is the hint.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from dataclasses import field
from typing import Any

from vgpuctl.capacity.kinds import addition_patterns, gpu_kind_key, patterns_complete
from vgpuctl.capacity.layout import HostLayout, Layout
from vgpuctl.capacity.problem import GpuSlot, HostCtx, Problem, Shape, usable_options
from vgpuctl.extras import require
from vgpuctl.lazyclass import dataclass
from vgpuctl.profiles import parse_profile

HOST_CHANGE_WEIGHT = 8  # a changed host (maintenance, maybe a reboot) counts as much as 8 changed GPUs
MAX_WEIGHT = 2**52
SEARCH_FLOOR = 1 / 3  # of the time limit: what the search gets however long the stages before it took
FIRST_STEP_SHARE = 0.2  # of the search's budget: one worker's try before the parallel search


@dataclass
class SolveStats:
    status: str  # optimal | feasible | unknown | infeasible | model_invalid
    objective: float
    bound: float
    gap: float  # VMs the bound still allows beyond the answer, relative to them (0 when proven optimal)
    missing_bound: float  # at most this many more VMs (of the lowest priority) could be placed
    seconds: float
    lexicographic: bool  # priorities weighted strictly (False when the weights would overflow)
    variables: int = 0
    build_seconds: float = 0.0  # building the model (patterns from placement included)
    truncated: list[str] = field(default_factory=list)  # GPU kinds whose patterns stopped at MAX_PATTERNS


@dataclass
class _Class:
    host: str
    slots: list[GpuSlot]
    choices: list[tuple[str, dict[str, int]]]
    n: list[Any] = field(default_factory=list)  # IntVar per choice
    u: dict[tuple[str, str], Any] = field(default_factory=dict)  # (shape, profile) -> IntVar

    @property
    def size(self) -> int:
        return len(self.slots)

    @property
    def current(self) -> str:
        return self.slots[0].gpu.vgpu_mode

    @property
    def nvlink_set(self) -> int | None:
        g = self.slots[0].gpu
        return g.nvlink_set if g.nvlink_up else None


def priority_weights(problem: Problem, change_cost: int) -> tuple[dict[int, int], bool]:
    """A weight per priority so that one more VM of a priority is worth more than every VM of lower
    priorities plus every change."""
    counts: Counter[int] = Counter()
    for s in problem.shapes:
        counts[s.priority] += s.count
    weights: dict[int, int] = {}
    below = change_cost
    for prio in sorted(counts):
        weights[prio] = below + 1
        below += weights[prio] * counts[prio]
    if below > MAX_WEIGHT:
        return {p: p * (change_cost + 1) for p in counts}, False
    return weights, True


def gpu_classes(host: HostCtx, profiles: list[str], truncated: set[str] | None = None) -> list[_Class]:
    """Identical GPUs of a host, each class with its (mode, pattern) choices over `profiles`; the kinds whose
    patterns stopped at kinds.MAX_PATTERNS are added to `truncated` as `<board> <mode>`."""
    groups: dict[tuple[object, ...], list[GpuSlot]] = {}
    for slot in host.gpus:
        g = slot.gpu
        key = (gpu_kind_key(g), tuple(slot.modes), g.nvlink_set if g.nvlink_up else None, slot.graphics_from)
        groups.setdefault(key, []).append(slot)
    out = []
    for slots in groups.values():
        rep = slots[0]
        relevant = [p for p in profiles if parse_profile(p).board == rep.gpu.board]
        choices = [(mode, pat) for mode in rep.modes
                   for pat in (addition_patterns(rep.as_mode(mode), relevant) or [{}])]
        if rep.graphics_from is not None:  # leaving it unused spares its graphics switch (and the reboot)
            choices.insert(0, (rep.gpu.vgpu_mode, {}))
        if truncated is not None:
            truncated.update(f"{rep.gpu.board} {mode}" for mode in rep.modes
                             if not patterns_complete(rep.as_mode(mode), relevant))
        out.append(_Class(host.name, slots, choices))
    return out


class _LayoutModel:
    def __init__(self, problem: Problem):
        require("ortools")  # the `capacity` extra; its absence is one line naming it
        from ortools.sat.python import cp_model

        self.cp = cp_model
        self.m = cp_model.CpModel()
        self.problem = problem
        self.y: dict[tuple[str, str, str], Any] = {}
        self.classes: dict[str, list[_Class]] = {}
        self.gpu_changes: list[Any] = []
        self.host_changes: list[Any] = []
        self.hinted: list[tuple[Any, int]] = []
        self.room: dict[str, dict[str, int]] = {}  # host -> profile -> vGPUs its GPUs can take at most
        self.truncated: set[str] = set()  # GPU kinds whose patterns stopped at kinds.MAX_PATTERNS
        self.taken_fb: list[Any] = []  # per host, the framebuffer (MiB) its new vGPUs take
        self.farm_fb = 0  # MiB the GPUs' fullest patterns hold, over the farm

    def build(self) -> None:
        for h in self.problem.hosts:
            self._host(h)
        for s in self.problem.shapes:
            terms = [v for (_, sn, _), v in self.y.items() if sn == s.name]
            if terms:
                self.m.add(sum(terms) <= s.count)
        if self.taken_fb:
            self.m.add(sum(self.taken_fb) <= self.farm_fb)
        self._host_symmetry()
        shapes = {s.name: s for s in self.problem.shapes}
        change_cost = sum(c.size for cs in self.classes.values() for c in cs) + HOST_CHANGE_WEIGHT * len(
            self.host_changes)
        self.weights, self.lexicographic = priority_weights(self.problem, change_cost)
        self.m.maximize(sum(self.weights[shapes[sn].priority] * v for (_, sn, _), v in self.y.items())
                        - sum(self.gpu_changes) - HOST_CHANGE_WEIGHT * sum(self.host_changes))

    def _host(self, h: HostCtx) -> None:
        m = self.m
        pairs = [(s, p) for s in self.problem.shapes for p in usable_options(self.problem, h, s)]
        if not pairs:
            return
        classes = gpu_classes(h, sorted({p for _, p in pairs}), self.truncated)
        self.classes[h.name] = classes
        room = {p: sum(c.size * max(pat.get(p, 0) for _, pat in c.choices) for c in classes) for _, p in pairs}
        self.room[h.name] = room
        for s, p in pairs:  # no more VMs than the host has room for: tight bounds make a tight relaxation
            most = min(s.count, room[p] // s.vgpus)
            self.y[h.name, s.name, p] = m.new_int_var(0, most, f"y[{h.name},{s.name},{p}]")
        changed_here = []
        for ci, c in enumerate(classes):
            c.n = [m.new_int_var(0, c.size, f"n[{h.name},{ci},{j}]") for j in range(len(c.choices))]
            m.add(sum(c.n) == c.size)
            switched = c.slots[0].graphics_from is not None
            moved = [v for (mode, pat), v in zip(c.choices, c.n, strict=True)
                     if mode != c.current or (switched and pat)]
            if moved:
                self.gpu_changes.extend(moved)
                changed_here.append((c.size, moved))
            for s, p in pairs:
                most = max(pat.get(p, 0) for _, pat in c.choices)
                if most == 0 or parse_profile(p).board != c.slots[0].gpu.board:
                    continue
                if s.nvlink and h.nvlink_set_refusal(c.nvlink_set, s.vgpus, p) is not None:
                    continue  # placement's device group rule: a group of the VM's size, for its profile
                bound = min(s.count * s.vgpus, most * c.size)
                c.u[s.name, p] = m.new_int_var(0, bound, f"u[{h.name},{ci},{s.name},{p}]")
            for p in {p for _, p in c.u}:
                m.add(sum(v for (_, pp), v in c.u.items() if pp == p)
                      <= sum(pat.get(p, 0) * n for (_, pat), n in zip(c.choices, c.n, strict=True)))
        for s, p in pairs:
            self._fill(h, s, p, classes)
        self._framebuffer(h, classes, pairs)
        self._one_time_sliced_profile(h, pairs)
        if changed_here:
            hc = m.new_bool_var(f"host_changed[{h.name}]")
            for size, moved in changed_here:
                m.add(sum(moved) <= size * hc)
            self.host_changes.append(hc)

    def _framebuffer(self, h: HostCtx, classes: list[_Class], pairs: list[tuple[Shape, str]]) -> None:
        """The framebuffer the vGPUs take, per class and per host, is at most what their GPUs' patterns hold.
        Sums of the per-profile constraints, so they change no solution; but the search's relaxation bounds
        the objective by them far sooner (the gap is measured against that bound)."""
        m, held = self.m, []
        for c in classes:
            if not c.u:
                continue
            fb = [sum(_mib(p) * k for p, k in pat.items()) for _, pat in c.choices]
            held.append(sum(f * n for f, n in zip(fb, c.n, strict=True)))
            m.add(sum(_mib(p) * v for (_, p), v in c.u.items()) <= held[-1])
            self.farm_fb += c.size * max(fb)
        taken = sum(_mib(p) * s.vgpus * self.y[h.name, s.name, p] for s, p in pairs)
        m.add(taken <= sum(held))
        self.taken_fb.append(taken)

    def _fill(self, h: HostCtx, s: Shape, p: str, classes: list[_Class]) -> None:
        """The VMs' vGPUs go into the host's classes, one per GPU and VM; NVLink VMs inside one set."""
        m, y = self.m, self.y[h.name, s.name, p]
        mine = [c for c in classes if (s.name, p) in c.u]
        if not s.nvlink:
            for c in mine:
                m.add(c.u[s.name, p] <= c.size * y)
            m.add(sum(c.u[s.name, p] for c in mine) == s.vgpus * y)
            self._distinct(h, s, p, mine, y)
            return
        ws = []
        for k in sorted({c.nvlink_set for c in mine if c.nvlink_set is not None}):
            members = [c for c in mine if c.nvlink_set == k]
            w = m.new_int_var(0, s.count, f"w[{h.name},{k},{s.name},{p}]")
            for c in members:
                m.add(c.u[s.name, p] <= c.size * w)
            m.add(sum(c.u[s.name, p] for c in members) == s.vgpus * w)
            ws.append(w)
        m.add(y == sum(ws))

    def _distinct(self, h: HostCtx, s: Shape, p: str, mine: list[_Class], y: Any) -> None:
        """A VM of several vGPUs needs that many GPUs that serve its profile (not one GPU holding them all)."""
        if s.vgpus < 2 or all(pat.get(p, 0) <= 1 for c in mine for _, pat in c.choices):
            return
        serving = sum(n for c in mine for (_, pat), n in zip(c.choices, c.n, strict=True) if pat.get(p, 0) >= 1)
        any_vm = self.m.new_bool_var(f"some[{h.name},{s.name},{p}]")
        self.m.add(y <= min(s.count, self.room[h.name][p] // s.vgpus) * any_vm)
        self.m.add(serving >= s.vgpus).only_enforce_if(any_vm)

    def _one_time_sliced_profile(self, h: HostCtx, pairs: list[tuple[Shape, str]]) -> None:
        """Where the host spreads a board's time-sliced profiles over several GPUs (HostCtx.spreads), new VMs of
        that board use at most one of them."""
        kinds: dict[str, set[str]] = {}
        for _, p in pairs:
            if h.spreads(p):
                kinds.setdefault(parse_profile(p).board, set()).add(p)
        for profiles in kinds.values():
            if len(profiles) < 2:
                continue
            used = []
            for p in sorted(profiles):
                u = self.m.new_bool_var(f"uses[{h.name},{p}]")
                shapes = {s.name: s for s, _ in pairs}
                total = sum(shapes[sn].vgpus * v for (hn, sn, pp), v in self.y.items() if hn == h.name and pp == p)
                cap = self.room[h.name][p]  # vGPUs of p the host can take at most
                self.m.add(total <= cap * u)
                used.append(u)
            self.m.add(sum(used) <= 1)

    def _host_symmetry(self) -> None:
        """Identical hosts are interchangeable: order them by the vGPUs they take."""
        groups: dict[tuple[object, ...], list[HostCtx]] = {}
        for h in self.problem.hosts:
            groups.setdefault(_signature(h), []).append(h)
        shapes = {s.name: s for s in self.problem.shapes}
        for members in groups.values():
            loads = [sum(shapes[sn].vgpus * v for (hn, sn, _), v in self.y.items() if hn == h.name) for h in members]
            for a, b in itertools.pairwise(loads):
                self.m.add(a >= b)

    def _hint(self, var: Any, value: int) -> None:
        self.m.add_hint(var, value)
        self.hinted.append((var, value))

    def hint(self, layout: Layout) -> None:
        layout = self._symmetric(layout)
        counts: Counter[tuple[str, str, str]] = Counter()
        for host, hl in layout.items():
            counts.update((host, sn, p) for sn, p in hl.vms)
        for key, v in self.y.items():
            self._hint(v, counts.get(key, 0))
        for host, classes in self.classes.items():
            hl = layout.get(host, HostLayout())
            for c in classes:
                picks: Counter[int] = Counter()
                used: Counter[tuple[str, str]] = Counter()
                for slot in c.slots:
                    use = hl.use.get(slot.gpu.id, Counter())
                    used.update(use)
                    per_profile: Counter[str] = Counter()
                    for (_sn, p), k in use.items():
                        per_profile[p] += k
                    mode = hl.modes.get(slot.gpu.id, c.current)
                    pick = next((j for j, (md, pat) in enumerate(c.choices)
                                 if md == mode and all(pat.get(p, 0) >= k for p, k in per_profile.items())), 0)
                    picks[pick] += 1
                for j, n in enumerate(c.n):
                    self._hint(n, picks.get(j, 0))
                for pair, v in c.u.items():
                    self._hint(v, used.get(pair, 0))

    def _symmetric(self, layout: Layout) -> Layout:
        """The same layout with identical hosts' shares swapped so that their loads fall in host order, as the
        symmetry constraints want (a hint that breaks a constraint would be thrown away)."""
        shapes = {s.name: s for s in self.problem.shapes}
        out = dict(layout)
        groups: dict[tuple[object, ...], list[HostCtx]] = {}
        for h in self.problem.hosts:
            groups.setdefault(_signature(h), []).append(h)
        for members in groups.values():
            def load(h: HostCtx) -> int:
                return sum(shapes[sn].vgpus for sn, _ in layout.get(h.name, HostLayout()).vms)

            for target, source in zip(members, sorted(members, key=load, reverse=True), strict=True):
                out[target.name] = _moved(layout.get(source.name, HostLayout()), source, target)
        return out

    def extract(self, solver: Any) -> Layout:
        layout: Layout = {h.name: HostLayout() for h in self.problem.hosts}
        for (host, sn, p), v in self.y.items():
            layout[host].vms += [(sn, p)] * solver.value(v)
        for host, classes in self.classes.items():
            for c in classes:
                slots = iter(c.slots)
                for (mode, _pat), n in zip(c.choices, c.n, strict=True):
                    for _ in range(solver.value(n)):
                        slot = next(slots)
                        if mode != c.current:
                            layout[host].modes[slot.gpu.id] = mode
        return layout


def _mib(profile: str) -> int:
    """A profile's framebuffer in MiB: the weight of the framebuffer constraints."""
    return round(parse_profile(profile).fb_gb * 1024)


def _moved(hl: HostLayout, source: HostCtx, target: HostCtx) -> HostLayout:
    """A host's layout carried to an identical host, GPU by GPU in the same position."""
    ids = {s.gpu.id: t.gpu.id for s, t in zip(source.gpus, target.gpus, strict=True)}
    return HostLayout({ids[k]: v for k, v in hl.modes.items()}, list(hl.vms),
                      {ids[k]: v for k, v in hl.use.items()})


def _signature(h: HostCtx) -> tuple[object, ...]:
    gpus = tuple((gpu_kind_key(s.gpu), tuple(s.modes), s.graphics_from) for s in h.gpus)
    return (gpus, h.policy, h.limit, h.frozen, tuple(sorted(h.offered)))


def search_time(time_limit_s: float, deadline: float | None, now: float | None = None) -> float:
    """Seconds the search may take: the limit, cut to what is left before `deadline`, but at least a third of
    it (on a loaded machine the answer then takes longer than the limit rather than stay greedy's)."""
    if deadline is None:
        return time_limit_s
    left = deadline - (time.monotonic() if now is None else now)
    return max(time_limit_s * SEARCH_FLOOR, min(time_limit_s, left))


def solve(problem: Problem, hint: Layout | None = None, time_limit_s: float = 10.0, workers: int | None = None,
          *, deadline: float | None = None) -> tuple[Layout, SolveStats]:
    """Build the model (OR-Tools imported here), then search for at most `time_limit_s` seconds and, with a
    `deadline` (time.monotonic()), no longer than until then, though never less than a third of the limit."""
    started = time.monotonic()
    model = _LayoutModel(problem)
    model.build()
    if hint:
        model.hint(hint)
    build_s = time.monotonic() - started
    cp = model.cp
    budget = search_time(time_limit_s, deadline)
    solver, status, seconds, bound = _search(model, budget, workers)
    name = solver.status_name(status).lower()
    variables = len(model.m.proto.variables)
    truncated = sorted(model.truncated)
    if status not in (cp.OPTIMAL, cp.FEASIBLE):
        return {}, SolveStats(name, 0.0, 0.0, 1.0, 0.0, seconds, model.lexicographic, variables, build_s,
                              truncated)
    obj = solver.objective_value
    layout = model.extract(solver)
    # The objective counts VMs in priority weights: its distance to the bound, in lowest-priority VMs, is how
    # many more VMs an optimal layout could at most place (changes weigh less than one VM).
    missing = 0.0 if status == cp.OPTIMAL else max(0.0, bound - obj) / min(model.weights.values())
    placed = sum(len(h.vms) for h in layout.values())
    gap = missing / (placed + missing) if missing else 0.0
    return layout, SolveStats(name, obj, bound, gap, missing, seconds, model.lexicographic, variables,
                              build_s, truncated)


def _search(model: _LayoutModel, budget_s: float, workers: int | None) -> tuple[Any, Any, float, float]:
    """Search in two steps: one worker first, for a share of the budget (on small and middle farms it proves the
    optimum in well under a second, where several workers sharing two cores still wander at the end of the
    budget), then, unless that proved the optimum, one worker per core (up to 8) for the rest, started from the
    first step's layout (a single worker finds no layout for large farms within the budget). Returns the solver
    whose answer is better, its status and the seconds of both steps."""
    cp = model.cp
    parallel = workers or min(8, max(1, os.cpu_count() or 1))
    first_s = budget_s * FIRST_STEP_SHARE if parallel > 1 else budget_s
    first = _run(model, first_s, 1)
    status = first.solve(model.m)
    seconds = first.wall_time
    if parallel == 1 or status == cp.OPTIMAL or budget_s - seconds <= 0:
        return first, status, seconds, first.best_objective_bound
    if status == cp.FEASIBLE:
        model.m.clear_hints()
        for index in range(len(model.m.proto.variables)):
            var = model.m.get_int_var_from_proto_index(index)
            model.m.add_hint(var, first.value(var))
    second = _run(model, budget_s - seconds, parallel)
    again = second.solve(model.m)
    seconds += second.wall_time
    if again not in (cp.OPTIMAL, cp.FEASIBLE):
        return first, status, seconds, first.best_objective_bound
    bound = second.best_objective_bound
    if status == cp.FEASIBLE:
        bound = min(bound, first.best_objective_bound)
        if second.objective_value < first.objective_value:
            return first, status, seconds, bound
    return second, again, seconds, bound


def _run(model: _LayoutModel, seconds: float, workers: int) -> Any:
    solver = model.cp.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, seconds)
    solver.parameters.num_search_workers = workers
    solver.parameters.linearization_level = 2  # the LP of the counting constraints bounds far better
    return solver
