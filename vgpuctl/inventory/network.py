"""The inventory's network parts of a VM entry: `network:` (its adapters) and `guest.identity` (hostname and
addresses a clone is given). Pydantic models only; the checks that need several entries are in
vgpuctl.inventory.netchecks, the plan in vgpuctl.vms.network and vgpuctl.vms.identity.

Every field is documented in inventory.example.yaml and docs/multi-node.md.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from vgpuctl.domain import AdapterType, IdentityMethod, RoceProtocol
from vgpuctl.lazyclass import dataclass
from vgpuctl.nicselect import DeviceSelect
from vgpuctl.strictmodel import KeyPath, Lax, StrictModel

_BUS_ID = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_VMNIC = re.compile(r"vmnic\d+")
_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_DOMAIN = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
DEFAULT_DOMAIN = "localdomain"  # LinuxPrep.domain is required by the API; used when the entry sets none
MAX_POOL = 65536  # addresses in one pool: a /16 is plenty for one entry's VMs


# ------------------------------------------------------------------------------------------------- adapters


class AdapterSpec(StrictModel):
    """One network adapter: `{portgroup, type: vmxnet3}`, `{portgroup, type: pvrdma, protocol}`,
    `{type: sriov, device, portgroup}` or `{type: passthrough, device}`."""

    type: Lax[AdapterType] = AdapterType.VMXNET3
    portgroup: str | None = None
    protocol: Lax[RoceProtocol] | None = None  # pvrdma only; rocev2 when not set
    device: str | None = None  # sriov, passthrough: PCI id, vmnic name or model
    mac: str | None = None  # a fixed MAC address (vSphere: addressType manual); generated when not set
    traffic_class: int | None = Field(default=None, ge=0, le=255)  # RDMA adapters: NCCL_IB_TC in the guest

    @field_validator("mac")
    @classmethod
    def _mac(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not _MAC.fullmatch(v):
            raise ValueError(f"must be a MAC address like 00:50:56:12:34:56 (got {v!r})")
        if int(v[:2], 16) & 1:
            raise ValueError(f"must be a unicast MAC address (the first octet's lowest bit is set in {v!r})")
        return v.lower()

    @model_validator(mode="after")
    def _fields_of_type(self) -> AdapterSpec:
        kind = self.type
        needs_portgroup = kind is not AdapterType.PASSTHROUGH
        if needs_portgroup and not self.portgroup:
            raise ValueError(f"a {kind} adapter needs 'portgroup'")
        if kind is AdapterType.PASSTHROUGH and self.portgroup is not None:
            raise ValueError("a passthrough NIC has no port group: the guest drives the whole physical NIC")
        if kind.is_physical and not self.device:
            raise ValueError(f"a {kind} adapter needs 'device': a PCI id, a vmnic name or a NIC model")
        if not kind.is_physical and self.device is not None:
            raise ValueError(f"'device' applies to sriov and passthrough adapters, not {kind}")
        if self.protocol is not None and kind is not AdapterType.PVRDMA:
            raise ValueError("'protocol' applies to pvrdma adapters only")
        if self.traffic_class is not None and not kind.is_rdma:
            raise ValueError("'traffic_class' applies to RDMA adapters (pvrdma, sriov, passthrough)")
        if self.mac is not None and kind is AdapterType.PASSTHROUGH:
            raise ValueError("a passthrough NIC keeps its own MAC address")
        return self

    @property
    def kind(self) -> AdapterType:
        return self.type

    @property
    def roce_protocol(self) -> RoceProtocol:
        return self.protocol if self.protocol is not None else RoceProtocol.ROCEV2

    @property
    def select(self) -> DeviceSelect | None:
        return DeviceSelect.parse(self.device) if self.device else None

    def label(self) -> str:
        """How plans and messages name it: `pvrdma on roce-fabric`, `sriov ConnectX-7 on roce-fabric`."""
        parts = [str(self.kind)]
        if self.device:
            parts.append(self.device)
        if self.portgroup:
            parts.append(f"on {self.portgroup}")
        return " ".join(parts)


# ------------------------------------------------------------------------------------------------- identity


@dataclass(frozen=True)
class AddressPool:
    """`10.0.40.10-10.0.40.99/24` (or one address `10.0.40.10/24`): consecutive IPv4 addresses of one subnet."""

    first: ipaddress.IPv4Address
    last: ipaddress.IPv4Address
    network: ipaddress.IPv4Network

    @classmethod
    def parse(cls, text: str) -> AddressPool:
        body, slash, prefix = text.strip().partition("/")
        if not slash or not prefix.isdigit():
            raise ValueError(f"must be FIRST-LAST/PREFIX, e.g. 10.0.40.10-10.0.40.99/24 (got {text!r})")
        first_text, dash, last_text = body.partition("-")
        try:
            first = ipaddress.IPv4Address(first_text.strip())
            last = ipaddress.IPv4Address(last_text.strip()) if dash else first
            network = ipaddress.IPv4Network(f"{first}/{prefix}", strict=False)
        except ValueError as exc:
            raise ValueError(f"not an IPv4 address range {text!r}: {exc}") from None
        if int(last) < int(first):
            raise ValueError(f"the range ends before it starts ({text!r})")
        if last not in network:
            raise ValueError(f"{last} is outside {network} ({text!r})")
        if network.prefixlen < 31 and (first == network.network_address or last == network.broadcast_address):
            raise ValueError(f"the range includes the network or broadcast address of {network} ({text!r})")
        if int(last) - int(first) + 1 > MAX_POOL:
            raise ValueError(f"holds more than {MAX_POOL} addresses ({text!r})")
        return cls(first, last, network)

    @property
    def size(self) -> int:
        return int(self.last) - int(self.first) + 1

    def address(self, i: int) -> ipaddress.IPv4Address:
        return ipaddress.IPv4Address(int(self.first) + i)

    def overlaps(self, other: AddressPool) -> bool:
        return int(self.first) <= int(other.last) and int(other.first) <= int(self.last)

    def __contains__(self, ip: object) -> bool:
        return isinstance(ip, ipaddress.IPv4Address) and int(self.first) <= int(ip) <= int(self.last)

    def __str__(self) -> str:
        return f"{self.first}-{self.last}/{self.network.prefixlen}"


class StaticAddresses(StrictModel):
    """`{pool, gateway, dns}`, or DHCP (written `dhcp` in the file)."""

    pool: str | None = None
    gateway: str | None = None
    dns: list[str] = Field(default_factory=list)
    dhcp: bool = False

    @field_validator("pool")
    @classmethod
    def _pool(cls, v: str | None) -> str | None:
        if v is not None:
            AddressPool.parse(v)
        return v

    @field_validator("gateway")
    @classmethod
    def _gateway(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                ipaddress.IPv4Address(v)
            except ValueError:
                raise ValueError(f"must be an IPv4 address (got {v!r})") from None
        return v

    @field_validator("dns", mode="before")
    @classmethod
    def _dns(cls, v: Any) -> Any:
        v = [v] if isinstance(v, str) else v
        for server in v or []:
            try:
                ipaddress.ip_address(server)
            except (ValueError, TypeError):
                raise ValueError(f"must list IP addresses of DNS servers (got {server!r})") from None
        return v

    @model_validator(mode="after")
    def _gateway_in_subnet(self) -> StaticAddresses:
        if self.dhcp or self.pool is None:
            if self.pool is not None or self.gateway is not None or self.dns or not self.dhcp:
                raise ValueError("give either `dhcp` or {pool: FIRST-LAST/PREFIX, gateway, dns}")
            return self
        pool = self.addresses
        if self.gateway is not None:
            gw = ipaddress.IPv4Address(self.gateway)
            if gw not in pool.network:
                raise ValueError(f"gateway {gw} is outside the pool's subnet {pool.network}")
            if gw in pool:
                raise ValueError(f"gateway {gw} is inside the pool {pool}: a VM would be given its address")
        return self

    @property
    def addresses(self) -> AddressPool:
        assert self.pool is not None
        return AddressPool.parse(self.pool)

    @property
    def static(self) -> bool:
        return self.pool is not None


class IdentitySpec(StrictModel):
    """`guest.identity`: a clone's hostname (its VM name) and addresses, by vSphere guest customization or by
    cloud-init guestinfo metadata, never both."""

    method: Lax[IdentityMethod] = IdentityMethod.CUSTOMIZATION
    hostname: Literal["from-name"] = "from-name"
    domain: str | None = None
    addresses: dict[str, StaticAddresses] = Field(default_factory=dict)  # port group -> `dhcp` or a pool

    @field_validator("addresses", mode="before")
    @classmethod
    def _dhcp(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        out = {}
        for key, how in v.items():
            if isinstance(how, str):
                if how != "dhcp":
                    raise ValueError(f"{key}: must be `dhcp` or {{pool: FIRST-LAST/PREFIX, gateway, dns}} "
                                     f"(got {how!r})")
                how = {"dhcp": True}
            out[key] = how
        return out

    @field_validator("domain")
    @classmethod
    def _domain(cls, v: str | None) -> str | None:
        if v is not None and (len(v) > 253 or not _DOMAIN.fullmatch(v)):
            raise ValueError(f"must be a DNS domain like example.com (got {v!r})")
        return v

    @property
    def how(self) -> IdentityMethod:
        return self.method

    @property
    def domain_name(self) -> str:
        return self.domain or DEFAULT_DOMAIN


def hostname_problem(name: str) -> str | None:
    """Why a VM name cannot be its guest's hostname (an RFC 1123 label), or None."""
    if not _LABEL.fullmatch(name):
        return (f"VM name {name!r} is not a valid hostname (letters, digits and '-', at most 63, not starting or "
                "ending with '-'): rename the VM or leave out guest.identity")
    return None


def adapter_path(index: int, j: int, *rest: str | int) -> KeyPath:
    return ("vms", index, "network", j, *rest)
