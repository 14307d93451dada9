"""Pure builders: a planned VmChange -> vim.vm.ConfigSpec, a CloneSpec -> vim.vm.CloneSpec.

No I/O: MoRefs are made from moids already observed, so the builders are unit-testable without a server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpuctl.model import CloneSpec, DeviceChange, FieldChange, Op, VmChange

# FieldChange.field -> ConfigSpec property. The planner may use either the vSphere or the model's name.
FIELD_MAP = {
    "memoryReservationLockedToMax": "memoryReservationLockedToMax",
    "memory_reservation_locked": "memoryReservationLockedToMax",
    "firmware": "firmware",
    "numCPUs": "numCPUs",
    "numCPU": "numCPUs",
    "cpus": "numCPUs",
    "memoryMB": "memoryMB",
    "memory_mb": "memoryMB",
    "numCoresPerSocket": "numCoresPerSocket",
}
_CASTS = {"numCPUs": int, "memoryMB": int, "numCoresPerSocket": int, "memoryReservationLockedToMax": bool}

NVLINK_GROUP_KEY = -100  # temporary key of the first vendor device group a request adds (-101 the next)
DEFAULT_GROUP_NAME = "nvlink"


def config_field(change: FieldChange) -> tuple[str, Any]:
    prop = FIELD_MAP.get(change.field)
    if prop is None:
        raise ValueError(f"unknown VM field in plan: {change.field!r}")
    value = change.new
    cast = _CASTS.get(prop)
    return prop, cast(value) if cast is not None and value is not None else value


def vgpu_device(profile: str, key: int) -> Any:
    from pyVmomi import vim

    return vim.vm.device.VirtualPCIPassthrough(
        key=key, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=profile)
    )


def device_specs(
    devices: list[DeviceChange],
    existing: Mapping[int, Any] | None = None,
    group_names: Mapping[int, str] | None = None,
) -> tuple[list[Any], Any]:
    """Device specs for vGPU adds (negative temporary keys) and removes (by key), plus deviceGroups or None.

    `existing` maps device keys to the device objects read from the VM; a removal sends that object, or a bare
    VirtualPCIPassthrough with the key when it is not known. Adds with the same `DeviceChange.group` form one
    NVLink vendor device group (all members in this one request); `group_names` gives the vendor device group
    name per group number (from the host's QueryConfigTarget), DEFAULT_GROUP_NAME otherwise.
    """
    from pyVmomi import vim

    specs: list[Any] = []
    group_keys: dict[int, int] = {}
    members: dict[int, int] = {}
    added = 0
    for change in devices:
        if change.op == Op.REMOVE:
            if change.key is None:
                raise ValueError(f"vGPU removal of {change.profile} without a device key")
            device = (existing or {}).get(change.key) or vim.vm.device.VirtualPCIPassthrough(key=change.key)
            specs.append(vim.vm.device.VirtualDeviceSpec(operation="remove", device=device))
        elif change.op == Op.ADD:
            added += 1
            device = vgpu_device(change.profile, -added)
            group = getattr(change, "group", None)
            if group is not None:
                key = group_keys.setdefault(group, NVLINK_GROUP_KEY - len(group_keys))
                device.deviceGroupInfo = vim.vm.device.VirtualDevice.DeviceGroupInfo(
                    groupInstanceKey=key, sequenceId=members.get(group, 0)
                )
                members[group] = members.get(group, 0) + 1
            specs.append(vim.vm.device.VirtualDeviceSpec(operation="add", device=device))
        else:
            raise ValueError(f"device change must add or remove, not {change.op!r}")
    if not group_keys:
        return specs, None
    names = group_names or {}
    groups = vim.vm.VirtualDeviceGroups(
        deviceGroup=[
            vim.vm.VirtualDeviceGroups.VendorDeviceGroup(
                groupInstanceKey=key, deviceGroupName=names.get(group, DEFAULT_GROUP_NAME)
            )
            for group, key in group_keys.items()
        ]
    )
    return specs, groups


def extra_config(values: Mapping[str, str | None]) -> list[Any]:
    """OptionValues; None becomes an empty value, which removes the key."""
    from pyVmomi import vim

    return [vim.option.OptionValue(key=k, value="" if v is None else str(v)) for k, v in sorted(values.items())]


def config_spec(
    change: VmChange,
    existing: Mapping[int, Any] | None = None,
    group_names: Mapping[int, str] | None = None,
    change_version: str = "",
) -> Any | None:
    """The one ReconfigVM spec carrying all of a VM's changes; None when nothing needs reconfiguring.

    `change_version`: the VM's config.changeVersion as read; vCenter applies the spec only while the VM still has
    it, and refuses it with ConcurrentAccess once another change came first."""
    from pyVmomi import vim

    if not change.needs_reconfigure:
        return None
    spec = vim.vm.ConfigSpec(changeVersion=change_version or None)
    for field_change in change.fields:
        prop, value = config_field(field_change)
        setattr(spec, prop, value)
    if change.devices:
        specs, groups = device_specs(change.devices, existing, group_names)
        spec.deviceChange = specs
        if groups is not None:
            spec.deviceGroups = groups
    if change.extra_config:
        spec.extraConfig = extra_config(change.extra_config)
    return spec


def clone_spec(
    clone: CloneSpec,
    stub: Any,
    *,
    pool_moid: str,
    host_moid: str | None = None,
    device_changes: list[Any] | None = None,
    customization: Any | None = None,
) -> Any:
    """CloneVM spec: relocate into the cluster's (or host's) resource pool, not powered on, cpus/memory set, the
    network adapters' device changes and the guest customization (vgpuctl.vsphere.vmnet) when given.

    The folder is CloneVM_Task's own argument, not part of this spec.
    """
    from pyVmomi import vim

    location = vim.vm.RelocateSpec(pool=vim.ResourcePool(pool_moid, stub))
    if host_moid:
        location.host = vim.HostSystem(host_moid, stub)
    spec = vim.vm.CloneSpec(location=location, template=False, powerOn=False)
    sizes: dict[str, int] = {}
    if clone.cpus is not None:
        sizes["numCPUs"] = int(clone.cpus)
    if clone.memory_mb is not None:
        sizes["memoryMB"] = int(clone.memory_mb)
    if sizes or device_changes:
        spec.config = vim.vm.ConfigSpec(**sizes, deviceChange=device_changes or [])
    if customization is not None:
        spec.customization = customization
    return spec


def revert_spec(before: list[Any], now: list[Any], change_version: str = "") -> Any:
    """A ReconfigVM spec removing the vGPUs `now` has beyond `before`, giving changed ones their old profile and
    adding back those it lost; conditional on `change_version` (the VM's as `now` was read) when given."""
    from pyVmomi import vim

    from vgpuctl.vsphere.observe import split_devices

    def vgpus(devices: list[Any]) -> dict[int, tuple[str, Any]]:
        profiles = {v.key: v.profile for v in split_devices(devices)[0]}
        return {int(d.key): (profiles[int(d.key)], d) for d in devices if int(d.key) in profiles}

    old, new = vgpus(before), vgpus(now)
    op = vim.vm.device.VirtualDeviceSpec.Operation
    spec = vim.vm.device.VirtualDeviceSpec
    changes = [spec(operation=op.remove, device=d) for k, (_, d) in new.items() if k not in old]
    changes += [spec(operation=op.edit, device=d) for k, (p, d) in old.items() if k in new and new[k][0] != p]
    for i, d in enumerate(d for k, (_, d) in old.items() if k not in new):
        d.key = -(i + 1)
        changes.append(spec(operation=op.add, device=d))
    return vim.vm.ConfigSpec(deviceChange=changes, changeVersion=change_version or None)
