"""NVLink-connected GPU sets as vSphere shows them, and which hosts are worth asking.

vSphere lists NVLink device groups per host in EnvironmentBrowser.QueryConfigTarget(host)
.vendorDeviceGroupInfo: one group per NVLink-connected set with its links up, each component device naming
its physical GPU (deviceInfo.label = PCI id, as gpusim reports it). That costs one call per host, so
`observe` asks only the hosts `nvlink_hosts_for` names. Pure functions; no pyVmomi import.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vgpuctl.inventory import Inventory
    from vgpuctl.model import Observed

_PCI_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def nvlink_hosts_for(inventory: Inventory, observed: Observed) -> set[str]:
    """Observed hosts where a VM with `nvlink: required` is or may be powered on.

    An existing VM is admitted on its current host (vgpuctl does not move VMs); a new VM on its named host,
    else on any host of its cluster.
    """
    from vgpuctl.model import folder_path

    hosts: set[str] = set()
    for vm in inventory.vms:
        if vm.nvlink != "required":
            continue
        current = [observed.vms[k] for k in observed.named(vm.name, folder_path(getattr(vm, "folder", None)))]
        if any(not c.is_template and c.host for c in current):
            hosts.update(c.host for c in current if not c.is_template and c.host)
        elif vm.host:
            hosts.add(vm.host)
        elif vm.cluster:
            hosts.update(observed.clusters.get(vm.cluster, []))
    return {h for h in hosts if h in observed.hosts}


def component_pci_id(component: Any) -> str | None:
    """The physical GPU of a device group component (its device's deviceInfo.label), if it names one."""
    info = getattr(getattr(component, "device", None), "deviceInfo", None)
    label = str(getattr(info, "label", "") or "").strip().lower()
    return label if _PCI_ID.match(label) else None


def sets_from_device_groups(groups: Iterable[Any], gpu_ids: Iterable[str]) -> list[list[str]]:
    """NVLink sets (PCI ids, sorted; sets ordered by lowest PCI id) from vendorDeviceGroupInfo entries.

    Only components naming one of the host's GPUs count; a group of fewer than two such GPUs is no set.
    Groups that share a GPU (one set listed under several profiles) are one set.
    """
    known = {g.lower() for g in gpu_ids}
    merged: list[set[str]] = []
    for group in groups:
        ids = {p for c in getattr(group, "componentDeviceInfo", None) or [] if (p := component_pci_id(c)) in known}
        if len(ids) < 2:
            continue
        overlapping = [s for s in merged if s & ids]
        for s in overlapping:
            ids |= s
            merged.remove(s)
        merged.append(ids)
    return sorted((sorted(s) for s in merged), key=lambda s: s[0])
