"""Saved plans against gpusim: `plan -f FILE --out PLANFILE` then `apply PLANFILE` applies exactly that plan,
and refuses in one line, touching nothing, when the farm changed since the plan was made."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from planout import refused
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim
from typer.testing import CliRunner

from vgpuctl.cli.main import app
from vgpuctl.planfile import content_digest

pytestmark = pytest.mark.sim

FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [{"name": "other-01", "cpus": 2, "memory_mb": 4096}],
}  # fmt: skip
INVENTORY = """\
apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
vms:
  - name: saved-01
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    vgpus: {profile: PROFILE, count: 1}
    power: 'off'
"""


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


def vgpuctl(sim: Any, tmp_path: Path, *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=sim.vgpuctl_env(tmp_path / "state", esxi=False))


def vgpus_of(sim: Any, name: str) -> list[str] | None:
    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
        vm = next((o for o in view.view if o.name == name), None)
        if vm is None:
            return None
        devices = vm.config.hardware.device
        return [
            d.backing.vgpu
            for d in devices
            if isinstance(getattr(d, "backing", None), vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo)
        ]
    finally:
        Disconnect(si)


def errors(result: Any) -> list[str]:
    """stderr without the --insecure warning."""
    return [line for line in result.stderr.strip().splitlines() if not line.startswith("warning: TLS")]


def make_plan(sim: Any, tmp_path: Path, profile: str = "grid_a100-20c") -> tuple[Path, Path]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY.replace("PROFILE", profile))
    out = tmp_path / "saved.plan"
    result = vgpuctl(sim, tmp_path, "plan", "-f", str(inv), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "+ vm saved-01" in result.stdout and f"apply {out}" in result.stderr
    return inv, out


def test_apply_planfile_applies_exactly_the_saved_plan(sim: Any, tmp_path: Path) -> None:
    inv, out = make_plan(sim, tmp_path)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    doc = json.loads(out.read_text())
    assert doc["format"] == "vgpuctl-plan/v1" and [c["vm"] for c in doc["plan"]["vm_changes"]] == ["saved-01"]
    inv.write_text(INVENTORY.replace("PROFILE", "grid_a100-40c"))  # edited after the plan: not what is applied
    asked = vgpuctl(sim, tmp_path, "apply", str(out))  # shown, then asked: no terminal here, so refused
    assert asked.exit_code == 1 and "rerun with --yes" in asked.stderr and "+ vm saved-01" in asked.stdout
    applied = vgpuctl(sim, tmp_path, "apply", str(out), "--yes")
    assert applied.exit_code == 0, applied.output
    assert vgpus_of(sim, "saved-01") == ["grid_a100-20c"]
    again = vgpuctl(sim, tmp_path, "apply", str(out), "--yes")  # the farm now differs from the plan's basis
    assert again.exit_code == 1 and "the farm changed since" in again.stderr


def test_apply_planfile_refuses_when_the_farm_changed(sim: Any, tmp_path: Path) -> None:
    _inv, out = make_plan(sim, tmp_path)
    si = sim.connect()
    try:  # someone powers on a VM after the plan was made
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
        WaitForTask(next(o for o in view.view if o.name == "other-01").PowerOnVM_Task())
    finally:
        Disconnect(si)
    refused = vgpuctl(sim, tmp_path, "apply", str(out), "--yes")
    assert refused.exit_code == 1
    lines = errors(refused)
    assert len(lines) == 1 and lines[0].startswith(f"error: the farm changed since {out} was made")
    assert vgpus_of(sim, "saved-01") is None  # nothing touched


def test_a_plan_file_of_another_version_is_refused_in_one_line(sim: Any, tmp_path: Path) -> None:
    _inv, out = make_plan(sim, tmp_path)
    doc = json.loads(out.read_text())
    assert doc["version"] == 3
    doc["version"] = 2  # as an older vgpuctl wrote it
    out.write_text(json.dumps(doc))
    refused = vgpuctl(sim, tmp_path, "apply", str(out), "--yes")
    assert refused.exit_code == 1
    assert errors(refused) == [
        f"error: {out}: the plan file was written by another version of vgpuctl: make it again with "
        "`vgpuctl plan --out`"
    ]
    assert vgpus_of(sim, "saved-01") is None  # nothing touched


@pytest.mark.parametrize("section", ["plan", "inventory"])
def test_an_edited_plan_file_is_refused_before_vcenter_is_read(sim: Any, tmp_path: Path, section: str) -> None:
    """An edit to the plan section would have applied the original plan; one to the inventory was refused as
    "host facts changed". Either is the plan file edited, said before any connection: here vCenter's URL leads
    nowhere, and the refusal is still that one line."""
    _inv, out = make_plan(sim, tmp_path)
    doc = json.loads(out.read_text())
    if section == "plan":
        doc["plan"]["vm_changes"][0]["vm"] = "other-01"
    else:
        doc["inventory"] = doc["inventory"].replace("grid_a100-20c", "grid_a100-40c")
    out.write_text(json.dumps(doc, indent=2))
    env = sim.vgpuctl_env(tmp_path / "state", esxi=False) | {"VGPUCTL_URL": "https://127.0.0.1:9/sdk"}
    refused = CliRunner().invoke(app, ["apply", str(out), "--yes"], env=env)
    assert refused.exit_code == 1
    assert errors(refused) == [
        f"error: {out}: the plan file was edited since `vgpuctl plan --out` wrote it (its digest does not match "
        "its content): nothing was changed; make a new plan with `vgpuctl plan -f FILE --out PLANFILE`"
    ]
    assert vgpus_of(sim, "saved-01") is None  # nothing touched


def test_bad_plan_files_and_arguments_are_one_line_errors(sim: Any, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.plan"
    garbage.write_text("{not json")
    for args, message in (
        (["apply", str(garbage)], "not a vgpuctl plan file"),
        (["apply", str(tmp_path / "missing.plan")], "no such plan file"),
        (["apply"], "give an inventory with -f FILE, or a saved plan"),
        (["apply", str(garbage), "-f", str(garbage)], "give an inventory with -f FILE, or a saved plan"),
    ):
        result = vgpuctl(sim, tmp_path, *args)
        assert result.exit_code == 1, (args, result.output)
        assert (
            result.stderr.strip().splitlines() == [f"error: {result.stderr.strip()[7:]}"] and message in result.stderr
        )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_plan_or_export_that_cannot_be_written_is_one_line(sim: Any, tmp_path: Path) -> None:
    """A full disk after the plan was made (or the farm read): one line naming the option, never "a bug"; a plan
    file written whole or not at all leaves none half-written."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY.replace("PROFILE", "grid_a100-20c"))
    result = vgpuctl(sim, tmp_path, "plan", "-f", str(inv), "--out", "/dev/full")
    assert result.exit_code == 1, result.output
    assert errors(result) == ["error: --out /dev/full: No space left on device"], result.stderr
    missing = tmp_path / "missing" / "farm.yaml"
    result = vgpuctl(sim, tmp_path, "export", "--out", str(missing))
    assert result.exit_code == 1, result.output
    assert errors(result) == [f"error: --out {missing}: there is no folder {missing.parent}"], result.stderr  # before
    assert "bug" not in result.output and not missing.parent.exists()
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_a_clone_into_a_folder_that_does_not_exist_is_a_plan_error(sim: Any, tmp_path: Path) -> None:
    """vCenter would refuse the clone at apply: the plan says so, at the entry's folder, and applies nothing."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY.replace("PROFILE", "grid_a100-20c").replace("    power: 'off'\n",
                                                                           "    power: 'off'\n    folder: teamZ\n"))
    result = vgpuctl(sim, tmp_path, "plan", "-f", str(inv))
    assert result.exit_code == 1, result.output
    assert refused(result) == [
        f"{inv}:9:13: vm saved-01: folder 'teamZ' does not exist in datacenter DC0 (it has no VM folders): "
        "create it in vCenter, or set 'folder' to one that exists (/ for the root); vgpuctl does not create folders"]
    assert vgpus_of(sim, "saved-01") is None


def test_a_consistent_forgery_that_hides_a_destroy_is_refused(sim: Any, tmp_path: Path) -> None:
    """The digests are plain hashes: someone takes the destroy out of the plan section and makes the digest match
    again. Apply makes the plan again from the saved inventory, and refuses it unless it is the saved section:
    the VM stays."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY.replace("PROFILE", "grid_a100-20c") + "  - name: other-01\n    state: absent\n"
                   + "allow_destroy: true\n")  # fmt: skip
    out = tmp_path / "saved.plan"
    planned = vgpuctl(sim, tmp_path, "plan", "-f", str(inv), "--out", str(out))
    assert planned.exit_code == 0 and "- vm other-01" in planned.stdout, planned.output
    doc = json.loads(out.read_text())
    doc["plan"]["vm_changes"] = [c for c in doc["plan"]["vm_changes"] if c["vm"] != "other-01"]
    doc["plan"]["disruptions"] = [d for d in doc["plan"]["disruptions"] if "other-01" not in json.dumps(d)]
    doc["plan"]["warnings"] = [w for w in doc["plan"]["warnings"] if "other-01" not in w]
    doc["digest"] = content_digest(doc)
    out.write_text(json.dumps(doc, indent=2))
    shown = vgpuctl(sim, tmp_path, "show", str(out))  # the forged file reads as a plan without the destroy
    assert shown.exit_code == 0 and "other-01" not in shown.stdout, shown.output
    refused = vgpuctl(sim, tmp_path, "apply", str(out), "--yes")
    assert refused.exit_code == 1
    assert errors(refused) == [
        f"error: {out}: its plan section is not the plan its inventory gives (disruptions, vm_changes differ): the "
        "file was changed after `vgpuctl plan --out` wrote it, digests and all; nothing was "
        "changed; make a new plan with `vgpuctl plan -f FILE --out PLANFILE`"
    ], refused.output
    assert vgpus_of(sim, "other-01") == [] and vgpus_of(sim, "saved-01") is None  # nothing touched
