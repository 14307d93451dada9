"""Capacity layouts: the CP-SAT solver against greedy first-fit decreasing, in the same run.

Generated farms (4 to 64 hosts x 4 or 8 GPUs, A100-40GB and H100-80GB hosts alternating, spreading and packing
hosts mixed) and demand mixes; both layouts are verified by the planner (vgpuctl.capacity.layout.verify), so the
figures count VMs that `vgpuctl plan` would power on. Prints per case: VMs placed by each, the ratio, GPU and
host changes, the solver's status, its gap (how many more VMs the bound still allows, relative) and its time.
No gpusim needed: the farms are plain observed data.

    .venv/bin/python bench/capacity_bench.py              # every case, 10 s solver limit
    .venv/bin/python bench/capacity_bench.py --only 64x8  # the 64 hosts x 8 GPUs, 1,000 VMs case
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vgpuctl.capacity import cpsat
from vgpuctl.capacity.demand import Demand
from vgpuctl.capacity.layout import Verified, greedy, verify
from vgpuctl.capacity.problem import Problem, build_problem
from vgpuctl.capacity.synthetic import RunningVm, SynthHost, make_farm
from vgpuctl.model import Observed

ALL = ["mig", "vgpu-mode", "profile"]


def farm(hosts: int, gpus: int, busy: bool = False) -> Observed:
    specs = []
    for i in range(hosts):
        board = "a100" if i % 2 else "h100"
        running = []
        if busy and i % 4 == 1:  # some hosts run VMs that hold a GPU: those GPUs keep their mode
            running = [RunningVm(f"busy-{i:02d}", [f"grid_{board}-20c"], [0])]
        specs.append(SynthHost(f"esx-{i:02d}", board=board, gpus=gpus, nvlink="all" if gpus == 8 else "pairs",
                               policy="consolidation" if i % 3 == 0 else "performance", running=running))
    return make_farm(specs)


def demand(items: list[dict[str, Any]], allow: list[str] = ALL) -> Demand:
    return Demand.model_validate({"apiVersion": "vgpuctl/v1", "kind": "Demand", "allow": allow, "demand": items})


def fb(name: str, count: int, gb: int, n: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": name, "count": count, "vgpus": {"fb_gb": gb, "series": "c", "count": n}, **extra}


def mix_inference(scale: int) -> Demand:
    return demand([fb("infer", 12 * scale, 10, priority=2), fb("mid", 6 * scale, 20), fb("tiny", 4 * scale, 5)])


def mix_fragmenting(scale: int) -> Demand:
    """One 20 GB and two 10 GB VMs per A100: same-size mode fits one size per GPU, MIG fits both."""
    return demand([fb("big", 2 * scale, 20), fb("small", 4 * scale, 10)], allow=["mig"])


def mix_training(scale: int) -> Demand:
    return demand([fb("train", max(1, scale // 2), 40, n=4),
                   {"name": "nvl", "count": max(1, scale // 8), "vgpus": {"profile": "grid_h100-80c", "count": 8},
                    "nvlink": "required", "priority": 3},
                   fb("infer", 8 * scale, 10, priority=2)])


def mix_1000() -> Demand:
    return demand([fb("infer", 500, 10, priority=2), fb("mid", 300, 20), fb("tiny", 120, 5), fb("train", 60, 40, n=4),
                   {"name": "nvl", "count": 20, "vgpus": {"profile": "grid_h100-80c", "count": 8},
                    "nvlink": "required", "priority": 3}])


@dataclass
class Row:
    case: str
    vms: int
    greedy: int
    solver: int
    greedy_changes: tuple[int, int]
    solver_changes: tuple[int, int]
    status: str
    gap: float
    build_s: float
    solve_s: float
    verify_s: float
    greedy_s: float


def _changes(v: Verified) -> tuple[int, int]:
    return len(v.modes), len({h for h, _ in v.modes})


def run(case: str, observed: Observed, wanted: Demand, time_limit: float) -> Row:
    problem: Problem = build_problem(observed, wanted)
    started = time.monotonic()
    layout = greedy(problem)
    first = verify(problem, observed, layout)
    hint = layout
    smallest = greedy(problem, largest_first=False)
    if len(verify(problem, observed, smallest).placed) > len(first.placed):
        hint = smallest  # the solver starts from the better of the two greedy orders; the baseline stays FFD
    greedy_s = time.monotonic() - started  # both greedy orders, each verified
    solved_layout, stats = cpsat.solve(problem, hint, time_limit)
    started = time.monotonic()
    solved = verify(problem, observed, solved_layout) if solved_layout else first
    verify_s = time.monotonic() - started
    return Row(case, sum(s.count for s in problem.shapes), len(first.placed), len(solved.placed), _changes(first),
               _changes(solved), stats.status, stats.gap, stats.build_seconds, stats.seconds, verify_s, greedy_s)


def cases(only: str | None) -> list[tuple[str, Observed, Demand]]:
    out = []
    for hosts, gpus in ((4, 4), (4, 8), (16, 4), (16, 8), (64, 4)):
        scale = hosts * gpus // 4
        for name, mix in (("inference", mix_inference), ("fragmenting", mix_fragmenting), ("training", mix_training)):
            out.append((f"{hosts}x{gpus} {name}", farm(hosts, gpus, busy=True), mix(scale)))
    out.append(("64x8 1000 VMs", farm(64, 8), mix_1000()))
    return [c for c in out if only is None or only in c[0]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=10.0, help="solver time limit per case, seconds")
    parser.add_argument("--only", help="run the cases whose name contains this (e.g. 64x8)")
    args = parser.parse_args()
    head = (f"{'case':<22}{'VMs':>6}{'greedy':>8}{'solver':>8}{'ratio':>7}  {'changes g/s (GPUs, hosts)':<27}"
            f"{'status':<10}{'gap':>7}{'greedy s':>9}{'model s':>9}{'CP-SAT s':>9}{'verify s':>9}{'total s':>9}")
    print(head)
    for case, observed, wanted in cases(args.only):
        r = run(case, observed, wanted, args.time_limit)
        ratio = r.solver / r.greedy if r.greedy else float("inf")
        changes = f"{r.greedy_changes} / {r.solver_changes}"
        total = r.greedy_s + r.build_s + r.solve_s + r.verify_s
        print(f"{r.case:<22}{r.vms:>6}{r.greedy:>8}{r.solver:>8}{ratio:>7.2f}  {changes:<27}{r.status:<10}"
              f"{r.gap:>7.1%}{r.greedy_s:>9.1f}{r.build_s:>9.1f}{r.solve_s:>9.1f}{r.verify_s:>9.1f}{total:>9.1f}",
              flush=True)


if __name__ == "__main__":
    main()
