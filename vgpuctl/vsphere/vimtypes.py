"""The pyVmomi device classes the bulk read builds and tests, looked up once.

Each `vim.vm.device.X` walks pyVmomi's lazy type modules (and a function-level `from pyVmomi import vim` costs
an import lookup): for a farm of 1,000 VMs, done per device, that cost more than building the devices.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace


@functools.cache
def device_types() -> SimpleNamespace:
    from pyVmomi import vim

    device = vim.vm.device
    return SimpleNamespace(
        passthrough=device.VirtualPCIPassthrough,
        ethernet=device.VirtualEthernetCard,
        vmxnet3=device.VirtualVmxnet3,
        vrdma=device.VirtualVmxnet3Vrdma,
        sriov=device.VirtualSriovEthernetCard,
        backing_info=device.VirtualDevice.BackingInfo,
        vmiop=device.VirtualPCIPassthrough.VmiopBackingInfo,
        device_backing=device.VirtualPCIPassthrough.DeviceBackingInfo,
        dynamic_backing=device.VirtualPCIPassthrough.DynamicBackingInfo,
        allowed_device=device.VirtualPCIPassthrough.AllowedDevice,
        group_info=device.VirtualDevice.DeviceGroupInfo,
        slot_info=device.VirtualDevice.PciBusSlotInfo,
        network_backing=device.VirtualEthernetCard.NetworkBackingInfo,
        port_backing=device.VirtualEthernetCard.DistributedVirtualPortBackingInfo,
        sriov_backing=device.VirtualSriovEthernetCard.SriovBackingInfo,
        port_connection=vim.dvs.PortConnection,
        network=vim.Network,
    )
