"""The spec that gives a VM back the vGPUs it ran with (after its new ones found no room at power-on)."""

from __future__ import annotations

from typing import Any

import pytest
from pyVmomi import vim

from vgpuctl.vsphere.vm import revert_spec

pytestmark = pytest.mark.unit

OP = vim.vm.device.VirtualDeviceSpec.Operation


def vgpu(key: int, profile: str) -> Any:
    backing = vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=profile)
    return vim.vm.device.VirtualPCIPassthrough(key=key, backing=backing)


def ops(spec: Any) -> list[tuple[str, int, str]]:
    return [(str(c.operation), int(c.device.key), str(c.device.backing.vgpu)) for c in spec.deviceChange]


def test_an_added_vgpu_is_removed_and_a_changed_one_gets_its_old_profile() -> None:
    before = [vgpu(13000, "grid_a100-10c"), vim.vm.device.VirtualE1000(key=4000)]
    now = [vgpu(13000, "grid_a100-20c"), vgpu(13001, "grid_a100-20c"), vim.vm.device.VirtualE1000(key=4000)]
    assert ops(revert_spec(before, now)) == [
        (OP.remove, 13001, "grid_a100-20c"),
        (OP.edit, 13000, "grid_a100-10c"),
    ]


def test_removed_vgpus_are_added_back_with_new_keys() -> None:
    before = [vgpu(13000, "grid_a100-10c"), vgpu(13001, "grid_a100-10c")]
    assert ops(revert_spec(before, [])) == [(OP.add, -1, "grid_a100-10c"), (OP.add, -2, "grid_a100-10c")]


def test_unchanged_vgpus_need_no_change() -> None:
    same = [vgpu(13000, "grid_a100-10c")]
    assert ops(revert_spec(same, [vgpu(13000, "grid_a100-10c")])) == []
