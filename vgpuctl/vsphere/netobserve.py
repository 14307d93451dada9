"""The network part of the bulk read: port groups (standard and distributed) with the hosts that reach them,
each host's physical NICs (PCI devices of class network, joined with config.network.pnic, the PCI passthrough
and SR-IOV state and the NUMA nodes), where each GPU sits (NUMA node, root bridge), and each VM's adapters.
Reads only what observe.py already fetched in its one property read; no calls of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from vgpuctl.domain import AdapterType, NetworkKind
from vgpuctl.model import ObservedGpu, ObservedHostNic, ObservedNetwork, ObservedNic
from vgpuctl.vsphere.objects import Obj
from vgpuctl.vsphere.vimtypes import device_types

NETWORK_CLASS = 0x02  # PCI base class "Network controller" (classId's upper byte)
INFINIBAND_SUBCLASS = 0x0207


def _moid(ref: Any) -> str:
    return str(ref._moId) if ref is not None else ""


def networks(objects: dict[str, Obj], in_dc: set[str], host_names: dict[str, str]) -> list[ObservedNetwork]:
    """Port groups of the datacenter, by name, each with the hosts that reach it: those the port group lists
    (`Network.host`) and those that list it (`HostSystem.network`); a distributed one carries its key and its
    switch's uuid."""
    switches = {m: o for m, o in objects.items() if o.type.endswith("DistributedVirtualSwitch")}
    listed_by_hosts: dict[str, set[str]] = {}
    for host_moid, host_name in host_names.items():
        for ref in objects[host_moid].get("network") or []:
            listed_by_hosts.setdefault(_moid(ref), set()).add(host_name)
    out = []
    for moid in sorted(in_dc):
        obj = objects[moid]
        if obj.type not in ("Network", "DistributedVirtualPortgroup", "OpaqueNetwork"):
            continue
        listed = {host_names[m] for m in (_moid(h) for h in obj.get("host", [])) if m in host_names}
        hosts = sorted(listed | listed_by_hosts.get(moid, set()))
        net = ObservedNetwork(name=str(obj.get("name")), moid=moid, hosts=hosts)
        if obj.type == "DistributedVirtualPortgroup":
            switch = switches.get(_moid(obj.get("config.distributedVirtualSwitch")))
            net.kind = NetworkKind.DISTRIBUTED
            net.key = str(obj.get("key") or moid)
            net.switch_uuid = str(switch.get("uuid")) if switch is not None else None
            net.switch = str(switch.get("name")) if switch is not None else None
        out.append(net)
    return sorted(out, key=lambda n: (n.name, n.moid))


def pci_roots(pci: dict[str, Any]) -> Callable[[str], str | None]:
    """PCI id -> its topmost bridge (the parentBridge chain); None when the host names no parent."""

    def root(pci_id: str) -> str | None:
        seen: set[str] = set()
        current, parent = pci_id, _parent(pci.get(pci_id))
        while parent and parent not in seen:
            seen.add(parent)
            current, parent = parent, _parent(pci.get(parent))
        return current if current != pci_id else None

    return root


def _parent(dev: Any) -> str | None:
    value = getattr(dev, "parentBridge", None) if dev is not None else None
    return str(value) if value else None


def numa_nodes(obj: Obj) -> dict[str, int]:
    """PCI id (lower case) -> NUMA node, from hardware.numaInfo (empty before API 6.7 or without NUMA)."""
    info = obj.get("hardware.numaInfo")
    out: dict[str, int] = {}
    for node in getattr(info, "numaNode", None) or []:
        for pci_id in getattr(node, "pciId", None) or []:
            out[str(pci_id).lower()] = int(node.typeId)
    return out


def host_nics(obj: Obj, pci: dict[str, Any]) -> list[ObservedHostNic]:
    """The host's network controllers with their uplink name, SR-IOV and passthrough state and place."""
    vmnics = {str(n.pci).lower(): str(n.device) for n in obj.get("config.network.pnic", []) if getattr(n, "pci", None)}
    passthru = {str(p.id).lower(): p for p in obj.get("config.pciPassthruInfo", [])}
    numa = numa_nodes(obj)
    root = pci_roots(pci)
    out = []
    for pci_id, dev in sorted(pci.items()):
        class_id = int(getattr(dev, "classId", 0) or 0) & 0xFFFF
        if class_id >> 8 != NETWORK_CLASS:
            continue
        key = pci_id.lower()
        nic = ObservedHostNic(
            pci_id=pci_id, device_name=str(getattr(dev, "deviceName", "") or ""),
            vendor_name=str(getattr(dev, "vendorName", "") or ""),
            vendor_id=int(dev.vendorId or 0) & 0xFFFF, device_id=int(dev.deviceId or 0) & 0xFFFF,
            vmnic=vmnics.get(key), numa_node=numa.get(key), pci_root=root(pci_id),
        )
        _passthru(nic, passthru.get(key))
        out.append(nic)
    return out


def _passthru(nic: ObservedHostNic, info: Any) -> None:
    if info is None:
        return
    nic.passthru_capable = bool(getattr(info, "passthruCapable", False))
    nic.passthru_enabled = bool(getattr(info, "passthruEnabled", False))
    nic.passthru_active = bool(getattr(info, "passthruActive", False))
    nic.sriov_capable = bool(getattr(info, "sriovCapable", False))
    nic.sriov_enabled = bool(getattr(info, "sriovEnabled", False))
    nic.sriov_active = bool(getattr(info, "sriovActive", False))
    nic.num_vf = int(getattr(info, "numVirtualFunction", 0) or 0)
    nic.num_vf_requested = int(getattr(info, "numVirtualFunctionRequested", 0) or 0)
    nic.max_vf = int(getattr(info, "maxVirtualFunctionSupported", 0) or 0)


def place_gpus(gpus: Iterable[ObservedGpu], obj: Obj, pci: dict[str, Any]) -> None:
    """Each GPU's NUMA node and root bridge (GPUDirect RDMA wants its NIC beside it)."""
    numa = numa_nodes(obj)
    root = pci_roots(pci)
    for gpu in gpus:
        gpu.numa_node = numa.get(gpu.pci_id.lower())
        gpu.pci_root = root(gpu.pci_id)


# ------------------------------------------------------------------------------------------------- VMs


class NetworkNames:
    """Port group names by network moid and by distributed port group key, built once for all VMs."""

    def __init__(self, nets: Iterable[ObservedNetwork]):
        nets = list(nets)
        self.by_moid = {n.moid: n.name for n in nets}
        self.by_key = {n.key: n.name for n in nets if n.key is not None}


def vm_nics(devices: Iterable[Any], nets: list[ObservedNetwork] | NetworkNames) -> list[ObservedNic]:
    """A VM's ethernet cards and its passthrough devices that are not vGPUs (pyVmomi objects, from the lean
    reader or pyVmomi itself)."""
    t = device_types()
    names = nets if isinstance(nets, NetworkNames) else NetworkNames(nets)
    by_moid, by_key = names.by_moid, names.by_key
    out = []
    for dev in devices:
        if isinstance(dev, t.ethernet):
            out.append(_card(dev, by_moid, by_key))
        elif isinstance(dev, t.passthrough):
            nic = _passthrough(dev)
            if nic is not None:
                out.append(nic)
    return sorted(out, key=lambda n: n.key)


def _card(dev: Any, by_moid: dict[str, str], by_key: dict[str, str]) -> ObservedNic:
    t = device_types()
    kind = _card_kind(dev)
    nic = ObservedNic(key=int(dev.key), kind=kind, mac=str(dev.macAddress or ""),
                      mac_manual=str(dev.addressType or "").lower() == "manual")
    slot = getattr(dev, "slotInfo", None)
    nic.slot = int(slot.pciSlotNumber) if isinstance(slot, t.slot_info) else None
    backing = dev.backing
    if isinstance(backing, t.port_backing) and backing.port:
        nic.network = by_key.get(str(backing.port.portgroupKey or ""), "")
    elif isinstance(backing, t.network_backing):
        nic.network = by_moid.get(_moid(backing.network), str(backing.deviceName or ""))
    if kind == AdapterType.PVRDMA:
        nic.protocol = getattr(dev, "deviceProtocol", None) or None
    if kind == AdapterType.SRIOV:
        sriov = getattr(dev, "sriovBacking", None)
        pf = getattr(sriov, "physicalFunctionBacking", None) if sriov is not None else None
        nic.device = str(pf.id).lower() if pf is not None and pf.id else None
    return nic


def _card_kind(dev: Any) -> str:
    t = device_types()
    if isinstance(dev, t.vrdma):
        return AdapterType.PVRDMA
    if isinstance(dev, t.sriov):
        return AdapterType.SRIOV
    if isinstance(dev, t.vmxnet3):
        return AdapterType.VMXNET3
    return type(dev).__name__.rsplit(".", 1)[-1].removeprefix("Virtual").lower()


def _passthrough(dev: Any) -> ObservedNic | None:
    """A passthrough device that is not a vGPU: a DirectPath device by id, or Dynamic DirectPath by allowed ids
    (its assigned id when it runs). Whether it is a NIC the planner decides from the host's PCI classes."""
    t = device_types()
    backing = dev.backing
    if isinstance(backing, t.device_backing):
        return ObservedNic(key=int(dev.key), kind=AdapterType.PASSTHROUGH, device=str(backing.id or "").lower() or None)
    if isinstance(backing, t.dynamic_backing):
        allowed = [[int(a.vendorId) & 0xFFFF, int(a.deviceId) & 0xFFFF] for a in backing.allowedDevice or []]
        assigned = str(backing.assignedId).lower() if backing.assignedId else None
        return ObservedNic(key=int(dev.key), kind=AdapterType.PASSTHROUGH, device=assigned, allowed=allowed)
    return None
