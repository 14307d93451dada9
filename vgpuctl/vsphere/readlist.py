"""What the bulk read asks vCenter for: the property paths of each managed object type, the types read with the
lean XML reader and their page size. Plain data: observe sends these, and so does the early read
(vgpuctl.vsphere.earlyread) before the command's modules are loaded.
"""

from __future__ import annotations

from collections.abc import Sequence

PAGE_SIZE = 1000
# The lean reads' pages are smaller: each next page is asked for as soon as the page before names its token, so
# vCenter prepares page N+1 while vgpuctl parses page N; with pages of 1,000 a farm of 1,000 VMs would come in
# one page and nothing would overlap. 512: a farm of 1,000 VMs and its templates in two pages (one more round
# trip per further 512 VMs or hosts, sent while a page is parsed). Smaller pages bring the first one sooner (the
# server gathers every object before it, then encodes page by page) but add round trips and gain nothing
# measurable: against gpusim, 1,000 VMs, ten runs of each alternating in one process, `plan` took 0.667 s with
# pages of 512, 0.657 s with 334 and with 256 (medians; the run-to-run spread is larger).
LEAN_PAGE_SIZE = 512

# The network part (vsphere/netobserve.py reads them)
NETWORK_PROPS = ["name", "parent", "host"]  # Network (and DistributedVirtualPortgroup, a subtype)
PORTGROUP_PROPS = ["key", "config.distributedVirtualSwitch"]  # DistributedVirtualPortgroup
SWITCH_PROPS = ["name", "parent", "uuid"]  # DistributedVirtualSwitch
HOST_NET_PROPS = ["config.network.pnic", "config.pciPassthruInfo", "hardware.numaInfo"]
VM_NET_PROPS = ["guest.hostName"]
# The port groups a host reaches, read from the host's side too: vCenter lists the pair on both sides
# (`Network.host`, `HostSystem.network`), govmomi's simulator lists its "VM Network" only on the hosts' side.
HOST_PORTGROUP_PROPS = ["network"]

# What every host is read for. A host setting's own property that is not here is read with the small types
# (`bulk_reads`) and lands in ObservedHost.properties: the setting's module is the one place that says it.
HOST_PROPS = [
    "name",
    "parent",
    "runtime.connectionState",
    "runtime.inMaintenanceMode",
    "runtime.powerState",
    "config.product.apiVersion",
    "summary.config.product.apiVersion",
    "config.graphicsInfo",
    "config.graphicsConfig",
    "config.sharedPassthruGpuTypes",
    "hardware.pciDevice",  # the lean reader keeps the GPUs graphicsInfo names, the NICs, the bridges above them
    "configManager.graphicsManager",
    "configManager.imageConfigManager",  # the installed packages (the vGPU Manager): one call a host, no read
    "customValue",  # vgpuctl's unfinished host work and run leases (vgpuctl.vsphere.workrecord)
    "availableField",
    *HOST_NET_PROPS,  # physical NICs, SR-IOV and passthrough state, NUMA nodes (vsphere/netobserve.py)
    *HOST_PORTGROUP_PROPS,  # the port groups it reaches (with Network.host: vsphere/netobserve.py)
]

VM_PROPS = [
    "name",
    "parent",
    "config.template",
    "config.hardware.device",  # the lean reader keeps only PCI passthrough devices and network adapters (rawread)
    "config.hardware.numCPU",
    "config.hardware.memoryMB",
    "config.memoryReservationLockedToMax",
    "config.memoryAllocation.reservation",
    "config.firmware",
    "config.extraConfig",
    "config.version",
    "config.changeVersion",
    "runtime.powerState",
    "runtime.host",
    "guest.net",
    "guest.ipAddress",
    "guest.guestState",
    "guest.toolsRunningStatus",
    *VM_NET_PROPS,
]

TYPE_PROPS = {
    "Datacenter": ["name", "parent", "vmFolder"],
    "Folder": ["name", "parent"],
    "ComputeResource": ["name", "parent", "resourcePool", "environmentBrowser"],  # ClusterComputeResource too
    "Network": NETWORK_PROPS,  # port groups; DistributedVirtualPortgroup is a Network too
    "DistributedVirtualPortgroup": PORTGROUP_PROPS,
    "DistributedVirtualSwitch": SWITCH_PROPS,
    "HostSystem": HOST_PROPS,
    "VirtualMachine": VM_PROPS,
}

LEAN_TYPES = ("HostSystem", "VirtualMachine")  # one read each, sent together: the hosts, answered sooner, first


Reads = list[tuple[list[tuple[str, list[str]]], int]]  # (types and their properties, page size), read by read


def bulk_reads(host_properties: Sequence[str] = ()) -> Reads:
    """observe's reads over its view, in the order it sends them: the small types (through pyVmomi), with the host
    settings' own HostSystem properties that HOST_PROPS lacks; then the hosts and the VMs (the lean reader), which
    the settings never change, so the early read's lean reads are observe's whatever the settings read."""
    extra = settings_own(host_properties)
    small = [(t, p) for t, p in TYPE_PROPS.items() if t not in LEAN_TYPES]
    if extra:
        small.append(("HostSystem", extra))
    return [(small, PAGE_SIZE), *(([(t, TYPE_PROPS[t])], LEAN_PAGE_SIZE) for t in LEAN_TYPES)]


def settings_own(host_properties: Sequence[str]) -> list[str]:
    """The host settings' properties that HOST_PROPS lacks (once each, in order): read with the small types, kept in
    ObservedHost.properties."""
    return [p for p in dict.fromkeys(host_properties) if p not in HOST_PROPS]


def merged(reads: Reads) -> list[tuple[str, list[str]]]:
    """The reads' types and properties as one read (each type once, its properties in order)."""
    props: dict[str, list[str]] = {}
    for type_props, _ in reads:
        for type_name, paths in type_props:
            props.setdefault(type_name, [])
            props[type_name] += [p for p in paths if p not in props[type_name]]
    return list(props.items())
