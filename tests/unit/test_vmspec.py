"""VmChange -> vim.vm.ConfigSpec / CloneSpec builders (pure)."""

from __future__ import annotations

import pytest
from pyVmomi import vim

from vgpuctl.model import CloneSpec, DeviceChange, FieldChange, Observed, ObservedGpu, ObservedHost, Op, VmChange
from vgpuctl.vsphere import vm as vmspec
from vgpuctl.vsphere.observe import set_nvlink_sets, split_devices

pytestmark = pytest.mark.unit

Vmiop = vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo


def adds(specs):
    return [s for s in specs if s.operation == "add"]


def test_empty_change_builds_nothing() -> None:
    assert vmspec.config_spec(VmChange(vm="a", power_on=True)) is None


def test_adds_get_distinct_negative_keys_and_vmiop_backing() -> None:
    change = VmChange(vm="a", devices=[DeviceChange(Op.ADD, "grid_a100-40c") for _ in range(4)])
    spec = vmspec.config_spec(change)
    keys = [s.device.key for s in spec.deviceChange]
    assert keys == [-1, -2, -3, -4]
    for s in spec.deviceChange:
        assert s.operation == "add"
        assert isinstance(s.device, vim.vm.device.VirtualPCIPassthrough)
        assert isinstance(s.device.backing, Vmiop)
        assert s.device.backing.vgpu == "grid_a100-40c"
    assert spec.deviceGroups is None


def test_remove_uses_the_existing_device_object() -> None:
    existing = vim.vm.device.VirtualPCIPassthrough(key=205, backing=Vmiop(vgpu="grid_a100-20c"))
    change = VmChange(
        vm="a",
        devices=[DeviceChange(Op.REMOVE, "grid_a100-20c", key=205), DeviceChange(Op.ADD, "grid_a100-40c")],
    )
    spec = vmspec.config_spec(change, {205: existing})
    ops = [(s.operation, s.device.key) for s in spec.deviceChange]
    assert ops == [("remove", 205), ("add", -1)]
    assert spec.deviceChange[0].device is existing


def test_remove_without_known_device_sends_the_key() -> None:
    spec = vmspec.config_spec(VmChange(vm="a", devices=[DeviceChange(Op.REMOVE, "grid_a100-20c", key=7)]))
    assert spec.deviceChange[0].device.key == 7
    with pytest.raises(ValueError, match="without a device key"):
        vmspec.config_spec(VmChange(vm="a", devices=[DeviceChange(Op.REMOVE, "grid_a100-20c")]))


@pytest.mark.parametrize(
    ("field", "new", "prop", "value"),
    [
        ("memoryReservationLockedToMax", True, "memoryReservationLockedToMax", True),
        ("memory_reservation_locked", True, "memoryReservationLockedToMax", True),
        ("firmware", "efi", "firmware", "efi"),
        ("numCPUs", "16", "numCPUs", 16),
        ("cpus", 8, "numCPUs", 8),
        ("memoryMB", 131072, "memoryMB", 131072),
        ("memory_mb", 2048, "memoryMB", 2048),
    ],
)
def test_fields(field: str, new, prop: str, value) -> None:
    spec = vmspec.config_spec(VmChange(vm="a", fields=[FieldChange(field, None, new)]))
    assert getattr(spec, prop) == value
    assert not spec.deviceChange


def test_unknown_field_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown VM field"):
        vmspec.config_spec(VmChange(vm="a", fields=[FieldChange("guestId", "a", "b")]))


def test_extra_config_none_removes_with_empty_value() -> None:
    change = VmChange(vm="a", extra_config={"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": None})
    spec = vmspec.config_spec(change)
    assert {(o.key, o.value) for o in spec.extraConfig} == {
        ("pciPassthru.use64bitMMIO", "TRUE"),
        ("pciPassthru.64bitMMIOSizeGB", ""),
    }


def test_nvlink_device_group_covers_grouped_adds() -> None:
    change = VmChange(
        vm="a",
        devices=[DeviceChange(Op.ADD, "grid_a100-40c", group=0) for _ in range(2)]
        + [DeviceChange(Op.ADD, "grid_a100-40c")],
    )
    spec = vmspec.config_spec(change, group_names={0: "NVLink-2GPU"})
    groups = spec.deviceGroups.deviceGroup
    assert len(groups) == 1
    assert isinstance(groups[0], vim.vm.VirtualDeviceGroups.VendorDeviceGroup)
    assert groups[0].groupInstanceKey < 0 and groups[0].deviceGroupName == "NVLink-2GPU"
    infos = [s.device.deviceGroupInfo for s in spec.deviceChange]
    assert [i.groupInstanceKey for i in infos[:2]] == [groups[0].groupInstanceKey] * 2
    assert [i.sequenceId for i in infos[:2]] == [0, 1]
    assert infos[2] is None  # the ungrouped vGPU stays out of the group


def test_two_groups_get_distinct_keys_and_default_name() -> None:
    change = VmChange(vm="a", devices=[DeviceChange(Op.ADD, "grid_a100-40c", group=g) for g in (0, 0, 1, 1)])
    spec = vmspec.config_spec(change)
    keys = [g.groupInstanceKey for g in spec.deviceGroups.deviceGroup]
    assert len(set(keys)) == 2 and all(k < 0 for k in keys)
    assert {g.deviceGroupName for g in spec.deviceGroups.deviceGroup} == {vmspec.DEFAULT_GROUP_NAME}
    assert [s.device.deviceGroupInfo.groupInstanceKey for s in spec.deviceChange] == [keys[0]] * 2 + [keys[1]] * 2


def test_everything_in_one_spec() -> None:
    change = VmChange(
        vm="a",
        fields=[FieldChange("memoryReservationLockedToMax", False, True), FieldChange("firmware", "bios", "efi")],
        devices=[DeviceChange(Op.ADD, "grid_a100-3-20c"), DeviceChange(Op.ADD, "grid_a100-2-10c")],
        extra_config={"pciPassthru.use64bitMMIO": "TRUE"},
    )
    spec = vmspec.config_spec(change)
    assert spec.memoryReservationLockedToMax is True and spec.firmware == "efi"
    assert len(adds(spec.deviceChange)) == 2
    assert len(spec.extraConfig) == 1


def test_clone_spec_to_cluster_pool() -> None:
    spec = vmspec.clone_spec(
        CloneSpec(template="t", cluster="C", cpus=16, memory_mb=131072), None, pool_moid="resgroup-1"
    )
    assert isinstance(spec, vim.vm.CloneSpec)
    assert spec.location.pool._moId == "resgroup-1"
    assert spec.location.host is None
    assert spec.powerOn is False and spec.template is False
    assert spec.config.numCPUs == 16 and spec.config.memoryMB == 131072


def test_clone_spec_to_host_without_sizes() -> None:
    spec = vmspec.clone_spec(CloneSpec(template="t", host="h"), None, pool_moid="resgroup-2", host_moid="host-9")
    assert spec.location.host._moId == "host-9"
    assert spec.location.pool._moId == "resgroup-2"
    assert spec.config is None


def test_split_devices_isinstance_checks_every_backing() -> None:
    devices = [
        vim.vm.device.VirtualPCIPassthrough(key=300, backing=Vmiop(vgpu="grid_a100-40c")),
        vim.vm.device.VirtualPCIPassthrough(
            key=301,
            backing=Vmiop(vgpu="grid_a100-40c"),
            deviceGroupInfo=vim.vm.device.VirtualDevice.DeviceGroupInfo(groupInstanceKey=7, sequenceId=0),
        ),
        # plain PCI passthrough (a NIC), dynamic DirectPath, and a vGPU-less VMIOP backing: not vGPUs
        vim.vm.device.VirtualPCIPassthrough(key=302, backing=vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo()),
        vim.vm.device.VirtualPCIPassthrough(key=303, backing=vim.vm.device.VirtualPCIPassthrough.DynamicBackingInfo()),
        vim.vm.device.VirtualPCIPassthrough(key=304, backing=Vmiop()),
        vim.vm.device.VirtualE1000(key=4000),
    ]
    vgpus, other = split_devices(devices)
    assert [(v.key, v.profile, v.device_group_key) for v in vgpus] == [
        (300, "grid_a100-40c", None),
        (301, "grid_a100-40c", 7),
    ]
    assert other == 3


def test_set_nvlink_sets_numbers_the_sets() -> None:
    gpus = [ObservedGpu(pci_id=p, device_name="A100") for p in ("0000:3b:00.0", "0000:3c:00.0", "0000:5e:00.0")]
    gpus[2].nvlink_set = 7  # stale
    observed = Observed(hosts={"h": ObservedHost(name="h", gpus=gpus)})
    set_nvlink_sets(observed, "h", [["0000:3B:00.0", "0000:3c:00.0"]])
    assert [g.nvlink_set for g in observed.hosts["h"].gpus] == [0, 0, None]


def test_a_reconfigure_is_conditional_on_the_version_it_was_given() -> None:
    change = VmChange(vm="a", devices=[DeviceChange(Op.ADD, "grid_a100-40c")])
    assert vmspec.config_spec(change, change_version="1700000000001").changeVersion == "1700000000001"
    assert vmspec.config_spec(change).changeVersion is None  # none read: unconditional, as before
    assert vmspec.revert_spec([], [], "1700000000002").changeVersion == "1700000000002"
