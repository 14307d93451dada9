"""Per-host network calls of the SR-IOV and PVRDMA host settings (vgpuctl.settings.sriov, .pvrdma).

Read, one host at a time and only for a host whose inventory entry sets one of them: its NICs as the bulk read
sees them (vgpuctl.vsphere.netobserve), whether it can rebind devices without a reboot
(`HostCapability.deviceRebindWithoutRebootSupported`, API 7.0), its VMkernel adapters, distributed switches and
RDMA devices (`config.network`), the advanced option `Net.PVRDMAVmknic` (`OptionManager.QueryOptions`) and
its firewall rulesets (`HostFirewallSystem.firewallInfo`). Written: `HostPciPassthruSystem.UpdatePassthruConfig`
with `HostSriovConfig`, `OptionManager.UpdateOptions`, `HostFirewallSystem.EnableRuleset`. docs/multi-node.md
gives the sources.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vgpuctl.errors import VsphereFault
from vgpuctl.netrules import network_rules
from vgpuctl.profiles import api_at_least
from vgpuctl.records.netfacts import HostNetFacts, RdmaDevice, Vmknic
from vgpuctl.vsphere.host import call_vim, object_props
from vgpuctl.vsphere.netobserve import host_nics
from vgpuctl.vsphere.objects import Obj
from vgpuctl.vsphere.readlist import HOST_NET_PROPS

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

NET_PATHS = [
    *HOST_NET_PROPS,
    "hardware.pciDevice",
    "capability",
    "config.network",
    "configManager.advancedOption",
    "configManager.firewallSystem",
    "config.product.apiVersion",
]
RDMA_DEVICE_API = (7, 0)  # HostNetworkInfo.rdmaDevice


def read_net_state(session: Session, moid: str) -> HostNetFacts:
    """Three calls: the host's properties, its advanced option, its firewall's rulesets."""
    props = object_props(session, moid, "HostSystem", NET_PATHS)
    obj = Obj(None, "HostSystem", props)
    pci = {str(d.id): d for d in props.get("hardware.pciDevice") or []}
    state = HostNetFacts(nics=host_nics(obj, pci))
    capability = props.get("capability")
    rebind = getattr(capability, "deviceRebindWithoutRebootSupported", None) if capability is not None else None
    state.rebind = bool(rebind) if rebind is not None else None
    _network(state, props.get("config.network"), api_at_least(props.get("config.product.apiVersion"), RDMA_DEVICE_API))
    options = props.get("configManager.advancedOption")
    if options is not None:
        state.pvrdma_vmknic = _option(session, moid, options, network_rules().pvrdma_host.advanced_option)
    firewall = props.get("configManager.firewallSystem")
    if firewall is not None:
        info = object_props(session, str(firewall._moId), "HostFirewallSystem", ["firewallInfo"]).get("firewallInfo")
        state.rulesets = {str(r.key): bool(r.enabled) for r in getattr(info, "ruleset", None) or []}
    return state


def _network(state: HostNetFacts, net: Any, rdma: bool) -> None:
    if net is None:
        return
    for vnic in getattr(net, "vnic", None) or []:
        port = getattr(vnic.spec, "distributedVirtualPort", None) if vnic.spec is not None else None
        state.vmknics.append(Vmknic(str(vnic.device), str(vnic.portgroup or ""),
                                        str(port.switchUuid) if port is not None else None))
    state.switches = sorted(str(p.dvsName or p.dvsUuid) for p in getattr(net, "proxySwitch", None) or [])
    if not rdma:
        return
    uplinks = {str(p.key): str(p.device) for p in getattr(net, "pnic", None) or []}
    state.rdma_devices = []
    for dev in net.rdmaDevice or []:
        paired = getattr(dev.backing, "pairedUplink", None) if dev.backing is not None else None
        info = dev.connectionInfo
        state.rdma_devices.append(RdmaDevice(str(dev.device), uplinks.get(str(paired)) if paired else None,
                                             str(info.state) if info is not None else None))


def _option(session: Session, moid: str, manager: Any, key: str) -> str | None:
    """The option's value ("" when empty); None when the host has no such option (InvalidName)."""
    try:
        found = call_vim(session, moid, manager.QueryOptions, key)
    except VsphereFault as err:
        if err.fault_type.endswith("InvalidName"):
            return None
        raise
    for opt in found or []:
        if str(opt.key) == key:
            return str(opt.value or "")
    return None


# ------------------------------------------------------------------------------------------------ writes


def update_sriov(session: Session, moid: str, nics: dict[str, tuple[int, bool]]) -> None:
    """One UpdatePassthruConfig: per NIC (PCI id -> (virtual functions, passthrough enabled now)) SR-IOV on with
    that many VFs, or off for 0; the NIC's passthrough setting is sent as the host has it (the type requires it).
    Without device rebind the host applies it at the next reboot."""
    from pyVmomi import vim

    manager = object_props(session, moid, "HostSystem", ["configManager.pciPassthruSystem"]).get(
        "configManager.pciPassthruSystem")
    if manager is None:
        raise VsphereFault("NotSupported", "the host has no PCI passthrough system", moid)
    configs = [vim.host.SriovConfig(id=pci, passthruEnabled=passthru, sriovEnabled=vfs > 0, numVirtualFunction=vfs)
               for pci, (vfs, passthru) in sorted(nics.items())]
    call_vim(session, moid, manager.UpdatePassthruConfig, configs)


def passthru_enabled(session: Session, moid: str) -> dict[str, bool]:
    """PCI id -> whether passthrough is enabled for it (config.pciPassthruInfo)."""
    infos = object_props(session, moid, "HostSystem", ["config.pciPassthruInfo"]).get("config.pciPassthruInfo") or []
    return {str(i.id).lower(): bool(i.passthruEnabled) for i in infos}


def set_pvrdma_vmknic(session: Session, moid: str, vmknic: str) -> None:
    """Net.PVRDMAVmknic = vmknic (UpdateOptions on the host's advanced options; the option's name is in
    vgpuctl/data/network.yaml)."""
    from pyVmomi import vim

    path = "configManager.advancedOption"
    manager = object_props(session, moid, "HostSystem", [path]).get(path)
    if manager is None:
        raise VsphereFault("NotSupported", "the host has no advanced options", moid)
    key = network_rules().pvrdma_host.advanced_option
    call_vim(session, moid, manager.UpdateOptions, [vim.option.OptionValue(key=key, value=vmknic)])


def enable_ruleset(session: Session, moid: str, ruleset: str) -> None:
    firewall = object_props(session, moid, "HostSystem", ["configManager.firewallSystem"]).get(
        "configManager.firewallSystem")
    if firewall is None:
        raise VsphereFault("NotSupported", "the host has no firewall system", moid)
    call_vim(session, moid, firewall.EnableRuleset, ruleset)
