"""A host's network facts for the SR-IOV and PVRDMA host settings: plain data, read one host at a time by
vgpuctl.vsphere.hostnet and only for a host whose inventory entry sets one of them (`HostFacts.network`)."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from vgpuctl.lazyclass import dataclass
from vgpuctl.model import ObservedHostNic


@dataclass
class RdmaDevice:
    """An RDMA device of the host (`config.network.rdmaDevice`, API 7.0) and the uplink it is paired with."""

    device: str  # vmrdma0
    uplink: str | None  # vmnic4
    state: str | None  # HostRdmaDeviceConnectionState: active, down, ...


@dataclass
class Vmknic:
    """A VMkernel adapter (`config.network.vnic`)."""

    device: str  # vmk1
    portgroup: str  # a standard port group's name; "" on a distributed switch
    switch_uuid: str | None = None  # the distributed switch it is on


@dataclass
class HostNetFacts:
    """What one host says about its network. `pvrdma_vmknic` None: the host has no `Net.PVRDMAVmknic` option;
    `rdma_devices` None: not reported (before API 7.0); `rebind` None: not reported (before API 7.0)."""

    nics: list[ObservedHostNic] = field(default_factory=list)
    rebind: bool | None = None  # HostCapability.deviceRebindWithoutRebootSupported
    vmknics: list[Vmknic] = field(default_factory=list)
    switches: list[str] = field(default_factory=list)  # distributed switches the host is a member of
    rdma_devices: list[RdmaDevice] | None = None
    pvrdma_vmknic: str | None = None  # Net.PVRDMAVmknic ("" when unset)
    rulesets: dict[str, bool] = field(default_factory=dict)  # firewall ruleset key -> enabled

    def vmknic(self, name: str) -> Vmknic | None:
        return next((v for v in self.vmknics if v.device == name), None)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostNetFacts:
        d = dict(data)
        d["nics"] = [ObservedHostNic(**n) for n in d.get("nics") or []]
        d["vmknics"] = [Vmknic(**v) for v in d.get("vmknics") or []]
        if d.get("rdma_devices") is not None:
            d["rdma_devices"] = [RdmaDevice(**r) for r in d["rdma_devices"]]
        return cls(**d)
