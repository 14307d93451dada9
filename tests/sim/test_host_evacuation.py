"""Host mode switches against gpusim that never strand a VM: a VM the new mode cannot run stops the plan before
anything is touched; a VM the inventory moves to a MIG profile is powered off, the host switched, the VM
re-profiled and powered on; the restore after `evacuate: power-off` powers on every VM it stopped (vGPU or
not) and goes on past a VM that fails. Checked with pyVmomi and the control endpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim
from typer.testing import CliRunner
from vimfind import find_object
from workstore import vcenter_record

from vgpuctl import pipeline
from vgpuctl.cli.main import app
from vgpuctl.domain import ChangeKind, Outcome
from vgpuctl.inventory import load_inventory_text
from vgpuctl.pipeline import RunOptions
from vgpuctl.vsphere.session import ConnectionSettings, open_session

pytestmark = pytest.mark.sim

H1 = "esx-01.gpu.sim"

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
            "vgpu_mode": "sameSize",
        }
    ],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [
        {"name": "train-01", "host": H1, "cpus": 8, "memory_mb": 16384, "firmware": "efi",
         "vgpus": ["grid_a100-40c"], "memory_locked": True},
        {"name": "web-01", "host": H1, "cpus": 2, "memory_mb": 4096},
        {"name": "web-02", "host": H1, "cpus": 2, "memory_mb": 4096},
    ],
}  # fmt: skip


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    sim = gpusim_factory(FARM)
    monkeypatch.setenv("VGPUCTL_ESXI_HOSTS", sim.env["GPUSIM_SSH_HOSTS"])
    monkeypatch.setenv("VGPUCTL_ESXI_KNOWN_HOSTS", sim.env["GPUSIM_SSH_KNOWN_HOSTS"])
    monkeypatch.setenv("VGPUCTL_ESXI_PASSWORD", sim.password)
    monkeypatch.delenv("GPUSIM_SSH_HOSTS", raising=False)
    conn = sim.connect()
    try:  # through the API, so that gpusim admits the vGPU
        for name in ("train-01", "web-01", "web-02"):
            WaitForTask(find_object(conn, name).PowerOnVM_Task())
    finally:
        Disconnect(conn)
    return sim


@pytest.fixture
def si(sim: Any) -> Iterator[Any]:
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def _power(si: Any, name: str) -> str:
    return str(find_object(si, name).runtime.powerState)


def _vgpus(si: Any, name: str) -> list[str]:
    return [
        d.backing.vgpu
        for d in find_object(si, name).config.hardware.device
        if isinstance(d, vim.vm.device.VirtualPCIPassthrough) and hasattr(d.backing, "vgpu")
    ]


def _env(sim: Any, tmp_path: Path) -> dict[str, str]:
    return {
        "VGPUCTL_URL": sim.url,
        "VGPUCTL_USERNAME": sim.username,
        "VGPUCTL_PASSWORD": sim.password,
        "VGPUCTL_INSECURE": "1",
        "VGPUCTL_STATE_DIR": str(tmp_path / "state"),
    }


def _vgpuctl(sim: Any, tmp_path: Path, *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=_env(sim, tmp_path))


MIG_H1 = f"apiVersion: vgpuctl/v1\nhosts:\n  - name: {H1}\n    gpus: [{{select: all, mode: mig}}]\n"


def test_a_vm_the_new_mode_cannot_run_stops_the_plan_and_nothing_is_touched(sim: Any, si: Any, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(MIG_H1 + "    maintenance: {evacuate: power-off}\n")
    plan = _vgpuctl(sim, tmp_path, "plan", "-f", str(inv), "--detailed-exitcode")
    assert plan.exit_code == 1, plan.output
    assert f"host {H1}: VM train-01 uses grid_a100-40c, which the host will not offer" in plan.output
    assert "grid_a100-3-20c" in plan.output  # what it would offer
    applied = _vgpuctl(sim, tmp_path, "apply", "-f", str(inv), "--yes")
    assert applied.exit_code == 1, applied.output
    assert _power(si, "train-01") == "poweredOn" and _power(si, "web-01") == "poweredOn"
    host = sim.host(H1)
    assert not host["inMaintenance"] and not any(g["migPending"] for g in host["gpus"])


def test_mig_switch_with_the_vm_re_profiled_ends_with_it_running_on_mig(sim: Any, si: Any, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        MIG_H1 + "    maintenance: {evacuate: power-off}\n"
        "vms:\n  - name: train-01\n    vgpus: {profile: grid_a100-3-20c}\n    power: restart\n"
    )
    plan = _vgpuctl(sim, tmp_path, "plan", "-f", str(inv), "--detailed-exitcode")
    assert plan.exit_code == 2, plan.output
    out = plan.output
    assert out.index(f"~ host {H1} evacuate train-01") < out.index(f"~ host {H1} mig") < out.index("~ vm train-01")
    assert f"~ host {H1} evacuate web-01" in out and f"~ host {H1} evacuate web-02" in out  # counted, all three

    applied = _vgpuctl(sim, tmp_path, "apply", "-f", str(inv), "--yes")
    assert applied.exit_code == 0, applied.output
    assert _power(si, "train-01") == "poweredOn"
    assert _vgpus(si, "train-01") == ["grid_a100-3-20c"]
    assert any(a["vmName"] == "train-01" and a["gi"] == "3g.20gb" for a in sim.assignments())
    assert _power(si, "web-01") == "poweredOn" and _power(si, "web-02") == "poweredOn"
    assert _vgpuctl(sim, tmp_path, "plan", "-f", str(inv), "--detailed-exitcode").exit_code == 0


def test_restore_goes_on_past_a_vm_that_fails_and_says_which(sim: Any, si: Any, tmp_path: Path) -> None:
    inv = load_inventory_text(
        f"apiVersion: vgpuctl/v1\nhosts:\n  - name: {H1}\n    nvlink: disabled\n"
        "    maintenance: {evacuate: power-off}\n"
    )

    def options() -> RunOptions:  # a run's own: its work store is the hosts' records as its observe read them
        return RunOptions(poll_s=0.05, shutdown_timeout_s=5)

    sim.arm_fault("web-01", "PowerOnVM_Task", "SystemError")
    settings = ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)
    with open_session(settings) as session:
        observed = pipeline.observe(session, None, inv)
        first = options()
        plan = pipeline.plan(session, observed, inv, first)
        assert not plan.errors, plan.errors
        evacuated = sorted(c.target for c in plan.host_changes if c.kind == ChangeKind.EVACUATE)
        assert evacuated == ["train-01", "web-01", "web-02"]
        result = pipeline.apply_hosts(session, observed, inv.hosts, plan.host_changes, first)
    (outcome,) = result.hosts
    assert (outcome.status, outcome.phase, outcome.error_type) == (Outcome.FAILED, "power-on", "RestoreError")
    assert sorted(outcome.powered_off) == ["train-01", "web-01", "web-02"]
    assert sorted(outcome.powered_on) == ["train-01", "web-02"]  # the one after the failure too
    assert list(outcome.not_restored) == ["web-01"] and "SystemError" in outcome.describe()
    assert _power(si, "web-01") == "poweredOff" and _power(si, "web-02") == "poweredOn"
    assert result.done_hosts == {H1}  # its GPU configuration is done: VMs may be planned against it
    record = vcenter_record(si, H1)
    assert record is not None and [v["name"] for v in record.vms] == ["web-01"]  # a re-run retries it

    with open_session(settings) as session:
        observed = pipeline.observe(session, None, inv)
        second = options()
        again = pipeline.plan(session, observed, inv, second)
        assert [(c.kind, c.target) for c in again.host_changes] == [(ChangeKind.RESUME, "host")]
        result = pipeline.apply_hosts(session, observed, inv.hosts, again.host_changes, second)
    assert result.hosts[0].status == Outcome.CHANGED and result.hosts[0].powered_on == ["web-01"]
    assert _power(si, "web-01") == "poweredOn"


H2 = "esx-02.gpu.sim"
MIGRATE_H1 = (
    f"apiVersion: vgpuctl/v1\nhosts:\n  - name: {H1}\n    nvlink: disabled\n    maintenance: {{evacuate: migrate}}\n"
)


def _host_of(si: Any, name: str) -> str:
    return str(find_object(si, name).runtime.host.name)


def test_migrate_moves_the_vms_to_the_other_host_with_their_vgpus(sim: Any, si: Any, tmp_path: Path) -> None:
    si.content.setting.UpdateOptions(changedValue=[vim.option.OptionValue(key="vgpu.hotmigrate.enabled", value="true")])
    inv = tmp_path / "inv.yaml"
    inv.write_text(MIGRATE_H1)
    plan = _vgpuctl(sim, tmp_path, "plan", "-f", str(inv), "--detailed-exitcode")
    assert plan.exit_code == 2, plan.output
    for vm in ("train-01", "web-01", "web-02"):
        assert f"~ host {H1} evacuate {vm}: poweredOn" in plan.output and f"-> migrate to {H2}" in plan.output
    applied = _vgpuctl(sim, tmp_path, "apply", "-f", str(inv), "--yes")
    assert applied.exit_code == 0, applied.output
    for vm in ("train-01", "web-01", "web-02"):
        assert _host_of(si, vm) == H2 and _power(si, vm) == "poweredOn", vm
    assigned = [a for a in sim.assignments() if a["vmName"] == "train-01"]
    assert [a["host"] for a in assigned] == [H2]  # its vGPU moved with it
    assert sim.host(H1)["modules"]["nvidia"]["configured"].endswith("NVreg_NvLinkDisable=1")


def test_migrate_without_vgpu_migration_refuses_an_unlisted_vgpu_vm(sim: Any, si: Any, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(MIGRATE_H1)
    plan = _vgpuctl(sim, tmp_path, "plan", "-f", str(inv))
    assert plan.exit_code == 1, plan.output
    assert f"host {H1}: VM train-01 cannot migrate (vCenter does not allow vMotion of running vGPU VMs" in plan.output
    assert _host_of(si, "train-01") == H1 and _power(si, "train-01") == "poweredOn"
    assert not sim.host(H1)["inMaintenance"]
