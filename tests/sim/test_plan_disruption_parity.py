"""Plan/apply disruption parity against gpusim: every host that apply puts in maintenance mode or reboots and
every VM it powers off was in the plan's `disruptions`, and nothing the plan listed was left out. What apply did
is read from vCenter's own task history (a TaskHistoryCollector made before the apply), not from its summary.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

H1, H2 = "esx-01.gpu.sim", "esx-02.gpu.sim"

FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "pairs",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [
        {"name": "train-01", "host": H1, "cpus": 8, "memory_mb": 16384, "firmware": "efi",
         "vgpus": ["grid_a100-40c"], "memory_locked": True},
        {"name": "web-01", "host": H1, "cpus": 2, "memory_mb": 4096},
        {"name": "web-02", "host": H1, "cpus": 2, "memory_mb": 4096},
        {"name": "solo-01", "host": H2, "cpus": 4, "memory_mb": 8192, "firmware": "efi",
         "vgpus": ["grid_a100-20c"], "memory_locked": True},
        {"name": "idle-01", "host": H2, "cpus": 2, "memory_mb": 4096},
    ],
}  # fmt: skip
RUNNING = ("train-01", "web-01", "web-02", "solo-01")

HEADER = "apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\n"
CASES = {
    # MIG on H1: train-01 re-profiled by its own change (handed over), the web VMs powered off and on again
    "mig-switch-hand-over": HEADER + f"hosts:\n  - name: {H1}\n    gpus: [{{select: all, mode: mig}}]\n"
    "    maintenance: {evacuate: power-off}\n"
    "vms:\n  - name: train-01\n    vgpus: {profile: grid_a100-3-20c}\n    power: restart\n",
    # a scheduler change on both hosts: maintenance and reboot each, every running VM evacuated and restored
    "scheduler-both-hosts": HEADER + "hosts:\n  - cluster: GPU-Cluster\n    scheduler: equal-share\n"
    "    maintenance: {evacuate: power-off, max_unavailable: 1}\n",
    # NVLink off on H2 only, plus a running VM on H1 powered off for its own vGPU change and left off
    "nvlink-and-own-change": HEADER + f"hosts:\n  - name: {H2}\n    nvlink: disabled\n"
    "    maintenance: {evacuate: power-off}\n"
    "vms:\n  - name: web-01\n    vgpus: {profile: grid_a100-10c, count: 1}\n    power: 'off'\n",
    # an assignment policy change: no maintenance, no power-off
    "policy-only": HEADER + "hosts:\n  - cluster: GPU-Cluster\n    graphics: {assignment_policy: consolidation}\n",
    # two VMs destroyed: a running one (powered off first) and a stopped one (a disruptive step all the same)
    "destroy": HEADER + "allow_destroy: true\nvms:\n  - {name: web-02, state: absent}\n"
    "  - {name: idle-01, state: absent}\n",
}


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    sim = gpusim_factory(FARM)
    si = sim.connect()
    try:
        for name in RUNNING:
            WaitForTask(_vm(si, name).PowerOnVM_Task())
    finally:
        Disconnect(si)
    return sim


@pytest.fixture
def si(sim: Any) -> Iterator[Any]:
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def _vm(si: Any, name: str) -> Any:
    view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
    try:
        return next(o for o in view.view if o.name == name)
    finally:
        view.Destroy()


def _names(si: Any) -> dict[str, str]:
    view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine, vim.HostSystem], True)
    try:
        return {o._moId: o.name for o in view.view}
    finally:
        view.Destroy()


def task_collector(si: Any) -> tuple[Any, set[str]]:
    """A collector of every task on the inventory's objects, and the keys of the tasks it already holds (those
    before the apply). The simulator records a destroyed VM's file deletion as a task of its FileManager, which is
    no managed entity and which pyVmomi refuses to read: only tasks of entities under the root folder are kept."""
    below_root = vim.TaskFilterSpec.ByEntity(entity=si.content.rootFolder, recursion="all")
    collector = si.content.taskManager.CreateCollectorForTasks(vim.TaskFilterSpec(entity=below_root))
    collector.SetCollectorPageSize(1000)
    return collector, {t.key for t in collector.latestPage or []}


def done_tasks(si: Any, collector: Any, before: set[str], known: dict[str, str]) -> list[tuple[str, str]]:
    """(descriptionId, entity name) of every task vCenter ran since the collector was made; `known`: the names of
    the objects before the apply (a VM it destroyed is no longer there to be named)."""
    names = {**known, **_names(si)}
    page = list(collector.latestPage or [])
    assert len(page) < 1000  # the page holds them all
    return [
        (str(t.descriptionId), names.get(t.entity._moId, t.entityName))
        for t in page
        if t.entity is not None and t.key not in before
    ]


def what_apply_did(tasks: list[tuple[str, str]]) -> dict[str, set[str]]:
    kinds = {"maintenance": "entermaintenance", "reboot": "reboot", "power-off": "poweroff", "power-on": "poweron",
             "destroy": "virtualmachine.destroy"}  # not the Folder.destroy of a lease or claim
    return {k: {entity for name, entity in tasks if needle in name.lower()} for k, needle in kinds.items()}


def vgpuctl(sim: Any, tmp_path: Path, *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=sim.vgpuctl_env(tmp_path / "state"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_apply_does_exactly_the_disruptive_steps_the_plan_shows(sim: Any, si: Any, tmp_path: Path, case: str) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(CASES[case])
    planned = vgpuctl(sim, tmp_path, "plan", "-f", str(inv), "-o", "json")
    assert planned.exit_code == 0, planned.output
    doc = json.loads(planned.stdout)
    shown = {
        action: {d["vm"] or d["host"] for d in doc["disruptions"] if d["action"] == action}
        for action in ("maintenance", "reboot", "power-off", "destroy")
    }
    comes_back = {d["vm"] for d in doc["disruptions"] if d["action"] == "power-off" and d["comes_back"]}
    assert doc["summary"]["power_off"] == len(shown["power-off"])
    assert doc["summary"]["maintenance"] == len(shown["maintenance"])
    assert doc["summary"]["remove"] == len(shown["destroy"])

    collector, before = task_collector(si)
    known = _names(si)
    applied = vgpuctl(sim, tmp_path, "apply", "-f", str(inv), "--yes")
    assert applied.exit_code == 0, applied.output
    did = what_apply_did(done_tasks(si, collector, before, known))
    collector.DestroyCollector()

    assert did["maintenance"] == shown["maintenance"], case
    assert did["reboot"] == shown["reboot"], case
    assert did["power-off"] == shown["power-off"], case
    assert did["destroy"] == shown["destroy"], case
    assert did["power-on"] & shown["power-off"] == comes_back, case  # powered on again exactly as shown
    text = vgpuctl(sim, tmp_path, "plan", "-f", str(inv)).stdout if not shown["power-off"] else ""
    assert "Disruptive steps" not in text
    if case == "destroy":
        assert shown["destroy"] == {"web-02", "idle-01"} and shown["power-off"] == {"web-02"}


def test_the_text_plan_lists_each_evacuated_vm_and_counts_them(sim: Any, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(CASES["scheduler-both-hosts"])
    out = vgpuctl(sim, tmp_path, "plan", "-f", str(inv)).stdout
    for host in (H1, H2):
        assert f"! host {host}: enters maintenance mode, exits after the change" in out
        assert f"! host {host}: reboots in maintenance mode" in out
    for vm in RUNNING:
        assert f"! vm {vm}: powered off to evacuate host " in out and "powered on again after the host change" in out
    assert "4 power-off, 2 hosts in maintenance, 2 reboots." in out
