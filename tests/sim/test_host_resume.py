"""Host work that survives crashes and a second operator, with real `vgpuctl` processes against gpusim: the work
record lives in vCenter (a custom attribute on the host), the lease is a fixed-name folder with a time to live.
kill -9 of `vgpuctl apply` while the host enters maintenance and while it reboots, then `plan` (not exit 0 while
the work is unfinished) and `apply` at once (the killed process's lease is taken over: it is gone from this
machine; converges, every VM running again); two applies started together on the same host: exactly one
proceeds, the other touches nothing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim
from vimfind import find_object

pytestmark = pytest.mark.sim
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"  # a progress line's date, time and UTC offset

H1 = "esx-01.gpu.sim"
TTL_S = 10  # the shortest time to live vgpuctl takes; a killed run's lease is taken over at once all the same
LIVE_TTL_S = 60  # runs that stay alive renew well within it, however loaded the machine
POLL_S = 0.05
WAIT_POLLS = 1200  # a bound on polls, not on time: each poll is one small control or SOAP read

FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [
        {"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "pairs",
         "graphics_type": "sharedDirect", "vgpu_mode": "sameSize", "nvidia_options": "NVreg_EnableMSI=1"}
    ],
    "vms": [
        {"name": "train-01", "host": H1, "cpus": 8, "memory_mb": 16384, "firmware": "efi",
         "vgpus": ["grid_a100-40c"], "memory_locked": True},
        {"name": "web-01", "host": H1, "cpus": 2, "memory_mb": 4096},
    ],
}  # fmt: skip

INVENTORY = f"""apiVersion: vgpuctl/v1
hosts:
  - name: {H1}
    nvlink: disabled
    maintenance: {{evacuate: power-off}}
"""


def _start(gpusim_factory: Callable[..., Any], farm: dict[str, Any]) -> Any:
    sim = gpusim_factory(farm)
    conn = sim.connect()
    try:
        for name in ("train-01", "web-01"):
            WaitForTask(find_object(conn, name, vim.VirtualMachine).PowerOnVM_Task())
    finally:
        Disconnect(conn)
    return sim


@pytest.fixture
def sim(request: pytest.FixtureRequest, gpusim_factory: Callable[..., Any]) -> Any:
    return _start(gpusim_factory, {**FARM, **getattr(request, "param", {})})  # indirect params: farm keys


@pytest.fixture
def si(sim: Any) -> Iterator[Any]:
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def _attribute(si: Any, host: str, name: str) -> str:
    h = find_object(si, host, vim.HostSystem)
    keys = {f.key: f.name for f in si.content.customFieldsManager.field or []}
    return next((v.value for v in h.customValue if keys.get(v.key) == name), "")


def _record(si: Any, host: str) -> dict[str, Any]:
    text = _attribute(si, host, "vgpuctl.work")
    return json.loads(text) if text else {}


def _env(sim: Any, ttl_s: float = TTL_S) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    env.update(
        VGPUCTL_URL=sim.url,
        VGPUCTL_USERNAME=sim.username,
        VGPUCTL_PASSWORD=sim.password,
        VGPUCTL_INSECURE="1",
        VGPUCTL_ESXI_HOSTS=sim.env["GPUSIM_SSH_HOSTS"],
        VGPUCTL_ESXI_KNOWN_HOSTS=sim.env["GPUSIM_SSH_KNOWN_HOSTS"],
        VGPUCTL_ESXI_PASSWORD=sim.password,
        VGPUCTL_LEASE_TTL_S=str(ttl_s),
    )
    return env


def _vgpuctl(
    sim: Any, tmp_path: Path, *args: str, ttl_s: float = TTL_S, inventory: str = INVENTORY
) -> subprocess.Popen[str]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(inventory)
    cmd = [sys.executable, "-m", "vgpuctl", *args, "-f", str(inv)]
    return subprocess.Popen(cmd, env=_env(sim, ttl_s), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _run(sim: Any, tmp_path: Path, *args: str, ttl_s: float = TTL_S) -> tuple[int, str]:
    proc = _vgpuctl(sim, tmp_path, *args, ttl_s=ttl_s)
    out, _ = proc.communicate()
    return proc.returncode, out


def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(WAIT_POLLS):
        if check():
            return
        time.sleep(POLL_S)
    raise AssertionError(f"never happened: {what}")


def _kill_at(sim: Any, si: Any, tmp_path: Path, phase: str) -> None:
    """Start `vgpuctl apply`, kill -9 it once its work record says it reached `phase`."""
    proc = _vgpuctl(sim, tmp_path, "apply", "--yes")
    try:
        _until(lambda: _record(si, H1).get("phase") == phase or proc.poll() is not None, f"phase {phase}")
        assert proc.poll() is None, proc.communicate()[0]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _converges(sim: Any, si: Any, tmp_path: Path) -> None:
    code, out = _run(sim, tmp_path, "plan", "--detailed-exitcode")
    assert code == 2, out  # never "no changes" while the work is unfinished
    assert f"~ host {H1} maintenance" in out and "unfinished work of run" in out
    # no waiting for the killed run's lease to expire: its process is gone from this machine, which the lease says
    code, out = _run(sim, tmp_path, "apply", "--yes")
    assert code == 0, out
    for vm in ("train-01", "web-01"):
        assert find_object(si, vm, vim.VirtualMachine).runtime.powerState == "poweredOn", vm
    host = sim.host(H1)
    assert not host["inMaintenance"]
    assert host["modules"]["nvidia"]["effective"] == "NVreg_EnableMSI=1 NVreg_NvLinkDisable=1"
    assert _record(si, H1) == {} and _attribute(si, H1, "vgpuctl.lease") == ""
    code, out = _run(sim, tmp_path, "plan", "--detailed-exitcode")
    assert code == 0, out


def test_kill_during_maintenance_then_plan_and_apply_resume(sim: Any, si: Any, tmp_path: Path) -> None:
    # killed once gpusim has the enter-maintenance call (not merely once the record names the phase: the
    # process could die before sending it), which then completes on its own after the kill
    hold = sim.hold("EnterMaintenanceMode_Task", H1)
    proc = _vgpuctl(sim, tmp_path, "apply", "--yes")
    try:
        _until(lambda: next(h for h in sim.holds() if h["id"] == hold)["started"] or proc.poll() is not None,
               "enter maintenance starts")  # fmt: skip
        assert proc.poll() is None, proc.communicate()[0]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        sim.release(hold)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    record = _record(si, H1)
    assert sorted(v["name"] for v in record["vms"]) == ["train-01", "web-01"]
    assert record["run"] and record.get("phase") == "enter-maintenance" and "enter-maintenance" in record["steps"]
    _until(lambda: sim.host(H1)["inMaintenance"], "the held task finished")
    _converges(sim, si, tmp_path)


@pytest.mark.parametrize("sim", [{"reboot_seconds": 3}], indirect=True)
def test_kill_during_the_reboot_wait_then_plan_and_apply_resume(sim: Any, si: Any, tmp_path: Path) -> None:
    _kill_at(sim, si, tmp_path, "wait-reconnect")
    _until(lambda: sim.host(H1)["connectionState"] == "connected", "the host is back")
    _converges(sim, si, tmp_path)


def test_two_applies_started_together_exactly_one_proceeds(sim: Any, si: Any, tmp_path: Path) -> None:
    sim.delay(H1, "EnterMaintenanceMode_Task", 2)  # the winner still holds the host when the other arrives
    barrier = threading.Barrier(2)
    results: list[tuple[int, str]] = []

    def one(i: int) -> None:
        work = tmp_path / f"op{i}"
        work.mkdir()
        barrier.wait()
        results.append(_run(sim, work, "apply", "--yes", ttl_s=LIVE_TTL_S))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    loser = next(out for code, out in results if code == 1)
    assert "is working on this host; not touched" in loser and "by " in loser, loser
    for vm in ("train-01", "web-01"):
        assert find_object(si, vm, vim.VirtualMachine).runtime.powerState == "poweredOn", vm
    assert _record(si, H1) == {} and not sim.host(H1)["inMaintenance"]
    assert _run(sim, tmp_path, "plan", "--detailed-exitcode")[0] == 0


def test_an_apply_that_plans_while_another_holds_the_host_touches_nothing(sim: Any, si: Any, tmp_path: Path) -> None:
    """The barrier race's slow loser, made deterministic: it plans once the winner's record says it is entering
    maintenance, so its plan shows that unfinished work, and still it touches nothing."""
    hold = sim.hold("EnterMaintenanceMode_Task", H1)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    winner = _vgpuctl(sim, tmp_path / "a", "apply", "--yes", ttl_s=LIVE_TTL_S)
    try:
        _until(lambda: _record(si, H1).get("phase") == "enter-maintenance" or winner.poll() is not None, "phase")
        code, lost = _run(sim, tmp_path / "b", "apply", "--yes", ttl_s=LIVE_TTL_S)
    finally:
        sim.release(hold)
    won = winner.communicate()[0]
    assert (code, winner.returncode) == (1, 0), lost + won
    assert "(stopped at enter-maintenance)" in lost and "is working on this host; not touched" in lost, lost
    assert len(next(h for h in sim.holds() if h["id"] == hold)["started"]) == 1
    assert not re.search(rf"^{STAMP} host {re.escape(H1)}: (?!failed)", lost, re.MULTILINE), lost


def test_first_ctrl_c_in_maintenance_before_the_change_restores_the_host(sim: Any, si: Any, tmp_path: Path) -> None:
    hold = sim.hold("EnterMaintenanceMode_Task", H1)  # gpusim says when the host's step starts
    proc = _vgpuctl(sim, tmp_path, "apply", "--yes")
    try:
        _until(lambda: next(h for h in sim.holds() if h["id"] == hold)["started"] or proc.poll() is not None,
               "enter maintenance starts")  # fmt: skip
        assert proc.poll() is None, proc.communicate()[0]
        proc.send_signal(signal.SIGINT)
    finally:
        sim.release(hold)
    out, _ = proc.communicate()
    assert proc.returncode == 130, out
    assert f"{H1}: interrupted before module-options; left: nvlink -> disabled, reboot, wait-reconnect, verify; " \
           "nothing changed; out of maintenance mode again; powered on again: train-01, web-01" in out, out  # fmt: skip
    assert "to continue: run the same apply again" in out
    host = sim.host(H1)
    assert not host["inMaintenance"]
    assert host["modules"]["nvidia"]["configured"] == "NVreg_EnableMSI=1"  # no change was written
    for vm in ("train-01", "web-01"):
        assert find_object(si, vm, vim.VirtualMachine).runtime.powerState == "poweredOn", vm
    assert _record(si, H1) == {} and _attribute(si, H1, "vgpuctl.lease") == ""
    code, out = _run(sim, tmp_path, "plan", "--detailed-exitcode")
    assert code == 2 and f"~ host {H1}" in out and "unfinished work" not in out, out  # the change, planned anew


@pytest.fixture(scope="module")
def shared_sim(gpusim_session_factory: Callable[..., Any]) -> Any:
    """One farm for the repeated race: each round switches NVLink the other way, so every round has work."""
    return _start(gpusim_session_factory, FARM)


RACES = 20


@pytest.mark.parametrize("race", range(RACES))
def test_two_applies_from_a_barrier_exactly_one_proceeds(shared_sim: Any, tmp_path: Path, race: int) -> None:
    sim = shared_sim
    nvlink = "enabled" if "NVreg_NvLinkDisable=1" in sim.host(H1)["modules"]["nvidia"]["effective"] else "disabled"
    inventory = INVENTORY.replace("nvlink: disabled", f"nvlink: {nvlink}")
    hold = sim.hold("EnterMaintenanceMode_Task", H1)  # the winner holds the host until the other run has ended
    barrier = threading.Barrier(2)
    procs: list[subprocess.Popen[str]] = []

    def one(i: int) -> None:
        work = tmp_path / f"op{i}"
        work.mkdir()
        barrier.wait()
        procs.append(_vgpuctl(sim, work, "apply", "--yes", ttl_s=LIVE_TTL_S, inventory=inventory))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def caught() -> int:
        return len(next(h for h in sim.holds() if h["id"] == hold)["started"])

    try:
        # one run ends, and the other has reached the held call (a fast loser can end before the winner gets
        # there: released then, the hold would not see the winner's call), or both have ended (a failure below)
        _until(lambda: any(p.poll() is not None for p in procs) and (caught() >= 1 or all(p.poll() is not None
                                                                                          for p in procs)),
               "one apply ends while the other waits in enter-maintenance")
    finally:
        sim.release(hold)
    loser = next(p for p in procs if p.poll() is not None)
    winner = next(p for p in procs if p is not loser)
    lost, won = loser.communicate()[0], winner.communicate()[0]
    assert (loser.returncode, winner.returncode) == (1, 0), lost + won
    assert "is working on this host; not touched" in lost, lost
    # the loser touched nothing: gpusim saw one enter-maintenance call, and the loser logged no step of its own on
    # the host (its plan may well name the winner's phase, "stopped at enter-maintenance", when it starts later)
    assert caught() == 1
    assert not re.search(rf"^{STAMP} host {re.escape(H1)}: (?!failed)", lost, re.MULTILINE), lost
    si = sim.connect()
    try:
        for vm in ("train-01", "web-01"):
            assert find_object(si, vm, vim.VirtualMachine).runtime.powerState == "poweredOn", vm
        assert _record(si, H1) == {} and _attribute(si, H1, "vgpuctl.lease") == ""
    finally:
        Disconnect(si)
    host = sim.host(H1)
    assert not host["inMaintenance"]
    assert ("NVreg_NvLinkDisable=1" in host["modules"]["nvidia"]["effective"]) == (nvlink == "disabled")


def test_a_host_change_stops_before_evacuating_a_vm_another_run_is_changing(sim: Any, si: Any, tmp_path: Path) -> None:
    """Evacuation claims the VMs it stops, as VM changes do: a VM another run has stops the host's change before
    anything changed, naming the VM and that run; once that run is done, the host's change goes through."""
    hold = sim.hold("PowerOffVM_Task", "web-01")  # the VM run has web-01 claimed and its power-off sent
    (tmp_path / "vm").mkdir()
    (tmp_path / "host").mkdir()
    vm_run = _vgpuctl(sim, tmp_path / "vm", "apply", "--yes", ttl_s=LIVE_TTL_S,
                      inventory="apiVersion: vgpuctl/v1\nvms:\n  - name: web-01\n    power: 'off'\n")  # fmt: skip
    try:
        _until(lambda: bool(next(h for h in sim.holds() if h["id"] == hold)["started"]) or vm_run.poll() is not None,
               "the VM run's power-off reaches gpusim")  # fmt: skip
        code, out = _run(sim, tmp_path / "host", "apply", "--yes", ttl_s=LIVE_TTL_S)
    finally:
        sim.release(hold)
    assert code == 1, out
    assert f"{H1}: evacuating it needs web-01: run " in out and f"pid {vm_run.pid} " in out, out
    assert find_object(si, "train-01", vim.VirtualMachine).runtime.powerState == "poweredOn"  # nothing was stopped
    assert not sim.host(H1)["inMaintenance"]
    assert vm_run.communicate()[0] is not None and vm_run.returncode == 0
    code, out = _run(sim, tmp_path / "host", "apply", "--yes", ttl_s=LIVE_TTL_S)
    assert code == 0, out


def test_lock_timeout_waits_for_the_host_with_a_progress_line(sim: Any, si: Any, tmp_path: Path) -> None:
    hold = sim.hold("EnterMaintenanceMode_Task", H1)  # the first run has the host, held in its maintenance step
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _vgpuctl(sim, tmp_path / "a", "apply", "--yes", ttl_s=LIVE_TTL_S)
    try:
        _until(lambda: bool(next(h for h in sim.holds() if h["id"] == hold)["started"]) or first.poll() is not None,
               "the first run's enter-maintenance reaches gpusim")  # fmt: skip
        second = _vgpuctl(sim, tmp_path / "b", "--lock-timeout", "10m", "apply", "--yes", ttl_s=LIVE_TTL_S)
        assert second.stdout is not None
        seen = []
        for line in second.stdout:
            seen.append(line)
            if f"host {H1}: waiting for run " in line:
                break
        assert any(f"pid {first.pid}" in line and "s more" in line for line in seen), "".join(seen)
    finally:
        sim.release(hold)
    first.communicate()
    waited = "".join(seen) + second.communicate()[0]
    assert (first.returncode, second.returncode) == (0, 0), waited
    assert _record(si, H1) == {} and not sim.host(H1)["inMaintenance"]
