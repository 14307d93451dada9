"""gpusim at scale: start-up of 64 hosts x 8 GPUs with 1,000 VMs, and one bulk read of every VM's devices.

Targets: start-up within 10 s on a 2-core machine; RetrievePropertiesEx over all VMs'
config.hardware.device within 2 s. This is a measurement, not a test: it prints the numbers and says
whether each target was met (exit status 0 either way unless --strict).

    .venv/bin/python bench/sim_scale.py [--hosts 64] [--gpus 8] [--vms 1000] [--runs 3] [--strict] [--smoke]

--smoke: 2 hosts x 2 GPUs, 10 VMs, one run, to check that the benchmark still runs (make test does).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from gpusim import Gpusim, build

START_TARGET_S = 10.0
READ_TARGET_S = 2.0


def pin_two_cores() -> str:
    """Run gpusim (a child of this process) on at most 2 CPUs, like the target machine."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 2:
        os.sched_setaffinity(0, set(cpus[:2]))
    return f"{min(len(cpus), 2)} of {os.cpu_count()} CPUs"


def read_all_devices(si: Any) -> tuple[int, float]:
    """One RetrievePropertiesEx (plus continuations) over a container view of all VMs."""
    from pyVmomi import vim, vmodl

    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    traversal = vmodl.query.PropertyCollector.TraversalSpec(
        name="view", path="view", skip=False, type=vim.view.ContainerView
    )
    spec = vmodl.query.PropertyCollector.FilterSpec(
        objectSet=[vmodl.query.PropertyCollector.ObjectSpec(obj=view, skip=True, selectSet=[traversal])],
        propSet=[
            vmodl.query.PropertyCollector.PropertySpec(type=vim.VirtualMachine, pathSet=["config.hardware.device"])
        ],
    )
    pc = content.propertyCollector
    started = time.perf_counter()
    result = pc.RetrievePropertiesEx([spec], vmodl.query.PropertyCollector.RetrieveOptions())
    count = len(result.objects) if result else 0
    while result is not None and result.token:
        result = pc.ContinuePropertiesEx(result.token)
        count += len(result.objects)
    elapsed = time.perf_counter() - started
    view.DestroyView()
    return count, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--vms", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--smoke", action="store_true", help="2 hosts x 2 GPUs, 10 VMs, one run: does it run")
    opts = parser.parse_args()
    if opts.smoke:
        opts.hosts, opts.gpus, opts.vms, opts.runs = 2, 2, 10, 1

    build()
    cpus = pin_two_cores()
    args = ["-hosts", str(opts.hosts), "-gpus", str(opts.gpus), "-vms", str(opts.vms), "-no-ssh"]
    starts: list[float] = []
    reads: list[float] = []
    for _ in range(opts.runs):
        started = time.perf_counter()
        sim = Gpusim.start(args=args)
        starts.append(time.perf_counter() - started)
        try:
            from pyVim.connect import Disconnect

            si = sim.connect()
            count, elapsed = read_all_devices(si)
            reads.append(elapsed)
            Disconnect(si)
        finally:
            sim.stop()
    ok_start = statistics.median(starts) < START_TARGET_S
    ok_read = statistics.median(reads) < READ_TARGET_S
    print(f"gpusim scale: {opts.hosts} hosts x {opts.gpus} GPUs, {opts.vms} VMs (+1 template), {cpus}")
    print(
        f"  start-up (spawn to env line): median {statistics.median(starts):.2f}s "
        f"min {min(starts):.2f}s max {max(starts):.2f}s  target < {START_TARGET_S:.0f}s  "
        f"{'OK' if ok_start else 'MISSED'}"
    )
    print(
        f"  RetrievePropertiesEx config.hardware.device over {count} VMs: median {statistics.median(reads):.2f}s "
        f"min {min(reads):.2f}s max {max(reads):.2f}s  target < {READ_TARGET_S:.0f}s  "
        f"{'OK' if ok_read else 'MISSED'}"
    )
    return 1 if opts.strict and not (ok_start and ok_read) else 0


if __name__ == "__main__":
    sys.exit(main())
