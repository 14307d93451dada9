"""Change windows, plans with problems and --lock-timeout, with real `vgpuctl` processes against gpusim.

- VMs of a cluster without host changes are changed while another cluster's host reboots (held in gpusim), as
  the events say;
- `--deadline` passing while the first wave's reboot is held: that host finishes, no further wave and no VM
  after it starts, the summary (text and JSON) lists what was left, exit 1;
- `maintenance.max_failures` with faults on the first hosts: the limit lets the second host start and keeps the
  third back; `pause_between_waves` shows as a step;
- a plan with one impossible host change (`evacuate: refuse` with a VM running) shows it beside every other
  change and exits 1 (also with --detailed-exitcode), `plan --out` saves nothing, `apply` refuses before any change;
- `--lock-timeout` waits for a host another run holds (while that run "reboots" it), plans it as it is once it is
  let go, and names the holder when it is not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVmomi import vim

from vgpuctl import pipeline
from vgpuctl.vsphere.session import ConnectionSettings, open_session
from vgpuctl.vsphere.workrecord import WAIT_POLL_S, Fields, Lease

pytestmark = pytest.mark.sim

H1, H2, H3, H4 = "esx-01.gpu.sim", "esx-02.gpu.sim", "esx-03.gpu.sim", "esx-04.gpu.sim"
POLL_S = 0.05
WAIT_POLLS = 2400  # a bound on polls, not on time: each poll is one small control read or file read

FARM: dict[str, Any] = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [
        {"name": "GPU-Cluster", "hosts": 3, "gpus_per_host": 2, "model": "A100-40GB", "graphics_type": "sharedDirect"},
        {"name": "Other-Cluster", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB",
         "graphics_type": "sharedDirect"},
    ],
    "vms": [
        {"name": "near-01", "host": H1, "cpus": 2, "memory_mb": 4096},  # on a changing host: waits for it
        {"name": "far-01", "host": H4, "cpus": 2, "memory_mb": 4096},
        {"name": "far-02", "host": H4, "cpus": 2, "memory_mb": 4096},
    ],
}  # fmt: skip


def inventory(maintenance: str = "{evacuate: power-off}") -> str:
    return f"""apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
hosts:
  - cluster: GPU-Cluster
    nvlink: disabled
    maintenance: {maintenance}
vms:
  - {{name: near-01, cpus: 4}}
  - {{name: far-01, cpus: 4}}
  - {{name: far-02, cpus: 4}}
"""


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


@pytest.fixture
def si(sim: Any) -> Iterator[Any]:
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def _env(sim: Any, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    # a held call is a request gpusim has not answered yet: room for the holds below, whatever the machine's load
    return {**env, **sim.vgpuctl_env(), "VGPUCTL_TIMEOUT": "300", **extra}


def _start(sim: Any, tmp_path: Path, *args: str, text: str, **env: str) -> subprocess.Popen[str]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(text)
    cmd = [sys.executable, "-m", "vgpuctl", *args, "-f", str(inv)]
    return subprocess.Popen(cmd, env=_env(sim, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(sim: Any, tmp_path: Path, *args: str, text: str, **env: str) -> tuple[int, str, str]:
    proc = _start(sim, tmp_path, *args, text=text, **env)
    out, err = proc.communicate()
    return proc.returncode, out, err


def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(WAIT_POLLS):
        if check():
            return
        time.sleep(POLL_S)
    raise AssertionError(f"never happened: {what}")


def _started(sim: Any, hold: int) -> bool:
    return bool(next(h for h in sim.holds() if h["id"] == hold)["started"])


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")] if path.exists() else []


def _finished(events: list[dict[str, Any]], subject: str, name: str) -> dict[str, Any] | None:
    return next((e for e in events if e["event"] == "finished" and e["subject"] == subject and e["name"] == name),
                None)  # fmt: skip


def _cpus(si: Any, name: str) -> int:
    view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
    try:
        return int(next(v for v in view.view if v.name == name).config.hardware.numCPU)
    finally:
        view.Destroy()


def test_vms_of_an_untouched_cluster_change_while_another_cluster_reboots(sim: Any, si: Any, tmp_path: Path) -> None:
    hold = sim.hold("RebootHost_Task", H1)  # the first wave stays in its reboot until the VMs are seen done
    events = tmp_path / "events.jsonl"
    proc = _start(sim, tmp_path, "apply", "--yes", "--events", str(events), text=inventory())
    try:
        _until(lambda: (_started(sim, hold) and all(_finished(_events(events), "vm", v) for v in ("far-01", "far-02")))
               or proc.poll() is not None, "far-01 and far-02 finish while esx-01's reboot is held")
        assert proc.poll() is None, proc.communicate()
        seen = _events(events)
        assert _finished(seen, "host", H1) is None and _finished(seen, "vm", "near-01") is None
        assert [_finished(seen, "vm", v)["outcome"] for v in ("far-01", "far-02")] == ["changed", "changed"]
    finally:
        sim.release(hold)
    out, err = proc.communicate()
    assert proc.returncode == 0, out + err
    seen = _events(events)
    host_done = _finished(seen, "host", H1)
    near = _finished(seen, "vm", "near-01")
    assert host_done is not None and near is not None and near["outcome"] == "changed"
    assert max(_finished(seen, "vm", v)["seq"] for v in ("far-01", "far-02")) < host_done["seq"] < near["seq"]
    assert [_cpus(si, v) for v in ("near-01", "far-01", "far-02")] == [4, 4, 4]


def _plan_seconds(sim: Any, tmp_path: Path) -> float:
    """How long a plan of this farm takes on this machine now (the deadline below leaves room for several)."""
    began = time.monotonic()
    code, out, err = _run(sim, tmp_path, "plan", text=inventory())
    assert code == 0, out + err
    return time.monotonic() - began


def test_no_wave_and_no_vm_starts_after_the_deadline(sim: Any, si: Any, tmp_path: Path) -> None:
    deadline = time.time() + max(20.0, 4 * _plan_seconds(sim, tmp_path))
    when = datetime.fromtimestamp(deadline, UTC).isoformat(timespec="seconds")
    hold = sim.hold("RebootHost_Task", H1)
    proc = _start(sim, tmp_path, "-o", "json", "apply", "--yes", "--deadline", when, text=inventory())
    try:
        _until(lambda: _started(sim, hold) or proc.poll() is not None, "esx-01's reboot starts before the deadline")
        assert proc.poll() is None, proc.communicate()
        _until(lambda: time.time() > deadline + 0.5, "the deadline passes while esx-01 reboots")
    finally:
        sim.release(hold)
    out, err = proc.communicate()
    assert proc.returncode == 1, out + err
    doc = json.loads(out)
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert hosts[H1]["status"] == "changed"  # in flight at the deadline: it finished
    assert [(hosts[h]["status"], hosts[h]["stopped_by"]) for h in (H2, H3)] == [("not-started", "deadline")] * 2
    vms = {v["vm"]: v for v in doc["vms"]}
    assert vms["far-01"]["status"] == vms["far-02"]["status"] == "changed"  # beside the hosts, before the deadline
    assert (vms["near-01"]["status"], vms["near-01"]["stopped_by"]) == ("not-started", "deadline")
    assert doc["stopped"] == [{"reason": "deadline", "message": doc["stopped"][0]["message"], "hosts": [H2, H3],
                               "vms": ["near-01"]}]  # fmt: skip
    assert doc["deadline"] and "passed" in doc["stopped"][0]["message"]
    assert "Stopped: the deadline" in err and f"hosts not started: {H2}, {H3}" in err and "near-01" in err
    assert "error: the deadline" in err
    assert not sim.host(H2)["inMaintenance"] and _cpus(si, "near-01") == 2


def test_max_failures_lets_hosts_start_up_to_the_limit_and_pauses_between_waves(sim: Any, tmp_path: Path) -> None:
    for host in (H1, H2):
        sim.arm_fault(host, "EnterMaintenanceMode_Task", "InvalidState")
    events = tmp_path / "events.jsonl"
    code, out, err = _run(sim, tmp_path, "-o", "json", "apply", "--yes", "--events", str(events),
                          text=inventory("{evacuate: power-off, max_failures: 2, pause_between_waves: 1s}"))
    assert code == 1, out + err
    doc = json.loads(out)
    hosts = {h["host"]: (h["status"], h["stopped_by"]) for h in doc["hosts"]}
    assert hosts == {H1: ("failed", None), H2: ("failed", None), H3: ("not-started", "max-failures")}
    assert [(s["reason"], s["hosts"]) for s in doc["stopped"]] == [("max-failures", [H3])]
    assert "maintenance.max_failures" in err and f"hosts not started: {H3}" in err
    pauses = [e["name"] for e in _events(events) if e["event"] == "step-start" and e["step"] == "pause"]
    assert pauses == [H2]  # before the second wave; the third never started
    assert {v["vm"]: v["status"] for v in doc["vms"]} == {"far-01": "changed", "far-02": "changed",
                                                          "near-01": "skipped"}  # fmt: skip


PLAN_FARM = {**FARM, "vms": [*FARM["vms"], {"name": "busy-01", "host": H1, "cpus": 4, "memory_mb": 8192,
                                             "memory_locked": True, "vgpus": ["grid_a100-20c"], "power_on": True}]}


def test_a_plan_with_an_impossible_host_change_shows_everything_and_changes_nothing(
    gpusim_factory: Callable[..., Any], tmp_path: Path
) -> None:
    sim = gpusim_factory(PLAN_FARM)
    text = inventory("{evacuate: refuse}")  # busy-01 runs on esx-01: its nvlink change cannot be made
    for extra in ((), ("--detailed-exitcode",)):
        code, out, err = _run(sim, tmp_path, "plan", *extra, text=text)
        assert code == 1, out + err
        lines = out.splitlines()
        first = lines.index(f"~ host {H1} nvlink: enabled -> disabled  (disruptive, reboot)")
        assert lines[first + 1].startswith(f"    x cannot be carried out: host {H1}: its nvlink change needs "
                                           "maintenance mode, and these VMs run there: busy-01")  # fmt: skip
        assert f"~ host {H2} nvlink: enabled -> disabled  (disruptive, reboot)" in lines  # no problem of its own
        assert not lines[lines.index(f"~ host {H2} nvlink: enabled -> disabled  (disruptive, reboot)") + 1].startswith(
            "    x")
        for vm in ("far-01", "far-02"):
            assert lines[lines.index(f"~ vm {vm}  (reconfigure -> power on)") + 1] == "    ~ numCPUs: 2 -> 4"
        assert "Disruptive steps:" in lines and lines[-1] == "Plan has 1 error; nothing can be applied."
        assert [line for line in err.splitlines() if line.startswith("error:")] == [
            "error: the plan has 1 problem (shown with it): nothing can be applied"], err
    code, out, err = _run(sim, tmp_path, "-o", "json", "plan", text=text)
    assert code == 1, err
    doc = json.loads(out)
    assert doc["kind"] == "plan" and sorted(v["vm"] for v in doc["vm_changes"]) == ["far-01", "far-02", "near-01"]
    assert [(p["subject"], p["name"]) for p in doc["problems"]] == [("host", H1)]
    assert "busy-01" in doc["problems"][0]["message"] and doc["summary"]["errors"] == 1
    assert doc["error"]["type"] == "PlanRefused" and doc["error"]["message"].endswith("nothing can be applied")
    assert [d["message"] for d in doc["error"]["details"]] == [doc["problems"][0]["message"]]
    saved = tmp_path / "tonight.plan"
    code, out, err = _run(sim, tmp_path, "plan", "--out", str(saved), text=text)
    assert code == 1 and not saved.exists(), out + err
    assert err.strip().splitlines()[-1] == (f"error: the plan has 1 problem (shown with it): {saved} was not saved "
                                            "(--out)")
    assert "x cannot be carried out" in out
    code, out, err = _run(sim, tmp_path, "apply", "--yes", text=text)
    assert code == 1, out + err
    assert "x cannot be carried out" in out and "~ vm far-01  (reconfigure -> power on)" in out
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        "error: the plan has 1 problem (shown with it): nothing was changed"]
    conn = sim.connect()
    try:
        assert [_cpus(conn, v) for v in ("far-01", "near-01")] == [2, 2]
    finally:
        Disconnect(conn)
    assert not any(sim.host(h)["inMaintenance"] for h in (H1, H2, H3))


# ------------------------------------------------------------------------------------------ --lock-timeout

LOCK_FARM = {"datacenter": "DC0", "reboot_seconds": 0.3, "clusters": [
    {"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB", "graphics_type": "sharedDirect"}]}
LOCK_INVENTORY = f"""apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
hosts:
  - name: {H1}
    nvlink: disabled
  - name: {H2}
    nvlink: disabled
"""


@pytest.fixture
def held(gpusim_factory: Callable[..., Any]) -> Iterator[tuple[Any, Lease]]:
    """gpusim with esx-01 held by another run (run id other-run-7) and down, as while that run reboots it."""
    sim = gpusim_factory(LOCK_FARM)
    settings = ConnectionSettings(sim.url, sim.username, sim.password, insecure=True)
    with open_session(settings) as session:
        observed = pipeline.observe(session, "DC0")
        lease = Lease(Fields(session), H1, observed.hosts[H1].moid, "other-run-7", ttl_s=600).acquire()
        sim.host_down(H1)
        try:
            yield sim, lease
        finally:
            if sim.host(H1)["down"]:
                sim.host_up(H1)
            lease.release()


def test_lock_timeout_waits_for_the_held_host_and_plans_it_as_it_is_then(held: tuple[Any, Lease],
                                                                          tmp_path: Path) -> None:
    sim, lease = held
    proc = _start(sim, tmp_path, "--lock-timeout", "10m", "apply", "--yes", text=LOCK_INVENTORY)
    assert proc.stderr is not None
    seen: list[str] = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if f"host {H1}: waiting for run other-run-7 by " in line:
                break
        assert seen and "since " in seen[-1] and "s more" in seen[-1], "".join(seen)
        time.sleep(2.5 * WAIT_POLL_S)  # two more of its polls, each of which would print a line of its own if broken
    finally:
        sim.host_up(H1)  # the other run is done: the host is back and let go
        lease.release()
    out, err = proc.communicate()
    every = "".join(seen) + err
    assert proc.returncode == 0, out + every
    assert every.count("waiting for run other-run-7") == 1, every
    assert f"~ host {H1} nvlink: enabled -> disabled" in out  # planned after the wait, from the host as it is
    assert "NVreg_NvLinkDisable=1" in sim.host(H1)["modules"]["nvidia"]["effective"], sim.host(H1)


def test_lock_timeout_from_the_environment_names_the_holder_when_it_runs_out(held: tuple[Any, Lease],
                                                                             tmp_path: Path) -> None:
    sim, _ = held
    code, out, err = _run(sim, tmp_path, "plan", text=LOCK_INVENTORY, VGPUCTL_LOCK_TIMEOUT="3s")
    assert code == 1, out + err
    assert err.count(f"host {H1}: waiting for run other-run-7") == 1, err
    problem = next((line for line in out.splitlines() if f"host {H1}: held by run other-run-7 of " in line), out + err)
    assert problem.startswith((f"Error: host {H1}:", f"    x cannot be carried out: host {H1}:")), out
    assert "held by run other-run-7 of " in problem and "waited 3 s for it (--lock-timeout)" in problem, problem
    assert f"~ host {H2} nvlink: enabled -> disabled" in out  # the rest of the plan is shown beside it
    code, out, err = _run(sim, tmp_path, "plan", "--host", H2, text=LOCK_INVENTORY, VGPUCTL_LOCK_TIMEOUT="3s")
    assert code == 0 and "waiting for" not in err, out + err  # nothing held in scope: no wait
