"""Two operators at once on overlapping capacity, with real `vgpuctl apply` processes against gpusim: both plans
fit the farm as it was, together they need every GPU; started from a barrier, each VM converges or fails alone
(capacity taken by the other run meanwhile), and afterwards no inventory is blocked: a rerun of each converges.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVmomi import vim

pytestmark = pytest.mark.sim

TEMPLATE = "ubuntu-22.04-ml"
FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "templates": [{"name": TEMPLATE, "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
}  # fmt: skip


def inventory(team: str) -> str:
    vms = "".join(
        f"  - name: {team}-0{i}\n    template: {TEMPLATE}\n    cluster: GPU-Cluster\n"
        "    vgpus: {profile: grid_a100-40c, count: 1}\n"
        for i in (1, 2)
    )
    return f"apiVersion: vgpuctl/v1\nvcenter: {{datacenter: DC0}}\nvms:\n{vms}"


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


@pytest.fixture
def si(sim: Any) -> Iterator[Any]:
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def _apply(sim: Any, work: Path, team: str) -> tuple[int, str]:
    work.mkdir(exist_ok=True)
    path = work / "inv.yaml"
    path.write_text(inventory(team))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    env.update(VGPUCTL_URL=sim.url, VGPUCTL_USERNAME=sim.username, VGPUCTL_PASSWORD=sim.password,
               VGPUCTL_INSECURE="1", VGPUCTL_STATE_DIR=str(work / "state"))  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "vgpuctl", "apply", "--yes", "-f", str(path)], env=env,
                          capture_output=True, text=True)  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(2400):  # a bound on polls, not on time: each is one small control read
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def _running_vgpus(si: Any) -> dict[str, list[str]]:
    view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
    try:
        return {
            vm.name: [
                d.backing.vgpu
                for d in vm.config.hardware.device
                if isinstance(d, vim.vm.device.VirtualPCIPassthrough) and hasattr(d.backing, "vgpu")
            ]
            for vm in view.view
            if vm.name != TEMPLATE and vm.runtime.powerState == "poweredOn"
        }
    finally:
        view.Destroy()


def test_two_applies_on_overlapping_capacity_fail_per_vm_and_reruns_converge(sim: Any, si: Any, tmp_path: Path) -> None:
    clones = sim.hold("CloneVM_Task", count=4)  # both runs planned and started every clone: they overlap
    barrier = threading.Barrier(2)
    results: dict[str, tuple[int, str]] = {}

    def one(team: str) -> None:
        barrier.wait()
        results[team] = _apply(sim, tmp_path / team, team)

    threads = [threading.Thread(target=one, args=(team,)) for team in ("a", "b")]
    for t in threads:
        t.start()
    try:
        _until(lambda: len(next(h for h in sim.holds() if h["id"] == clones)["started"]) == 4, "four clones start")
    finally:
        sim.release(clones)
    for t in threads:
        t.join()
    failed = [line for _, out in results.values() for line in out.splitlines() if line.startswith("  failed: ")]
    assert failed, results  # the plans overlapped: some VM found its capacity taken by the other run
    for line in failed:  # each failed alone, and left no clone stranded on the full host
        assert "InsufficientGraphicsResourcesFault" in line and "the clone this run made was removed" in line, line
    assert sorted(code for code, _ in results.values()) in ([0, 1], [1, 1]), results
    assert len(_running_vgpus(si)) == 4 - len(failed)
    for team in ("a", "b"):  # nothing blocks either inventory afterwards
        code, out = _apply(sim, tmp_path / team, team)
        assert code == 0, out
    assert _running_vgpus(si) == {f"{t}-0{i}": ["grid_a100-40c"] for t in "ab" for i in (1, 2)}
