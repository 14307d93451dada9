"""The inventory's network keys when the file is read: adapter fields by type, GPUDirect RDMA's rules, identities
against adapters and names, address pools (exhausted, overlapping), fixed MAC addresses; each FILE:LINE:COL."""

from __future__ import annotations

import base64
import json

import pytest

from vgpuctl.errors import InventoryErrors
from vgpuctl.inventory import load_inventory_text, validate
from vgpuctl.inventory.netchecks import pool_address
from vgpuctl.inventory.network import AddressPool
from vgpuctl.model import GuestIdentity, IdentityAdapter
from vgpuctl.nicselect import DeviceSelect
from vgpuctl.vms.identity import cloud_init_metadata, guestinfo

pytestmark = pytest.mark.unit


def errors(text: str) -> list[str]:
    with pytest.raises(InventoryErrors) as info:
        validate(load_inventory_text("apiVersion: vgpuctl/v1\nvms:\n" + text, "inv.yaml"))
    return [e.located() for e in info.value.errors]


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        ("{type: vmxnet3}", "inv.yaml:5:9: vms[0].network[0]: a vmxnet3 adapter needs 'portgroup'"),
        ("{type: sriov, portgroup: roce}", "a sriov adapter needs 'device'"),
        ("{type: passthrough, device: vmnic4, portgroup: roce}", "a passthrough NIC has no port group"),
        ("{type: vmxnet3, portgroup: a, protocol: rocev2}", "'protocol' applies to pvrdma adapters only"),
        ("{type: pvrdma, portgroup: a, protocol: rocev3}",
         "inv.yaml:5:48: vms[0].network[0].protocol: must be 'rocev1' or 'rocev2'"),
        ("{type: infiniband, portgroup: a}", "must be 'vmxnet3', 'pvrdma', 'sriov' or 'passthrough'"),
        ("{portgroup: a, traffic_class: 106}", "'traffic_class' applies to RDMA adapters"),
        ("{type: pvrdma, portgroup: a, traffic_class: 256}", "traffic_class: must be at most 255 (got 256)"),
        ("{portgroup: a, mac: '01:50:56:00:00:01'}", "must be a unicast MAC address"),
        ("{portgroup: a, mac: 'nope'}", "must be a MAC address"),
        ("{portgroup: a, device: vmnic4}", "'device' applies to sriov and passthrough adapters, not vmxnet3"),
    ],
)
def test_adapter_fields_by_type(adapter: str, message: str) -> None:
    found = errors(f"  - name: a\n    network:\n      - {adapter}\n")
    assert len(found) == 1 and message in found[0], found


def test_device_selection_forms() -> None:
    assert DeviceSelect.parse("0000:3B:00.0") == DeviceSelect("pci", "0000:3b:00.0")
    assert DeviceSelect.parse("vmnic4") == DeviceSelect("vmnic", "vmnic4")
    assert DeviceSelect.parse("ConnectX-7") == DeviceSelect("model", "ConnectX-7")


@pytest.mark.parametrize(
    ("vm", "message"),
    [
        ("    vgpus: {profile: grid_a100-3-20c}\n    network: [{type: sriov, device: vmnic4, portgroup: r}]\n",
         "inv.yaml:6:21: vms[0].gpudirect_rdma: GPUDirect RDMA is refused on MIG-backed vGPUs (grid_a100-3-20c)"),
        ("    vgpus: {profile: grid_a100-40q}\n    network: [{type: sriov, device: vmnic4, portgroup: r}]\n",
         "C-series vGPUs only (grid_a100-40q is Q-series)"),
        ("    vgpus: {profile: grid_a100-40c}\n    network: [{type: pvrdma, portgroup: r}]\n",
         "needs an SR-IOV or passthrough RDMA adapter in 'network' (PVRDMA is paravirtual"),
        ("    network: [{type: passthrough, device: vmnic4}]\n", "GPUDirect RDMA needs the VM's vGPUs listed"),
    ],
)
def test_gpudirect_rdma_rules(vm: str, message: str) -> None:
    found = errors(f"  - name: a\n{vm}    gpudirect_rdma: true\n")
    assert len(found) == 1 and message in found[0], found


def test_gpudirect_rdma_on_whole_and_fractional_time_sliced_c_series_is_accepted() -> None:
    for profile in ("grid_a100-40c", "grid_a100-10c"):
        load_inventory_text(f"apiVersion: vgpuctl/v1\nvms:\n  - name: a\n    vgpus: {{profile: {profile}}}\n"
                            "    network: [{type: sriov, device: ConnectX-7, portgroup: r}]\n"
                            "    gpudirect_rdma: true\n")


POOLS = """\
  - name: a-{01..03}
    network: [{portgroup: r}]
    guest: {identity: {addresses: {r: {pool: 10.0.40.10-10.0.40.11/24}}}}
  - name: b
    network: [{portgroup: r}]
    guest: {identity: {addresses: {r: {pool: 10.0.40.11-10.0.40.20/24, gateway: 10.0.40.1}}}}
"""


def test_exhausted_and_overlapping_pools() -> None:
    assert errors(POOLS) == [
        "inv.yaml:5:46: vms[0].guest.identity.addresses.r.pool: pool 10.0.40.10-10.0.40.11/24 holds 2 address(es) for "
        "3 VMs: exhausted",
        "inv.yaml:8:46: vms[1].guest.identity.addresses.r.pool: pool 10.0.40.11-10.0.40.20/24 overlaps pool "
        "10.0.40.10-10.0.40.11/24 of vms[0] (line 5): two VMs would be given one address",
    ]


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ("10.0.40.20-10.0.40.10/24", "the range ends before it starts"),
        ("10.0.40.10-10.0.41.10/24", "10.0.41.10 is outside 10.0.40.0/24"),
        ("10.0.40.0-10.0.40.10/24", "the range includes the network or broadcast address"),
        ("10.0.40.10", "must be FIRST-LAST/PREFIX"),
        ("fd00::1-fd00::9/64", "not an IPv4 address range"),
    ],
)
def test_bad_pools(pool: str, message: str) -> None:
    found = errors(f"  - name: a\n    network: [{{portgroup: r}}]\n"
                   f"    guest: {{identity: {{addresses: {{r: {{pool: '{pool}'}}}}}}}}\n")
    assert len(found) == 1 and message in found[0], found


def test_a_gateway_inside_the_pool_or_outside_the_subnet() -> None:
    inside = errors("  - name: a\n    network: [{portgroup: r}]\n"
                    "    guest: {identity: {addresses: {r: {pool: 10.0.40.10-10.0.40.99/24, gateway: 10.0.40.50}}}}\n")
    assert "gateway 10.0.40.50 is inside the pool" in inside[0]
    outside = errors("  - name: a\n    network: [{portgroup: r}]\n"
                     "    guest: {identity: {addresses: {r: {pool: 10.0.40.10-10.0.40.99/24, gateway: 10.0.41.1}}}}\n")
    assert "gateway 10.0.41.1 is outside the pool's subnet 10.0.40.0/24" in outside[0]


def test_addresses_must_name_one_adapter_and_the_name_must_be_a_hostname() -> None:
    found = errors("  - name: bad_name\n    network: [{portgroup: r}, {portgroup: r, type: pvrdma}]\n"
                   "    guest: {identity: {addresses: {r: dhcp, s: dhcp}}}\n")
    assert found == [
        "inv.yaml:5:13: vms[0].guest.identity.hostname: VM name 'bad_name' is not a valid hostname (letters, digits "
        "and '-', at most 63, not starting or ending with '-'): rename the VM or leave out guest.identity",
        "inv.yaml:5:39: vms[0].guest.identity.addresses.r: 2 adapters are on port group 'r': the addresses cannot "
        "say which one they are for",
        "inv.yaml:5:48: vms[0].guest.identity.addresses.s: no adapter of this VM is on port group 's' (its port "
        "groups: r)",
    ]


def test_fixed_macs_on_a_range_or_twice() -> None:
    found = errors("  - name: a-{1..2}\n    network: [{portgroup: r, mac: '00:50:56:00:00:01'}]\n"
                   "  - name: b\n    network: [{portgroup: r, mac: '00:50:56:00:00:02'}]\n"
                   "  - name: c\n    network: [{portgroup: r, mac: '00:50:56:00:00:02'}]\n")
    assert [e.split(": ", 2)[2] for e in found] == [
        "a fixed MAC address on a name range gives 2 VMs the address 00:50:56:00:00:01",
        "MAC address 00:50:56:00:00:02 is also given to vms[1].network[0]",
    ]


def test_each_vm_of_a_range_takes_the_next_address() -> None:
    inv = load_inventory_text("apiVersion: vgpuctl/v1\nvms:\n" + POOLS.replace("a-{01..03}", "a-{01..02}")
                              .replace("10.0.40.11-10.0.40.20", "10.0.40.12-10.0.40.20"))
    assert [pool_address(vm, "r") for vm in inv.vms] == [("10.0.40.10", 24), ("10.0.40.11", 24), ("10.0.40.12", 24)]
    assert AddressPool.parse("10.0.40.10-10.0.40.99/24").size == 90


def test_cloud_init_metadata_matches_adapters_by_mac() -> None:
    identity = GuestIdentity("cloud-init", "train-01", "localdomain", [
        IdentityAdapter("mgmt"), IdentityAdapter("roce", "10.0.40.10", 24, "10.0.40.1", ["10.0.0.53"])])
    meta = cloud_init_metadata(identity, ["00:50:56:AA:00:01", "00:50:56:aa:00:02"])
    assert meta == {
        "instance-id": "train-01",
        "local-hostname": "train-01",
        "network": {"version": 2, "ethernets": {
            "nic00": {"match": {"macaddress": "00:50:56:aa:00:01"}, "dhcp4": True},
            "nic01": {"match": {"macaddress": "00:50:56:aa:00:02"}, "addresses": ["10.0.40.10/24"],
                      "routes": [{"to": "default", "via": "10.0.40.1"}], "nameservers": {"addresses": ["10.0.0.53"]}},
        }},
    }
    keys = guestinfo(identity, ["00:50:56:aa:00:01", "00:50:56:aa:00:02"])
    assert keys["guestinfo.metadata.encoding"] == "base64"
    assert json.loads(base64.b64decode(keys["guestinfo.metadata"] or "")) == json.loads(json.dumps(meta))
