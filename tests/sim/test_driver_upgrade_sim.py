"""A driver upgrade of the vGPU Manager against gpusim, with real `vgpuctl` processes (the guest stage stood in for
by tests/sim/guest_stand_in.py, which sets the guest driver each VM reports where gpusim keeps it).

Three hosts on R550 (550.90.05) run vGPU VMs whose guest drivers (550.90.07) are two branches behind the wanted
R580 (580.65.05): the guests move first to R535, which both accept, the hosts go one at a time, each emptied by
vMotion onto the others, then the guests get R580's own driver. Checked from gpusim's state while the apply runs:
at most one host out of service at a time, no running VM ever on a pair NVIDIA does not list (gpusim refuses and
records those), no incident; a second plan has nothing to do. A saturated cluster is refused at plan time naming
the VMs; kill -9 in the middle of the second host resumes; faults (an unreachable depot, a host whose remediation
fails, one that does not come back) stop the window with the host's work recorded, and a rerun continues. The
same window on a cluster a vLCM image manages goes through gpusim's vSphere Automation API (depot import, draft,
commit, apply to one host). `capacity --drain` gives the evacuation answer without an inventory change.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim

from vgpuctl.preflight.privileges import OPERATIONS
from vgpuctl.releases import Fit, pair

pytestmark = pytest.mark.sim

HOSTS = ["esx-01.gpu.sim", "esx-02.gpu.sim", "esx-03.gpu.sim"]
VMS = ["train-01", "train-02", "train-03"]
OLD, NEW = "550.90.05", "580.65.05"
GUEST_OLD, INTERIM, TARGET = "550.90.07", "535.161.07", "580.65.06"
BUNDLE = "nvidia/NVD-AIE-800_580.65.05-1OEM.800.1.0.20613240.zip"
DEPOT = f"/vmfs/volumes/datastore1/{BUNDLE}"
STAND_IN = Path(__file__).with_name("guest_stand_in.py")
POLL_S = 0.05
WAIT_POLLS = 2400  # a bound on polls, not on time


def farm(vms_per_host: int = 1, reboot_s: float = 0.5, image: bool = False,
         users: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    vms = [{"name": f"train-{i * vms_per_host + j + 1:02d}", "host": h, "cpus": 4, "memory_mb": 8192,
            "firmware": "efi", "memory_locked": True, "vgpus": ["grid_a100-40c"], "power_on": True}
           for i, h in enumerate(HOSTS) for j in range(vms_per_host)]
    return {
        "datacenter": "DC0", "reboot_seconds": reboot_s, "users": users or [],
        "clusters": [{"name": "GPU-Cluster", "hosts": 3, "gpus_per_host": 2, "model": "A100-40GB",
                      "graphics_type": "sharedDirect"}],
        "vms": vms,
        "software": {
            "image_clusters": ["GPU-Cluster"] if image else [],
            "depots": [{"location": URL if image else DEPOT, "components": [
                {"name": "NVD-AIE-800", "version": f"{NEW}-1OEM.800.1.0.20613240", "vendor": "NVIDIA",
                 "display_name": "NVIDIA AI Enterprise vGPU driver for VMware ESX-8.0.0"}]}],
            "guest_drivers": {vm["name"]: GUEST_OLD for vm in vms},
        },
    }  # fmt: skip


SOURCE = f"{{datastore: datastore1, path: {BUNDLE}}}"
URL = f"https://depot.example.com/{BUNDLE}"


def inventory(vms: list[str], power: str = "restart", source: str = SOURCE) -> str:
    entries = "".join(f"  - name: {vm}\n    power: {power}\n    guest: {{group: trainers}}\n" for vm in vms)
    return f"""apiVersion: vgpuctl/v1
hosts:
  - cluster: GPU-Cluster
    vgpu_manager: {{version: {NEW}, source: {source}}}
    maintenance: {{evacuate: migrate, max_unavailable: 1, reboot_timeout_s: 20}}
vms:
{entries}guests:
  groups:
    trainers:
      roles: [vgpu_guest_driver]
      vars:
        vgpu_guest_driver_src: files/NVIDIA-Linux-x86_64-{TARGET}-grid.run
        vgpu_guest_driver_sha256: "{'a' * 64}"
        vgpu_guest_driver_interim_src: files/NVIDIA-Linux-x86_64-{INTERIM}-grid.run
        vgpu_guest_driver_interim_sha256: "{'b' * 64}"
"""


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any], request: pytest.FixtureRequest) -> Any:
    sim = gpusim_factory(farm(**getattr(request, "param", {})))
    si = sim.connect()
    try:
        si.content.setting.UpdateOptions(changedValue=[vim.option.OptionValue(key="vgpu.hotmigrate.enabled",
                                                                              value="true")])
    finally:
        Disconnect(si)
    for vm in sim.software()["guestDrivers"]:  # the guests run: VMware Tools report an address
        sim.set_guest(vm, ip=f"10.0.0.{int(vm[-2:]) + 10}")
    return sim


def env(sim: Any, tmp_path: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    out.update(sim.vgpuctl_env(tmp_path / "state"), GPUSIM_CONTROL=sim.control,
               GUEST_STAND_IN_LOG=str(tmp_path / "guest-stand-in.jsonl"), VGPUCTL_LEASE_TTL_S="10")
    return out


def start(sim: Any, tmp_path: Path, text: str, *args: str) -> subprocess.Popen[str]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(text)
    return subprocess.Popen([sys.executable, str(STAND_IN), *args, "-f", str(inv)], env=env(sim, tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run(sim: Any, tmp_path: Path, text: str, *args: str) -> tuple[int, str]:
    proc = start(sim, tmp_path, text, *args)
    out, _ = proc.communicate()
    return proc.returncode, out


class Watch:
    """Samples gpusim while an apply runs: hosts out of service at once, and running VMs on a pair NVIDIA's
    table excludes (`Fit.NO`: the farm's own start, 17.3's manager with 17.3's guest, is a pair the table cannot
    place, which gpusim runs)."""

    def __init__(self, sim: Any):
        self.sim, self.most_away, self.bad = sim, 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            hosts = {h["name"]: h for h in self.sim.hosts()}
            self.most_away = max(self.most_away, sum(1 for h in hosts.values()
                                                     if h["inMaintenance"] or h["connectionState"] != "connected"))
            drivers = self.sim.software()["guestDrivers"]
            for a in self.sim.assignments():
                manager = hosts[a["host"]]["access"]["vgpuManager"]
                if (guest := drivers.get(a["vmName"])) and pair(manager, guest).fit == Fit.NO:
                    self.bad.append((a["vmName"], a["host"], manager, guest))
            time.sleep(POLL_S)


def stand_in_log(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "guest-stand-in.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def converged(sim: Any) -> None:
    software = sim.software()
    assert {h: s["running"] for h, s in software["hosts"].items()} == dict.fromkeys(HOSTS, NEW)
    assert {h: s["installed"] for h, s in software["hosts"].items()} == dict.fromkeys(HOSTS, NEW)
    assert software["guestDrivers"] == dict.fromkeys(VMS, TARGET)
    assert software["incidents"] == []
    assert {a["vmName"] for a in sim.assignments()} == set(VMS)  # every VM runs its vGPU
    assert not any(h["inMaintenance"] for h in sim.hosts())


def test_guests_first_then_one_host_at_a_time_then_guests(sim: Any, tmp_path: Path) -> None:
    text = inventory(VMS)
    drains = [arg for h in HOSTS for arg in ("--drain", h)]
    code, out = run(sim, tmp_path, text, "capacity", *drains, "--detailed-exitcode")
    assert code == 0 and "every step can be emptied" in out, out
    code, out = run(sim, tmp_path, text, "plan")
    assert code == 0, out
    assert "Driver upgrade window, in this order:" in out
    for vm in VMS:
        assert f"~ vm {vm} guest driver: {GUEST_OLD} -> {INTERIM}" in out, out
        assert f"~ vm {vm} guest driver: {INTERIM} -> {TARGET}" in out, out
    for i, host in enumerate(HOSTS, start=1):
        assert f"{i}) host {host} vGPU Manager {OLD} -> {NEW}" in out, out
    with Watch(sim) as watch:
        code, out = run(sim, tmp_path, text, "apply", "--yes")
    assert code == 0, out
    assert watch.bad == [] and watch.most_away == 1
    log = stand_in_log(tmp_path)
    assert [sorted({m[1] for m in entry["moves"]}) for entry in log] == [["before"], ["after"]]
    assert log[0]["managers"] == dict.fromkeys(HOSTS, OLD)  # the guests moved before any host changed
    assert log[1]["managers"] == dict.fromkeys(HOSTS, NEW)  # and to their release after every host
    converged(sim)
    code, out = run(sim, tmp_path, text, "plan", "--detailed-exitcode")
    assert code == 0, out
    code, out = run(sim, tmp_path, text, "status", "--shell", "-o", "json")
    assert code == 0, out
    doc = json.loads(out[out.index("\n{") + 1:])  # after the warnings on stderr
    assert {h["host"]: h.get("vgpu_manager") for h in doc["hosts"]} == dict.fromkeys(HOSTS, NEW)
    assert {v["vm"]: v.get("guest_driver") for v in doc["vms"]} == dict.fromkeys(VMS, TARGET)
    code, out = run(sim, tmp_path, text, "export", "--cluster", "GPU-Cluster")
    assert code == 0, out
    assert f"vgpu_manager:\n      version: {NEW}\n" in out or f"vgpu_manager: {{version: {NEW}}}" in out, out


@pytest.mark.parametrize("sim", [{"vms_per_host": 2}], indirect=True)
def test_a_saturated_cluster_is_refused_at_plan_time_naming_the_vms(sim: Any, tmp_path: Path) -> None:
    vms = [f"train-{i:02d}" for i in range(1, 7)]  # two whole-GPU vGPUs on every host: no room anywhere
    for vm in vms:
        sim.set_guest_driver(vm, INTERIM)  # no guest move needed: only the room is missing
    code, out = run(sim, tmp_path, inventory(vms, power="keep"), "plan")
    assert code == 1, out
    assert ("host esx-01.gpu.sim: VM train-01 cannot migrate (needs 1 x grid_a100-40c free while esx-01.gpu.sim is "
            "in maintenance; the rest of cluster GPU-Cluster has 0)") in out, out
    assert "VM train-02 cannot migrate" in out
    code, out = run(sim, tmp_path, "apiVersion: vgpuctl/v1\n", "capacity", "--drain", HOSTS[0], "--drain", HOSTS[1],
                    "--detailed-exitcode")  # the same answer without an inventory change
    assert code == 2, out
    assert ("train-01 (grid_a100-40c) on esx-01.gpu.sim cannot move: needs 1 x grid_a100-40c free while "
            "esx-01.gpu.sim is in maintenance; the rest of cluster GPU-Cluster has 0") in out, out
    assert "running VM(s) cannot be moved: train-01, train-02, train-03, train-04" in out, out
    assert sim.software()["incidents"] == [] and all(h["access"]["vgpuManager"] == OLD for h in sim.hosts())


def test_kill_9_in_the_middle_of_the_second_host_resumes(sim: Any, tmp_path: Path) -> None:
    """Killed once gpusim has the second host's reboot (its vGPU Manager installed, the VMs moved off it), which
    then goes on by itself; the next apply finishes that host (out of maintenance) and the rest of the window."""
    text = inventory(VMS)
    hold = sim.hold("RebootHost_Task", HOSTS[1])
    proc = start(sim, tmp_path, text, "apply", "--yes")
    try:
        for _ in range(WAIT_POLLS):
            if next(h for h in sim.holds() if h["id"] == hold)["started"]:
                break
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(POLL_S)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        sim.release(hold)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sim.software()["hosts"][HOSTS[2]]["running"] == OLD  # the third host never left service
    for _ in range(WAIT_POLLS):  # the reboot the killed run asked for goes on by itself
        if sim.software()["hosts"][HOSTS[1]]["running"] == NEW and sim.host(HOSTS[1])["connectionState"] == "connected":
            break
        time.sleep(POLL_S)
    code, out = run(sim, tmp_path, text, "plan", "--detailed-exitcode")
    assert code == 2 and "unfinished work of run" in out, out
    code, out = run(sim, tmp_path, text, "apply", "--yes")
    assert code == 0, out
    converged(sim)
    code, out = run(sim, tmp_path, text, "plan", "--detailed-exitcode")
    assert code == 0, out


def _second_run_continues(sim: Any, tmp_path: Path, text: str) -> None:
    code, out = run(sim, tmp_path, text, "apply", "--yes")
    assert code == 0, out
    converged(sim)


def test_a_host_whose_remediation_fails_stops_the_window_and_a_rerun_continues(sim: Any, tmp_path: Path) -> None:
    text = inventory(VMS)
    sim.remediation_fault(HOSTS[0], "fail")
    code, out = run(sim, tmp_path, text, "apply", "--yes")
    assert code == 1, out
    assert "esx-01.gpu.sim: failed" in out and "the install failed" in out, out
    assert "the driver upgrade window stops before another host leaves" in out, out
    assert [h["inMaintenance"] for h in sim.hosts()] == [True, False, False]  # recorded, and no other host left
    assert all(s["running"] == OLD for s in sim.software()["hosts"].values())
    _second_run_continues(sim, tmp_path, text)


@pytest.mark.parametrize("sim", [{"reboot_s": 0.5}], indirect=True)
def test_a_host_that_does_not_come_back_stops_the_window(sim: Any, tmp_path: Path) -> None:
    text = inventory(VMS).replace("reboot_timeout_s: 20", "reboot_timeout_s: 3")
    sim.remediation_fault(HOSTS[0], "stay-down")
    code, out = run(sim, tmp_path, text, "apply", "--yes")
    assert code == 1, out
    assert "esx-01.gpu.sim: failed" in out, out
    assert all(sim.host(h)["access"]["vgpuManager"] == OLD for h in HOSTS[1:])
    sim.host_up(HOSTS[0])  # someone brings it back
    _second_run_continues(sim, tmp_path, text)


def test_an_unreachable_depot_is_a_plan_error(sim: Any, tmp_path: Path) -> None:
    sim.depot_reachable(DEPOT, False)
    code, out = run(sim, tmp_path, inventory(VMS), "plan")
    assert code == 1, out
    assert f"vgpu_manager: the depot {DEPOT} cannot be read: " in out and "Could not download" in out, out
    code, out = run(sim, tmp_path, inventory(VMS).replace(NEW + ",", "580.82.07,"), "plan")
    assert code == 1 and "does not hold NVIDIA's vGPU Manager 580.82.07" not in out  # (the depot is down)
    sim.depot_reachable(DEPOT, True)
    code, out = run(sim, tmp_path, inventory(VMS).replace(NEW + ",", "580.82.07,"), "plan")
    assert code == 1 and "does not hold NVIDIA's vGPU Manager 580.82.07 (it holds NVD-AIE-800" in out, out
    code, out = run(sim, tmp_path, inventory(VMS).replace(NEW + ",", "latest,"), "plan")
    assert code == 1 and "inv.yaml:4:" in out and "'latest' is not a driver version" in out, out


def test_powered_off_vms_do_not_start_on_an_incompatible_manager(sim: Any, tmp_path: Path) -> None:
    """gpusim's stand-in for the vGPU that does not load: vCenter's fault at power-on, and an incident."""
    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
        vm = next(v for v in view.view if v.name == "train-01")
        WaitForTask(vm.PowerOffVM_Task())
        sim.access(HOSTS[0], vgpu_manager=NEW)
        with pytest.raises(vim.fault.GenericVmConfigFault):
            WaitForTask(vm.PowerOnVM_Task())
    finally:
        Disconnect(si)
    [incident] = sim.software()["incidents"]
    assert (incident["vm"], incident["manager"], incident["guest"], incident["what"]) == (
        "train-01", NEW, GUEST_OLD, "refused")


def _rest_get(sim: Any, path: str) -> Any:
    """GET on gpusim's vSphere Automation API with a session of its own."""
    import base64
    import ssl
    import urllib.request
    from urllib.parse import urlsplit

    base, ctx = f"https://{urlsplit(sim.url).netloc}", ssl._create_unverified_context()
    auth = base64.b64encode(f"{sim.username}:{sim.password}".encode()).decode()
    login = urllib.request.Request(base + "/rest/com/vmware/cis/session", method="POST",
                                   headers={"Authorization": f"Basic {auth}"})
    with urllib.request.urlopen(login, context=ctx) as resp:
        token = json.load(resp)["value"]
    with urllib.request.urlopen(urllib.request.Request(base + path, headers={"vmware-api-session-id": token}),
                                context=ctx) as resp:
        return json.load(resp)


@pytest.mark.parametrize("sim", [{"image": True}], indirect=True)
def test_a_cluster_managed_by_an_image_upgrades_through_vlcm(sim: Any, tmp_path: Path) -> None:
    """The same window on a cluster a vLCM image manages: the depot imported into vCenter, the image's draft with
    NVIDIA's component at the version, its commit, and an apply limited to one host at a time."""
    text = inventory(VMS, source=f"{{url: {URL}}}")
    code, out = run(sim, tmp_path, text, "plan")
    assert code == 0, out
    for i, host in enumerate(HOSTS, start=1):
        assert f"{i}) host {host} vGPU Manager {OLD} -> {NEW}" in out, out
    with Watch(sim) as watch:
        code, out = run(sim, tmp_path, text, "apply", "--yes")
    assert code == 0, out
    assert watch.bad == [] and watch.most_away == 1
    converged(sim)
    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.ClusterComputeResource], True)
        moid = next(c for c in view.view if c.name == "GPU-Cluster")._moId
    finally:
        Disconnect(si)
    image = _rest_get(sim, f"/api/esx/settings/clusters/{moid}/software")
    assert image["components"]["NVD-AIE-800"]["version"].startswith(NEW), image
    assert [d["location"] for d in _rest_get(sim, "/api/esx/settings/depots/offline").values()] == [URL]
    compliance = _rest_get(sim, f"/api/esx/settings/clusters/{moid}/software/compliance")
    assert compliance["status"] == "COMPLIANT", compliance
    code, out = run(sim, tmp_path, text, "plan", "--detailed-exitcode")
    assert code == 0, out


VLCM = ["VcIntegrity.lifecycleSoftwareSpecification.Write", "VcIntegrity.lifecycleSoftwareRemediation.Write",
        "VcIntegrity.lifecycleHealth.Read", "VcIntegrity.lifecycleSettings.Write"]


def _all_but_vlcm() -> list[str]:
    return sorted({p for op in OPERATIONS for p in op.privileges} - set(VLCM))


@pytest.mark.parametrize("sim", [{"image": True, "users": [
    {"name": "no-vlcm", "password": "secret-1", "privileges": _all_but_vlcm()},
    {"name": "upgrader", "password": "secret-2", "privileges": _all_but_vlcm() + VLCM}]}], indirect=True)
def test_a_role_without_the_image_privileges_is_refused_at_plan_time(sim: Any, tmp_path: Path) -> None:
    """An upgrade through a cluster's vLCM image asks the image privileges on the cluster: a role without them is
    refused before anything changes, naming each and the cluster (gpusim answers HasPrivilegeOnEntities for the
    farm file's users from their lists); the role with them plans the window."""
    text = inventory(VMS, source=f"{{url: {URL.replace('.zip', '/index.xml')}}}")
    (tmp_path / "inv.yaml").write_text(text)
    for user, password, code in (("no-vlcm", "secret-1", 1), ("upgrader", "secret-2", 0)):
        environment = env(sim, tmp_path) | {"VGPUCTL_USERNAME": user, "VGPUCTL_PASSWORD": password}
        proc = subprocess.run([sys.executable, "-m", "vgpuctl", "plan", "-f", str(tmp_path / "inv.yaml")],
                              env=environment, capture_output=True, text=True)
        assert proc.returncode == code, proc.stdout + proc.stderr
        refused = [line for line in (proc.stdout + proc.stderr).splitlines()
                   if "privileges.host-vgpu_manager-beyond-host" in line]
        if code:
            assert refused and all(p in refused[0] for p in VLCM), proc.stdout + proc.stderr
            assert "on cluster GPU-Cluster" in refused[0] and "the root folder" in refused[0], refused
        else:
            assert not refused and "vGPU Manager 550.90.05 -> 580.65.05" in proc.stdout, proc.stdout
    assert not any(h["inMaintenance"] for h in sim.hosts())
