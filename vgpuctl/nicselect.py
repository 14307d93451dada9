"""Which of a host's physical NICs a name selects: a PCI id (`0000:3b:00.0`), the host's device name (`vmnic4`),
or a model (`ConnectX-7`, matched in the host's PCI device name or by the known device ids of
vgpuctl/data/network.yaml). The `sriov` host setting and the VMs' SR-IOV and passthrough adapters name NICs this
way. Pure.
"""

from __future__ import annotations

import re
from typing import Literal

from vgpuctl.lazyclass import dataclass
from vgpuctl.model import ObservedHost, ObservedHostNic
from vgpuctl.netrules import network_rules

_BUS_ID = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_VMNIC = re.compile(r"vmnic\d+")
_BRACKET = re.compile(r"\[([^\]]+)\]")


def nic_model(nic: ObservedHostNic) -> str:
    """`ConnectX-7` for "MT2910 Family [ConnectX-7]"; the whole name when it has no bracketed model."""
    m = _BRACKET.search(nic.device_name)
    return m.group(1).strip() if m else nic.device_name


def is_virtual_function(nic: ObservedHostNic) -> bool:
    rules = network_rules()
    return (nic.vendor_id == rules.nic_vendor_id and nic.device_id in rules.vf_device_ids) or \
        "virtual function" in nic.device_name.lower()


def selects(select: DeviceSelect, nic: ObservedHostNic) -> bool:
    if select.by == "pci":
        return nic.pci_id.lower() == select.value
    if select.by == "vmnic":
        return nic.vmnic == select.value
    wanted = select.value.lower()
    if wanted in (nic_model(nic).lower(), nic.device_name.lower()):
        return True
    known = next((m for m in network_rules().nic_models if m.model.lower() == wanted), None)
    return known is not None and nic.vendor_id == network_rules().nic_vendor_id and nic.device_id == known.device_id


def matching_nics(host: ObservedHost, select: DeviceSelect) -> list[ObservedHostNic]:
    """The host's physical NICs (not virtual functions) the selection names, by PCI id."""
    return sorted((n for n in host.nics if not is_virtual_function(n) and selects(select, n)), key=lambda n: n.pci_id)


@dataclass(frozen=True)
class DeviceSelect:
    """How an SR-IOV or passthrough adapter names its physical NIC: a PCI id (`0000:3b:00.0`), the host's
    device name (`vmnic4`), or a model (`ConnectX-7`, matched in the host's PCI device name)."""

    by: Literal["pci", "vmnic", "model"]
    value: str

    @classmethod
    def parse(cls, text: str) -> DeviceSelect:
        if _BUS_ID.fullmatch(text):
            return cls("pci", text.lower())
        if _VMNIC.fullmatch(text):
            return cls("vmnic", text)
        return cls("model", text)

    def __str__(self) -> str:
        return self.value


def describe_nics(host: ObservedHost) -> str:
    pfs = [n for n in host.nics if not is_virtual_function(n)]
    return ", ".join(f"{n.pci_id} {nic_model(n)}" + (f" ({n.vmnic})" if n.vmnic else "") for n in pfs)


