"""The lean reader's devices against pyVmomi's own deserializer: for every device form vgpuctl reads (a vGPU in
an NVLink group, DirectPath and Dynamic DirectPath passthrough, each kind of network adapter and backing), the
fields observe and netobserve read are the same."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from pyVmomi import VmomiSupport
from pyVmomi.SoapAdapter import SoapResponseDeserializer, SoapStubAdapter

from vgpuctl.vsphere import rawread

pytestmark = pytest.mark.unit

DEVICES = [
    '<VirtualDevice xsi:type="VirtualPCIPassthrough"><key>13000</key><backing '
    'xsi:type="VirtualPCIPassthroughVmiopBackingInfo"><vgpu>grid_h100-80c</vgpu></backing><deviceGroupInfo>'
    "<groupInstanceKey>7</groupInstanceKey><sequenceId>1</sequenceId></deviceGroupInfo></VirtualDevice>",
    '<VirtualDevice xsi:type="VirtualPCIPassthrough"><key>13001</key><backing '
    'xsi:type="VirtualPCIPassthroughDeviceBackingInfo"><deviceName>mlx5</deviceName><useAutoDetect>false'
    "</useAutoDetect><id>0000:3b:00.1</id><deviceId>101d</deviceId><systemId>5f3c-aa</systemId>"
    "<vendorId>5555</vendorId></backing></VirtualDevice>",
    '<VirtualDevice xsi:type="VirtualPCIPassthrough"><key>13002</key><backing '
    'xsi:type="VirtualPCIPassthroughDynamicBackingInfo"><deviceName></deviceName><useAutoDetect>false'
    "</useAutoDetect><allowedDevice><vendorId>5555</vendorId><deviceId>4125</deviceId></allowedDevice>"
    "<allowedDevice><vendorId>5555</vendorId><deviceId>4127</deviceId></allowedDevice>"
    "<assignedId>0000:5e:00.0</assignedId></backing></VirtualDevice>",
    '<VirtualDevice xsi:type="VirtualE1000"><key>4000</key><deviceInfo><label>Network adapter 1</label>'
    '<summary>VM Network</summary></deviceInfo><backing xsi:type="VirtualEthernetCardNetworkBackingInfo">'
    '<deviceName>VM Network</deviceName><useAutoDetect>false</useAutoDetect><network type="Network">network-7'
    "</network></backing><slotInfo xsi:type=\"VirtualDevicePciBusSlotInfo\"><pciSlotNumber>160</pciSlotNumber>"
    "</slotInfo><addressType>assigned</addressType><macAddress>00:50:56:aa:bb:01</macAddress></VirtualDevice>",
    '<VirtualDevice xsi:type="VirtualVmxnet3Vrdma"><key>4001</key><backing '
    'xsi:type="VirtualEthernetCardDistributedVirtualPortBackingInfo"><port><switchUuid>50 2a 1f</switchUuid>'
    "<portgroupKey>dvportgroup-21</portgroupKey></port></backing><addressType>generated</addressType>"
    "<macAddress>00:50:56:aa:bb:02</macAddress><deviceProtocol>rocev2</deviceProtocol></VirtualDevice>",
    '<VirtualDevice xsi:type="VirtualSriovEthernetCard"><key>4002</key><backing '
    'xsi:type="VirtualEthernetCardNetworkBackingInfo"><deviceName>roce-pg</deviceName><network '
    'type="Network">network-9</network></backing><addressType>generated</addressType><macAddress>'
    "00:50:56:aa:bb:03</macAddress><sriovBacking><physicalFunctionBacking><deviceName></deviceName>"
    "<useAutoDetect>false</useAutoDetect><id>0000:af:00.0</id></physicalFunctionBacking></sriovBacking>"
    "</VirtualDevice>",
    '<VirtualDevice xsi:type="VirtualDisk"><key>2000</key><capacityInKB>1024</capacityInKB></VirtualDevice>',
]

ANSWER = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/'
    'envelope/" xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
    '<soapenv:Body><RetrievePropertiesExResponse xmlns="urn:vim25"><returnval><objects><obj type="VirtualMachine">'
    'vm-1</obj><propSet><name>config.hardware.device</name><val xsi:type="ArrayOfVirtualDevice">'
    f'{"".join(DEVICES)}</val></propSet></objects></returnval></RetrievePropertiesExResponse></soapenv:Body>'
    "</soapenv:Envelope>"
).encode()


def what_vgpuctl_reads(device: Any) -> tuple[Any, ...]:
    """The fields observe.split_devices and netobserve.vm_nics read, by device kind."""
    backing = device.backing
    common = (type(device).__name__, device.key, type(backing).__name__ if backing is not None else None)
    return common + (_nic_fields(device) if hasattr(device, "macAddress") else _passthrough_fields(device))


def _passthrough_fields(device: Any) -> tuple[Any, ...]:
    backing, group = device.backing, device.deviceGroupInfo
    return (
        *(getattr(backing, f, None) for f in ("vgpu", "id", "deviceId", "systemId", "vendorId", "assignedId")),
        [(a.vendorId, a.deviceId) for a in getattr(backing, "allowedDevice", None) or []],
        (group.groupInstanceKey, group.sequenceId) if group is not None else None,
    )


def _nic_fields(card: Any) -> tuple[Any, ...]:
    backing, sriov = card.backing, getattr(card, "sriovBacking", None)
    network, port = getattr(backing, "network", None), getattr(backing, "port", None)
    return (
        card.macAddress, card.addressType, card.slotInfo.pciSlotNumber if card.slotInfo else None,
        getattr(backing, "deviceName", None), network._moId if network is not None else None,
        (port.switchUuid, port.portgroupKey) if port is not None else None, getattr(card, "deviceProtocol", None),
        sriov.physicalFunctionBacking.id if sriov is not None else None,
    )


def lean_devices(body: bytes) -> list[Any]:
    ret = rawread.returnval_of(ET.fromstring(rawread.drop_unread_devices(body)))
    return list(rawread.objects_of(ret, None)[0].props["config.hardware.device"])


def pyvmomi_devices(body: bytes) -> list[Any]:
    stub = SoapStubAdapter(host="localhost", version=VmomiSupport.newestVersions.Get("vim"))
    result_type = VmomiSupport.GetVmodlType("vmodl.query.PropertyCollector.RetrieveResult")
    result = SoapResponseDeserializer(stub).Deserialize(io.BytesIO(body), result_type)
    return list(result.objects[0].propSet[0].val)


def test_every_device_form_reads_as_pyvmomi_reads_it() -> None:
    read_by_pyvmomi = [d for d in pyvmomi_devices(ANSWER) if type(d).__name__ != "vim.vm.device.VirtualDisk"]
    assert [what_vgpuctl_reads(d) for d in lean_devices(ANSWER)] == [what_vgpuctl_reads(d)
                                                                    for d in read_by_pyvmomi]
    assert len(read_by_pyvmomi) == 6  # the disk is the one device the reader leaves out


def test_the_lean_devices_are_pyvmomi_objects_with_their_defaults() -> None:
    vgpu, directpath, dynamic, e1000, vrdma, sriov = lean_devices(ANSWER)
    assert vgpu.backing.vgpu == "grid_h100-80c" and vgpu.deviceGroupInfo.groupInstanceKey == 7
    assert directpath.backing.vendorId == 5555 and directpath.deviceGroupInfo is None
    assert [a.deviceId for a in dynamic.backing.allowedDevice] == [4125, 4127]
    assert e1000.slotInfo.pciSlotNumber == 160 and e1000.backing.network._moId == "network-7"
    assert vrdma.deviceProtocol == "rocev2" and vrdma.slotInfo is None and vrdma.backing.port.portgroupKey
    assert sriov.sriovBacking.physicalFunctionBacking.id == "0000:af:00.0"
    assert e1000.connectable is None and vrdma.unitNumber is None  # fields never read keep pyVmomi's defaults
