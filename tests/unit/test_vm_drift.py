"""The drift check apply makes after claiming a VM and before its first step (pure): the VM's name, power state,
vGPUs and configuration version (vCenter's changeVersion) against what the plan saw; and the check after its
reconfigure: the VM shows what the reconfigure set."""

from __future__ import annotations

import pytest

from vgpuctl.errors import DriftError
from vgpuctl.model import CloneSpec, DeviceChange, FieldChange, ObservedVgpu, ObservedVm, Op, VmChange
from vgpuctl.vms.drift import check_drift, clone_unmet, unmet_since
from vgpuctl.vsphere.vmops import SPEC_READ_BACK, VmState

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


# The read right after a reconfigure: its changeVersion is what the power-on is conditional on, so the VM must show
# what the reconfigure set (something else's change landing before the read would pass as this run's otherwise).


def state(*profiles: str, **settings: int | bool | str) -> VmState:
    from pyVmomi import vim

    devices = [vim.vm.device.VirtualPCIPassthrough(
        key=13000 + n, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=p)
    ) for n, p in enumerate(profiles)]  # fmt: skip
    return VmState(name="web-01", power="poweredOff", devices=devices, settings=dict(settings))


def after_reconfigure(change: VmChange, before: VmState, after: VmState) -> list[str]:
    return unmet_since(before, after, change)


def resize(cpus: int, *devices: DeviceChange) -> VmChange:
    return VmChange("web-01", fields=[FieldChange("numCPUs", 8, cpus)], devices=list(devices))


def test_a_vm_that_shows_what_its_reconfigure_set_is_as_set() -> None:
    change = resize(4, DeviceChange(Op.REMOVE, "grid_a100-10c", key=13000), DeviceChange(Op.ADD, "grid_a100-20c"))
    before = state("grid_a100-10c", "grid_a100-4c", numCPUs=8)
    assert after_reconfigure(change, before, state("grid_a100-4c", "grid_a100-20c", numCPUs=4, memoryMB=1)) == []


def test_a_setting_changed_after_the_reconfigure_is_named_with_what_this_run_set() -> None:
    unmet = after_reconfigure(resize(2), state(numCPUs=8), state(numCPUs=6))
    assert unmet == ["numCPUs is 6, this run set 2"]


def test_vgpus_changed_after_the_reconfigure_are_named() -> None:
    change = resize(2, DeviceChange(Op.ADD, "grid_a100-10c"))
    unmet = after_reconfigure(change, state(numCPUs=8), state("grid_a100-20c", numCPUs=2))
    assert unmet == ["vGPUs are [grid_a100-20c], this run set [grid_a100-10c]"]
    assert after_reconfigure(change, state(), state(numCPUs=2)) == ["vGPUs are none, this run set [grid_a100-10c]"]


def test_a_setting_the_server_does_not_report_is_not_judged() -> None:
    assert after_reconfigure(resize(2), state(numCPUs=8), state()) == []


def test_settings_are_compared_as_the_spec_sends_them() -> None:
    change = VmChange("web-01", fields=[FieldChange("memoryReservationLockedToMax", False, True),
                                        FieldChange("firmware", "bios", "efi")])  # fmt: skip
    assert after_reconfigure(change, state(), state(memoryReservationLockedToMax=True, firmware="efi")) == []
    assert after_reconfigure(change, state(), state(memoryReservationLockedToMax=False, firmware="efi")) == [
        "memoryReservationLockedToMax is False, this run set True"
    ]


def test_a_setting_the_reconfigure_left_must_read_as_it_was() -> None:
    change = VmChange("web-01", fields=[FieldChange("memoryReservationLockedToMax", False, True)])
    unmet = after_reconfigure(change, state(numCPUs=2), state(numCPUs=6, memoryReservationLockedToMax=True))
    assert unmet == ["numCPUs is 6, it was 2 before this run's last step"]
    added = after_reconfigure(change, state(), state("grid_a100-4c", memoryReservationLockedToMax=True))
    assert added == ["vGPUs are [grid_a100-4c], they were none"]


def test_cores_per_socket_is_not_judged_vcenter_assigns_it_at_power_on() -> None:
    assert "numCoresPerSocket" not in SPEC_READ_BACK
    change = VmChange("web-01", fields=[FieldChange("numCoresPerSocket", 1, 2)])
    assert after_reconfigure(change, state(), state(numCoresPerSocket=4)) == []


def test_after_a_power_off_everything_must_read_as_it_was() -> None:
    before = state("grid_a100-10c", numCPUs=8, memoryMB=65536)
    assert unmet_since(before, state("grid_a100-10c", numCPUs=8, memoryMB=65536)) == []
    assert unmet_since(before, state(numCPUs=8, memoryMB=32768)) == [
        "memoryMB is 32768, it was 65536 before this run's last step",
        "vGPUs are none, they were [grid_a100-10c]",
    ]


def test_a_clone_must_read_as_its_spec_set_it() -> None:
    spec = CloneSpec("tmpl", cpus=2, memory_mb=8192)
    assert clone_unmet(spec, state(numCPUs=2, memoryMB=8192)) == []
    assert clone_unmet(spec, state(numCPUs=6, memoryMB=8192)) == ["numCPUs is 6, this run set 2"]
    assert clone_unmet(CloneSpec("tmpl"), state(numCPUs=6, memoryMB=1)) == []  # the template's: not judged
