"""`vgpuctl capacity` against gpusim: what fits now, and a demand answer whose fragment is applied to the
simulator; every VM the answer placed must power on there (gpusim's admission is the judge)."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from typer.testing import CliRunner
from vimfind import find_object

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

H1, H2 = "esx-01.gpu.sim", "esx-02.gpu.sim"
FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 1, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "assignment_policy": "consolidation", "vgpu_mode": "sameSize"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [{"name": "busy-01", "host": H1, "cpus": 4, "memory_mb": 8192, "firmware": "efi", "memory_locked": True,
             "vgpus": ["grid_a100-40c"]}],
}
DEMAND = """\
apiVersion: vgpuctl/v1
kind: Demand
allow: [mig]
frozen_hosts: [esx-01.gpu.sim]
template: ubuntu-22.04-ml
demand:
  - name: big
    count: 1
    vgpus: {fb_gb: 20, series: c}
  - name: small
    count: 2
    vgpus: {fb_gb: 10, series: c}
    memory_gb: 16
"""


@pytest.fixture
def sim(gpusim_factory: Any) -> Iterator[Any]:
    sim = gpusim_factory(FARM)
    conn = sim.connect()
    try:
        _wait(find_object(conn, "busy-01").PowerOnVM_Task())  # admitted through the API: it holds esx-01's GPU
    finally:
        Disconnect(conn)
    yield sim


@pytest.fixture
def env(sim: Any, no_vgpuctl_env: None) -> dict[str, str]:
    return sim.vgpuctl_env()


def vgpuctl(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def _wait(task: Any) -> None:
    from pyVim.task import WaitForTask

    WaitForTask(task)


def test_what_fits_now_reads_the_farm(env: dict[str, str]) -> None:
    result = vgpuctl(env, "-o", "json", "capacity")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    fits = {h["host"]: {(r["profile"], r["vgpus"]): r["vms"] for r in h["fits"]} for h in doc["hosts"]}
    assert fits[H1]["grid_a100-10c", 1] == 0  # busy-01 holds the whole GPU
    assert fits[H2]["grid_a100-10c", 1] == 4 and fits[H2]["grid_a100-40c", 1] == 1


def test_answer_applies_and_every_placed_vm_powers_on(env: dict[str, str], sim: Any, tmp_path: Path) -> None:
    demand = tmp_path / "demand.yaml"
    demand.write_text(DEMAND)
    fragment = tmp_path / "layout.yaml"
    result = vgpuctl(env, "-o", "json", "capacity", "--demand", str(demand), "--out", str(fragment),
                     "--detailed-exitcode")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["fits"] and doc["placed"] == 3 and doc["greedy_placed"] == 1
    assert [(c["host"], c["new"]) for c in doc["host_changes"]] == [(H2, "multiInstanceGpu")]

    assert vgpuctl(env, "validate", "-f", str(fragment)).exit_code == 0
    applied = vgpuctl(env, "apply", "-f", str(fragment), "--yes", "--parallel", "1")
    assert applied.exit_code == 0, applied.output

    conn = sim.connect()
    try:
        for vm in doc["vms"]:
            assert find_object(conn, vm["name"]).runtime.powerState == "poweredOn", vm["name"]
    finally:
        Disconnect(conn)
    placed = {a["vmName"]: a["host"] for a in sim.assignments()}
    assert {vm["name"]: placed.get(vm["name"]) for vm in doc["vms"]} == {vm["name"]: H2 for vm in doc["vms"]}
    again = vgpuctl(env, "plan", "-f", str(fragment), "--detailed-exitcode")
    assert again.exit_code == 0, again.output


def test_demand_that_does_not_fit_exits_2_with_the_flag(env: dict[str, str], tmp_path: Path) -> None:
    demand = tmp_path / "demand.yaml"
    demand.write_text(textwrap.dedent("""\
        apiVersion: vgpuctl/v1
        kind: Demand
        demand:
          - {name: wide, count: 3, vgpus: {profile: grid_a100-40c, count: 1}}
        """))
    plain = vgpuctl(env, "capacity", "--demand", str(demand))
    assert plain.exit_code == 0 and "does not fit" in plain.stdout
    flagged = vgpuctl(env, "-o", "json", "capacity", "--demand", str(demand), "--detailed-exitcode")
    assert flagged.exit_code == 2
    doc = json.loads(flagged.stdout)
    assert doc["demand"][0]["placed"] == 1 and doc["demand"][0]["reason"] == "framebuffer"


SPREAD_FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 4, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "assignment_policy": "performance", "vgpu_mode": "sameSize"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
}
SPREAD_DEMAND = """\
apiVersion: vgpuctl/v1
kind: Demand
template: ubuntu-22.04-ml
demand:
  - {name: small, count: 12, vgpus: {fb_gb: 10, series: c}, priority: 2, memory_gb: 8}
  - {name: big, count: 6, vgpus: {fb_gb: 20, series: c}, memory_gb: 8}
"""


def test_answer_on_spreading_hosts_holds_in_any_power_on_order(gpusim_factory: Any, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Spreading hosts lock every idle GPU to the first profile that reaches it: the answer gives each host one
    size, so a parallel apply (power-ons in any order) still powers on every VM it placed."""
    sim = gpusim_factory(SPREAD_FARM)
    for name in list(os.environ):
        if name.startswith(("VGPUCTL_", "GOVC_")):
            monkeypatch.delenv(name)
    env = {"VGPUCTL_URL": sim.url, "VGPUCTL_USERNAME": sim.username, "VGPUCTL_PASSWORD": sim.password,
           "VGPUCTL_INSECURE": "1"}
    demand = tmp_path / "demand.yaml"
    demand.write_text(SPREAD_DEMAND)
    fragment = tmp_path / "layout.yaml"
    result = vgpuctl(env, "-o", "json", "capacity", "--demand", str(demand), "--out", str(fragment))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["fits"] and doc["placed"] == 18 and doc["host_changes"] == []
    per_host: dict[str, set[str]] = {}
    for vm in doc["vms"]:
        per_host.setdefault(vm["host"], set()).add(vm["profile"])
    assert all(len(profiles) == 1 for profiles in per_host.values())
    applied = vgpuctl(env, "apply", "-f", str(fragment), "--yes", "--parallel", "8")
    assert applied.exit_code == 0, applied.output
    assert {a["vmName"] for a in sim.assignments()} == {vm["name"] for vm in doc["vms"]}


NVLINK_FARM = {
    "datacenter": "DC0",
    "clusters": [
        {"name": "Quads", "hosts": 1, "gpus_per_host": 4, "model": "A100-40GB", "nvlink": "quads",
         "graphics_type": "sharedDirect", "assignment_policy": "performance", "vgpu_mode": "sameSize"},
        {"name": "Pairs", "hosts": 1, "gpus_per_host": 4, "model": "A100-40GB", "nvlink": "pairs",
         "graphics_type": "sharedDirect", "assignment_policy": "performance", "vgpu_mode": "sameSize"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
}
NVLINK_DEMAND = """\
apiVersion: vgpuctl/v1
kind: Demand
template: ubuntu-22.04-ml
demand:
  - {name: pair, count: 3, vgpus: {profile: grid_a100-40c, count: 2}, nvlink: required, priority: 2, memory_gb: 8}
  - {name: quad, count: 1, vgpus: {profile: grid_a100-40c, count: 4}, nvlink: required, memory_gb: 8}
"""


def test_nvlink_answer_applies_and_every_placed_vm_powers_on_in_its_device_group(
        gpusim_factory: Any, no_vgpuctl_env: None, tmp_path: Path) -> None:
    """esx-01's bridge quad offers one device group of 4, esx-02 two groups of 2: 2-vGPU NVLink VMs go only to
    esx-02 (two of three fit), the 4-vGPU one only to esx-01; gpusim admits each as its device group."""
    sim = gpusim_factory(NVLINK_FARM)
    env = sim.vgpuctl_env()
    demand = tmp_path / "demand.yaml"
    demand.write_text(NVLINK_DEMAND)
    fragment = tmp_path / "layout.yaml"
    result = vgpuctl(env, "-o", "json", "capacity", "--demand", str(demand), "--out", str(fragment))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    hosts = sorted((vm["shape"], vm["host"]) for vm in doc["vms"])
    assert hosts == [("pair", H2), ("pair", H2), ("quad", H1)]
    assert {d["name"]: d["placed"] for d in doc["demand"]} == {"pair": 2, "quad": 1}

    applied = vgpuctl(env, "apply", "-f", str(fragment), "--yes", "--parallel", "4")
    assert applied.exit_code == 0, applied.output
    gpus: dict[str, set[tuple[str, str]]] = {}
    for a in sim.assignments():
        gpus.setdefault(a["vmName"], set()).add((a["host"], a["gpu"]))
    assert {name: len(held) for name, held in gpus.items()} == {vm["name"]: vm["vgpus"] for vm in doc["vms"]}
    assert all({h for h, _ in gpus[vm["name"]]} == {vm["host"]} for vm in doc["vms"])
    conn = sim.connect()
    try:
        for vm in doc["vms"]:
            assert find_object(conn, vm["name"]).runtime.powerState == "poweredOn", vm["name"]
    finally:
        Disconnect(conn)
    again = vgpuctl(env, "plan", "-f", str(fragment), "--detailed-exitcode")
    assert again.exit_code == 0, again.output


MIG_FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [
        {"name": name, "hosts": 1, "gpus_per_host": 1, "model": "A100-40GB", "nvlink": "none",
         "graphics_type": "sharedDirect", "assignment_policy": "performance", "vgpu_mode": "sameSize"}
        for name in ("One", "Two")],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
}
# A 20 GB and two 5 GB VMs on one idle A100-40GB: only a MIG GPU holds all three (3g.20gb or 4g.20gb beside two
# 1g.5gb instances). The shape names put the small VMs first by name: apply must still power on the large one
# first, the order capacity verified (under the conservative MIG start rule two 1g.5gb instances powered on
# first leave no room for a 4g.20gb, which only starts at slot 0).
MIG_DEMANDS = {
    H1: """\
apiVersion: vgpuctl/v1
kind: Demand
allow: [mig]
clusters: [One]
template: ubuntu-22.04-ml
demand:
  - {name: infer, count: 2, vgpus: {fb_gb: 5, series: c}, memory_gb: 8}
  - {name: train, count: 1, vgpus: {fb_gb: 20, series: c}, memory_gb: 8}
""",
    H2: """\
apiVersion: vgpuctl/v1
kind: Demand
allow: [mig]
clusters: [Two]
template: ubuntu-22.04-ml
demand:
  - {name: small, count: 2, vgpus: {profile: grid_a100-1-5c}, memory_gb: 8}
  - {name: wide, count: 1, vgpus: {profile: grid_a100-4-20c}, memory_gb: 8}
""",
}


def test_mixed_mig_answer_applies_with_one_switch_and_all_three_running(
        gpusim_factory: Any, no_vgpuctl_env: None, tmp_path: Path) -> None:
    """The answer places all three VMs with one MIG switch, its fragment applies (in parallel: apply powers on
    the VMs of the host largest first), and gpusim's admission runs all three."""
    sim = gpusim_factory(MIG_FARM)
    env = sim.vgpuctl_env()
    for host, text in MIG_DEMANDS.items():
        demand = tmp_path / f"{host}.demand.yaml"
        demand.write_text(text)
        fragment = tmp_path / f"{host}.layout.yaml"
        result = vgpuctl(env, "-o", "json", "capacity", "--demand", str(demand), "--out", str(fragment),
                         "--detailed-exitcode")
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["fits"] and doc["placed"] == 3
        assert [(c["host"], c["new"], c["needs_reboot"]) for c in doc["host_changes"]] == [
            (host, "multiInstanceGpu", True)]
        assert {vm["host"] for vm in doc["vms"]} == {host}
        applied = vgpuctl(env, "apply", "-f", str(fragment), "--yes", "--parallel", "3")
        assert applied.exit_code == 0, applied.output
        conn = sim.connect()
        try:
            for vm in doc["vms"]:
                assert find_object(conn, vm["name"]).runtime.powerState == "poweredOn", vm["name"]
        finally:
            Disconnect(conn)
        held = {a["vmName"]: a["host"] for a in sim.assignments()}
        assert {vm["name"]: held.get(vm["name"]) for vm in doc["vms"]} == {vm["name"]: host for vm in doc["vms"]}
        again = vgpuctl(env, "plan", "-f", str(fragment), "--detailed-exitcode")
        assert again.exit_code == 0, again.output
