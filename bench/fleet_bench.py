"""Benchmark: one `vgpuctl plan` of a fleet of two vCenters vs two single-vCenter plans one after the other.

    .venv/bin/python bench/fleet_bench.py [--hosts 32] [--gpus 8] [--vms 500] [--repeat 5] [--smoke]

Starts two gpusims (two vCenters), each with HOSTS x GPUS A100-40GB and VMS powered-off VMs, writes a fleet
inventory naming every VM of both (each wants one grid_a100-10c), then times in the same run, REPEAT rounds
(medians reported):
  fleet       what `vgpuctl plan -f FLEET` runs, in-process: both vCenters planned in parallel
              (vgpuctl.fleetrun.plan_fleet: a session, observe and plan per vCenter)
  sequential  the same two plans one after the other (vgpuctl.pipeline.plan_only per vCenter): what one
              inventory and one run per vCenter cost before fleets
After a round not timed, the two alternate in each round (which goes first swaps every round); the ratio is
printed of the medians and paired (the median of each round's fleet time over that round's sequential time).
--smoke: two tiny farms (2 hosts x 2 GPUs, 10 VMs each, one round), to check that the benchmark still runs (make
test does).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _common import a100_farm, gpusim, load_note, settings, timed, vm_names

from vgpuctl import fleet, fleetrun, pipeline
from vgpuctl.gcpause import one_command_process
from vgpuctl.pipeline import RunOptions


def write_fleet(sims: dict[str, Any], names: dict[str, list[str]], path: Path) -> None:
    lines = ["apiVersion: vgpuctl/v1", "vcenters:"]
    lines += [f"  - {{name: {vc}, url: '{sim.url}', datacenter: DC0}}" for vc, sim in sims.items()]
    lines.append("vms:")
    for vc, vms in names.items():
        lines += [f"  - {{name: {n}, vcenter: {vc}, vgpus: {{profile: grid_a100-10c, count: 1}}, power: 'off'}}"
                  for n in vms]
    path.write_text("\n".join(lines) + "\n")


def plan_fleet(parts: list[Any], connect: dict[str, Any]) -> list[Any]:
    return fleetrun.plan_fleet(parts, connect, RunOptions())


def plan_in_sequence(parts: list[Any], connect: dict[str, Any]) -> list[Any]:
    return [pipeline.plan_only(connect[p.name], p.inventory, fleetrun.part_options(RunOptions(), p)) for p in parts]


def check(planned: list[Any], vms: int) -> None:
    for p in planned:
        plan = p.plan if hasattr(p, "plan") else p.planned.plan
        if plan.errors or len(plan.changes) != vms:
            sys.exit(f"unexpected plan: {len(plan.changes)} VM changes, errors {plan.errors[:3]}")


def measure(parts: list[Any], connect: dict[str, Any], repeat: int, vms: int) -> tuple[list[float], list[float]]:
    fleet: list[float] = []
    sequential: list[float] = []
    check(plan_fleet(parts, connect), vms)  # a round not timed: first imports, first sessions
    check(plan_in_sequence(parts, connect), vms)
    for i in range(repeat):
        order = [("fleet", plan_fleet), ("sequential", plan_in_sequence)]
        for name, fn in order if i % 2 == 0 else reversed(order):
            planned, seconds = timed(lambda fn=fn: fn(parts, connect))
            check(planned, vms)
            (fleet if name == "fleet" else sequential).append(seconds)
    return fleet, sequential


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--vms", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="2 hosts x 2 GPUs, 10 VMs each, one round")
    args = parser.parse_args()
    if args.smoke:
        args.hosts, args.gpus, args.vms, args.repeat = 2, 2, 10, 1

    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        sims = {vc: stack.enter_context(gpusim(a100_farm(args.hosts, args.gpus, args.vms))) for vc in ("east", "west")}
        names = {vc: vm_names(sim) for vc, sim in sims.items()}  # not timed (pyVmomi came with vgpuctl's imports)

        one_command_process()  # the collector as the vgpuctl command runs it (vgpuctl.gcpause)
        path = Path(tmp) / "fleet.yaml"
        write_fleet(sims, names, path)
        parts = fleet.split(pipeline.load(path))
        connect = {vc: settings(sim) for vc, sim in sims.items()}
        print(f"fleet: 2 vCenters, each {args.hosts} hosts x {args.gpus} GPUs and {args.vms} VMs; the inventory "
              f"names every VM; {load_note()}", flush=True)
        fleet_s, sequential_s = measure(parts, connect, args.repeat, args.vms)
    t_fleet, t_seq = statistics.median(fleet_s), statistics.median(sequential_s)
    paired = sorted(f / s for f, s in zip(fleet_s, sequential_s, strict=True))
    print(f"one fleet plan (both vCenters in parallel): {t_fleet:.2f} s")
    print(f"two plans one after the other: {t_seq:.2f} s")
    print(f"fleet / sequential: {t_fleet / t_seq:.2f}x (of the medians)")
    print(f"  paired (each round's fleet over its sequential): median {statistics.median(paired):.2f}x, "
          f"{paired[0]:.2f}x to {paired[-1]:.2f}x")
    print(f"runs: fleet {[round(s, 2) for s in fleet_s]} s; sequential {[round(s, 2) for s in sequential_s]} s")
    print(f"at the end: {load_note()}")


if __name__ == "__main__":
    main()
