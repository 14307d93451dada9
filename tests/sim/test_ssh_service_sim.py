"""`ssh: {service: manage}` against gpusim: hosts whose SSH service (TSM-SSH) is stopped get it started through
the API for an apply, under the host's lease, and stopped again afterwards: after the apply, after Ctrl-C, and by
a later apply when the run that started it died (its work record says so). A plan starts and stops nothing and
writes nothing: it says what apply will do, and leaves the SSH service a running apply uses alone."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from gpusim import Gpusim
from typer.testing import CliRunner

from vgpuctl import pipeline
from vgpuctl.cli.main import app
from vgpuctl.hosts.sshservice import SshServiceRun, start_for_run
from vgpuctl.hosts.targets import specs_by_host
from vgpuctl.inventory import load_inventory_text
from vgpuctl.vsphere.session import ConnectionSettings, open_session

pytestmark = pytest.mark.sim

HOSTS = ["esx-01.gpu.sim", "esx-02.gpu.sim"]
FARM = {"clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB",
                      "graphics_type": "sharedDirect", "ssh": {"stopped": True}}]}
INVENTORY = """\
apiVersion: vgpuctl/v1
hosts:
  - cluster: GPU-Cluster
    scheduler: equal-share
    ssh: {service: manage}
"""


@pytest.fixture
def sim(gpusim_factory: Any) -> Gpusim:
    return gpusim_factory(FARM)


@pytest.fixture
def env(sim: Gpusim, monkeypatch: pytest.MonkeyPatch, no_vgpuctl_env: None) -> None:
    for key, value in {**sim.vgpuctl_env(), "SSH_AUTH_SOCK": ""}.items():
        monkeypatch.setenv(key, value)


def ssh_running(sim: Gpusim) -> list[bool]:
    return [sim.host(h)["access"]["sshRunning"] for h in HOSTS]


def record(sim: Gpusim, host: str) -> str:
    si = sim.connect()
    try:
        from pyVmomi import vim

        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.HostSystem], True)
        obj = next(h for h in view.view if h.name == host)
        fields = {f.key: f.name for f in si.content.customFieldsManager.field or []}
        return next((str(v.value) for v in obj.customValue if fields.get(v.key) == "vgpuctl.work"), "")
    finally:
        from pyVim.connect import Disconnect

        Disconnect(si)


def test_plan_starts_no_ssh_service_and_says_apply_will(sim: Gpusim, env: None, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    plain = _write(tmp_path, INVENTORY.replace("    ssh: {service: manage}\n", ""))
    without = CliRunner().invoke(app, ["plan", "-f", str(plain)])  # SSH left alone: the plan says what to do
    assert without.exit_code == 1
    assert "its SSH service (TSM-SSH) is stopped: set ssh: {service: manage}" in without.output
    before = sim.state()
    result = CliRunner().invoke(app, ["plan", "-f", str(inv), "--detailed-exitcode"])
    assert result.exit_code == 2, result.output
    assert f"~ host {HOSTS[0]} scheduler" in result.stdout
    assert (f"host {HOSTS[0]}: its SSH service (TSM-SSH) is stopped: apply starts it for its run (ssh.service: "
            "manage), reads the ESXi shell then and stops it again at its end") in result.output  # fmt: skip
    assert sim.state() == before  # nothing started, stopped or written
    assert ssh_running(sim) == [False, False]
    assert record(sim, HOSTS[0]) == ""


def test_plan_leaves_the_ssh_service_a_running_apply_uses_alone(sim: Gpusim, env: None, tmp_path: Path) -> None:
    """An apply that started the SSH services holds the hosts' leases; a plan meanwhile neither takes over its
    records nor stops its services."""
    with _started_by_a_live_run(sim) as run:
        records = [record(sim, h) for h in HOSTS]
        assert ssh_running(sim) == [True, True] and all('"ssh":{"running":false' in r for r in records)
        inv = tmp_path / "inv.yaml"
        inv.write_text(INVENTORY)
        result = CliRunner().invoke(app, ["plan", "-f", str(inv)])
        assert result.exit_code == 0, result.output
        assert "did not stop it" not in result.output  # that run is alive: its services are its own
        assert ssh_running(sim) == [True, True]
        assert [record(sim, h) for h in HOSTS] == records
        assert sorted(run.leases) == HOSTS


@contextmanager
def _started_by_a_live_run(sim: Gpusim) -> Any:
    """A run (this process) that started the hosts' SSH services for its apply and holds their leases."""
    inventory = load_inventory_text(INVENTORY, "inv.yaml")
    settings = ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)
    with open_session(settings) as session:
        observed = pipeline.observe(session, None, inventory)
        state = pipeline.state_of(session, observed, pipeline.RunOptions())
        run = SshServiceRun()
        start_for_run(session, observed, specs_by_host(inventory, observed), state, run)
        try:
            yield run
        finally:
            for lease in run.leases.values():  # let go without stopping: what a killed run leaves, once its
                lease.release()  # leases are gone


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plain.yaml"
    path.write_text(text)
    return path


def test_apply_changes_the_hosts_over_ssh_and_stops_it_again(sim: Gpusim, env: None, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    result = CliRunner().invoke(app, ["apply", "-f", str(inv), "--yes"])
    assert result.exit_code == 0, result.output
    assert all("RmPVMRL" in sim.host(h)["modules"]["nvidia"]["effective"] for h in HOSTS)
    assert ssh_running(sim) == [False, False]
    assert all(record(sim, h) == "" for h in HOSTS)


class _Interrupting:
    """Hooks that send SIGINT (Ctrl-C) once the first host starts its work."""

    def __init__(self) -> None:
        self.sent = False

    def planned(self, planned: Any) -> None:
        pass

    def confirm(self, planned: Any) -> None:
        pass

    @contextmanager
    def apply_progress(self, planned: Any) -> Any:
        hooks = self

        class Progress:
            def vm_step(self, vm: str, step: str, percent: Any = None) -> None:
                pass

            def host_step(self, host: str, step: str, detail: Any) -> None:
                if not hooks.sent:
                    hooks.sent = True
                    os.kill(os.getpid(), signal.SIGINT)

            def vms_planned(self, vms: Any) -> None:
                pass

        yield Progress()

    def note(self, message: str) -> None:
        pass


def test_ctrl_c_stops_ssh_again(sim: Gpusim, env: None) -> None:
    inventory = load_inventory_text(INVENTORY, "inv.yaml")
    settings = ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)
    hooks = _Interrupting()
    outcome = pipeline.run(settings, inventory, pipeline.RunOptions(poll_s=0.05, shutdown_timeout_s=5), hooks=hooks)
    assert hooks.sent and outcome.interrupted
    assert ssh_running(sim) == [False, False]


def test_a_later_apply_stops_what_a_dead_run_left_started(sim: Gpusim, env: None, tmp_path: Path) -> None:
    with _started_by_a_live_run(sim):
        pass  # it dies: its leases go (a process gone is judged dead at once), its records and services stay
    assert ssh_running(sim) == [True, True]
    assert '"ssh":{"running":false,"policy":"off"}' in record(sim, HOSTS[0])
    plain = tmp_path / "inv.yaml"
    plain.write_text(INVENTORY.replace("    scheduler: equal-share\n", ""))  # a later run: nothing to change
    before = sim.state()
    result = CliRunner().invoke(app, ["plan", "-f", str(plain), "--detailed-exitcode"])
    assert result.exit_code == 0, result.output
    assert f"host {HOSTS[0]}: run " in result.output and "did not stop it: apply stops it at its end" in result.output
    assert sim.state() == before  # the plan only says so
    result = CliRunner().invoke(app, ["apply", "-f", str(plain), "--yes"])
    assert result.exit_code == 0, result.output
    assert "did not stop it: apply stops it at its end" in result.output
    assert ssh_running(sim) == [False, False]
    assert all(record(sim, h) == "" for h in HOSTS)
    assert not [f for f in sim.state()["folders"] if " vgpuctl-lease-" in f]


def test_a_saved_plan_that_leaves_the_shell_to_apply_applies(sim: Gpusim, env: None, tmp_path: Path) -> None:
    """plan --out reads no shell of a host whose SSH service is stopped; apply PLANFILE starts it, reads the shell,
    makes the same plan again and applies it."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    saved = tmp_path / "tonight.plan"
    planned = CliRunner().invoke(app, ["plan", "-f", str(inv), "--out", str(saved)])
    assert planned.exit_code == 0 and ssh_running(sim) == [False, False], planned.output
    applied = CliRunner().invoke(app, ["apply", str(saved), "--yes"])
    assert applied.exit_code == 0, applied.output
    assert all("RmPVMRL" in sim.host(h)["modules"]["nvidia"]["effective"] for h in HOSTS)
    assert ssh_running(sim) == [False, False]
    assert all(record(sim, h) == "" for h in HOSTS)
