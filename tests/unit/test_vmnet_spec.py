"""Network adapters and guest identity as vSphere specs (vgpuctl.vsphere.vmnet): the device class and backing of
each adapter type, edits and removals, the clone spec carrying them, and the Linux prep customization."""

from __future__ import annotations

import pytest
from pyVmomi import vim

from vgpuctl.model import (
    CloneSpec,
    GuestIdentity,
    IdentityAdapter,
    NicChange,
    ObservedHost,
    ObservedHostNic,
    ObservedNetwork,
    Op,
)
from vgpuctl.vsphere.vm import clone_spec
from vgpuctl.vsphere.vmnet import (
    NIC_KEY_BASE,
    NicTarget,
    customization_spec,
    ethernet_macs,
    needs_system_ids,
    nic_specs,
)

pytestmark = pytest.mark.unit

NETS = [
    ObservedNetwork("mgmt", moid="network-7"),
    ObservedNetwork("roce", moid="dvportgroup-9", kind="distributed", key="dvportgroup-9", switch_uuid="50 2f a1"),
]
HOST = ObservedHost("esx-01", nics=[
    ObservedHostNic("0000:5e:00.0", "MT2910 Family [ConnectX-7]", vendor_id=0x15B3, device_id=0x1021, num_vf=8,
                    sriov_enabled=True),
])
TARGET = NicTarget(NETS, HOST, {"0000:5e:00.0": "65f3c2a1-sys"})


def spec_of(change: NicChange, existing: dict[int, object] | None = None) -> vim.vm.device.VirtualDeviceSpec:
    (spec,) = nic_specs([change], existing or {}, TARGET, None)
    return spec


def test_vmxnet3_on_a_standard_port_group() -> None:
    spec = spec_of(NicChange(Op.ADD, "vmxnet3", "mgmt"))
    dev = spec.device
    assert spec.operation == "add" and type(dev) is vim.vm.device.VirtualVmxnet3 and dev.key == NIC_KEY_BASE
    assert dev.backing.deviceName == "mgmt" and dev.backing.network._moId == "network-7"
    assert dev.addressType == "generated" and dev.connectable.startConnected


def test_pvrdma_on_a_distributed_port_group_with_its_protocol_and_a_fixed_mac() -> None:
    dev = spec_of(NicChange(Op.ADD, "pvrdma", "roce", protocol="rocev2", mac="00:50:56:00:00:09")).device
    assert isinstance(dev, vim.vm.device.VirtualVmxnet3Vrdma) and dev.deviceProtocol == "rocev2"
    assert dev.backing.port.portgroupKey == "dvportgroup-9" and dev.backing.port.switchUuid == "50 2f a1"
    assert (dev.addressType, dev.macAddress) == ("manual", "00:50:56:00:00:09")


def test_sriov_names_its_physical_function() -> None:
    dev = spec_of(NicChange(Op.ADD, "sriov", "roce", device="0000:5e:00.0", select="ConnectX-7")).device
    assert isinstance(dev, vim.vm.device.VirtualSriovEthernetCard)
    pf = dev.sriovBacking.physicalFunctionBacking
    # vSphere clients send the device id as lower-case hex (govc, vhpc-toolkit): docs/multi-node.md
    assert (pf.id, pf.deviceId, pf.vendorId, pf.systemId) == ("0000:5e:00.0", "1021", 0x15B3, "65f3c2a1-sys")


def test_passthrough_by_id_and_dynamic_by_model() -> None:
    fixed = spec_of(NicChange(Op.ADD, "passthrough", device="0000:5e:00.0")).device
    assert type(fixed.backing) is vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo
    dynamic = spec_of(NicChange(Op.ADD, "passthrough", allowed=[[0x15B3, 0x1021]])).device
    assert isinstance(dynamic.backing, vim.vm.device.VirtualPCIPassthrough.DynamicBackingInfo)
    assert [(a.vendorId, a.deviceId) for a in dynamic.backing.allowedDevice] == [(0x15B3, 0x1021)]
    assert needs_system_ids([NicChange(Op.ADD, "sriov", "roce")]) and not needs_system_ids(
        [NicChange(Op.ADD, "passthrough", allowed=[[1, 2]])])


def test_edit_and_remove_use_the_devices_read() -> None:
    card = vim.vm.device.VirtualVmxnet3Vrdma(key=4001, deviceProtocol="rocev1")
    edit = spec_of(NicChange(Op.CHANGE, "pvrdma", "roce", key=4001, protocol="rocev2"), {4001: card})
    assert edit.operation == "edit" and edit.device.deviceProtocol == "rocev2"
    assert edit.device.backing.port.portgroupKey == "dvportgroup-9"
    gone = spec_of(NicChange(Op.REMOVE, "vmxnet3", "mgmt", key=4000))
    assert gone.operation == "remove" and gone.device.key == 4000


def test_an_unknown_port_group_or_nic_is_a_bug_not_a_guess() -> None:
    with pytest.raises(ValueError, match="port group 'storage' was not observed"):
        spec_of(NicChange(Op.ADD, "vmxnet3", "storage"))
    with pytest.raises(ValueError, match=r"NIC 0000:d8:00\.0 not found"):
        spec_of(NicChange(Op.ADD, "passthrough", device="0000:d8:00.0"))


IDENTITY = GuestIdentity("customization", "train-01", "example.com", [
    IdentityAdapter("mgmt"), IdentityAdapter("roce", "10.0.40.10", 24, "10.0.40.1", ["10.0.0.53"])])


def test_linux_prep_customization() -> None:
    spec = customization_spec(IDENTITY)
    assert spec.identity.hostName.name == "train-01" and spec.identity.domain == "example.com"
    dhcp, fixed = spec.nicSettingMap
    assert isinstance(dhcp.adapter.ip, vim.vm.customization.DhcpIpGenerator)
    assert fixed.adapter.ip.ipAddress == "10.0.40.10" and fixed.adapter.subnetMask == "255.255.255.0"
    assert fixed.adapter.gateway == ["10.0.40.1"] and spec.globalIPSettings.dnsServerList == ["10.0.0.53"]


def test_the_clone_spec_carries_adapters_and_customization() -> None:
    devices = nic_specs([NicChange(Op.ADD, "sriov", "roce", device="0000:5e:00.0")], {}, TARGET, None)
    spec = clone_spec(CloneSpec("tmpl", cpus=8), None, pool_moid="resgroup-1", host_moid="host-1",
                      device_changes=devices, customization=customization_spec(IDENTITY))
    assert spec.config.numCPUs == 8 and len(spec.config.deviceChange) == 1
    assert spec.customization.identity.hostName.name == "train-01" and spec.location.host._moId == "host-1"


def test_macs_follow_the_pci_slots() -> None:
    a = vim.vm.device.VirtualVmxnet3(key=4001, macAddress="00:50:56:00:00:02",
                                     slotInfo=vim.vm.device.VirtualDevice.PciBusSlotInfo(pciSlotNumber=224))
    b = vim.vm.device.VirtualVmxnet3(key=4000, macAddress="00:50:56:00:00:01",
                                     slotInfo=vim.vm.device.VirtualDevice.PciBusSlotInfo(pciSlotNumber=192))
    c = vim.vm.device.VirtualSriovEthernetCard(key=4002, macAddress="00:50:56:00:00:03")
    assert ethernet_macs([a, c, b, vim.vm.device.VirtualPCIPassthrough(key=1)]) == [
        "00:50:56:00:00:01", "00:50:56:00:00:02", "00:50:56:00:00:03"]
