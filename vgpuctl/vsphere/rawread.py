"""A lean reader for the biggest bulk reads: VirtualMachine and HostSystem properties straight from the SOAP XML.

The RetrievePropertiesEx request is pyVmomi's (one counted round trip); its answer is parsed with ElementTree
and only what vgpuctl reads is converted: PCI passthrough devices as real pyVmomi objects (so
`observe.split_devices` alone decides what a vGPU is), host graphics fields as plain namespaces.
"""

from __future__ import annotations

import gzip
import io
import threading
import xml.etree.ElementTree as ET
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from vgpuctl.vsphere.objects import Obj, view_filter_spec

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

NS = "urn:vim25"
XSI_TYPE = "{http://www.w3.org/2001/XMLSchema-instance}type"
_Q = "{" + NS + "}"

_class_cache: dict[str, Any] = {}
_class_lock = threading.Lock()


def invoke_raw(stub: Any, mo: Any, method: str, args: list[Any]) -> bytes:
    """One counted SOAP call whose 200 body is returned as bytes; a SOAP fault is raised as pyVmomi's fault."""
    import http.client

    from pyVmomi.SoapAdapter import SoapResponseDeserializer

    info = mo._GetMethodInfo(method)
    request = stub.SerializeRequest(mo, info, args)
    headers = {
        "Cookie": stub.cookie,
        "SOAPAction": stub.versionId,
        "Content-Type": "text/xml; charset=UTF-8",
        "Accept-Encoding": "gzip",
    }
    stub.count_round_trip()
    conn = stub.GetConnection()
    try:
        conn.request("POST", stub.path, request, headers)
        resp = conn.getresponse()
        body = resp.read()
    except (OSError, http.client.HTTPException):
        conn.close()
        stub.DropConnections()
        raise
    stub.ReturnConnection(conn)
    if (resp.getheader("Content-Encoding") or "").lower() == "gzip":
        body = gzip.decompress(body)
    if resp.status == 200:
        return body
    if resp.status == 500:
        fault = SoapResponseDeserializer(stub).Deserialize(io.BytesIO(body), info.result)
        if isinstance(fault, BaseException):
            raise fault
    raise http.client.HTTPException(f"{resp.status} {resp.reason}")


def retrieve_vms(session: Session, view: Any, paths: list[str], page_size: int) -> list[Any]:
    """VirtualMachine objects of a ContainerView as Obj, paged, under Session.invoke."""
    return retrieve(session, view, [("VirtualMachine", paths)], page_size)


def retrieve(session: Session, view: Any, type_props: list[tuple[str, list[str]]], page_size: int) -> list[Any]:
    """Objects of these types (VirtualMachine, HostSystem) in a ContainerView as Obj, paged, in one
    RetrievePropertiesEx (plus one ContinueRetrievePropertiesEx per further page), under Session.invoke."""
    from pyVmomi import vmodl

    pc_ns = vmodl.query.PropertyCollector
    spec = view_filter_spec(view, type_props)
    stub = session.stub
    pc = session.content.propertyCollector

    def run() -> list[Any]:
        out: list[Any] = []
        body = invoke_raw(stub, pc, "RetrievePropertiesEx", [[spec], pc_ns.RetrieveOptions(maxObjects=page_size)])
        while body:
            ret = ET.fromstring(body).find(f".//{_Q}returnval")
            if ret is None:
                break
            for elem in ret.findall(f"{_Q}objects"):
                out.append(_object(elem, stub))
            token = ret.findtext(f"{_Q}token")
            if not token:
                break
            body = invoke_raw(stub, pc, "ContinueRetrievePropertiesEx", [token])
        return out

    return session.invoke(run)


# ------------------------------------------------------------------------------------------ conversion


def _object(elem: ET.Element, stub: Any) -> Any:
    ref_elem = elem.find(f"{_Q}obj")
    assert ref_elem is not None
    obj = Obj(ref=_ref(ref_elem), type=ref_elem.get("type", "VirtualMachine"))
    for missing in elem.findall(f"{_Q}missingSet"):
        fault = missing.find(f"{_Q}fault/{_Q}fault")
        if fault is not None and _local(fault.get(XSI_TYPE, "")) == "NotAuthenticated":
            from pyVmomi import vim

            raise vim.fault.NotAuthenticated()
    convert = _CONVERT_BY_TYPE.get(obj.type, _CONVERT)
    for prop in elem.findall(f"{_Q}propSet"):
        name = prop.findtext(f"{_Q}name") or ""
        val = prop.find(f"{_Q}val")
        if val is not None:
            obj.props[name] = convert.get(name, _text)(val, stub)
    return obj


def _local(type_name: str) -> str:
    return type_name.rsplit(":", 1)[-1]


def _vim_class(type_name: str) -> Any:
    name = _local(type_name)
    with _class_lock:
        cls = _class_cache.get(name)
        if cls is None:
            from pyVmomi import VmomiSupport

            try:
                cls = VmomiSupport.GetWsdlType(NS, name)
            except KeyError:
                cls = type(None)  # unknown to this pyVmomi: never a vGPU
            _class_cache[name] = cls
    return cls


def _ref(elem: ET.Element) -> Any:
    return SimpleNamespace(_moId=elem.text or "", _wsdlName=elem.get("type", ""))


def _text(elem: ET.Element, stub: Any) -> str:
    return elem.text or ""


def _int(elem: ET.Element, stub: Any) -> int:
    return int(elem.text or 0)


def _bool(elem: ET.Element, stub: Any) -> bool:
    return (elem.text or "").strip().lower() in ("true", "1")


def _ref_val(elem: ET.Element, stub: Any) -> Any:
    return _ref(elem)


def _options(elem: ET.Element, stub: Any) -> list[Any]:
    return [
        SimpleNamespace(key=o.findtext(f"{_Q}key") or "", value=o.findtext(f"{_Q}value") or "")
        for o in elem.findall(f"{_Q}OptionValue")
    ]


def _nics(elem: ET.Element, stub: Any) -> list[Any]:
    return [
        SimpleNamespace(ipAddress=[ip.text or "" for ip in nic.findall(f"{_Q}ipAddress")])
        for nic in elem.findall(f"{_Q}GuestNicInfo")
    ]


def _devices(elem: ET.Element, stub: Any) -> list[Any]:
    """PCI passthrough devices and network adapters, as pyVmomi objects: the rest is never read by vgpuctl."""
    from pyVmomi import vim

    out = []
    for dev in elem.findall(f"{_Q}VirtualDevice"):
        cls = _vim_class(dev.get(XSI_TYPE, ""))
        if isinstance(cls, type) and issubclass(cls, vim.vm.device.VirtualEthernetCard):
            out.append(_ethernet_card(dev, cls, stub))
            continue
        if not (isinstance(cls, type) and issubclass(cls, vim.vm.device.VirtualPCIPassthrough)):
            continue
        device = cls(key=int(dev.findtext(f"{_Q}key") or 0))
        backing = dev.find(f"{_Q}backing")
        if backing is not None:
            bcls = _vim_class(backing.get(XSI_TYPE, ""))
            if isinstance(bcls, type) and issubclass(bcls, vim.vm.device.VirtualDevice.BackingInfo):
                device.backing = bcls()
                if issubclass(bcls, vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo):
                    device.backing.vgpu = backing.findtext(f"{_Q}vgpu")
                else:
                    _passthrough_backing(device.backing, backing)
        group = dev.find(f"{_Q}deviceGroupInfo")
        if group is not None:
            device.deviceGroupInfo = vim.vm.device.VirtualDevice.DeviceGroupInfo(
                groupInstanceKey=int(group.findtext(f"{_Q}groupInstanceKey") or 0),
                sequenceId=int(group.findtext(f"{_Q}sequenceId") or 0),
            )
        out.append(device)
    return out


def _passthrough_backing(backing: Any, elem: ET.Element) -> None:
    """DirectPath (id, deviceId, vendorId, systemId) and Dynamic DirectPath (allowedDevice, assignedId)."""
    from pyVmomi import vim

    if isinstance(backing, vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo):
        backing.id = elem.findtext(f"{_Q}id") or ""
        backing.deviceId = elem.findtext(f"{_Q}deviceId") or ""
        backing.systemId = elem.findtext(f"{_Q}systemId") or ""
        backing.vendorId = int(elem.findtext(f"{_Q}vendorId") or 0)
    elif isinstance(backing, vim.vm.device.VirtualPCIPassthrough.DynamicBackingInfo):
        backing.assignedId = elem.findtext(f"{_Q}assignedId")
        backing.allowedDevice = [
            vim.vm.device.VirtualPCIPassthrough.AllowedDevice(vendorId=int(a.findtext(f"{_Q}vendorId") or 0),
                                                              deviceId=int(a.findtext(f"{_Q}deviceId") or 0))
            for a in elem.findall(f"{_Q}allowedDevice")
        ]


def _ethernet_card(dev: ET.Element, cls: Any, stub: Any) -> Any:
    """A VirtualEthernetCard with what vgpuctl reads: key, MAC, slot, port group backing, PVRDMA protocol and
    the SR-IOV physical function."""
    from pyVmomi import vim

    card = cls(key=int(dev.findtext(f"{_Q}key") or 0), macAddress=dev.findtext(f"{_Q}macAddress"),
               addressType=dev.findtext(f"{_Q}addressType"))
    slot = dev.findtext(f"{_Q}slotInfo/{_Q}pciSlotNumber")
    if slot:
        card.slotInfo = vim.vm.device.VirtualDevice.PciBusSlotInfo(pciSlotNumber=int(slot))
    backing = dev.find(f"{_Q}backing")
    kind = _local(backing.get(XSI_TYPE, "")) if backing is not None else ""
    if backing is not None and kind == "VirtualEthernetCardNetworkBackingInfo":
        net = backing.find(f"{_Q}network")
        card.backing = vim.vm.device.VirtualEthernetCard.NetworkBackingInfo(
            deviceName=backing.findtext(f"{_Q}deviceName"),
            network=vim.Network(net.text or "", stub) if net is not None else None)
    elif backing is not None and kind == "VirtualEthernetCardDistributedVirtualPortBackingInfo":
        card.backing = vim.vm.device.VirtualEthernetCard.DistributedVirtualPortBackingInfo(
            port=vim.dvs.PortConnection(switchUuid=backing.findtext(f"{_Q}port/{_Q}switchUuid") or "",
                                        portgroupKey=backing.findtext(f"{_Q}port/{_Q}portgroupKey")))
    if isinstance(card, vim.vm.device.VirtualVmxnet3Vrdma):
        card.deviceProtocol = dev.findtext(f"{_Q}deviceProtocol")
    if isinstance(card, vim.vm.device.VirtualSriovEthernetCard):
        pf = dev.findtext(f"{_Q}sriovBacking/{_Q}physicalFunctionBacking/{_Q}id")
        if pf:
            card.sriovBacking = vim.vm.device.VirtualSriovEthernetCard.SriovBackingInfo(
                physicalFunctionBacking=vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo(id=pf))
    return card


def _opt_int(text: str | None) -> int | None:
    return int(text) if text else None


def _strings(elem: ET.Element, stub: Any) -> list[str]:
    return [child.text or "" for child in elem]


def _mo(elem: ET.Element, stub: Any) -> Any:
    """A real pyVmomi managed object on the session's stub: vgpuctl calls methods on this one."""
    return _vim_class(elem.get("type", ""))(elem.text or "", stub)


def _graphics_info(elem: ET.Element, stub: Any) -> list[Any]:
    """HostGraphicsInfo: the fields observe reads, absent ones None as in pyVmomi."""
    return [
        SimpleNamespace(
            deviceName=info.findtext(f"{_Q}deviceName"),
            vendorName=info.findtext(f"{_Q}vendorName"),
            pciId=info.findtext(f"{_Q}pciId"),
            graphicsType=info.findtext(f"{_Q}graphicsType"),
            memorySizeInKB=_opt_int(info.findtext(f"{_Q}memorySizeInKB")),
            vgpuMode=info.findtext(f"{_Q}vgpuMode"),
            vm=[_ref(v) for v in info.findall(f"{_Q}vm")],
        )
        for info in elem
    ]


def _graphics_config(elem: ET.Element, stub: Any) -> Any:
    return SimpleNamespace(
        hostDefaultGraphicsType=elem.findtext(f"{_Q}hostDefaultGraphicsType"),
        sharedPassthruAssignmentPolicy=elem.findtext(f"{_Q}sharedPassthruAssignmentPolicy"),
    )


def _pci_devices(elem: ET.Element, stub: Any) -> list[Any]:
    """HostPciDevice: id, class, vendor and device ids (xsd:short, negative above 0x7FFF as in pyVmomi), names
    and the parent bridge."""
    return [
        SimpleNamespace(
            id=dev.findtext(f"{_Q}id"),
            classId=_opt_int(dev.findtext(f"{_Q}classId")),
            vendorId=_opt_int(dev.findtext(f"{_Q}vendorId")),
            deviceId=_opt_int(dev.findtext(f"{_Q}deviceId")),
            vendorName=dev.findtext(f"{_Q}vendorName"),
            deviceName=dev.findtext(f"{_Q}deviceName"),
            parentBridge=dev.findtext(f"{_Q}parentBridge"),
        )
        for dev in elem
    ]


def _pnics(elem: ET.Element, stub: Any) -> list[Any]:
    """PhysicalNic: device (vmnicN), its PCI id and driver."""
    return [SimpleNamespace(device=n.findtext(f"{_Q}device"), pci=n.findtext(f"{_Q}pci"),
                            driver=n.findtext(f"{_Q}driver")) for n in elem]


_PASSTHRU_BOOLS = ("passthruEnabled", "passthruCapable", "passthruActive", "sriovEnabled", "sriovCapable",
                   "sriovActive")
_PASSTHRU_INTS = ("numVirtualFunctionRequested", "numVirtualFunction", "maxVirtualFunctionSupported")


def _passthru_info(elem: ET.Element, stub: Any) -> list[Any]:
    """HostPciPassthruInfo (HostSriovInfo for SR-IOV capable devices): absent fields None as in pyVmomi."""
    out = []
    for info in elem:
        fields: dict[str, Any] = {"id": info.findtext(f"{_Q}id")}
        for name in _PASSTHRU_BOOLS:
            text = info.findtext(f"{_Q}{name}")
            fields[name] = None if text is None else text.strip().lower() in ("true", "1")
        for name in _PASSTHRU_INTS:
            fields[name] = _opt_int(info.findtext(f"{_Q}{name}"))
        out.append(SimpleNamespace(**fields))
    return out


def _numa_info(elem: ET.Element, stub: Any) -> Any:
    """HostNumaInfo: each node's typeId and the PCI devices attached to it (API 6.7)."""
    return SimpleNamespace(numaNode=[
        SimpleNamespace(typeId=int(n.findtext(f"{_Q}typeId") or 0),
                        pciId=[p.text or "" for p in n.findall(f"{_Q}pciId")])
        for n in elem.findall(f"{_Q}numaNode")
    ])


def _custom_values(elem: ET.Element, stub: Any) -> dict[int, str]:
    """ManagedEntity.customValue: field key -> string value."""
    return {int(v.findtext(f"{_Q}key") or 0): v.findtext(f"{_Q}value") or "" for v in elem}


def _field_names(elem: ET.Element, stub: Any) -> dict[int, str]:
    """ManagedEntity.availableField: field key -> name."""
    return {int(f.findtext(f"{_Q}key") or 0): f.findtext(f"{_Q}name") or "" for f in elem}


_HOST_CONVERT = {
    "parent": _ref_val,
    "runtime.inMaintenanceMode": _bool,
    "config.graphicsInfo": _graphics_info,
    "config.graphicsConfig": _graphics_config,
    "config.sharedPassthruGpuTypes": _strings,
    "hardware.pciDevice": _pci_devices,
    "config.network.pnic": _pnics,
    "config.pciPassthruInfo": _passthru_info,
    "hardware.numaInfo": _numa_info,
    "configManager.graphicsManager": _mo,
    "customValue": _custom_values,
    "availableField": _field_names,
}

_CONVERT = {
    "parent": _ref_val,
    "runtime.host": _ref_val,
    "config.template": _bool,
    "config.memoryReservationLockedToMax": _bool,
    "config.hardware.numCPU": _int,
    "config.hardware.memoryMB": _int,
    "config.memoryAllocation.reservation": _int,
    "config.extraConfig": _options,
    "config.hardware.device": _devices,
    "guest.net": _nics,
}

_CONVERT_BY_TYPE = {"VirtualMachine": _CONVERT, "HostSystem": _HOST_CONVERT}
