"""A driver upgrade window's guest driver moves run the guest stage (vgpuctl.guest.drivers): playbooks/driver.yml
through ansible-runner, limited to the VMs of one driver file, with that file (resolved from the inventory's
folder), its sha256 and version as extra variables; a VM without an address fails without a run."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from vgpuctl.domain import Outcome, WindowStage
from vgpuctl.guest.drivers import deploy_drivers, driver_vars
from vgpuctl.guest.targets import playbooks_dir
from vgpuctl.inventory import load_inventory
from vgpuctl.model import GuestDriverMove

pytestmark = pytest.mark.unit


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _move(vm: str, new: str = "535.161.07") -> GuestDriverMove:
    return GuestDriverMove(vm, "trainers", WindowStage.BEFORE, "550.90.07", new,
                           f"files/NVIDIA-Linux-x86_64-{new}-grid.run", "abc123", "why")


def test_the_driver_playbook_is_the_driver_role_alone() -> None:
    plays = YAML(typ="safe").load((playbooks_dir() / "driver.yml").read_text())
    roles = [t["ansible.builtin.include_role"]["name"] for t in plays[0]["tasks"]]
    assert roles == ["gpu_facts", "vgpu_guest_driver"]


def test_moves_run_the_driver_playbook_limited_with_the_file_as_extra_vars(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    inv_file = tmp_path / "inventory.yaml"
    inv_file.write_text(
        "apiVersion: vgpuctl/v1\n"
        "vms:\n  - {name: train-01, guest: {group: trainers}}\n  - {name: train-02, guest: {group: trainers}}\n"
        f"guests:\n  connection: {{user: nobody, port: {_free_port()}}}\n"
        "  groups:\n    trainers: {roles: [vgpu_guest_driver]}\n"
    )
    inv = load_inventory(inv_file)
    assert driver_vars(inv, _move("train-01"))["vgpu_guest_driver_src"] == str(
        tmp_path / "files" / "NVIDIA-Linux-x86_64-535.161.07-grid.run")
    state = tmp_path / "state"
    out = deploy_drivers(inv, {"train-01": "127.0.0.1", "train-02": None}, [_move("train-01"), _move("train-02")],
                         state=state)
    by_vm = {o.vm: o for o in out}
    assert by_vm["train-02"].status == Outcome.FAILED and "no guest IP address" in by_vm["train-02"].message
    assert by_vm["train-01"].status == Outcome.FAILED  # nothing listens: unreachable
    (command,) = state.rglob("command")
    ran = json.loads(command.read_text())
    assert ran["command"][-1] == "driver.yml"
    assert "--limit" in ran["command"] and ran["command"][ran["command"].index("--limit") + 1] == "train-01"
    extra = json.loads(ran["command"][ran["command"].index("-e") + 1])  # the driver's file, sha256 and version
    assert extra == {"vgpu_guest_driver_src": str(tmp_path / "files" / "NVIDIA-Linux-x86_64-535.161.07-grid.run"),
                     "vgpu_guest_driver_sha256": "abc123", "vgpu_guest_driver_version": "535.161.07"}
