"""NVLink-connected GPU sets as vSphere shows them, and which hosts are worth asking.

vSphere lists NVLink device groups per host in EnvironmentBrowser.QueryConfigTarget(host)
.vendorDeviceGroupInfo: one group per NVLink-connected set with its links up, each component device naming
its physical GPU (deviceInfo.label = PCI id, as gpusim reports it), and the group sizes a set offers (the
vGPU counts an NVLink VM may have there). That costs one call per host, so `observe` asks only the hosts
`vgpuctl.farm.state.nvlink_hosts_for` names. Pure functions; no pyVmomi import.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import field
from typing import TYPE_CHECKING, Any

from vgpuctl.lazyclass import dataclass
from vgpuctl.model import ObservedDeviceGroup

if TYPE_CHECKING:
    pass

_PCI_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# vCenter spells the vendor "Nvidia" (`Nvidia:2@nvidia_h100l-94c%NVLink`); any case is taken
_GROUP_NAME = re.compile(r"^Nvidia:(?P<n>\d+)@(?P<profile>[^%]+)%NVLink$", re.IGNORECASE)


def component_pci_id(component: Any) -> str | None:
    """The physical GPU of a device group component (its device's deviceInfo.label), if it names one."""
    info = getattr(getattr(component, "device", None), "deviceInfo", None)
    label = str(getattr(info, "label", "") or "").strip().lower()
    return label if _PCI_ID.match(label) else None


@dataclass(frozen=True)
class GroupedSet:
    """One NVLink-connected set as the host offers it: its GPUs (PCI ids, sorted), the sizes of the device
    groups listed over them (sorted) and the profiles their names offer them for (sorted). vSphere attaches a
    group whole, so the sizes are the vGPU counts an NVLink VM may have there, of one of those profiles."""

    gpus: list[str]
    group_sizes: list[int]
    profiles: list[str] = field(default_factory=list)


def group_profile(group: Any) -> str | None:
    """The profile a device group is offered for, from its name (`Nvidia:2@grid_a100-40c%NVLink`)."""
    m = _GROUP_NAME.match(str(getattr(group, "deviceGroupName", "") or "").strip())
    return m["profile"] if m else None


def device_group_sets(groups: Iterable[Any], gpu_ids: Iterable[str]) -> list[GroupedSet]:
    """NVLink sets (ordered by lowest PCI id) with their group sizes, from vendorDeviceGroupInfo entries.

    Only components naming one of the host's GPUs count; a group of fewer than two such GPUs is no set.
    Groups that share a GPU (one set listed under several profiles, or an NVSwitch set's groups of 2, 4 and
    8 GPUs) are one set; a group's size is the number of GPUs it names, its profile the one its name gives.
    """
    known = {g.lower() for g in gpu_ids}
    merged: list[tuple[set[str], set[int], set[str]]] = []
    for group in groups:
        ids = {p for c in getattr(group, "componentDeviceInfo", None) or [] if (p := component_pci_id(c)) in known}
        if len(ids) < 2:
            continue
        sizes = {len(ids)}
        profile = group_profile(group)
        profiles = {profile} if profile else set()
        for entry in [m for m in merged if m[0] & ids]:
            ids |= entry[0]
            sizes |= entry[1]
            profiles |= entry[2]
            merged.remove(entry)
        merged.append((ids, sizes, profiles))
    out = [GroupedSet(sorted(ids), sorted(sizes), sorted(profiles)) for ids, sizes, profiles in merged]
    return sorted(out, key=lambda s: s.gpus[0])


def sets_from_device_groups(groups: Iterable[Any], gpu_ids: Iterable[str]) -> list[list[str]]:
    """NVLink sets (PCI ids, sorted; sets ordered by lowest PCI id) from vendorDeviceGroupInfo entries."""
    return [s.gpus for s in device_group_sets(groups, gpu_ids)]



def observed_groups(groups: Iterable[Any]) -> list[ObservedDeviceGroup]:
    """vendorDeviceGroupInfo entries as plain data: each group's name and its members' vGPU profiles."""
    out = []
    for info in groups:
        components = list(getattr(info, "componentDeviceInfo", None) or [])
        profiles = [getattr(getattr(c.device, "backing", None), "vgpu", None) for c in components]
        out.append(ObservedDeviceGroup(str(info.deviceGroupName), tuple(str(p) for p in profiles)))
    return out
