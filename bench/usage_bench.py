"""Benchmark: one GPU usage read (vCenter's gpu counters) of HOSTS x GPUS against gpusim: round trips and time.

Starts gpusim with HOSTS x GPUS A100-40GB, sets its historical intervals to statistics level 4, reads the farm
once (not timed), then times `vgpuctl.vsphere.perf.read_gpu_usage` for the last hour (the hosts' realtime 20 s
samples: 180 per GPU and counter) and for the last 7 days (vCenter's Past Week interval: 336 samples of 30 min),
each followed by the per-GPU figures (`farm.usage.gpu_usage`), and `vgpuctl status --usage` and `vgpuctl status`
processes end to end (the difference is what the usage read adds to the command).
Round trips are counted by the session, QueryPerf calls by gpusim; medians of --repeat runs.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from typing import Any

from _common import a100_farm, cli_env, farm_size_args, gpusim, load_note, settings, timed, vgpuctl_bin

from vgpuctl.farm.usage import gpu_usage
from vgpuctl.vsphere.observe import observe
from vgpuctl.vsphere.perf import read_gpu_usage
from vgpuctl.vsphere.session import open_session


def read_once(session: Any, sim: Any, observed: Any, seconds: float | None) -> tuple[float, int, int, int, int]:
    """(seconds, round trips, QueryPerf calls, series, GPUs with a covered window) of one read and its figures."""
    hosts = {name: h.moid for name, h in observed.hosts.items()}
    trips, queries = session.round_trips, sim.perf()["queries"]
    (read, figures), took = timed(lambda: (r := read_gpu_usage(session, hosts, seconds), gpu_usage(observed, r)))
    assert read.refused is None and not read.warnings, (read.refused, read.warnings)
    covered = sum(1 for u in figures.gpus.values() if u.covered)
    return took, session.round_trips - trips, sim.perf()["queries"] - queries, len(read.series), covered


def run_cli(sim: Any, *extra: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([vgpuctl_bin(), "status", *extra, "--no-shell", "--no-vm-classes", "-o", "json"],
                          env=cli_env(sim), capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-2000:]
    return took


def main() -> None:
    args = farm_size_args(__doc__.splitlines()[0])

    with gpusim(a100_farm(args.hosts, args.gpus, 0)) as sim:
        sim.set_perf(statistics_level=4)
        print(f"farm: {args.hosts} hosts x {args.gpus} GPUs; {load_note()}", flush=True)
        with open_session(settings(sim)) as session:
            observed = observe(session)
            for label, seconds in (("last hour, realtime 20 s samples", None), ("last 7 days, Past Week", 604800.0)):
                runs = [read_once(session, sim, observed, seconds) for _ in range(args.repeat)]
                took = statistics.median(r[0] for r in runs)
                _, trips, queries, series, covered = runs[-1]
                print(f"usage read ({label}): {took:.2f} s, {trips} round trips, {queries} QueryPerf, "
                      f"{series} series, {covered} GPUs covered (median of {args.repeat})", flush=True)
        for extra in (("--usage",), ()):
            cli = statistics.median(run_cli(sim, *extra) for _ in range(args.repeat))
            command = " ".join(("vgpuctl status", *extra))
            print(f"{command} (CLI process, end to end): {cli:.2f} s (median of {args.repeat})")
    print(f"at the end: {load_note()}")


if __name__ == "__main__":
    main()
