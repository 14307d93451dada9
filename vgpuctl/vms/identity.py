"""A new VM's guest identity: its hostname (the VM's name) and, per ethernet adapter in PCI slot order, DHCP or
the static address its entry's pool gives it. Pure: the plan's GuestIdentity, the addresses it would take
that another VM already has, and the cloud-init metadata written to guestinfo (cloud-init's VMware datasource:
docs/multi-node.md). vSphere guest customization is built from the same GuestIdentity in vgpuctl.vsphere.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence

from vgpuctl.inventory.netchecks import pool_address
from vgpuctl.inventory.schema import VmSpec
from vgpuctl.inventory.yamlpos import KeyPath
from vgpuctl.model import GuestIdentity, IdentityAdapter, Observed
from vgpuctl.netrules import network_rules

GUESTINFO_METADATA = "guestinfo.metadata"
GUESTINFO_ENCODING = "guestinfo.metadata.encoding"


def plan_identity(spec: VmSpec, ethernet: Sequence[str]) -> GuestIdentity | None:
    """The identity a clone of this entry is given; `ethernet` lists its ethernet adapters' port groups in PCI
    slot order (vgpuctl.vms.network.NetPlan.ethernet). None when the entry asks for none."""
    wanted = spec.identity
    if wanted is None:
        return None
    adapters = []
    for portgroup in ethernet:
        how = wanted.addresses.get(portgroup)
        address = pool_address(spec, portgroup)
        if how is not None and address is not None:
            ip, prefix = address
            adapters.append(IdentityAdapter(portgroup, ip, prefix, how.gateway, list(how.dns)))
        else:
            adapters.append(IdentityAdapter(portgroup))
    return GuestIdentity(str(wanted.how), spec.name, wanted.domain_name, adapters)


def address_conflicts(spec: VmSpec, identity: GuestIdentity, observed: Observed,
                      own_key: str | None) -> list[tuple[KeyPath, str]]:
    """Static addresses of the identity that a VM other than this one reports in its guest (VMware Tools)."""
    owners: dict[str, str] = {}
    for key, vm in observed.vms.items():
        if key != own_key:
            for ip in vm.guest_ips:
                owners.setdefault(ip, vm.name)
    out = []
    for adapter in identity.adapters:
        if adapter.address is not None and adapter.address in owners:
            path: KeyPath = ("vms", spec._index, "guest", "identity", "addresses", adapter.portgroup, "pool")
            out.append((path, f"address {adapter.address} (for {spec.name} on {adapter.portgroup}) is in use by VM "
                              f"{owners[adapter.address]}"))
    return out


# ------------------------------------------------------------------------------------------- cloud-init


def cloud_init_metadata(identity: GuestIdentity, macs: Sequence[str]) -> dict[str, object]:
    """cloud-init meta-data (VMware datasource): instance-id and local-hostname from the VM's name, and a
    network config version 2 with one ethernet per adapter, matched by MAC address (`macs` in the identity's
    adapter order, as the clone has them)."""
    ethernets: dict[str, object] = {}
    for i, (adapter, mac) in enumerate(zip(identity.adapters, macs, strict=False)):
        eth: dict[str, object] = {"match": {"macaddress": mac.lower()}}
        if adapter.address is None:
            eth["dhcp4"] = True
        else:
            eth["addresses"] = [f"{adapter.address}/{adapter.prefix}"]
            if adapter.gateway:
                eth["routes"] = [{"to": "default", "via": adapter.gateway}]
            if adapter.dns:
                eth["nameservers"] = {"addresses": list(adapter.dns)}
        ethernets[f"nic{i:02d}"] = eth
    return {
        "instance-id": identity.hostname,
        "local-hostname": identity.hostname,
        "network": {"version": 2, "ethernets": ethernets},
    }


def guestinfo(identity: GuestIdentity, macs: Sequence[str]) -> dict[str, str | None]:
    """extraConfig keys for cloud-init's VMware datasource: the metadata as base64 JSON (JSON is YAML)."""
    text = json.dumps(cloud_init_metadata(identity, macs), sort_keys=True)
    encoded = base64.b64encode(text.encode()).decode()
    limit = network_rules().cloud_init_metadata_max_bytes
    if len(encoded) > limit:
        raise ValueError(f"cloud-init metadata of {identity.hostname} is {len(encoded)} bytes; at most {limit}")
    return {GUESTINFO_METADATA: encoded, GUESTINFO_ENCODING: "base64"}
