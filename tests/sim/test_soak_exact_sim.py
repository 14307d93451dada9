"""Soak: three operators at once, round after round, against one gpusim farm. Each round three `vgpuctl apply`
processes start together from a barrier, each with its own inventory over overlapping VMs on shared hosts, each
asking every one of its VMs for a vGPU profile the VM does not have yet (and that the other inventories do not
ask for). After each round:

- every VM is in exactly one inventory's state of that round, and running (every inventory asks it to run);
- no run claims a change it did not make: the reconfigures the runs report are exactly the reconfigures vCenter
  recorded (its VmReconfiguredEvents of the round), with the profiles they reported;
- a run that did not change a VM says why, naming the VM and the run that had it (or that changed it first);
- `plan` of the inventory whose change each VM holds (that VM's entry) exits 0.

ROUNDS rounds, bounded by rounds (no clock): 4 to 10 s a round, 1.5 to 3.5 minutes in all on two shared cores,
depending on their load. It is a plain sim test, so `make test` and `make test-sim` run it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVmomi import vim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

ROUNDS = 20
HOSTS = ["esx-01.gpu.sim", "esx-02.gpu.sim"]
VMS = ["v1", "v2", "v3", "v4"]  # v1, v3 on the first host, v2, v4 on the second: two GPUs each
INVENTORIES = {"a": ["v1", "v2", "v3"], "b": ["v2", "v3", "v4"], "c": ["v3", "v4", "v1"]}
PROFILES = ["grid_a100-4c", "grid_a100-5c", "grid_a100-8c", "grid_a100-10c", "grid_a100-20c"]
# what a run that did not change a VM may say: another run has it, or changed it first
LOST = ("is changing this VM; not touched", "changed since the plan", "was changed by something else")

FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "vms": [{"name": vm, "host": HOSTS[i % 2], "cpus": 2, "memory_mb": 4096, "firmware": "efi", "power_on": True}
            for i, vm in enumerate(VMS)],
}  # fmt: skip


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


@pytest.fixture
def si(sim: Any) -> Iterator[Any]:
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def _entry(vm: str, profile: str) -> str:
    return f"  - name: {vm}\n    vgpus: {{profile: {profile}, count: 1}}\n"


def _inventory(entries: dict[str, str]) -> str:
    return "apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nvms:\n" + "".join(
        _entry(vm, profile) for vm, profile in entries.items()
    )


def _wanted(current: dict[str, str | None], rng: random.Random) -> dict[str, dict[str, str]]:
    """Per inventory, per VM: a profile the VM does not have and no other inventory asks of it this round."""
    wanted: dict[str, dict[str, str]] = {team: {} for team in INVENTORIES}
    for vm in VMS:
        teams = [t for t, vms in INVENTORIES.items() if vm in vms]
        choices = rng.sample([p for p in PROFILES if p != current[vm]], len(teams))
        for team, profile in zip(teams, choices, strict=True):
            wanted[team][vm] = profile
    return wanted


def _vms(si: Any) -> dict[str, Any]:
    view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
    try:
        return {vm.name: vm for vm in view.view if vm.name in VMS}
    finally:
        view.Destroy()


def _profiles(vm: Any) -> list[str]:
    return [d.backing.vgpu for d in vm.config.hardware.device
            if isinstance(d, vim.vm.device.VirtualPCIPassthrough) and hasattr(d.backing, "vgpu")]  # fmt: skip


def _state(si: Any) -> dict[str, tuple[list[str], str]]:
    return {name: (_profiles(vm), str(vm.runtime.powerState)) for name, vm in _vms(si).items()}


def _reconfigured(si: Any, seen: set[int]) -> dict[str, list[str]]:
    """VM -> the vGPU profiles each VmReconfiguredEvent not seen before added (one entry per reconfigure)."""
    spec = vim.event.EventFilterSpec(eventTypeId=["VmReconfiguredEvent"], maxCount=1000)
    out: dict[str, list[str]] = {}
    for event in si.content.eventManager.QueryEvents(spec) or []:
        if event.key in seen or event.vm is None or event.vm.name not in VMS:
            continue
        seen.add(event.key)
        added = [c.device.backing.vgpu for c in event.configSpec.deviceChange or []
                 if c.operation == "add" and hasattr(getattr(c.device, "backing", None), "vgpu")]  # fmt: skip
        out.setdefault(event.vm.name, []).extend(added or ["(no vGPU added)"])
    return out


def _apply(sim: Any, work: Path, text: str) -> tuple[int, dict[str, Any] | None, str]:
    work.mkdir(parents=True, exist_ok=True)
    path = work / "inv.yaml"
    path.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    env |= sim.vgpuctl_env(esxi=False)
    proc = subprocess.run([sys.executable, "-m", "vgpuctl", "-o", "json", "apply", "--yes", "-f", str(path)],
                          env=env, capture_output=True, text=True)  # fmt: skip
    try:
        document = json.loads(proc.stdout)
    except ValueError:
        document = None
    return proc.returncode, document, proc.stdout + proc.stderr


def _round(sim: Any, tmp_path: Path, wanted: dict[str, dict[str, str]]) -> dict[str, tuple[int, Any, str]]:
    barrier = threading.Barrier(len(wanted))
    results: dict[str, tuple[int, Any, str]] = {}

    def one(team: str) -> None:
        barrier.wait()
        results[team] = _apply(sim, tmp_path / team, _inventory(wanted[team]))

    threads = [threading.Thread(target=one, args=(team,)) for team in wanted]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _claimed(results: dict[str, tuple[int, Any, str]], wanted: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """VM -> the profiles the runs report they reconfigured it to; and each VM a run did not change says why."""
    claimed: dict[str, list[str]] = {}
    for team, (code, document, out) in results.items():
        assert code in (0, 1) and document is not None and "vms" in document, (team, out)
        for outcome in document["vms"]:
            vm = outcome["vm"]
            if outcome["status"] == "changed":
                assert "reconfigure" in outcome["steps"], (team, outcome)
                claimed.setdefault(vm, []).append(wanted[team][vm])
            else:  # lost to another run: said so, naming the VM and that run
                assert outcome["status"] == "failed" and any(why in outcome["message"] for why in LOST), (team, out)
                assert outcome["message"].startswith(vm) and " run " in outcome["message"], (team, outcome)
        assert (code == 0) == all(o["status"] == "changed" for o in document["vms"]), (team, out)
    return claimed


def _plan_exits_0(sim: Any, tmp_path: Path, vm: str, profile: str) -> None:
    path = tmp_path / f"plan-{vm}.yaml"
    path.write_text(_inventory({vm: profile}))
    result = CliRunner().invoke(app, ["plan", "--detailed-exitcode", "-f", str(path)], env=sim.vgpuctl_env(esxi=False))
    assert result.exit_code == 0, (vm, profile, result.output)


def test_three_operators_twenty_rounds_every_vm_exact(sim: Any, si: Any, tmp_path: Path) -> None:
    rng = random.Random(19)
    seen: set[int] = set()
    _reconfigured(si, seen)  # what the farm's setup did
    for n in range(ROUNDS):
        current = {vm: (p[0] if p else None) for vm, (p, _) in _state(si).items()}
        wanted = _wanted(current, rng)
        results = _round(sim, tmp_path / f"round-{n:02d}", wanted)
        claimed = _claimed(results, wanted)
        done = _reconfigured(si, seen)
        state = _state(si)
        for vm in VMS:
            profiles, power = state[vm]
            holders = [team for team in INVENTORIES if vm in wanted[team] and [wanted[team][vm]] == profiles]
            assert len(holders) == 1 and power == "poweredOn", (n, vm, state[vm], wanted, results)
            assert sorted(claimed.get(vm, [])) == sorted(done.get(vm, [])), (n, vm, claimed, done, results)
            _plan_exits_0(sim, tmp_path, vm, profiles[0])
