"""Benchmark: one read of `vgpuctl exporter` (what it serves every scrape interval) of HOSTS x GPUS against gpusim:
round trips and time, and the time to build the metrics of that read.

Starts gpusim with HOSTS x GPUS A100-40GB (each host with a VM holding a vGPU, so that leases, work records and
utilization have something to say), then times `vgpuctl.cli.scrape.read_farm` (the bulk observe with the NVLink
sets, each host's API facts, the leases, the GPU counters of a 5-minute window; one session, its login included)
and `reports.metrics.build_families` on its result. Round trips are counted by the session; medians of --repeat.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from _common import a100_farm, farm_size_args, gpusim, load_note, settings, timed

from vgpuctl.cli.scrape import FarmCollector, Schedule, read_farm
from vgpuctl.reports.metrics import build_families


def farm(hosts: int, gpus: int) -> dict[str, Any]:
    out = a100_farm(hosts, gpus, 0)
    out["vms"] = [{"name": f"vm-{i:03d}", "host": f"esx-{i + 1:02d}.gpu.sim", "memory_mb": 8192,
                   "memory_locked": True, "firmware": "efi", "vgpus": ["grid_a100-20c"], "power_on": True}
                  for i in range(hosts)]
    return out


def no_plan(path: Any) -> Any:
    raise AssertionError(f"no inventory to plan: {path}")


def read_once(sim: Any, window_s: float) -> tuple[float, int, int, float]:
    """(seconds, round trips, series served, seconds to build the metrics) of one read."""
    (farm_read, usage), took = timed(lambda: read_farm(settings(sim), None, window_s))
    assert usage.refused is None, usage.refused
    collector = FarmCollector(lambda: (farm_read, usage), no_plan, Schedule(60, window_s, 600))
    collector.refresh()
    families, built = timed(lambda: build_families(collector.state, time.time()))
    return took, farm_read.round_trips, sum(len(f.samples) for f in families), built


def main() -> None:
    args = farm_size_args(__doc__.splitlines()[0])

    with gpusim(farm(args.hosts, args.gpus)) as sim:
        print(f"farm: {args.hosts} hosts x {args.gpus} GPUs; {load_note()}", flush=True)
        read_once(sim, 300.0)  # warm up: not timed
        runs = [read_once(sim, 300.0) for _ in range(args.repeat)]
        took, built = statistics.median(r[0] for r in runs), statistics.median(r[3] for r in runs)
        _, trips, samples, _ = runs[-1]
        print(f"exporter read: {took:.2f} s, {trips} round trips, {samples} samples served; metrics built in "
              f"{built:.3f} s (median of {args.repeat})", flush=True)
    print(f"at the end: {load_note()}")


if __name__ == "__main__":
    main()
