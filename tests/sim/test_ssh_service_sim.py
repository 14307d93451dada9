"""`ssh: {service: manage}` against gpusim: hosts whose SSH service (TSM-SSH) is stopped get it started through
the API for the run (plan reads the shell, apply changes the host) and stopped again afterwards: after a plan,
after an apply, after Ctrl-C, and by a later run when the run that started it died (its work record says so)."""

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
from vgpuctl.inventory import load_inventory_text
from vgpuctl.vsphere.session import ConnectionSettings

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


def test_plan_starts_ssh_for_the_run_and_stops_it_again(sim: Gpusim, env: None, tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    plain = _write(tmp_path, INVENTORY.replace("    ssh: {service: manage}\n", ""))
    without = CliRunner().invoke(app, ["plan", "-f", str(plain)])  # SSH left alone: the plan says what to do
    assert without.exit_code == 1
    assert "its SSH service (TSM-SSH) is stopped: set ssh: {service: manage}" in without.output
    result = CliRunner().invoke(app, ["plan", "-f", str(inv), "--detailed-exitcode"])
    assert result.exit_code == 2, result.output
    assert f"~ host {HOSTS[0]} scheduler" in result.stdout
    assert f"host {HOSTS[0]}: started its SSH service for this run (ssh.service: manage)" in result.output
    assert ssh_running(sim) == [False, False]  # put back
    assert record(sim, HOSTS[0]) == ""


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


def test_a_later_run_stops_what_a_dead_run_left_started(sim: Gpusim, env: None, tmp_path: Path) -> None:
    from vgpuctl.hosts.sshservice import SshServiceRun, start_for_run
    from vgpuctl.hosts.targets import specs_by_host
    from vgpuctl.vsphere.session import open_session

    inventory = load_inventory_text(INVENTORY, "inv.yaml")
    settings = ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)
    options = pipeline.RunOptions()
    with open_session(settings) as session:  # a run that starts SSH and dies before its end
        observed = pipeline.observe(session, None, inventory)
        state = pipeline.state_of(session, observed, options)
        start_for_run(session, observed, specs_by_host(inventory, observed), state, SshServiceRun())
    assert ssh_running(sim) == [True, True]
    assert '"ssh":{"running":false,"policy":"off"}' in record(sim, HOSTS[0])
    plain = tmp_path / "inv.yaml"
    plain.write_text(INVENTORY.replace("    scheduler: equal-share\n", ""))  # a later run: nothing to change
    result = CliRunner().invoke(app, ["plan", "-f", str(plain), "--detailed-exitcode"])
    assert result.exit_code == 0, result.output
    assert "an earlier run" in result.output and "did not stop it: this run stops it at its end" in result.output
    assert ssh_running(sim) == [False, False]
    assert all(record(sim, h) == "" for h in HOSTS)
