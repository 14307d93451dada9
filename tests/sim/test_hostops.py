"""Host GPU operations against gpusim over real SOAP and real SSH (host keys verified against the
known_hosts file gpusim writes): MIG on and off, NVLink off and on, the scheduler, evacuation (refuse and
power-off with restore), and failures injected through the control endpoint (reboot timeout, SSH failure,
verification mismatch). Results are checked with pyVmomi and the control endpoint, not
only through vgpuctl's own readers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kinds
import pytest
import typer
from hostfacts import gpu_states, read_shell
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim
from vimfind import find_object
from workstore import vcenter_record

from vgpuctl import pipeline
from vgpuctl.cli import host as host_cli
from vgpuctl.cli.common import GlobalOptions, report_error
from vgpuctl.cli.main import app
from vgpuctl.domain import ChangeKind, Outcome
from vgpuctl.errors import SshError, SshHostKeyError
from vgpuctl.export import export_inventory
from vgpuctl.hosts.apply import pending_changes
from vgpuctl.hosts.facts import open_shell, shell_runner
from vgpuctl.hosts.status import collect_host_facts
from vgpuctl.inventory import load_inventory_text
from vgpuctl.model import Plan
from vgpuctl.pipeline import RunOptions
from vgpuctl.reports.explain import explain_host
from vgpuctl.reports.host import host_status
from vgpuctl.reports.plan import render_plan_text
from vgpuctl.settings.base import HostPlan
from vgpuctl.settings.ecc import ECC
from vgpuctl.settings.facts import nvlink_peers
from vgpuctl.vsphere.observe import observe
from vgpuctl.vsphere.session import ConnectionSettings, open_session

pytestmark = pytest.mark.sim

H1, H2, H3 = "esx-01.gpu.sim", "esx-02.gpu.sim", "esx-03.gpu.sim"
GPU0, GPU1 = "0000:3b:00.0", "0000:3c:00.0"

FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [
        {
            "name": "GPU-Cluster",
            "hosts": 2,
            "gpus_per_host": 2,
            "model": "A100-40GB",
            "nvlink": "pairs",
            "graphics_type": "sharedDirect",
            "assignment_policy": "performance",
            "vgpu_mode": "sameSize",
            "nvidia_options": "NVreg_EnableMSI=1",
        },
        {"name": "H100", "hosts": 1, "gpus_per_host": 2, "model": "H100-80GB", "graphics_type": "sharedDirect"},
    ],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [
        {
            "name": "train-01",
            "host": H1,
            "cpus": 8,
            "memory_mb": 16384,
            "firmware": "efi",
            "vgpus": ["grid_a100-40c"],
            "memory_locked": True,
        },  # powered on by the fixture (admission)
        {
            "name": "mig-01",
            "host": H2,
            "cpus": 8,
            "memory_mb": 16384,
            "firmware": "efi",
            "vgpus": ["grid_a100-3-20c"],
            "memory_locked": True,
        },
    ],
}


class Steps:
    """Progress recorder; `hooks` run when a host reaches a step (to inject faults at the right moment)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        self.hooks: dict[str, Callable[[str], None]] = {}

    def host_step(self, host: str, step: str, detail: str | None) -> None:
        self.seen.append((host, step, detail))
        hook = self.hooks.pop(step, None)
        if hook is not None:
            hook(host)

    def steps(self, host: str) -> list[str]:
        return [s for h, s, _ in self.seen if h == host]


class Farm:
    def __init__(self, sim: Any, tmp: Path):
        self.sim = sim
        self.state_dir = tmp / "state"  # VGPUCTL_STATE_DIR of the CLI runs (their run logs)
        self.settings = ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)

    def inventory(self, hosts_yaml: str) -> Any:
        return load_inventory_text(f"apiVersion: vgpuctl/v1\nhosts:\n{hosts_yaml}")

    def plan(self, hosts_yaml: str) -> HostPlan:
        inv = self.inventory(hosts_yaml)
        with open_session(self.settings) as session:
            return pipeline.plan_hosts(session, observe(session), inv.hosts, self.options())

    def options(self, **fields: Any) -> RunOptions:
        """A run's options: work records in vCenter, on the hosts (the one work store), read with each run's
        observe."""
        return RunOptions(poll_s=0.05, shutdown_timeout_s=5, **fields)

    def apply(self, hosts_yaml: str, steps: Steps | None = None, keep_going: bool = False) -> tuple[Any, Any]:
        inv = self.inventory(hosts_yaml)
        options = self.options(keep_going=keep_going)
        with open_session(self.settings) as session:
            observed = observe(session)
            plan = pipeline.plan_hosts(session, observed, inv.hosts, options)
            assert not plan.errors, plan.errors
            result = pipeline.apply_hosts(session, observed, inv.hosts, plan.changes, options, progress=steps)
        return plan, result

    def shell(self, host: str) -> Any:
        return open_shell(host)

    def facts(self, host: str) -> Any:
        with self.shell(host) as sh:
            return read_shell(host, shell_runner(sh))

    def host(self, name: str) -> dict[str, Any]:
        return self.sim.host(name)


@pytest.fixture
def farm(
    request: pytest.FixtureRequest, gpusim_factory: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Farm:
    sim = gpusim_factory({**FARM, **getattr(request, "param", {})})  # indirect params override farm keys
    monkeypatch.setenv("VGPUCTL_ESXI_HOSTS", sim.env["GPUSIM_SSH_HOSTS"])
    monkeypatch.setenv("VGPUCTL_ESXI_KNOWN_HOSTS", sim.env["GPUSIM_SSH_KNOWN_HOSTS"])
    monkeypatch.setenv("VGPUCTL_ESXI_PASSWORD", sim.password)
    monkeypatch.delenv("GPUSIM_SSH_HOSTS", raising=False)
    # Powered on through the API after start so that gpusim admits its vGPU (farm-file power_on does not).
    conn = sim.connect()
    try:
        assert _power_on_fault(conn, "train-01") is None
    finally:
        Disconnect(conn)
    return Farm(sim, tmp_path)


@pytest.fixture
def si(farm: Farm) -> Iterator[Any]:
    conn = farm.sim.connect()
    yield conn
    Disconnect(conn)


def _power_on_fault(si: Any, vm_name: str) -> str | None:
    """Power the VM on; the vim fault type name when it fails, None when it runs."""
    vm = find_object(si, vm_name, vim.VirtualMachine)
    try:
        WaitForTask(vm.PowerOnVM_Task())
    except vim.fault.VimFault as fault:
        return type(fault).__name__
    return None


def _power_off(si: Any, vm_name: str) -> None:
    vm = find_object(si, vm_name, vim.VirtualMachine)
    if vm.runtime.powerState != "poweredOff":
        WaitForTask(vm.PowerOffVM_Task())


def _gpus(farm: Farm, host: str) -> dict[str, dict[str, Any]]:
    return {g["pciId"]: g for g in farm.host(host)["gpus"]}


# --------------------------------------------------------------------------------------------- MIG


def test_mig_on_and_back_changes_offered_profiles_and_admission(farm: Farm, si: Any) -> None:
    host = find_object(si, H2, vim.HostSystem)
    assert "grid_a100-3-20c" not in host.config.sharedPassthruGpuTypes
    assert _power_on_fault(si, "mig-01") is not None  # no GPU offers the MIG profile yet

    steps = Steps()
    plan, result = farm.apply(f"  - name: {H2}\n    gpus: [{{select: all, mode: mig}}]\n", steps)
    assert [(c.kind, c.target, c.needs_reboot) for c in plan.changes] == [
        (kinds.MIG, GPU0, True),
        (kinds.MIG, GPU1, True),
    ]
    outcome = result.hosts[0]
    assert outcome.status == Outcome.CHANGED, outcome.describe()
    assert outcome.rebooted
    assert steps.steps(H2)[:3] == ["enter-maintenance", "mig", "mig"]
    assert "wait-reconnect" in steps.steps(H2) and steps.steps(H2)[-2:] == ["exit-maintenance", "changed"]

    gpus = _gpus(farm, H2)
    assert all(g["migCurrent"] and g["vgpuMode"] == "multiInstanceGpu" for g in gpus.values())
    assert not farm.host(H2)["inMaintenance"]
    host = find_object(si, H2, vim.HostSystem)
    assert "grid_a100-3-20c" in host.config.sharedPassthruGpuTypes
    assert "grid_a100-40c" not in host.config.sharedPassthruGpuTypes
    facts = farm.facts(H2)
    assert all(g.mig_current and g.mig_pending for g in gpu_states(facts).values())
    assert _power_on_fault(si, "mig-01") is None  # the MIG-backed VM runs after the switch

    assert farm.plan(f"  - name: {H2}\n    gpus: [{{select: all, mode: mig}}]\n").changes == []  # converged

    _power_off(si, "mig-01")
    plan, result = farm.apply(f"  - name: {H2}\n    gpus: [{{select: all, mode: time-sliced}}]\n")
    assert result.hosts[0].status == Outcome.CHANGED, result.hosts[0].describe()
    assert not any(g["migCurrent"] for g in _gpus(farm, H2).values())
    host = find_object(si, H2, vim.HostSystem)
    assert "grid_a100-40c" in host.config.sharedPassthruGpuTypes
    assert "grid_a100-3-20c" not in host.config.sharedPassthruGpuTypes


def test_hopper_switches_mig_without_a_reboot(farm: Farm, si: Any) -> None:
    steps = Steps()
    plan, result = farm.apply(f"  - name: {H3}\n    gpus: [{{select: all, mode: mig}}]\n", steps)
    assert [(c.kind, c.needs_reboot) for c in plan.changes] == [(kinds.MIG, False), (kinds.MIG, False)]
    outcome = result.hosts[0]
    assert outcome.status == Outcome.CHANGED and not outcome.rebooted, outcome.describe()
    assert "reboot" not in steps.steps(H3)
    assert all(g["migCurrent"] for g in _gpus(farm, H3).values())
    assert "grid_h100-3-40c" in find_object(si, H3, vim.HostSystem).config.sharedPassthruGpuTypes


# --------------------------------------------------------------------------------------------- NVLink


def _device_groups(si: Any, host_name: str) -> list[str]:
    host = find_object(si, host_name, vim.HostSystem)
    target = host.parent.environmentBrowser.QueryConfigTarget(host)
    return sorted(g.deviceGroupName for g in target.vendorDeviceGroupInfo or [])


def test_nvlink_off_and_on_keeps_other_module_options(farm: Farm, si: Any) -> None:
    assert _device_groups(si, H2)
    before = farm.facts(H2)
    assert all(g.nvlink_active == g.nvlink_links > 0 for g in gpu_states(before).values())
    assert nvlink_peers(before)[GPU0] == [GPU1]

    plan, result = farm.apply(f"  - name: {H2}\n    nvlink: disabled\n")
    assert [(c.kind, c.old, c.new, c.needs_reboot) for c in plan.changes] == [
        (kinds.NVLINK, "enabled", "disabled", True)
    ]
    assert result.hosts[0].status == Outcome.CHANGED, result.hosts[0].describe()
    modules = farm.host(H2)["modules"]["nvidia"]
    assert modules["configured"] == modules["effective"] == "NVreg_EnableMSI=1 NVreg_NvLinkDisable=1"
    after = farm.facts(H2)
    assert all(g.nvlink_active == 0 for g in gpu_states(after).values())
    assert nvlink_peers(after)[GPU0] == []
    assert _device_groups(si, H2) == []
    assert _device_groups(si, H1)  # the other host is untouched

    _, result = farm.apply(f"  - name: {H2}\n    nvlink: enabled\n")
    assert result.hosts[0].status == Outcome.CHANGED, result.hosts[0].describe()
    assert farm.host(H2)["modules"]["nvidia"]["effective"] == "NVreg_EnableMSI=1"
    assert nvlink_peers(farm.facts(H2))[GPU0] == [GPU1]
    assert _device_groups(si, H2)


# --------------------------------------------------------------------------------------------- ECC memory


def test_ecc_off_on_one_gpu_reboots_the_host_and_then_plans_no_change(farm: Farm, si: Any) -> None:
    entry = f"  - name: {H3}\n    gpus: [{{select: all, ecc: 'on'}}, {{select: '{GPU0}', ecc: 'off'}}]\n"
    steps = Steps()
    plan, result = farm.apply(entry, steps)
    assert [(c.kind, c.target, c.old, c.new, c.needs_reboot) for c in plan.changes] == [
        (kinds.ECC, GPU0, "on", "off", True)
    ]
    outcome = result.hosts[0]
    assert outcome.status == Outcome.CHANGED and outcome.rebooted, outcome.describe()
    assert steps.steps(H3).index("ecc") < steps.steps(H3).index("reboot")
    gpus = {g["pciId"]: g for g in farm.host(H3)["gpus"]}  # gpusim's own state, not vgpuctl's reading
    assert (gpus[GPU0]["eccCurrent"], gpus[GPU0]["eccPending"], gpus[GPU1]["eccCurrent"]) == (False, False, True)
    assert farm.plan(entry).changes == []  # verified, and planned again to nothing
    facts = farm.facts(H3)
    assert gpu_states(facts)[GPU0].ecc_current is False
    inv = farm.inventory(entry)
    with open_session(farm.settings) as session:
        observed = observe(session)
    report = explain_host(H3, inv, observed, Plan(), {H3: facts})
    by_key = {v.setting: v for v in report.settings}
    assert (by_key[f"gpus[{GPU0}].ecc"].vcenter, by_key[f"gpus[{GPU0}].ecc"].differs) == ("off", False)
    assert by_key["gpus[all].ecc"].vcenter == f"{GPU0}: off, {GPU1}: on"
    text = export_inventory(observed, {H3: facts})
    exported = load_inventory_text(text)
    (h3,) = [h for h in exported.hosts if h.name == H3]
    eccs = {g.select: ECC.of(g) for g in h3.gpus if ECC.of(g) is not None}
    assert eccs == {GPU0: "off", GPU1: "on"}, text


def test_ecc_needs_the_esxi_shell(farm: Farm, monkeypatch: pytest.MonkeyPatch) -> None:
    farm.sim.request("POST", "/ssh/faults", {"host": H3, "kind": "refuse"})
    plan = farm.plan(f"  - name: {H3}\n    gpus: [{{select: all, ecc: 'off'}}]\n")
    assert any("ecc changes need ESXi SSH" in e for e in plan.errors), plan.errors


# --------------------------------------------------------------------------------------------- scheduler


def test_scheduler_policy_with_time_slice(farm: Farm) -> None:
    plan, result = farm.apply(f"  - name: {H2}\n    scheduler: {{policy: fixed-share, timeslice_ms: 24}}\n")
    assert [(c.kind, c.old, c.new) for c in plan.changes] == [
        (kinds.SCHEDULER, "best-effort", "fixed-share (24 ms)")
    ]
    assert result.hosts[0].status == Outcome.CHANGED, result.hosts[0].describe()
    host = farm.host(H2)
    assert host["modules"]["nvidia"]["effective"] == "NVreg_EnableMSI=1 NVreg_RegistryDwords=RmPVMRL=0x00180013"
    assert {(g["scheduler"]["policy"], g["scheduler"]["timesliceMs"]) for g in host["gpus"]} == {("fixed-share", 24)}

    _, result = farm.apply(f"  - name: {H2}\n    scheduler: best-effort\n")
    assert result.hosts[0].status == Outcome.CHANGED
    assert farm.host(H2)["modules"]["nvidia"]["effective"] == "NVreg_EnableMSI=1"


def test_fixed_share_on_mixed_size_is_refused_before_anything_changes(farm: Farm) -> None:
    plan = farm.plan(f"  - name: {H2}\n    gpus: [{{select: all, vgpu_mode: mixedSize}}]\n    scheduler: fixed-share\n")
    assert any("not supported on mixed-size GPUs" in e for e in plan.errors)
    assert farm.host(H2)["modules"]["nvidia"]["configured"] == "NVreg_EnableMSI=1"


# --------------------------------------------------------------------------------------------- evacuation


def test_refuse_lists_running_vgpu_vms_and_changes_nothing(farm: Farm) -> None:
    spec = f"  - name: {H1}\n    nvlink: disabled\n"
    plan = farm.plan(spec)  # the plan refuses, naming the running VMs
    assert any(e.startswith(f"host {H1}: its nvlink change needs maintenance mode, and these VMs run there: "
                            "train-01 (grid_a100-40c)") for e in plan.errors), plan.errors
    # apply still refuses a running VM its plan did not see (one started after the plan), changing nothing
    inv = farm.inventory(spec)
    options = farm.options()
    with open_session(farm.settings) as session:
        observed = observe(session)
        result = pipeline.apply_hosts(session, observed, inv.hosts, plan.changes, options)
    outcome = result.hosts[0]
    assert outcome.status == Outcome.FAILED
    assert outcome.error_type == "RefusedError"
    assert "train-01 (grid_a100-40c)" in outcome.message
    assert outcome.in_maintenance is False
    host = farm.host(H1)
    assert not host["inMaintenance"] and host["modules"]["nvidia"]["configured"] == "NVreg_EnableMSI=1"
    assert any(a["vmName"] == "train-01" for a in farm.sim.assignments())


def test_power_off_evacuation_restores_the_vms(farm: Farm, si: Any) -> None:
    spec = f"  - name: {H1}\n    nvlink: disabled\n    maintenance: {{evacuate: power-off}}\n"
    steps = Steps()
    seen_record: list[Any] = []
    steps.hooks["reboot"] = lambda host: seen_record.append(vcenter_record(si, host))
    _, result = farm.apply(spec, steps)
    outcome = result.hosts[0]
    assert outcome.status == Outcome.CHANGED, outcome.describe()
    assert outcome.powered_off == ["train-01"] and outcome.powered_on == ["train-01"]
    assert seen_record and seen_record[0].vms[0]["name"] == "train-01"  # persisted while the host was down
    assert vcenter_record(si, H1) is None
    assert find_object(si, "train-01", vim.VirtualMachine).runtime.powerState == "poweredOn"
    assert any(a["vmName"] == "train-01" for a in farm.sim.assignments())
    assert farm.host(H1)["modules"]["nvidia"]["effective"] == "NVreg_EnableMSI=1 NVreg_NvLinkDisable=1"


# --------------------------------------------------------------------------------------------- failures


# a reboot long enough that the host is surely still down when the first reconnect poll takes it off the network
@pytest.mark.parametrize("farm", [{"reboot_seconds": 2}], indirect=True)
def test_reboot_timeout_leaves_host_in_maintenance_and_rerun_continues(farm: Farm, si: Any) -> None:
    spec = (
        "  - cluster: GPU-Cluster\n    nvlink: disabled\n    maintenance: {evacuate: power-off, reboot_timeout_s: 1}\n"
    )
    steps = Steps()
    steps.hooks["wait-reconnect"] = lambda host: farm.sim.host_down(host)
    _, result = farm.apply(spec, steps)
    first, second = result.hosts
    assert (first.host, first.status, first.phase) == (H1, Outcome.FAILED, "wait-reconnect")
    assert first.error_type == "RebootTimeout"
    assert first.in_maintenance and first.vms_to_restore == ["train-01"]
    assert "left in maintenance mode" in first.describe() and "run apply again" in first.describe()
    assert (second.host, second.status) == (H2, Outcome.NOT_STARTED)  # no further host after a failure
    assert "nvlink" not in farm.host(H2)["modules"]["nvidia"]["configured"].lower()

    farm.sim.host_up(H1)
    for _ in range(200):  # the simulated reboot ends on its own clock
        if farm.host(H1)["connectionState"] == "connected":
            break
        time.sleep(0.05)
    spec = spec.replace("reboot_timeout_s: 1", "reboot_timeout_s: 60")
    plan = farm.plan(spec)
    assert [(c.host, c.kind) for c in plan.changes] == [(H1, ChangeKind.RESUME), (H2, kinds.NVLINK)]
    _, result = farm.apply(spec)
    assert [o.status for o in result.hosts] == [Outcome.CHANGED, Outcome.CHANGED], [o.describe() for o in result.hosts]
    assert result.hosts[0].powered_on == ["train-01"]
    assert not farm.host(H1)["inMaintenance"]
    assert find_object(si, "train-01", vim.VirtualMachine).runtime.powerState == "poweredOn"
    assert farm.plan(spec).changes == []


def test_ssh_failure_stops_the_host_and_keep_going_continues(farm: Farm) -> None:
    spec = (
        f"  - cluster: GPU-Cluster\n    gpus: [{{select: '{GPU1}', mode: mig}}]\n"
        "    maintenance: {evacuate: power-off}\n"
    )
    farm.sim.request(
        "POST",
        "/ssh/faults",
        {"host": H1, "kind": "fail", "match": "-mig", "stderr": "Unable to talk to the GPU", "exit": 3},
    )
    _, result = farm.apply(spec, keep_going=True)
    first, second = result.hosts
    assert (first.status, first.phase, first.error_type) == (Outcome.FAILED, "mig", "SshError")
    assert "Unable to talk to the GPU" in first.message
    assert first.in_maintenance
    assert second.status == Outcome.CHANGED, second.describe()
    assert farm.host(H1)["inMaintenance"]

    farm.sim.request("DELETE", "/ssh/faults")
    _, result = farm.apply(spec)
    assert [o.status for o in result.hosts] == [Outcome.CHANGED], [o.describe() for o in result.hosts]
    assert _gpus(farm, H1)[GPU1]["migCurrent"] and not _gpus(farm, H1)[GPU0]["migCurrent"]
    assert not farm.host(H1)["inMaintenance"]
    assert result.hosts[0].powered_on == ["train-01"]  # recorded by the failed run, restored by this one


def test_verification_mismatch_is_reported(farm: Farm) -> None:
    spec = f"  - name: {H2}\n    gpus: [{{select: {GPU0}, mode: mig}}]\n"
    farm.sim.reboot_fault(H2, ["mig"])  # the next reboot leaves the pending MIG mode unapplied
    _, result = farm.apply(spec)
    outcome = result.hosts[0]
    assert (outcome.status, outcome.phase, outcome.error_type) == (Outcome.FAILED, "verify", "VerificationError")
    assert f"mig {GPU0} is time-sliced, expected mig" in outcome.message
    assert outcome.in_maintenance
    host = farm.host(H2)
    assert host["inMaintenance"] and "rebootFault" not in host  # the fault was consumed by that reboot
    assert not _gpus(farm, H2)[GPU0]["migCurrent"]

    _, result = farm.apply(spec)
    assert result.hosts[0].status == Outcome.CHANGED, result.hosts[0].describe()
    assert _gpus(farm, H2)[GPU0]["migCurrent"]
    assert not farm.host(H2)["inMaintenance"]


def test_unknown_host_key_is_rejected(farm: Farm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    monkeypatch.setenv("VGPUCTL_ESXI_KNOWN_HOSTS", str(known))
    plan = farm.plan(f"  - name: {H2}\n    nvlink: disabled\n")  # refused, naming why: nothing is changed
    assert any(e.startswith(f"host {H2}: nvlink changes need ESXi SSH, which failed: SSH host key of") and
               "not in known_hosts" in e for e in plan.errors), plan.errors
    assert not farm.host(H2)["inMaintenance"]
    with pytest.raises(SshHostKeyError):  # the shell itself still refuses the unknown key
        farm.facts(H2)


# --------------------------------------------------------------------------------------------- CLI


def _cli(farm: Farm, args: list[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """`vgpuctl -o ... host ARGS` in-process, with the host commands under a root like main.py's."""
    from typer.testing import CliRunner

    monkeypatch.setenv("VGPUCTL_PASSWORD", farm.sim.password)
    monkeypatch.setenv("VGPUCTL_STATE_DIR", str(farm.state_dir))
    root = typer.Typer()

    @root.callback()
    def main(ctx: typer.Context, output: str = "text") -> None:
        ctx.obj = GlobalOptions(url=farm.sim.url, username=farm.sim.username, insecure=True, output=output)

    root.add_typer(host_cli.app, name="host")
    result = CliRunner().invoke(root, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        code = report_error(result.exception, None)
        return code, result.output + str(result.exception)
    return result.exit_code, result.output


def test_cli_host_show_and_mig(farm: Farm, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = _cli(farm, ["host", "show", H1], monkeypatch)
    assert code == 0, out
    assert f"{GPU0} NVIDIA A100-PCIE-40GB: sharedDirect, sameSize, MIG off, NVLink 12/12 up to {GPU1}" in out
    assert "VMs: train-01" in out and "nvidia module options: NVreg_EnableMSI=1" in out

    code, out = _cli(farm, ["host", "mig", H2, "--gpu", GPU1, "--enable"], monkeypatch)
    assert code != 0 and "rerun with --yes" in out  # asks first; without a terminal it refuses
    assert not _gpus(farm, H2)[GPU1]["migPending"]

    code, out = _cli(farm, ["host", "mig", H2, "--gpu", GPU1, "--enable", "--yes"], monkeypatch)
    assert code == 0, out
    assert f"~ mig {GPU1}: time-sliced -> mig" in out
    assert "enters maintenance mode" in out and "reboots" in out
    assert _gpus(farm, H2)[GPU1]["migCurrent"] and not _gpus(farm, H2)[GPU0]["migCurrent"]

    code, out = _cli(farm, ["--output", "json", "host", "show", H2], monkeypatch)
    doc = json.loads(out[out.index("{") :])
    rows = {g["gpu"]: g for g in doc["gpus"]}
    assert (rows[GPU1]["mig_current"], rows[GPU1]["mig_pending"]) == (True, True)
    assert rows[GPU0]["mig_current"] is False


def test_cli_host_errors_are_one_line(farm: Farm, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = _cli(farm, ["host", "nvlink", "esx-99.gpu.sim", "--disable", "--yes"], monkeypatch)
    assert code == 1 and "host 'esx-99.gpu.sim' not found" in out
    code, out = _cli(farm, ["host", "mig", H1, "--gpu", "0000:af:00.0", "--enable", "--yes"], monkeypatch)
    assert code == 1 and "GPU 0000:af:00.0 is not on this host" in out
    code, out = _cli(farm, ["host", "scheduler", H1, "--policy", "best-effort", "--timeslice-ms", "3"], monkeypatch)
    assert code == 1 and "--timeslice-ms applies to equal-share and fixed-share only" in out
    code, out = _cli(farm, ["host", "nvlink", H1, "--disable", "--yes"], monkeypatch)  # train-01 runs there
    assert code == 1 and "train-01 (grid_a100-40c)" in out and "evacuate" in out
    assert not farm.host(H1)["inMaintenance"]


# --------------------------------------------------------------------------------------------- with VMs


def test_mig_backed_vm_waits_for_the_host_switch(farm: Farm, si: Any) -> None:
    inv = farm.inventory(
        f"  - name: {H2}\n    gpus: [{{select: all, mode: mig}}]\n"
        "vms:\n  - name: mig-01\n    vgpus: {profile: grid_a100-3-20c}\n    power: restart\n"
    )
    options = farm.options()
    with open_session(farm.settings) as session:
        observed = observe(session)
        hplan = pipeline.plan_hosts(session, observed, inv.hosts, options)
        before = pipeline.replan_vms(inv, observed, hplan.changes)
        mig01 = next(c for c in before.changes if c.vm == "mig-01")
        assert mig01.power_on and mig01.depends_on_hosts == [H2]
        early = pipeline.apply_vms(session, before, observed, options)  # the host change has not run: it waits
        assert [(o.vm, o.status) for o in early.vms] == [("mig-01", "skipped")]
        assert find_object(si, "mig-01", vim.VirtualMachine).runtime.powerState == "poweredOff"

        result = pipeline.apply_hosts(session, observed, inv.hosts, hplan.changes, options)
        assert result.changed == [H2]
        after = pipeline.replan_vms(inv, observe(session), pending_changes(hplan.changes, result))
        assert not after.errors and after.host_changes == []
        late = pipeline.apply_vms(session, after, observe(session), options)
        assert [(o.vm, o.status) for o in late.vms] == [("mig-01", "changed")], late.to_dict()
    assert find_object(si, "mig-01", vim.VirtualMachine).runtime.powerState == "poweredOn"
    assert any(a["vmName"] == "mig-01" and a["gi"] == "3g.20gb" for a in farm.sim.assignments())


def test_status_rows_per_gpu(farm: Farm) -> None:
    farm.sim.request("POST", "/ssh/faults", {"host": H3, "kind": "refuse"})
    with open_session(farm.settings) as session:
        observed = observe(session)
        facts = collect_host_facts(session, observed)
    rows = {name: host_status(observed.hosts[name], f, f.shell_error) for name, f in facts.items()}
    assert sorted(rows) == [H1, H2, H3]
    h1 = rows[H1]
    assert (h1.nvlink, h1.scheduler) == ("enabled", "best-effort")
    gpu = h1.gpus[0]
    assert (gpu.mig_current, gpu.mig_pending, gpu.nvlink_active) == (False, False, 12)
    assert gpu.vms == ["train-01"]
    assert rows[H3].shell_error and rows[H3].gpus[0].mig_current is None


def test_wrong_ssh_credentials_fail_before_anything_changes(farm: Farm, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VGPUCTL_ESXI_PASSWORD", "not-the-password")
    monkeypatch.setenv("VGPUCTL_ESXI_KEY_FILE", "")
    plan = farm.plan(f"  - name: {H2}\n    gpus: [{{select: all, mode: mig}}]\n")
    assert any("mig changes need ESXi SSH, which failed: SSH authentication failed" in e for e in plan.errors), plan
    with pytest.raises(SshError, match="authentication failed"):  # the one host asked for: its shell's error
        farm.facts(H2)
    assert not farm.host(H2)["inMaintenance"] and not _gpus(farm, H2)[GPU0]["migPending"]


class Scripted(Steps):
    """Steps whose `on` actions fire for a given (host, step, detail) the first time it is reported."""

    def __init__(self) -> None:
        super().__init__()
        self.on: dict[tuple[str, str, str | None], Callable[[], None]] = {}

    def host_step(self, host: str, step: str, detail: str | None) -> None:
        super().host_step(host, step, detail)
        action = self.on.pop((host, step, detail), None)
        if action is not None:
            action()


def test_verify_waits_for_ssh_to_come_back_after_the_reboot(farm: Farm) -> None:
    steps = Scripted()
    steps.on[(H2, "reboot", None)] = lambda: farm.sim.request("POST", "/ssh/faults", {"host": H2, "kind": "refuse"})
    steps.on[(H2, "verify", "waiting for SSH")] = lambda: farm.sim.request("DELETE", "/ssh/faults")
    _, result = farm.apply(f"  - name: {H2}\n    nvlink: disabled\n", steps)
    assert result.hosts[0].status == Outcome.CHANGED, result.hosts[0].describe()
    assert (H2, "verify", "waiting for SSH") in steps.seen


def test_max_unavailable_changes_hosts_at_the_same_time(farm: Farm) -> None:
    steps = Scripted()
    both: list[bool] = []

    def wait_for_the_other() -> None:  # H1 holds its reboot until H2 reached its own: only if they run together
        for _ in range(200):
            if (H2, "reboot", None) in steps.seen:
                both.append(True)
                return
            time.sleep(0.05)
        both.append(False)

    steps.on[(H1, "reboot", None)] = wait_for_the_other
    spec = (
        "  - cluster: GPU-Cluster\n    nvlink: disabled\n    maintenance: {evacuate: power-off, max_unavailable: 2}\n"
    )
    _, result = farm.apply(spec, steps)
    assert [o.status for o in result.hosts] == [Outcome.CHANGED, Outcome.CHANGED], [o.describe() for o in result.hosts]
    assert both == [True]


def test_plan_and_apply_with_hosts_first_converges(farm: Farm, si: Any) -> None:
    inv = farm.inventory(
        f"  - name: {H2}\n    gpus: [{{select: all, mode: mig}}]\n    scheduler: equal-share\n"
        "vms:\n  - name: mig-01\n    vgpus: {profile: grid_a100-3-20c}\n    power: restart\n"
    )
    options = farm.options()
    with open_session(farm.settings) as session:
        observed = pipeline.observe(session, None, inv)
        plan = pipeline.plan(session, observed, inv, options)
        assert not plan.errors, plan.errors
        assert [(c.kind, c.target) for c in plan.host_changes] == [
            (kinds.MIG, GPU0),
            (kinds.MIG, GPU1),
            (kinds.SCHEDULER, "host"),
        ]
        assert [(c.vm, c.depends_on_hosts) for c in plan.changes] == [("mig-01", [H2])]
        text = render_plan_text(plan)
        assert text.index(f"host {H2} mig") < text.index("mig-01")

        done = pipeline.apply(session, inv, plan, observed, options)
        assert done.hosts is not None and done.hosts.changed == [H2], [o.describe() for o in done.hosts.hosts]
        assert [(o.vm, o.status) for o in done.vms.vms] == [("mig-01", "changed")], done.vms.to_dict()
        again = pipeline.plan(session, pipeline.observe(session, None, inv), inv, options)
        assert again.is_empty and not again.errors, render_plan_text(again)
    assert find_object(si, "mig-01", vim.VirtualMachine).runtime.powerState == "poweredOn"


def test_vms_after_host_changes_are_planned_with_the_nvlink_sets(farm: Farm, si: Any) -> None:
    """The observe after the host changes reads NVLink sets like the first one: an NVLink VM on a host that
    was just changed is planned and placed on its NVLink pair."""
    inv = farm.inventory(
        f"  - name: {H2}\n    scheduler: equal-share\n"
        "vms:\n  - name: nv-01\n    template: ubuntu-22.04-ml\n"
        f"    host: {H2}\n    vgpus: {{profile: grid_a100-40c, count: 2}}\n    nvlink: required\n"
    )
    options = farm.options()
    with open_session(farm.settings) as session:
        observed = pipeline.observe(session, None, inv)
        assert {g.nvlink_set for g in observed.hosts[H2].gpus} == {0}
        plan = pipeline.plan(session, observed, inv, options)
        assert not plan.errors, plan.errors
        assert [c.vm for c in plan.changes] == ["nv-01"] and plan.changes[0].depends_on_hosts == [H2]
        done = pipeline.apply(session, inv, plan, observed, options)
        assert not done.vm_errors, done.vm_errors
        assert [(o.vm, o.status) for o in done.vms.vms] == [("nv-01", "changed")], done.vms.to_dict()
        groups = [d.group for d in done.vm_plan.changes[0].devices]
        assert groups == [0, 0]
    vm = find_object(si, "nv-01", vim.VirtualMachine)
    assert vm.runtime.powerState == "poweredOn"
    assert len({d.deviceGroupInfo.groupInstanceKey for d in vm.config.hardware.device if d.deviceGroupInfo}) == 1


def test_trust_on_first_use_records_the_key_and_says_so(
    farm: Farm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    monkeypatch.setenv("VGPUCTL_ESXI_KNOWN_HOSTS", str(known))
    code, out = _cli(farm, ["host", "show", H2], monkeypatch)
    assert code == 1 and "not in known_hosts" in out
    code, out = _cli(farm, ["host", "show", H2, "--ssh-trust-on-first-use"], monkeypatch)
    assert code == 0, out
    assert f"trusted the new SSH host key of {H2}" in out
    assert H2 in known.read_text()
    code, out = _cli(farm, ["host", "show", H2], monkeypatch)  # now known: no flag needed
    assert code == 0 and "trusted" not in out


# --------------------------------------------------------------------------------------------- vgpuctl plan/apply


def test_cli_plan_and_apply_run_host_changes_first(farm: Farm, si: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    env = {
        "VGPUCTL_URL": farm.sim.url,
        "VGPUCTL_USERNAME": farm.sim.username,
        "VGPUCTL_PASSWORD": farm.sim.password,
        "VGPUCTL_INSECURE": "1",
        "VGPUCTL_STATE_DIR": str(farm.state_dir),
    }
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        f"apiVersion: vgpuctl/v1\nhosts:\n  - name: {H2}\n    gpus: [{{select: all, mode: mig}}]\n"
        "vms:\n  - name: mig-01\n    vgpus: {profile: grid_a100-3-20c}\n    power: restart\n"
    )

    def vgpuctl(*args: str) -> Any:
        return CliRunner().invoke(app, list(args), env=env)

    plan = vgpuctl("plan", "-f", str(inv), "--detailed-exitcode")
    assert plan.exit_code == 2, plan.output
    assert plan.output.index(f"~ host {H2} mig {GPU0}: time-sliced -> mig") < plan.output.index("mig-01")
    assert "(disruptive, reboot)" in plan.output
    assert f"after the host changes on {H2}" in plan.output

    applied = vgpuctl("apply", "-f", str(inv), "--yes")
    assert applied.exit_code == 0, applied.output
    assert "Hosts: 1 changed, 0 failed, 0 not started." in applied.output
    assert find_object(si, "mig-01", vim.VirtualMachine).runtime.powerState == "poweredOn"
    assert vgpuctl("plan", "-f", str(inv), "--detailed-exitcode").exit_code == 0

    status = vgpuctl("-o", "json", "status")
    assert status.exit_code == 0, status.output
    doc = json.loads(status.stdout)
    h2 = next(h for h in doc["hosts"] if h["host"] == H2)
    assert {g["mig"] for g in h2["gpus"]} == {"on"} and h2["nvlink"] == "enabled"


def test_cli_apply_reports_a_failed_host_and_keep_going(farm: Farm, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    env = {
        "VGPUCTL_URL": farm.sim.url,
        "VGPUCTL_USERNAME": farm.sim.username,
        "VGPUCTL_PASSWORD": farm.sim.password,
        "VGPUCTL_INSECURE": "1",
        "VGPUCTL_STATE_DIR": str(farm.state_dir),
    }
    refuse = tmp_path / "refuse.yaml"
    refuse.write_text("apiVersion: vgpuctl/v1\nhosts:\n  - cluster: GPU-Cluster\n    nvlink: disabled\n")
    planned = CliRunner().invoke(app, ["apply", "-f", str(refuse), "--yes"], env=env)
    assert planned.exit_code == 1  # evacuate: refuse with running VMs: the plan refuses, nothing changes
    assert "these VMs run there: train-01 (grid_a100-40c)" in planned.output
    assert "maintenance.evacuate is refuse: stop them, set evacuate: power-off or migrate" in planned.output
    assert not farm.host(H1)["inMaintenance"] and f"{H1}: failed" not in planned.output
    # the `host` command sets the evacuation with its flag: the refusal names the flag, not the inventory key
    flagged = CliRunner().invoke(app, ["host", "nvlink", H1, "--disable", "--evacuate", "refuse", "--yes"], env=env)
    assert flagged.exit_code == 1 and "these VMs run there: train-01 (grid_a100-40c)" in flagged.output
    assert "--evacuate is refuse: stop them, or run again with --evacuate power-off or --evacuate migrate" in \
        flagged.output and "maintenance.evacuate" not in flagged.output
    inv = tmp_path / "inv.yaml"
    inv.write_text(refuse.read_text() + "    maintenance: {evacuate: power-off}\n")
    farm.sim.arm_fault(H1, "EnterMaintenanceMode_Task", "InvalidState", count=2)  # this time apply itself fails
    result = CliRunner().invoke(app, ["apply", "-f", str(inv), "--yes"], env=env)
    assert result.exit_code == 1
    assert f"{H1}: failed at enter-maintenance" in result.output and "InvalidState" in result.output
    assert f"{H2}: not started" in result.output and "apply failed on host(s)" in result.output
    result = CliRunner().invoke(app, ["apply", "-f", str(inv), "--yes", "--keep-going"], env=env)
    assert result.exit_code == 1
    assert f"{H2}: changed" in result.output
    assert farm.host(H2)["modules"]["nvidia"]["effective"] == "NVreg_EnableMSI=1 NVreg_NvLinkDisable=1"
