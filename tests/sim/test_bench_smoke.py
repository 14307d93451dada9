"""The benchmarks in bench/ still run: each one's --smoke case (a tiny farm, one repeat) exits 0 and prints its
figures. Never a time limit: the figures are only checked to be there (and plan's round trips to stay few)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sim

REPO = Path(__file__).resolve().parents[2]
NUMBER = r"\d+(?:\.\d+)?"


def run_bench(script: str, *args: str, smoke: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *(["--smoke"] if smoke else []), *args],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, f"{script} failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


def test_plan_bench_runs_and_keeps_round_trips_few() -> None:
    out = run_bench("plan_bench.py", "--profile")
    library = re.search(rf"vgpuctl plan \(library\): {NUMBER} s, (\d+) round trips, 10 VM changes, 0 errors", out)
    cli = re.search(rf"vgpuctl plan \(CLI process, end to end\): {NUMBER} s, (\d+) round trips", out)
    assert library and cli, out
    assert int(library.group(1)) <= 10 and int(cli.group(1)) <= 10
    assert int(library.group(1)) == int(cli.group(1))  # the command reads the farm as the library does
    assert re.search(rf"naive pyVmomi loop: +{NUMBER} s, \d+ round trips, 11 VMs read", out), out
    assert re.search(rf"bulk host and VM reads alone \(no parsing\): {NUMBER} s, {NUMBER} MB in 2 pages", out), out
    assert re.search(rf"vgpuctl plan / floor: {NUMBER}x", out), out
    assert re.search(rf"paired \(each run .*\): median {NUMBER}x, {NUMBER}x to {NUMBER}x", out), out
    steps = ("unread devices cut out", "ElementTree parse", "conversion to objects", "model building",
             "load \\+ validate", "make_plan")
    for step in steps:
        assert re.search(rf"  {step} +{NUMBER} s", out), out
    assert "ncalls  tottime" in out  # the cProfile table


def test_a_plan_of_1000_vms_read_in_several_pages_keeps_within_10_round_trips() -> None:
    """The benchmark's own farm (64 hosts x 8 GPUs, 1,000 VMs, answers in several pages), once: the whole plan,
    the privileges preflight asks included, in at most 10 SOAP round trips, in the library and the CLI alike."""
    out = run_bench("plan_bench.py", "--repeat", "1", smoke=False)
    library = re.search(rf"vgpuctl plan \(library\): {NUMBER} s, (\d+) round trips, 1000 VM changes, 0 errors", out)
    cli = re.search(rf"vgpuctl plan \(CLI process, end to end\): {NUMBER} s, (\d+) round trips", out)
    pages = re.search(rf"bulk host and VM reads alone \(no parsing\): {NUMBER} s, {NUMBER} MB in (\d+) pages", out)
    assert library and cli and pages, out
    assert int(pages.group(1)) > 2, out  # the hosts' page and the VMs' pages
    assert int(library.group(1)) <= 10 and int(cli.group(1)) <= 10, out


def test_startup_bench_runs() -> None:
    out = run_bench("startup_bench.py")
    labels = ("vgpuctl --help", r"a usage error \(plan --no-such-option\)", r"vgpuctl plan \(CLI process, end to end\)",
              r"the same, every import done beforehand \(bench/preloaded.py\)")
    for label in labels:
        assert re.search(rf"{label}: median {NUMBER} s wall, {NUMBER} s CPU", out), out
    assert re.search(rf"plan process / floor: {NUMBER}x of the medians; paired median {NUMBER}x", out), out
    assert re.search(rf"early read off / floor: {NUMBER}x of the medians; paired median {NUMBER}x", out), out
    assert re.search(rf"imports done beforehand / floor: {NUMBER}x of the medians; paired median {NUMBER}x", out), out
    first_connect = re.search(r"imported at plan's first connect: (\d+) modules .*by package: (.*)", out)
    assert first_connect, out
    # the early read connects with vgpuctl.vsphere's early reader loaded, before the planning modules
    assert "vgpuctl.vsphere" in first_connect.group(2) and "vgpuctl.planner" not in first_connect.group(2), out


def test_apply_bench_runs() -> None:
    out = run_bench("apply_bench.py")
    assert re.search(rf"vgpuctl apply: +{NUMBER} s for 4 VMs x 1 vGPUs \(4 changed, 0 failed, \d+ round trips", out)
    assert "verified 4/4" in out, out


def test_capacity_bench_runs() -> None:
    out = run_bench("capacity_bench.py")
    row = re.search(rf"^4x4 inference +(\d+) +(\d+) +(\d+) +{NUMBER}", out, re.MULTILINE)
    assert row, out
    vms, greedy, solver = (int(g) for g in row.groups())
    assert 0 < greedy <= vms and 0 < solver <= vms  # placed by each, out of the demand


def test_capacity_bench_command_runs() -> None:
    out = run_bench("capacity_bench.py", "--cli")
    for variant in ("--time-limit 1.0", "--greedy"):
        assert re.search(rf"vgpuctl capacity {variant}: {NUMBER} s in all .*, \d+ VMs placed", out), out


def test_sim_scale_runs() -> None:
    out = run_bench("sim_scale.py")
    assert re.search(rf"start-up \(spawn to env line\): median {NUMBER}s", out), out
    assert re.search(rf"RetrievePropertiesEx config.hardware.device over 11 VMs: median {NUMBER}s", out), out


def test_fleet_bench_runs() -> None:
    out = run_bench("fleet_bench.py")
    assert re.search(rf"one fleet plan \(both vCenters in parallel\): {NUMBER} s", out), out
    assert re.search(rf"two plans one after the other: {NUMBER} s", out), out
    assert re.search(rf"fleet / sequential: {NUMBER}x \(of the medians\)", out), out
    assert re.search(rf"paired \(each round's fleet over its sequential\): median {NUMBER}x", out), out


def test_usage_bench_runs_and_reads_in_two_round_trips() -> None:
    out = run_bench("usage_bench.py")
    for label in ("last hour, realtime 20 s samples", "last 7 days, Past Week"):
        assert re.search(rf"usage read \({label}\): {NUMBER} s, 2 round trips, 1 QueryPerf, \d+ series, "
                         r"4 GPUs covered", out), out
    assert re.search(rf"vgpuctl status --usage \(CLI process, end to end\): {NUMBER} s", out), out
    assert re.search(rf"vgpuctl status \(CLI process, end to end\): {NUMBER} s", out), out


def test_exporter_bench_runs_and_counts_round_trips() -> None:
    out = run_bench("exporter_bench.py")
    assert re.search(rf"exporter read: {NUMBER} s, \d+ round trips, \d+ samples served; metrics built in "
                     rf"{NUMBER} s \(median of 1\)", out), out
