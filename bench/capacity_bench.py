"""Capacity layouts: the CP-SAT solver against greedy first-fit decreasing, in the same run.

Generated farms (4 to 64 hosts x 4 or 8 GPUs, A100-40GB and H100-80GB hosts alternating, spreading and packing
hosts mixed) and demand mixes. Each case runs in a fresh Python process the way `vgpuctl capacity --demand`
answers: `plan_capacity` with the same time budget, OR-Tools imported within it, greedy and solver layouts both
verified by the planner (vgpuctl.capacity.layout.verify), so the figures count VMs that `vgpuctl plan` would
power on. Prints per case: VMs placed by each, the ratio, GPU and host changes, the solver's status, its gap
(how many more VMs the bound still allows, relative) and the time of each stage and in all. No gpusim needed:
the farms are plain observed data (the command adds reading the farm, see bench/README.md).

    .venv/bin/python bench/capacity_bench.py              # every case, the command's default budget
    .venv/bin/python bench/capacity_bench.py --only 64x8  # the 64 hosts x 8 GPUs, 1,000 VMs case
    .venv/bin/python bench/capacity_bench.py --cli        # that case as one `vgpuctl capacity` against gpusim
    .venv/bin/python bench/capacity_bench.py --smoke [--cli]  # one small case (4 hosts x 4 GPUs), a 1 s budget:
                                                              # does it still run (make test does)
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vgpuctl.capacity import DEFAULT_TIME_LIMIT_S
from vgpuctl.capacity.answer import plan_capacity
from vgpuctl.capacity.demand import Demand
from vgpuctl.capacity.synthetic import RunningVm, SynthHost, make_farm
from vgpuctl.model import Observed

REPO = Path(__file__).resolve().parents[1]
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


def run_case(case: str, time_limit: float) -> dict[str, Any]:
    """One case as the command answers it (run in a process of its own: OR-Tools is imported in the budget)."""
    observed, wanted = next(build for name, build in cases(case) if name == case)()
    started = time.monotonic()  # where the command's clock would stand after reading the farm

    answer = plan_capacity(observed, wanted, time_limit_s=time_limit, started=started)
    assert answer.greedy is not None and answer.timings is not None
    t = answer.timings
    return {"case": case, "vms": sum(d.count for d in wanted.demand), "greedy": len(answer.greedy.placed),
            "solver": answer.placed, "method": answer.method, "greedy_changes": _changes(answer.greedy.modes),
            "solver_changes": _changes({(c.host, c.gpu): c.new for c in answer.changes}), "status": answer.status,
            "gap": answer.gap or 0.0, "greedy_s": t.greedy, "model_s": t.model, "search_s": t.search,
            "verify_s": t.verify, "total_s": t.total}


def _changes(modes: dict[tuple[str, str], str]) -> tuple[int, int]:
    return len(modes), len({h for h, _ in modes})


def _busy_case(hosts: int, gpus: int, mix: Callable[[int], Demand], scale: int) -> tuple[Observed, Demand]:
    return farm(hosts, gpus, busy=True), mix(scale)


Case = tuple[str, Callable[[], tuple[Observed, Demand]]]  # name, and what builds its farm and demand


SMOKE_CASE = "4x4 inference"


def cases(only: str | None) -> list[Case]:
    out: list[Case] = []
    for hosts, gpus in ((4, 4), (4, 8), (16, 4), (16, 8), (64, 4)):
        scale = hosts * gpus // 4
        for name, mix in (("inference", mix_inference), ("fragmenting", mix_fragmenting), ("training", mix_training)):
            out.append((f"{hosts}x{gpus} {name}", functools.partial(_busy_case, hosts, gpus, mix, scale)))
    out.append(("64x8 1000 VMs", lambda: (farm(64, 8), mix_1000())))
    if only == SMOKE_CASE:
        return [c for c in out if c[0] == only]
    return [c for c in out if only is None or only in c[0]]


def cli_farm(hosts_per_cluster: int) -> dict[str, Any]:
    return {"datacenter": "DC0", "templates": [], "clusters": [
        {"name": "A100s", "hosts": hosts_per_cluster, "gpus_per_host": 8, "model": "A100-40GB",
         "graphics_type": "sharedDirect", "vgpu_mode": "sameSize", "assignment_policy": "performance",
         "nvlink": "pairs"},
        {"name": "H100s", "hosts": hosts_per_cluster, "gpus_per_host": 8, "model": "H100-80GB",
         "graphics_type": "sharedDirect", "vgpu_mode": "sameSize", "assignment_policy": "consolidation",
         "nvlink": "nvswitch"}]}


def run_cli(time_limit: float, hosts_per_cluster: int = 32) -> None:
    """The whole command against gpusim (2 x HOSTS_PER_CLUSTER hosts x 8 GPUs, the 1,000-VM demand), timed from
    the process's start to its exit: with the solver, and with --greedy."""
    import tempfile

    import yaml

    sys.path.insert(0, str(REPO / "tests"))
    from gpusim import Gpusim

    farm = cli_farm(hosts_per_cluster)
    with tempfile.TemporaryDirectory() as tmp, Gpusim.start(farm=farm, args=["-no-ssh"], timeout=300) as sim:
        path = Path(tmp) / "demand.yaml"
        path.write_text(yaml.safe_dump(mix_1000().model_dump(mode="json", exclude_none=True, by_alias=True)))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_")) and k != "SSH_AUTH_SOCK"}
        env.update(VGPUCTL_URL=sim.url, VGPUCTL_USERNAME=sim.username, VGPUCTL_PASSWORD=sim.password,
                   VGPUCTL_INSECURE="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)  # this checkout
        vgpuctl = str(Path(sys.executable).with_name("vgpuctl"))
        for extra in (["--time-limit", str(time_limit)], ["--greedy"]):
            started = time.monotonic()
            done = subprocess.run([vgpuctl, "-o", "json", "capacity", "--demand", str(path), *extra], env=env,
                                  check=True, capture_output=True, text=True)
            wall = time.monotonic() - started
            doc = json.loads(done.stdout)
            gap = f", gap {doc['gap']:.1%}" if doc["gap"] is not None else ""
            print(f"vgpuctl capacity {' '.join(extra)}: {wall:.1f} s in all (answer {doc['seconds']:.1f} s from "
                  f"the command's start), {doc['placed']} VMs placed ({doc['method']}, {doc['status']}{gap}; "
                  f"greedy {doc['greedy_placed']}); load average {os.getloadavg()[0]:.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S,
                        help="budget of each answer in seconds, as `vgpuctl capacity --time-limit`")
    parser.add_argument("--only", help="run the cases whose name contains this (e.g. 64x8)")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # one case, as a JSON line (the process per case)
    parser.add_argument("--cli", action="store_true",
                        help="time the whole `vgpuctl capacity` command against gpusim at 64 hosts x 8 GPUs instead")
    parser.add_argument("--smoke", action="store_true",
                        help=f"only the case {SMOKE_CASE!r} (with --cli: 4 hosts), a 1 s budget: does it run")
    args = parser.parse_args()
    if args.smoke:
        args.only, args.time_limit = SMOKE_CASE, 1.0
    if args.cli:
        run_cli(args.time_limit, 2 if args.smoke else 32)
        return
    if args.case:
        print(json.dumps(run_case(args.case, args.time_limit)))
        return
    print(f"budget {args.time_limit:g} s per answer; {os.cpu_count()} CPUs; load average "
          f"{os.getloadavg()[0]:.1f} at the start")
    head = (f"{'case':<22}{'VMs':>6}{'greedy':>8}{'solver':>8}{'ratio':>7}  {'changes g/s (GPUs, hosts)':<27}"
            f"{'status':<10}{'gap':>7}{'greedy s':>9}{'model s':>9}{'CP-SAT s':>9}{'verify s':>9}{'total s':>9}")
    print(head)
    for case, _build in cases(args.only):
        done = subprocess.run([sys.executable, __file__, "--case", case, "--time-limit", str(args.time_limit)],
                              check=True, capture_output=True, text=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
        ratio = r["solver"] / r["greedy"] if r["greedy"] else float("inf")
        changes = f"{tuple(r['greedy_changes'])} / {tuple(r['solver_changes'])}"
        print(f"{case:<22}{r['vms']:>6}{r['greedy']:>8}{r['solver']:>8}{ratio:>7.2f}  {changes:<27}"
              f"{r['status']:<10}{r['gap']:>7.1%}{r['greedy_s']:>9.1f}{r['model_s']:>9.1f}{r['search_s']:>9.1f}"
              f"{r['verify_s']:>9.1f}{r['total_s']:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
