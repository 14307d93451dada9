"""Scoped plan and apply against gpusim (--vm, --host, a saved scoped plan): a VM pulls in the host change it
waits for (shown as pulled in), everything out of scope is listed and left untouched (checked on the farm
through the control endpoint and pyVmomi), a saved plan keeps its scope and is shown as `plan` showed it, and
the event stream of a scoped apply (a file beside -o json, or stdout) validates against its schema."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim
from typer.testing import CliRunner
from vimfind import find_object

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

H1, H2, H3 = "esx-01.gpu.sim", "esx-02.gpu.sim", "esx-03.gpu.sim"
EVENT_SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schemas" / "event.schema.json").read_text())

FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [{"name": "GPU-Cluster", "hosts": 3, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "pairs",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "vms": [
        {"name": "train-01", "host": H1, "cpus": 4, "memory_mb": 8192, "firmware": "efi",
         "vgpus": ["grid_a100-40c"], "memory_locked": True},
        {"name": "infer-01", "host": H2, "cpus": 2, "memory_mb": 4096, "firmware": "efi", "memory_locked": True},
        {"name": "web-01", "host": H3, "cpus": 2, "memory_mb": 4096, "firmware": "efi", "memory_locked": True},
    ],
}  # fmt: skip

INVENTORY = """\
apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
hosts:
  - cluster: GPU-Cluster
    gpus: [{select: all, mode: mig}]
    maintenance: {evacuate: power-off}
vms:
  - {name: train-01, vgpus: {profile: grid_a100-3-20c}, power: restart}
  - {name: infer-01, vgpus: {profile: grid_a100-3-20c}, power: off}
  - {name: web-01, vgpus: {profile: grid_a100-3-20c}, power: off}
"""


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, no_vgpuctl_env: None) -> Any:
    sim = gpusim_factory(FARM)
    monkeypatch.setenv("VGPUCTL_ESXI_HOSTS", sim.env["GPUSIM_SSH_HOSTS"])
    monkeypatch.setenv("VGPUCTL_ESXI_KNOWN_HOSTS", sim.env["GPUSIM_SSH_KNOWN_HOSTS"])
    monkeypatch.setenv("VGPUCTL_ESXI_PASSWORD", sim.password)
    conn = sim.connect()
    try:
        WaitForTask(find_object(conn, "train-01").PowerOnVM_Task())
    finally:
        Disconnect(conn)
    return sim


@pytest.fixture
def si(sim: Any) -> Iterator[Any]:
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def _vgpus(si: Any, name: str) -> list[str]:
    return [d.backing.vgpu for d in find_object(si, name).config.hardware.device
            if isinstance(d, vim.vm.device.VirtualPCIPassthrough) and hasattr(d.backing, "vgpu")]


def _mig(sim: Any, host: str) -> list[bool]:
    return [bool(g["migCurrent"] or g["migPending"]) for g in sim.host(host)["gpus"]]


def vgpuctl(sim: Any, tmp_path: Path, *args: str) -> Any:
    env = {"VGPUCTL_URL": sim.url, "VGPUCTL_USERNAME": sim.username, "VGPUCTL_PASSWORD": sim.password,
           "VGPUCTL_INSECURE": "1", "VGPUCTL_STATE_DIR": str(tmp_path / "state")}
    return CliRunner().invoke(app, list(args), env=env)


def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    return path


def test_a_vm_pulls_in_its_host_and_the_rest_stays_untouched(sim: Any, si: Any, tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    planned = vgpuctl(sim, tmp_path, "-o", "json", "plan", "-f", str(inv), "--vm", "train-01")
    assert planned.exit_code == 0, planned.output
    doc = json.loads(planned.stdout)
    assert {h["host"] for h in doc["host_changes"]} == {H1}
    assert all(h["pulled_in_by"] == ["train-01"] for h in doc["host_changes"] if h["setting"] == "mig")
    assert [v["vm"] for v in doc["vm_changes"]] == ["train-01"]
    assert doc["scope"]["pulled_in_hosts"] == [H1] and doc["scope"]["out_of_scope_hosts"] == [H2, H3]
    assert doc["scope"]["out_of_scope_vms"] == ["infer-01", "web-01"]

    events = tmp_path / "events.jsonl"
    applied = vgpuctl(sim, tmp_path, "apply", "-f", str(inv), "--vm", "train-01", "--yes", "--events", str(events),
                      "-o", "json")
    assert applied.exit_code == 0, applied.output
    assert json.loads(applied.stdout)["kind"] == "apply"  # stdout: the one document; the events in their file
    assert _vgpus(si, "train-01") == ["grid_a100-3-20c"]
    assert str(find_object(si, "train-01").runtime.powerState) == "poweredOn"
    assert all(_mig(sim, H1)) and not any(_mig(sim, H2)) and not any(_mig(sim, H3))  # out of scope: untouched
    assert _vgpus(si, "infer-01") == [] and _vgpus(si, "web-01") == []

    lines = [json.loads(line) for line in events.read_text().splitlines()]
    for line in lines:
        jsonschema.validate(line, EVENT_SCHEMA)
    assert lines[0]["event"] == "run-start" and lines[0]["scope"]["vms"] == ["train-01"]
    assert lines[-1]["event"] == "summary" and lines[-1]["exit_code"] == 0
    finished = {(e["subject"], e["name"]): e["outcome"] for e in lines if e["event"] == "finished"}
    assert finished == {("host", H1): "changed", ("vm", "train-01"): "changed"}
    steps = [(e["subject"], e["step"]) for e in lines if e["event"] == "step-start"]
    assert ("host", "enter-maintenance") in steps and ("vm", "reconfigure") in steps
    assert len({e["run_id"] for e in lines}) == 1

    again = vgpuctl(sim, tmp_path, "plan", "-f", str(inv), "--vm", "train-01", "--detailed-exitcode")
    assert again.exit_code == 0, again.output
    rest = vgpuctl(sim, tmp_path, "-o", "json", "plan", "-f", str(inv))
    assert {h["host"] for h in json.loads(rest.stdout)["host_changes"]} == {H2, H3}  # what was left out is still due


def test_a_saved_scoped_plan_is_shown_as_planned_asked_for_and_applied_in_its_scope(
    sim: Any, si: Any, tmp_path: Path
) -> None:
    inv = inventory(tmp_path)
    saved = tmp_path / "h2.plan"
    planned = vgpuctl(sim, tmp_path, "plan", "-f", str(inv), "--host", "esx-02", "--out", str(saved))
    assert planned.exit_code == 0, planned.output
    assert f"~ host {H2} mig" in planned.stdout and "~ vm infer-01" in planned.stdout
    assert "Scope: --host esx-02" in planned.stdout and f"out of scope, untouched: hosts {H1}, {H3}" in planned.stdout

    shown = vgpuctl(sim, tmp_path, "show", str(saved))
    assert shown.exit_code == 0 and shown.stdout == planned.stdout  # exactly as plan showed it
    shown_json = json.loads(vgpuctl(sim, tmp_path, "show", str(saved), "-o", "json").stdout)
    assert shown_json["scope"]["selected_hosts"] == [H2]

    asked = vgpuctl(sim, tmp_path, "apply", str(saved))  # no --yes, no terminal to ask on
    assert asked.exit_code == 1 and "rerun with --yes" in asked.stderr
    assert asked.stdout == planned.stdout  # it showed the saved plan before asking
    assert not any(_mig(sim, H2))

    refused = vgpuctl(sim, tmp_path, "apply", str(saved), "--vm", "web-01", "--yes")
    assert refused.exit_code == 1 and "keeps the scope it was made with" in refused.stderr

    applied = vgpuctl(sim, tmp_path, "apply", str(saved), "--yes", "--events", "-")
    assert applied.exit_code == 0, applied.output
    events = [json.loads(line) for line in applied.stdout.splitlines()]  # stdout: nothing but events
    assert events[0]["event"] == "run-start" and events[-1]["event"] == "summary"
    assert f"~ host {H2} mig" in applied.stderr  # the text went to stderr
    assert all(_mig(sim, H2)) and not any(_mig(sim, H1)) and not any(_mig(sim, H3))
    assert _vgpus(si, "infer-01") == ["grid_a100-3-20c"] and _vgpus(si, "web-01") == []
    assert _vgpus(si, "train-01") == ["grid_a100-40c"]  # on esx-01, out of scope
