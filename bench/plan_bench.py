"""Benchmark: `vgpuctl plan` over 1,000 VMs vs a naive per-VM pyVmomi loop, against gpusim.

    .venv/bin/python bench/plan_bench.py [--hosts 64] [--gpus 8] [--vms 1000] [--repeat 3] [--latency-ms 0]
                                         [--profile] [--smoke]

Starts gpusim with HOSTS x GPUS A100-40GB and VMS powered-off VMs, writes an inventory naming every VM (each
wants one grid_a100-10c), then times in the same run, REPEAT times each (median reported):
  floor     gpusim's own time to answer observe's bulk reads of hosts and of VMs, every page (both first
            requests sent together, each next page asked for as soon as its token is read, as observe does), the
            answer not parsed: no reader of these properties can go under it on this machine; the time of one
            read of both together, as observe read them before, is printed beside it
  vgpuctl   what `vgpuctl plan` runs, in-process: load + validate the inventory, log in, observe, plan
  naive     log in, list the VMs, then read each VM's config.hardware.device one VM at a time (pyVmomi)
and once, end to end, `vgpuctl -v -o json plan` (a new process: interpreter start included, vgpuctl's bytecode
compiled beforehand as an install does; -v puts the round trips in the JSON document; bench/startup_bench.py
times it paired with the floor). SOAP round trips are counted by vgpuctl's session for both in-process
variants. gpusim on loopback answers a round trip in well under a millisecond; --latency-ms adds that much
client-side delay to every SOAP round trip after login, in both variants alike, to model the network and a real
vCenter's time per call.
The ratio to the floor is printed twice: of the medians, and paired (the median of each round's vgpuctl time over
that round's floor, which the machine's drift over the run moves less).

--profile adds, from the same run: the floor's pages with the VM devices vgpuctl never reads cut out, parsed by
ElementTree, converted into objects, the model built from them (each step on its own, as observe does it:
collector paused), load + validate and make_plan, and the functions where a cProfile of those steps spends its
time. --smoke: a tiny farm (2 hosts x 2 GPUs, 10 VMs,
one repeat), to check that the benchmark still runs (make test does).
"""

from __future__ import annotations

import argparse
import compileall
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import REPO, a100_farm, cli_env, gpusim, load_note, settings, timed, vgpuctl_bin, vm_names

import vgpuctl.vms.plan  # noqa: F401  (import cost is not part of the comparison)
from vgpuctl import pipeline
from vgpuctl.gcpause import one_command_process, paused_gc
from vgpuctl.planner import make_plan
from vgpuctl.vsphere import rawread
from vgpuctl.vsphere.objects import view_filter_spec
from vgpuctl.vsphere.observe import build_observed, retrieve_all
from vgpuctl.vsphere.readlist import LEAN_PAGE_SIZE, LEAN_TYPES, TYPE_PROPS
from vgpuctl.vsphere.session import open_session


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
    """The stages of `vgpuctl plan` (vgpuctl.pipeline), timed one by one."""
    phases: dict[str, float] = {}
    mark = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        phases[name] = now - mark
        mark = now

    inventory = pipeline.load(path)
    lap("load+validate")
    options = pipeline.RunOptions(datacenter="DC0")
    with open_session(settings(sim)) as session:
        add_latency(session)
        lap("login")
        observed = pipeline.observe(session, options.datacenter, inventory)
        lap("observe")
        plan = pipeline.plan(session, observed, inventory, options)
        lap("make_plan")
        return plan, session.round_trips, phases


def naive_loop(sim: Any) -> tuple[dict[str, list[str]], int]:
    """What a hand-written pyVmomi script does: iterate the VMs, read each one's devices."""
    from pyVmomi import vim

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


@dataclass
class Floor:
    seconds: float
    pages: list[bytes] = field(default_factory=list)


def bulk_answer_time(sim: Any) -> Floor:
    """gpusim's own time to answer observe's bulk reads (hosts, then VMs: both first requests sent together, as
    observe sends them), every page, with no parsing on the client: a floor that no reader of these properties
    can go under on this machine (the best ratio is naive time / this). Each next page is asked for as soon as
    the page before it names its token, as observe does."""

    seconds, pages = _answer_time(sim, [[kind] for kind in LEAN_TYPES])
    return Floor(seconds, pages)


def combined_answer_time(sim: Any) -> float:
    """gpusim's time to answer one read of hosts and VMs together, every page: how observe read them before."""

    return _answer_time(sim, [list(LEAN_TYPES)])[0]


def _answer_time(sim: Any, reads: list[list[str]]) -> tuple[float, list[bytes]]:
    """Seconds to every page of these reads, their first requests sent together, pages read read by read."""
    from pyVmomi import vim, vmodl

    with open_session(settings(sim)) as session:
        add_latency(session)
        content = session.content
        view = content.viewManager.CreateContainerView(content.rootFolder, [getattr(vim, t) for t in TYPE_PROPS],
                                                       True)
        options = vmodl.query.PropertyCollector.RetrieveOptions(maxObjects=LEAN_PAGE_SIZE)
        pc = content.propertyCollector
        pages: list[bytes] = []
        started = time.perf_counter()
        waiting = [rawread.SentRequest(session.stub, pc, "RetrievePropertiesEx",
                                       [[view_filter_spec(view, [(t, TYPE_PROPS[t]) for t in kinds])], options])
                   for kinds in reads]
        for sent in waiting:
            while sent is not None:
                head, following, body = rawread.LeadingToken(), None, []
                for chunk in sent.chunks():
                    body.append(chunk)
                    if not head.done:
                        head.feed(chunk)
                        if head.token:
                            following = rawread.SentRequest(session.stub, pc, "ContinueRetrievePropertiesEx",
                                                            [head.token])
                pages.append(b"".join(body))
                sent = following
        seconds = time.perf_counter() - started
        view.Destroy()
        return seconds, pages


@dataclass
class Profiled:
    """What --profile needs besides the floor's pages: the small types (read once) and the inventory."""

    small: dict[str, Any]
    inventory: Any


def read_profiled(sim: Any, path: Path) -> Profiled:
    with open_session(settings(sim)) as session:
        small = retrieve_all(session, [(t, p) for t, p in TYPE_PROPS.items() if t not in LEAN_TYPES])
    return Profiled(small, pipeline.load(path))


def client_steps(floor: Floor, profiled: Profiled, path: Path) -> dict[str, float]:
    """observe's client-side steps on the floor's pages, each alone and with the collector paused as observe
    runs them, then load + validate (pipeline.load) and make_plan: seconds per step."""
    import xml.etree.ElementTree as ET

    steps: dict[str, float] = {}
    with paused_gc():
        cut, steps["unread devices cut out"] = timed(lambda: [rawread.drop_unread_devices(p) for p in floor.pages])
        roots, steps["ElementTree parse"] = timed(lambda: [ET.fromstring(page) for page in cut])
        objects, steps["conversion to objects"] = timed(
            lambda: [o for root in roots for o in rawread.objects_of(rawread.returnval_of(root), None)]
        )
        roots.clear()  # observe keeps no XML either
        everything = {**profiled.small, **{o.moid: o for o in objects}}
        observed, steps["model building"] = timed(lambda: build_observed(everything, "DC0"))
        objects.clear()  # observe keeps only the model
        everything.clear()
    _, steps["load + validate"] = timed(lambda: pipeline.load(path))
    _, steps["make_plan"] = timed(lambda: make_plan(profiled.inventory, observed))
    return steps


def cprofile_steps(floor: Floor, profiled: Profiled, top: int = 14) -> str:
    """Where the cut, parse, conversion, model building and make_plan spend their time (cProfile, by own time)."""
    import cProfile
    import io
    import pstats
    import xml.etree.ElementTree as ET

    profiler = cProfile.Profile()
    profiler.enable()
    with paused_gc():
        pages = (rawread.returnval_of(ET.fromstring(rawread.drop_unread_devices(p))) for p in floor.pages)
        objects = {o.moid: o for page in pages for o in rawread.objects_of(page, None)}
        observed = build_observed({**profiled.small, **objects}, "DC0")
    make_plan(profiled.inventory, observed)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("ncalls"))
    return "\n".join(lines[start:]).rstrip()


@dataclass
class Runs:
    floors: list[Floor] = field(default_factory=list)
    combined: list[float] = field(default_factory=list)
    ours: list[tuple[float, int, int, int, dict[str, float]]] = field(default_factory=list)
    theirs: list[tuple[float, int, int]] = field(default_factory=list)
    steps: list[dict[str, float]] = field(default_factory=list)
    cprofile: str = ""


def measure(sim: Any, path: Path, args: argparse.Namespace) -> Runs:
    profiled = read_profiled(sim, path) if args.profile else None
    runs = Runs()
    for _ in range(args.repeat):
        runs.floors.append(bulk_answer_time(sim))
        runs.combined.append(combined_answer_time(sim))
        (plan, trips, phases), seconds = timed(lambda: vgpuctl_plan(sim, path))
        runs.ours.append((seconds, trips, len(plan.changes), len(plan.errors), phases))
        (read, naive_trips), naive_seconds = timed(lambda: naive_loop(sim))
        runs.theirs.append((naive_seconds, naive_trips, len(read)))
        if profiled is not None:
            runs.steps.append(client_steps(runs.floors[-1], profiled, path))
    if profiled is not None:
        runs.cprofile = cprofile_steps(runs.floors[-1], profiled)
    return runs


def run_cli(sim: Any, path: Path) -> tuple[float, int]:
    compileall.compile_dir(REPO / "vgpuctl", quiet=1)  # as installed: the process compiles none of its sources
    proc, seconds = timed(
        lambda: subprocess.run(
            [vgpuctl_bin(), "-v", "-o", "json", "plan", "-f", str(path)], env=cli_env(sim), capture_output=True,
            text=True,
        )
    )
    if proc.returncode != 0:
        sys.exit(f"vgpuctl plan failed: {proc.stderr}")
    return seconds, int(json.loads(proc.stdout)["round_trips"])


def report(runs: Runs, cli: tuple[float, int]) -> None:
    t_ours = statistics.median(s for s, *_ in runs.ours)
    t_naive = statistics.median(s for s, *_ in runs.theirs)
    floor = statistics.median(f.seconds for f in runs.floors)
    _, trips, changes, errors, phases = sorted(runs.ours, key=lambda r: r[0])[len(runs.ours) // 2]
    _, naive_trips, naive_vms = runs.theirs[0]
    size = sum(len(p) for p in runs.floors[0].pages)
    print(f"vgpuctl plan (library): {t_ours:.2f} s, {trips} round trips, {changes} VM changes, {errors} errors")
    print("  phases (the median run): " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
    print(f"naive pyVmomi loop:     {t_naive:.2f} s, {naive_trips} round trips, {naive_vms} VMs read")
    print(f"vgpuctl plan (CLI process, end to end): {cli[0]:.2f} s, {cli[1]} round trips")
    print(
        f"gpusim's answer to the bulk host and VM reads alone (no parsing): {floor:.2f} s, "
        f"{size / 1e6:.1f} MB in {len(runs.floors[0].pages)} pages; best possible ratio on this machine: "
        f"{t_naive / floor:.1f}x"
    )
    combined = statistics.median(runs.combined)
    print(f"  (one read of hosts and VMs together, as observe read them before: {combined:.2f} s)")
    print(f"vgpuctl plan / floor: {t_ours / floor:.2f}x")
    paired = sorted(ours[0] / f.seconds for ours, f in zip(runs.ours, runs.floors, strict=True))
    print(f"  paired (each run against the floor read in the same round, before it): median "
          f"{statistics.median(paired):.2f}x, {paired[0]:.2f}x to {paired[-1]:.2f}x")
    print(f"ratio naive / vgpuctl: {t_naive / t_ours:.1f}x faster; round trips {naive_trips / trips:.0f}x fewer")
    print(f"runs: vgpuctl {[round(s, 2) for s, *_ in runs.ours]} s; naive {[round(s, 2) for s, *_ in runs.theirs]} s; "
          f"floor {[round(f.seconds, 2) for f in runs.floors]} s; "
          f"one combined read {[round(c, 2) for c in runs.combined]} s")


def report_profile(runs: Runs) -> None:
    floor = statistics.median(f.seconds for f in runs.floors)
    print("profile (medians, same run; each step alone, on the floor's pages):")
    print(f"  {'gpusim answers the bulk read (floor)':<40}{floor:6.3f} s")
    for name in runs.steps[0]:
        print(f"  {name:<40}{statistics.median(s[name] for s in runs.steps):6.3f} s")
    print("cProfile of the cut, parse, conversion, model building and make_plan (by own time):")
    print(runs.cprofile)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--vms", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--profile", action="store_true", help="time observe's client-side steps on their own too")
    parser.add_argument("--smoke", action="store_true", help="2 hosts x 2 GPUs, 10 VMs, one repeat: does it run")
    args = parser.parse_args()
    if args.smoke:
        args.hosts, args.gpus, args.vms, args.repeat = 2, 2, 10, 1
    global LATENCY_S
    LATENCY_S = args.latency_ms / 1000

    with gpusim(a100_farm(args.hosts, args.gpus, args.vms)) as sim, tempfile.TemporaryDirectory() as tmp:
        names = vm_names(sim)  # vgpuctl's modules and pyVmomi were imported with this script: not timed
        one_command_process()  # the collector as the vgpuctl command runs it (vgpuctl.gcpause)

        path = Path(tmp) / "inventory.yaml"
        write_inventory(names, path)
        print(
            f"farm: {args.hosts} hosts x {args.gpus} GPUs, {len(names)} VMs; inventory names every VM; "
            f"added latency {args.latency_ms:g} ms per round trip; {load_note()}",
            flush=True,
        )
        runs = measure(sim, path, args)
        cli = run_cli(sim, path)
    report(runs, cli)
    if args.profile:
        report_profile(runs)
    print(f"at the end: {load_note()}")


if __name__ == "__main__":
    main()
