"""The exact layout: an OR-Tools CP-SAT model (imported only here; `pip install vgpuctl[capacity]`).

Variables, per host h: y[h,s,p] VMs of demand shape s with profile p on h; per GPU g: one (mode, pattern)
choice z[g,j], where the patterns are the maximal vGPU multisets placement admits on g in that mode
(vgpuctl.capacity.kinds), and x[g,s,p] the VMs of (s,p) with a vGPU on g. A VM's vGPUs sit on distinct GPUs
of one host (x <= y, sum of x over the host = vGPUs per VM x y), NVLink VMs inside one NVLink set. Identical
VMs form one shape; identical hosts and identical idle GPUs are ordered to remove symmetric solutions.
On hosts that spread vGPUs (performance policy) new VMs of one board use one time-sliced and one MIG
profile, so the layout holds whatever order the VMs power on in.
Objective: placed VMs by priority (a higher priority outweighs everything below it), then fewest GPU and
host changes. The greedy layout is the hint.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

from vgpuctl.capacity.kinds import addition_patterns
from vgpuctl.capacity.layout import HostLayout, Layout
from vgpuctl.capacity.problem import HostCtx, Problem, usable_options
from vgpuctl.placement import PERFORMANCE
from vgpuctl.profiles import parse_profile

HOST_CHANGE_WEIGHT = 8  # a changed host (maintenance, maybe a reboot) counts as much as 8 changed GPUs
MAX_WEIGHT = 2**52


@dataclass
class SolveStats:
    status: str  # optimal | feasible | unknown | infeasible | model_invalid
    objective: float
    bound: float
    gap: float  # relative gap of the objective to the bound (0 when proven optimal)
    seconds: float
    lexicographic: bool  # priorities weighted strictly (False when the weights would overflow)


def priority_weights(problem: Problem, change_cost: int) -> tuple[dict[int, int], bool]:
    """A weight per priority so that one more VM of a priority is worth more than every VM of lower
    priorities plus every change."""
    counts = Counter()
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


def solve(problem: Problem, hint: Layout | None = None, time_limit_s: float = 10.0, workers: int = 8,
          ) -> tuple[Layout, SolveStats]:
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    y: dict[tuple[str, str, str], cp_model.IntVar] = {}
    gpu_changes: list[cp_model.IntVar] = []
    host_changes: list[cp_model.IntVar] = []
    choices: dict[tuple[str, str], list[tuple[str, dict[str, int], cp_model.IntVar]]] = {}
    x_all: dict[tuple[str, str, str, str], cp_model.IntVar] = {}
    shapes = {s.name: s for s in problem.shapes}

    for h in problem.hosts:
        opts = {s.name: usable_options(problem, h, s) for s in problem.shapes}
        for s in problem.shapes:
            for p in opts[s.name]:
                y[h.name, s.name, p] = m.NewIntVar(0, s.count, f"y[{h.name},{s.name},{p}]")
        _host_model(m, h, problem, opts, y, x_all, choices, gpu_changes, host_changes)
    for s in problem.shapes:
        terms = [v for (_, sn, _), v in y.items() if sn == s.name]
        if terms:
            m.Add(sum(terms) <= s.count)
    _break_host_symmetry(m, problem, y)

    change_cost = len(gpu_changes) + HOST_CHANGE_WEIGHT * len(host_changes)
    weights, lexicographic = priority_weights(problem, change_cost)
    m.Maximize(sum(weights[shapes[sn].priority] * v for (_, sn, _), v in y.items())
               - sum(gpu_changes) - HOST_CHANGE_WEIGHT * sum(host_changes))
    if hint:
        _hint(m, hint, y, x_all, choices)

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_search_workers = workers
    status = solver.Solve(m)
    name = solver.StatusName(status).lower()
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return {}, SolveStats(name, 0.0, 0.0, 1.0, solver.WallTime(), lexicographic)
    obj, bound = solver.ObjectiveValue(), solver.BestObjectiveBound()
    gap = 0.0 if status == cp_model.OPTIMAL else abs(bound - obj) / max(1.0, abs(bound))
    layout = _extract(solver, problem, y, choices)
    return layout, SolveStats(name, obj, bound, gap, solver.WallTime(), lexicographic)


def _host_model(m, h: HostCtx, problem: Problem, opts: dict[str, list[str]], y, x_all, choices,
                gpu_changes, host_changes) -> None:
    pairs = [(s, p) for s in problem.shapes for p in opts[s.name]]
    if not pairs:
        return
    changed_here = []
    sets = h.nvlink_sets()
    x: dict[tuple[str, str, str], object] = {}
    for slot in h.gpus:
        g = slot.gpu
        relevant = sorted({p for _, p in pairs if parse_profile(p).board == g.board})
        table: list[tuple[str, dict[str, int], object]] = []
        for mode in slot.modes:
            for pat in addition_patterns(slot.as_mode(mode), relevant) or [{}]:
                table.append((mode, pat, m.NewBoolVar(f"z[{h.name},{g.id},{len(table)}]")))
        mode_only_current = all(t[0] == g.vgpu_mode for t in table)
        m.AddExactlyOne([t[2] for t in table])
        choices[h.name, g.id] = table
        if not mode_only_current:
            changed = m.NewBoolVar(f"changed[{h.name},{g.id}]")
            m.Add(changed == sum(t[2] for t in table if t[0] != g.vgpu_mode))
            gpu_changes.append(changed)
            changed_here.append(changed)
        content: dict[str, list[object]] = {}
        for s, p in pairs:
            if parse_profile(p).board != g.board or not any(pat.get(p) for _, pat, _ in table):
                continue
            if s.nvlink and (g.nvlink_set is None or not g.nvlink_up or len(sets.get(g.nvlink_set, [])) < s.vgpus):
                continue
            most = max(pat.get(p, 0) for _, pat, _ in table)
            v = m.NewIntVar(0, min(s.count, most), f"x[{h.name},{g.id},{s.name},{p}]")
            m.Add(v <= y[h.name, s.name, p])  # one vGPU of a VM per GPU
            x[g.id, s.name, p] = v
            x_all[h.name, g.id, s.name, p] = v
            content.setdefault(p, []).append(v)
        for p, terms in content.items():
            m.Add(sum(terms) <= sum(pat.get(p, 0) * z for _, pat, z in table))
    for s, p in pairs:
        if s.nvlink:
            _nvlink_sets(m, h, s, p, sets, x, y)
        else:
            terms = [v for (gid, sn, pp), v in x.items() if sn == s.name and pp == p]
            m.Add(sum(terms) == s.vgpus * y[h.name, s.name, p])
    _break_gpu_symmetry(m, h, choices)
    if h.policy == PERFORMANCE:
        _one_profile_per_kind(m, h, pairs, y)
    if changed_here:
        hc = m.NewBoolVar(f"host_changed[{h.name}]")
        m.AddMaxEquality(hc, changed_here)
        host_changes.append(hc)


def _nvlink_sets(m, h: HostCtx, s, p: str, sets, x, y) -> None:
    ws = []
    for k, members in sorted(sets.items()):
        terms = [x[g.gpu.id, s.name, p] for g in members if (g.gpu.id, s.name, p) in x]
        if len(terms) < s.vgpus:
            continue
        w = m.NewIntVar(0, s.count, f"w[{h.name},{k},{s.name},{p}]")
        for t in terms:
            m.Add(t <= w)
        m.Add(sum(terms) == s.vgpus * w)
        ws.append(w)
    m.Add(y[h.name, s.name, p] == sum(ws))


def _one_profile_per_kind(m, h: HostCtx, pairs, y) -> None:
    """On a spreading host, new VMs of one board use at most one time-sliced and one MIG profile."""
    kinds: dict[tuple[str, bool], set[str]] = {}
    for _, p in pairs:
        prof = parse_profile(p)
        kinds.setdefault((prof.board, prof.is_mig), set()).add(p)
    for profiles in kinds.values():
        if len(profiles) < 2:
            continue
        used = []
        for p in sorted(profiles):
            u = m.NewBoolVar(f"uses[{h.name},{p}]")
            for (hn, _sn, pp), v in y.items():
                if hn == h.name and pp == p:
                    m.Add(v == 0).OnlyEnforceIf(u.Not())
            used.append(u)
        m.Add(sum(used) <= 1)


def _break_gpu_symmetry(m, h: HostCtx, choices) -> None:
    """Identical idle GPUs of a host (same kind, modes and NVLink set) are interchangeable: order their choices."""
    last: dict[tuple[object, ...], object] = {}
    for slot in h.gpus:
        g = slot.gpu
        if not slot.idle:
            continue
        key = (g.board, g.fb_gb, g.vgpu_mode, tuple(slot.modes), g.nvlink_set, g.nvlink_up)
        table = choices[h.name, g.id]
        index = sum(i * z for i, (_, _, z) in enumerate(table))
        if key in last:
            m.Add(last[key] <= index)
        last[key] = index


def _signature(h: HostCtx) -> tuple[object, ...]:
    gpus = tuple((s.gpu.board, s.gpu.fb_gb, s.gpu.vgpu_mode, tuple(s.modes), tuple(s.gpu.vgpus), s.gpu.blocked,
                  s.gpu.nvlink_set, s.gpu.nvlink_up) for s in h.gpus)
    return (gpus, h.policy, h.limit, h.frozen, tuple(sorted(h.offered)))


def _break_host_symmetry(m, problem: Problem, y) -> None:
    """Identical hosts are interchangeable: order them by the vGPUs they take."""
    groups: dict[tuple[object, ...], list[HostCtx]] = {}
    for h in problem.hosts:
        groups.setdefault(_signature(h), []).append(h)
    shapes = {s.name: s for s in problem.shapes}
    for members in groups.values():
        loads = [sum(shapes[sn].vgpus * v for (hn, sn, _), v in y.items() if hn == h.name) for h in members]
        for a, b in itertools.pairwise(loads):
            m.Add(a >= b)


def _hint(m, hint: Layout, y, x_all, choices) -> None:
    counts: Counter[tuple[str, str, str]] = Counter()
    for host, hl in hint.items():
        for sn, p in hl.vms:
            counts[host, sn, p] += 1
    for key, v in y.items():
        m.AddHint(v, counts.get(key, 0))
    for (host, gid), table in choices.items():
        hl = hint.get(host, HostLayout())
        use = hl.use.get(gid, Counter())
        per_profile: Counter[str] = Counter()
        for (_sn, p), n in use.items():
            per_profile[p] += n
        mode = hl.modes.get(gid, next(iter(table))[0])
        pick = next((i for i, (md, pat, _) in enumerate(table)
                     if md == mode and all(pat.get(p, 0) >= n for p, n in per_profile.items())), None)
        for i, (_, _, z) in enumerate(table):
            m.AddHint(z, 1 if i == pick else 0)
    for (host, gid, sn, p), v in x_all.items():
        m.AddHint(v, hint.get(host, HostLayout()).use.get(gid, Counter()).get((sn, p), 0))


def _extract(solver, problem: Problem, y, choices) -> Layout:
    layout: Layout = {h.name: HostLayout() for h in problem.hosts}
    for (host, sn, p), v in y.items():
        layout[host].vms += [(sn, p)] * solver.Value(v)
    for (host, gid), table in choices.items():
        current = next(s.gpu.vgpu_mode for s in problem.host(host).gpus if s.gpu.id == gid)
        for mode, _pat, z in table:
            if solver.Value(z) and mode != current:
                layout[host].modes[gid] = mode
    return layout
