"""The network rules of vgpuctl/data/network.yaml as typed values: what each adapter type needs (hardware
version, reserved memory, a distributed switch), what GPUDirect RDMA allows and sets, the PVRDMA host
prerequisites, and the ConnectX NIC ids. Pure; the file is read once. Sources: the file and docs/multi-node.md.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from vgpuctl.datafiles import data_folder, load_yaml_data
from vgpuctl.domain import AdapterType
from vgpuctl.lazyclass import dataclass


@dataclass(frozen=True)
class AdapterRule:
    min_hardware_version: int
    reserve_memory: bool
    needs_distributed_switch: bool = False
    protocol_min_hardware_version: int | None = None
    min_api: str | None = None
    source: str = ""


@dataclass(frozen=True)
class GpudirectRule:
    series: tuple[str, ...]
    allow_mig_backed: bool
    adapters: tuple[AdapterType, ...]
    extra_config: dict[str, str]
    source: str


@dataclass(frozen=True)
class NicModel:
    model: str
    device_id: int
    vf_device_id: int
    name: str


@dataclass(frozen=True)
class PvrdmaHostRule:
    advanced_option: str
    firewall_ruleset: str
    firewall_protocol: str
    firewall_first_port: int
    firewall_last_port: int


@dataclass(frozen=True)
class SriovFirmwareRule:
    """What a NIC needs before ESXi can give it virtual functions: SR-IOV enabled in its firmware."""

    vendor_id: int  # whose NICs take `fix` (NVIDIA/Mellanox ConnectX)
    fix: str
    other_vendors_fix: str

    def fix_for(self, vendor_id: int) -> str:
        return self.fix if vendor_id == self.vendor_id else self.other_vendors_fix


@dataclass(frozen=True)
class NetworkRules:
    adapters: dict[str, AdapterRule]  # vmxnet3, pvrdma, sriov, passthrough, passthrough_dynamic
    gpudirect: GpudirectRule
    pvrdma_host: PvrdmaHostRule
    nic_vendor_id: int
    nic_vendor_name: str
    nic_models: tuple[NicModel, ...]
    cloud_init_metadata_max_bytes: int
    sources: dict[str, dict[str, str]]
    sriov_firmware: SriovFirmwareRule
    vmotion: dict[AdapterType, tuple[bool, str]]  # adapter kind -> (a running VM with it moves, the source key)

    def moves(self, kind: AdapterType) -> bool:
        """Whether vSphere moves a running VM with a device of this kind to another host (data/network.yaml)."""
        return self.vmotion[kind][0]

    def adapter(self, kind: AdapterType, dynamic: bool = False) -> AdapterRule:
        key = "passthrough_dynamic" if dynamic and kind is AdapterType.PASSTHROUGH else str(kind)
        return self.adapters[key]

    def nic_model(self, device_id: int) -> NicModel | None:
        return next((m for m in self.nic_models if device_id in (m.device_id, m.vf_device_id)), None)

    @property
    def vf_device_ids(self) -> frozenset[int]:
        return frozenset(m.vf_device_id for m in self.nic_models)

    def nic_ids(self, text: str) -> tuple[int, int] | None:
        """(vendor id, device id) of a NIC model (`ConnectX-7`) or of `VVVV:DDDD` in hex; None when unknown."""
        m = re.fullmatch(r"([0-9a-fA-F]{4}):([0-9a-fA-F]{4})", text.strip())
        if m:
            return int(m.group(1), 16), int(m.group(2), 16)
        model = next((n for n in self.nic_models if n.model.lower() == text.strip().lower()), None)
        return (self.nic_vendor_id, model.device_id) if model is not None else None


def firmware_sriov_off(sriov_capable: bool, max_vf: int) -> bool:
    """SR-IOV is off in a NIC's firmware as far as vSphere can tell: it reports the NIC without SR-IOV, or with
    maxVirtualFunctionSupported 0 (data/network.yaml, sriov_firmware)."""
    return not sriov_capable or max_vf == 0


def firmware_fix(vendor_id: int) -> str:
    """How to turn SR-IOV on in a NIC's firmware (the mlxconfig step for a ConnectX)."""
    return network_rules().sriov_firmware.fix_for(vendor_id)


def rules_path() -> Path:
    return data_folder() / "network.yaml"


@cache
def network_rules(path: Path | None = None) -> NetworkRules:
    data = load_yaml_data(path or rules_path())
    gdr = data["gpudirect_rdma"]
    host = data["pvrdma_host"]
    nics = data["nics"]
    return NetworkRules(
        adapters={name: _adapter(raw) for name, raw in data["adapters"].items()},
        gpudirect=GpudirectRule(
            series=tuple(str(s).lower() for s in gdr["series"]),
            allow_mig_backed=bool(gdr["allow_mig_backed"]),
            adapters=tuple(AdapterType(a) for a in gdr["adapters"]),
            extra_config={str(k): str(v) for k, v in gdr["extra_config"].items()},
            source=str(gdr["source"]),
        ),
        pvrdma_host=PvrdmaHostRule(
            advanced_option=str(host["advanced_option"]),
            firewall_ruleset=str(host["firewall_ruleset"]),
            firewall_protocol=str(host["firewall_ports"]["protocol"]),
            firewall_first_port=int(host["firewall_ports"]["first"]),
            firewall_last_port=int(host["firewall_ports"]["last"]),
        ),
        nic_vendor_id=int(nics["vendor_id"]),
        nic_vendor_name=str(nics["vendor_name"]),
        nic_models=tuple(NicModel(str(m["model"]), int(m["device_id"]), int(m["vf_device_id"]), str(m["name"]))
                         for m in nics["models"]),
        cloud_init_metadata_max_bytes=int(data["identity"]["cloud_init_metadata_max_bytes"]),
        sources=dict(data["sources"]),
        vmotion={AdapterType(k): (bool(v["moves"]), str(v["source"])) for k, v in data["vmotion"].items()},
        sriov_firmware=SriovFirmwareRule(int(data["sriov_firmware"]["vendor_id"]), str(data["sriov_firmware"]["fix"]),
                                         str(data["sriov_firmware"]["other_vendors_fix"])),
    )


def _adapter(raw: dict[str, Any]) -> AdapterRule:
    return AdapterRule(
        min_hardware_version=int(raw["min_hardware_version"]),
        reserve_memory=bool(raw["reserve_memory"]),
        needs_distributed_switch=bool(raw.get("needs_distributed_switch", False)),
        protocol_min_hardware_version=raw.get("protocol_min_hardware_version"),
        min_api=raw.get("min_api"),
        source=str(raw.get("source", "")),
    )


def hardware_version(text: str) -> int | None:
    """`vmx-20` -> 20; None when the VM's version is not of that form."""
    m = re.fullmatch(r"vmx-(\d+)", text or "")
    return int(m.group(1)) if m else None
