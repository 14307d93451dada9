"""Network adapters and guest identity in vSphere's terms: device specs for planned NicChanges (vmxnet3,
VirtualVmxnet3Vrdma, VirtualSriovEthernetCard, VirtualPCIPassthrough with a DirectPath or Dynamic DirectPath
backing), the guest customization spec of a clone (Linux prep), the host's PCI passthrough system ids
(QueryConfigTarget), and a clone's customization outcome from vCenter's events.

Builders are pure (MoRefs from observed moids); the two calls say so. Sources: docs/multi-node.md.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vgpuctl.domain import AdapterType, NetworkKind
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import GuestIdentity, NicChange, ObservedHost, ObservedNetwork, Op

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

NIC_KEY_BASE = -1000  # temporary keys of added adapters (vGPUs take -1, -2, ...)
CUSTOMIZATION_DONE = ("CustomizationSucceeded",)
CUSTOMIZATION_FAILED = ("CustomizationFailed", "CustomizationLinuxIdentityFailed", "CustomizationNetworkSetupFailed",
                        "CustomizationSysprepFailed", "CustomizationUnknownFailure")


@dataclass(frozen=True)
class NicTarget:
    """Where the adapters go: the datacenter's port groups, the VM's host (its NICs), and the host's PCI
    passthrough system ids by PCI id (only needed for SR-IOV and DirectPath adds)."""

    networks: Sequence[ObservedNetwork]
    host: ObservedHost | None = None
    system_ids: Mapping[str, str] | None = None


def needs_system_ids(changes: Sequence[NicChange]) -> bool:
    return any(c.op == Op.ADD and c.kind in (AdapterType.SRIOV, AdapterType.PASSTHROUGH) and not c.allowed
               for c in changes)


def nic_specs(changes: Sequence[NicChange], existing: Mapping[int, Any], target: NicTarget, stub: Any) -> list[Any]:
    """One VirtualDeviceSpec per change: adds with keys from NIC_KEY_BASE down, edits and removals of the
    existing devices (`existing`: key -> device as read from the VM)."""
    from pyVmomi import vim

    op = vim.vm.device.VirtualDeviceSpec.Operation
    specs = []
    for i, change in enumerate(changes):
        if change.op == Op.ADD:
            device = _new_device(change, NIC_KEY_BASE - i, target, stub)
            specs.append(vim.vm.device.VirtualDeviceSpec(operation=op.add, device=device))
        elif change.op == Op.REMOVE:
            device = existing.get(change.key or 0) or vim.vm.device.VirtualEthernetCard(key=change.key)
            specs.append(vim.vm.device.VirtualDeviceSpec(operation=op.remove, device=device))
        else:
            device = existing.get(change.key or 0)
            if device is None:
                raise ValueError(f"adapter change of key {change.key} without the device")
            if change.portgroup:
                device.backing = _backing(change.portgroup, target, stub)
            if change.protocol and isinstance(device, vim.vm.device.VirtualVmxnet3Vrdma):
                device.deviceProtocol = change.protocol
            specs.append(vim.vm.device.VirtualDeviceSpec(operation=op.edit, device=device))
    return specs


def _new_device(change: NicChange, key: int, target: NicTarget, stub: Any) -> Any:
    from pyVmomi import vim

    if change.kind == AdapterType.PASSTHROUGH:
        return vim.vm.device.VirtualPCIPassthrough(key=key, backing=_pci_backing(change, target))
    cls = {AdapterType.PVRDMA: vim.vm.device.VirtualVmxnet3Vrdma,
           AdapterType.SRIOV: vim.vm.device.VirtualSriovEthernetCard}.get(AdapterType(change.kind),
                                                                         vim.vm.device.VirtualVmxnet3)
    card = cls(key=key, backing=_backing(change.portgroup or "", target, stub),
               connectable=vim.vm.device.VirtualDevice.ConnectInfo(startConnected=True, allowGuestControl=True))
    if change.mac:
        card.addressType, card.macAddress = "manual", change.mac
    else:
        card.addressType = "generated"
    if change.kind == AdapterType.PVRDMA and change.protocol:
        card.deviceProtocol = change.protocol
    if change.kind == AdapterType.SRIOV:
        card.allowGuestOSMtuChange = True
        card.sriovBacking = vim.vm.device.VirtualSriovEthernetCard.SriovBackingInfo(
            physicalFunctionBacking=_pci_backing(change, target))
    return card


def _backing(portgroup: str, target: NicTarget, stub: Any) -> Any:
    from pyVmomi import vim

    net = next((n for n in target.networks if n.name == portgroup), None)
    if net is None:
        raise ValueError(f"port group {portgroup!r} was not observed")
    if net.kind == NetworkKind.DISTRIBUTED:
        return vim.vm.device.VirtualEthernetCard.DistributedVirtualPortBackingInfo(
            port=vim.dvs.PortConnection(switchUuid=net.switch_uuid or "", portgroupKey=net.key))
    return vim.vm.device.VirtualEthernetCard.NetworkBackingInfo(deviceName=net.name,
                                                               network=vim.Network(net.moid, stub))


def _pci_backing(change: NicChange, target: NicTarget) -> Any:
    """DirectPath: the device by id, its device id as lower-case hex (what vSphere clients send) and the host's
    system id; Dynamic DirectPath: the allowed vendor and device ids."""
    from pyVmomi import vim

    if change.allowed:
        return vim.vm.device.VirtualPCIPassthrough.DynamicBackingInfo(
            deviceName="", allowedDevice=[vim.vm.device.VirtualPCIPassthrough.AllowedDevice(vendorId=v, deviceId=d)
                                          for v, d in change.allowed])
    pci = change.device or ""
    nic = next((n for n in (target.host.nics if target.host else []) if n.pci_id.lower() == pci.lower()), None)
    if nic is None:
        raise ValueError(f"NIC {pci or change.select} not found on the VM's host")
    vendor = nic.vendor_id - 0x10000 if nic.vendor_id > 0x7FFF else nic.vendor_id  # xsd:short
    return vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo(
        id=nic.pci_id, deviceId=f"{nic.device_id:x}", vendorId=vendor,
        systemId=(target.system_ids or {}).get(nic.pci_id.lower(), ""), deviceName="")


def system_ids(session: Session, host: ObservedHost) -> dict[str, str]:
    """PCI id -> the system id vSphere wants in a DirectPath backing, from the host's QueryConfigTarget (its
    pciPassthrough and sriov lists). One call, made only for SR-IOV and DirectPath adds."""
    from pyVmomi import vim

    browser = vim.EnvironmentBrowser(host.environment_browser_moid, session.stub)
    target = session.invoke(browser.QueryConfigTarget, vim.HostSystem(host.moid, session.stub))
    out: dict[str, str] = {}
    for info in [*(getattr(target, "pciPassthrough", None) or []), *(getattr(target, "sriov", None) or [])]:
        device = getattr(info, "pciDevice", None)
        if device is not None and getattr(info, "systemId", None):
            out[str(device.id).lower()] = str(info.systemId)
    return out


# --------------------------------------------------------------------------------------- customization


def customization_spec(identity: GuestIdentity) -> Any:
    """Linux prep: the hostname fixed to the VM's name, the domain, one adapter mapping per ethernet adapter in
    PCI slot order (DHCP or a fixed address), DNS servers global (Linux customization reads them only there)."""
    from pyVmomi import vim

    c = vim.vm.customization
    mapping = []
    for adapter in identity.adapters:
        settings = c.IPSettings(ip=c.DhcpIpGenerator())
        if adapter.address is not None:
            net = ipaddress.IPv4Network(f"{adapter.address}/{adapter.prefix}", strict=False)
            settings = c.IPSettings(ip=c.FixedIp(ipAddress=adapter.address), subnetMask=str(net.netmask))
            if adapter.gateway:
                settings.gateway = [adapter.gateway]
        mapping.append(c.AdapterMapping(adapter=settings))
    return c.Specification(
        identity=c.LinuxPrep(hostName=c.FixedName(name=identity.hostname), domain=identity.domain, hwClockUTC=True),
        globalIPSettings=c.GlobalIPSettings(dnsServerList=identity.dns or None),
        nicSettingMap=mapping,
    )


@dataclass(frozen=True)
class CustomizationResult:
    succeeded: bool
    message: str  # the failure event's text and reason, or ""


def customization_result(session: Session, vm: Any, since: Any) -> CustomizationResult | None:
    """The clone's customization outcome from vCenter's events since `since` (the server's time before the
    power-on), or None while it has not reported. One QueryEvents."""
    from pyVmomi import vim

    manager = session.content.eventManager
    spec = vim.event.EventFilterSpec(
        entity=vim.event.EventFilterSpec.ByEntity(entity=vm, recursion="self"),
        eventTypeId=[*CUSTOMIZATION_DONE, *CUSTOMIZATION_FAILED],
        time=vim.event.EventFilterSpec.ByTime(beginTime=since) if since is not None else None,
    )
    events = session.invoke(manager.QueryEvents, spec) or []
    for event in sorted(events, key=lambda e: int(e.key)):
        name = type(event).__name__.rsplit(".", 1)[-1]
        if name in CUSTOMIZATION_FAILED:
            reason = getattr(event, "reason", None)
            text = str(event.fullFormattedMessage or name)
            log = getattr(event, "logLocation", None)
            detail = "; ".join(x for x in (f"reason {reason}" if reason else "", f"log {log}" if log else "") if x)
            return CustomizationResult(False, f"{name}: {text}" + (f" ({detail})" if detail else ""))
    if any(type(e).__name__.rsplit(".", 1)[-1] in CUSTOMIZATION_DONE for e in events):
        return CustomizationResult(True, "")
    return None


def ethernet_macs(devices: Sequence[Any]) -> list[str]:
    """MAC addresses of a VM's ethernet adapters in PCI slot order (then key): the order its identity's adapters
    follow."""
    from pyVmomi import vim

    cards = [d for d in devices if isinstance(d, vim.vm.device.VirtualEthernetCard)]

    def slot(d: Any) -> tuple[int, int]:
        info = getattr(d, "slotInfo", None)
        number = getattr(info, "pciSlotNumber", None) if info is not None else None
        return (int(number) if number is not None else 1 << 30, int(d.key))

    return [str(d.macAddress or "") for d in sorted(cards, key=slot)]
