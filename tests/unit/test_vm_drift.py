"""The drift check apply makes after claiming a VM and before its first step (pure): the VM's name, power state,
vGPUs and configuration version (vCenter's changeVersion) against what the plan saw."""

from __future__ import annotations

import pytest

from vgpuctl.errors import DriftError
from vgpuctl.model import ObservedVgpu, ObservedVm, VmChange
from vgpuctl.vms.apply import check_drift
from vgpuctl.vsphere.vmops import VmState

pytestmark = pytest.mark.unit


def seen(version: str = "17") -> ObservedVm:
    return ObservedVm("web-01", moid="vm-1", power_state="poweredOn", change_version=version,
                      vgpus=[ObservedVgpu(key=13000, profile="grid_a100-10c")])  # fmt: skip


def now(version: str = "17", profile: str = "grid_a100-10c") -> VmState:
    from pyVmomi import vim

    device = vim.vm.device.VirtualPCIPassthrough(
        key=13000, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=profile)
    )
    return VmState(name="web-01", power="poweredOn", devices=[device], change_version=version)


def test_the_vm_as_the_plan_saw_it_is_no_drift() -> None:
    check_drift(VmChange("web-01"), seen(), now())


def test_a_configuration_version_that_moved_is_drift_even_with_the_same_vgpus() -> None:
    with pytest.raises(DriftError, match=r"web-01 changed since the plan: its configuration changed .*plan again"):
        check_drift(VmChange("web-01"), seen("17"), now("18"))


def test_changed_vgpus_are_named_rather_than_the_version() -> None:
    with pytest.raises(DriftError) as err:
        check_drift(VmChange("web-01"), seen("17"), now("18", "grid_a100-20c"))
    assert "vGPUs are [grid_a100-20c#13000], the plan saw [grid_a100-10c#13000]" in str(err.value)
    assert "changeVersion" not in str(err.value)


def test_a_vm_observed_without_a_version_is_judged_by_its_vgpus_alone() -> None:
    check_drift(VmChange("web-01"), seen(""), now("18"))
