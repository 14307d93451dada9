"""Benchmark: `vgpuctl plan` over 1,000 VMs vs a naive per-VM pyVmomi loop, against gpusim.

    .venv/bin/python bench/plan_bench.py [--hosts 64] [--gpus 8] [--vms 1000] [--repeat 3] [--latency-ms 0]

Starts gpusim with HOSTS x GPUS A100-40GB and VMS powered-off VMs, writes an inventory naming every VM (each
wants one grid_a100-10c), then times in the same run, REPEAT times each (median reported):
  vgpuctl   load + validate the inventory, log in, bulk observe, make_plan (in-process, via the library)
  naive     log in, list the VMs, then read each VM's config.hardware.device one VM at a time (pyVmomi)
  floor     gpusim's own time to answer observe's bulk host + VM read (plus the added latency), not parsed
and once, end to end, the `vgpuctl -o json plan` command (a new process: interpreter start included).
SOAP round trips are counted by vgpuctl's session for both in-process variants. gpusim on loopback answers
a round trip in well under a millisecond; --latency-ms adds that much client-side delay to every SOAP round
trip after login, in both variants alike, to model the network and a real vCenter's time per call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import a100_farm, cli_env, gpusim, settings, timed, vgpuctl_bin, vm_names


def write_inventory(names: list[str], path: Path) -> None:
    lines = ["apiVersion: vgpuctl/v1", "vcenter: {datacenter: DC0}", "vms:"]
    for name in names:
        lines.append(f"  - {{name: {name}, vgpus: {{profile: grid_a100-10c, count: 1}}, power: 'off'}}")
    path.write_text("\n".join(lines) + "\n")


LATENCY_S = 0.0


def add_latency(session: Any) -> None:
    """Every SOAP request of this session waits LATENCY_S: both pyVmomi's calls (property reads through
    accessors included) and vgpuctl's lean reads count their round trip through `count_round_trip`."""
    if not LATENCY_S:
        return
    stub = session.stub
    count = stub.count_round_trip

    def delayed() -> None:
        time.sleep(LATENCY_S)
        count()

    stub.count_round_trip = delayed


def vgpuctl_plan(sim: Any, path: Path) -> tuple[Any, int, dict[str, float]]:
    from vgpuctl.inventory import load_inventory, validate
    from vgpuctl.vms.plan import make_plan
    from vgpuctl.vsphere.observe import observe
    from vgpuctl.vsphere.session import open_session

    phases: dict[str, float] = {}
    mark = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        phases[name] = now - mark
        mark = now

    inventory = load_inventory(path)
    validate(inventory)
    lap("load+validate")
    with open_session(settings(sim)) as session:
        add_latency(session)
        lap("login")
        observed = observe(session, "DC0")
        lap("observe")
        plan = make_plan(inventory, observed)
        lap("make_plan")
        return plan, session.round_trips, phases


def naive_loop(sim: Any) -> tuple[dict[str, list[str]], int]:
    """What a hand-written pyVmomi script does: iterate the VMs, read each one's devices."""
    from pyVmomi import vim

    from vgpuctl.vsphere.session import open_session

    vmiop = vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo
    found: dict[str, list[str]] = {}
    with open_session(settings(sim)) as session:
        add_latency(session)
        content = session.content
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        for vm in view.view:
            devices = vm.config.hardware.device  # one RetrievePropertiesEx per VM
            found[vm.name] = [d.backing.vgpu for d in devices if isinstance(d.backing, vmiop)]
        view.Destroy()
        return found, session.round_trips


def bulk_answer_time(sim: Any) -> float:
    """gpusim's own time to answer observe's bulk host + VM read, with no parsing on the client: a floor that no
    reader of these properties can go under on this machine (the best ratio is naive time / this)."""
    from pyVmomi import vim, vmodl

    from vgpuctl.vsphere import rawread
    from vgpuctl.vsphere.objects import view_filter_spec
    from vgpuctl.vsphere.observe import LEAN_TYPES, PAGE_SIZE, TYPE_PROPS
    from vgpuctl.vsphere.session import open_session

    with open_session(settings(sim)) as session:
        add_latency(session)
        content = session.content
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem, vim.VirtualMachine], True)
        spec = view_filter_spec(view, [(t, TYPE_PROPS[t]) for t in LEAN_TYPES])
        options = vmodl.query.PropertyCollector.RetrieveOptions(maxObjects=PAGE_SIZE)
        pc = content.propertyCollector
        _, seconds = timed(lambda: rawread.invoke_raw(session.stub, pc, "RetrievePropertiesEx", [[spec], options]))
        view.Destroy()
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--vms", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()
    global LATENCY_S
    LATENCY_S = args.latency_ms / 1000

    with gpusim(a100_farm(args.hosts, args.gpus, args.vms)) as sim, tempfile.TemporaryDirectory() as tmp:
        names = vm_names(sim)  # also imports pyVmomi and vgpuctl's modules before anything is timed
        import vgpuctl.inventory
        import vgpuctl.vms.plan  # noqa: F401  (import cost is not part of the comparison)

        path = Path(tmp) / "inventory.yaml"
        write_inventory(names, path)
        print(
            f"farm: {args.hosts} hosts x {args.gpus} GPUs, {len(names)} VMs; inventory names every VM; "
            f"added latency {args.latency_ms:g} ms per round trip",
            flush=True,
        )

        ours, theirs, floors = [], [], []
        for _ in range(args.repeat):
            floors.append(bulk_answer_time(sim))
            (plan, trips, phases), seconds = timed(lambda: vgpuctl_plan(sim, path))
            ours.append((seconds, trips, len(plan.changes), len(plan.errors), phases))
            (read, naive_trips), naive_seconds = timed(lambda: naive_loop(sim))
            theirs.append((naive_seconds, naive_trips, len(read)))

        proc, cli_seconds = timed(
            lambda: subprocess.run(
                [vgpuctl_bin(), "-o", "json", "plan", "-f", str(path)], env=cli_env(sim), capture_output=True, text=True
            )
        )
        if proc.returncode != 0:
            sys.exit(f"vgpuctl plan failed: {proc.stderr}")
        cli_trips = json.loads(proc.stdout)["round_trips"]

    t_ours = statistics.median(s for s, *_ in ours)
    t_naive = statistics.median(s for s, *_ in theirs)
    _, trips, changes, errors, phases = ours[0]
    _, naive_trips, naive_vms = theirs[0]
    print(f"vgpuctl plan (library): {t_ours:.2f} s, {trips} round trips, {changes} VM changes, {errors} errors")
    print("  phases (first run): " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
    print(f"naive pyVmomi loop:     {t_naive:.2f} s, {naive_trips} round trips, {naive_vms} VMs read")
    print(f"vgpuctl plan (CLI process, end to end): {cli_seconds:.2f} s, {cli_trips} round trips")
    floor = statistics.median(floors)
    print(
        f"gpusim's answer to the bulk host + VM read alone (no parsing): {floor:.2f} s; "
        f"best possible ratio on this machine: {t_naive / floor:.1f}x"
    )
    print(f"ratio naive / vgpuctl: {t_naive / t_ours:.1f}x faster; round trips {naive_trips / trips:.0f}x fewer")
    print(f"runs: vgpuctl {[round(s, 2) for s, *_ in ours]} s; naive {[round(s, 2) for s, *_ in theirs]} s")


if __name__ == "__main__":
    main()
