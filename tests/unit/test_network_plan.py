"""The VM network plan: adapters diffed with the vGPUs, SR-IOV VFs and passthrough NICs placed like GPUs, the
identity a clone is given, GPUDirect RDMA's settings and warnings, and the errors located in the file.

The farm (tests/fixtures/network/_farm.yaml): two hosts with four A100-40GB each and two ConnectX-7 NICs, one with
2 SR-IOV virtual functions, one enabled for passthrough; port groups mgmt (standard), roce-fabric and roce-b
(distributed; roce-b only on esx-02).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from vgpuctl.capacity.fitnow import what_fits
from vgpuctl.export import export_inventory
from vgpuctl.inventory import load_inventory_text
from vgpuctl.model import NicChange, Observed, ObservedNic, Op, Plan
from vgpuctl.planner import make_plan
from vgpuctl.reports.capacity import capacity_report
from vgpuctl.reports.plan import plan_to_json, render_plan_text

pytestmark = pytest.mark.unit

FARM = YAML(typ="safe").load((Path(__file__).resolve().parents[1] / "fixtures" / "network" / "_farm.yaml").read_text())

PAIR = """\
apiVersion: vgpuctl/v1
vms:
  - name: train-{01..02}
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    memory_gb: 64
    vgpus: {profile: grid_a100-40c, count: 4}
    network:
      - {portgroup: mgmt}
      - {type: sriov, device: ConnectX-7, portgroup: roce-fabric, traffic_class: 106}
    guest:
      identity:
        addresses:
          roce-fabric: {pool: 10.0.40.10-10.0.40.19/24, gateway: 10.0.40.1, dns: [10.0.0.53]}
"""


def observed(**changes: Any) -> Observed:
    data = copy.deepcopy(FARM)
    for key, value in changes.items():
        data[key] = value
    return Observed.from_dict(data)


def plan_of(text: str, obs: Observed | None = None) -> Plan:
    return make_plan(load_inventory_text(text, "inv.yaml"), obs or observed())


def running(name: str, host: str, nics: list[dict[str, Any]], vgpus: int = 0, ips: list[str] | None = None,
            power: str = "poweredOn") -> dict[str, Any]:
    return {"moid": f"vm-{name}", "host": host, "cluster": "GPU-Cluster", "power_state": power, "firmware": "efi",
            "hardware_version": "vmx-20", "memory_mb": 65536, "memory_reservation_locked": True,
            "vgpus": [{"key": 100 + i, "profile": "grid_a100-40c"} for i in range(vgpus)], "nics": nics,
            "guest_ips": ips or [],
            "extra_config": {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "512"}}


def with_vms(**vms: dict[str, Any]) -> Observed:
    data = copy.deepcopy(FARM)
    data["vms"].update(vms)
    for name, vm in vms.items():  # the GPUs a running VM holds
        if vm["power_state"] == "poweredOn":
            host = data["hosts"][vm["host"]] = copy.deepcopy(data["hosts"][vm["host"]])
            for gpu in host["gpus"][: len(vm["vgpus"])]:
                gpu["vms"] = [*gpu.get("vms", []), name]
    return Observed.from_dict(data)


def test_a_training_pair_gets_one_vf_each_and_its_own_address() -> None:
    plan = plan_of(PAIR)
    assert plan.errors == []
    one, two = (c for c in plan.changes)
    assert {one.clone.host, two.clone.host} == {"esx-01.gpu.sim", "esx-02.gpu.sim"}  # 4 GPUs each: one per host
    added = one.clone.nics
    assert [(n.op, n.kind, n.portgroup) for n in added] == [(Op.ADD, "sriov", "roce-fabric")]  # mgmt: template's
    assert added[0].device == "0000:5e:00.0" and added[0].select == "ConnectX-7"
    assert [(a.portgroup, a.address) for a in one.clone.identity.adapters] == [("mgmt", None),
                                                                                ("roce-fabric", "10.0.40.10")]
    assert two.clone.identity.adapters[1].address == "10.0.40.11" and two.clone.identity.hostname == "train-02"
    assert one.clone.identity.adapters[1].gateway == "10.0.40.1" and one.clone.identity.dns == ["10.0.0.53"]
    text = render_plan_text(plan)
    assert "+ nic sriov ConnectX-7 on roce-fabric (0000:5e:00.0)" in text
    assert "+ identity customization: hostname train-01, mgmt DHCP, roce-fabric 10.0.40.10/24 via 10.0.40.1" in text
    doc = plan_to_json(plan)["vm_changes"][0]
    assert doc["nics"][0] == {"op": "+", "type": "sriov", "portgroup": "roce-fabric", "device": "0000:5e:00.0",
                              "select": "ConnectX-7", "key": None, "protocol": None, "mac": None, "old": None}
    assert doc["identity"]["adapters"][1]["address"] == "10.0.40.10"


def test_the_pair_as_applied_plans_no_change() -> None:
    sriov = {"kind": "sriov", "network": "roce-fabric", "device": "0000:5e:00.0", "mac": "00:50:56:bb:00:01"}
    mgmt = {"kind": "vmxnet3", "network": "mgmt", "mac": "00:50:56:aa:00:02"}
    obs = with_vms(**{
        "train-01": running("train-01", "esx-01.gpu.sim", [dict(mgmt, key=4000), dict(sriov, key=4001)], 4),
        "train-02": running("train-02", "esx-02.gpu.sim", [dict(mgmt, key=4000), dict(sriov, key=4001)], 4),
    })
    plan = plan_of(PAIR, obs)
    assert plan.errors == [] and plan.changes == []


def test_vf_exhaustion_is_refused_at_plan_time() -> None:
    text = PAIR.replace("train-{01..02}", "train-{01..05}").replace("count: 4", "count: 1")
    plan = plan_of(text)  # 2 hosts x 2 VFs: four VMs fit, the fifth does not
    assert len(plan.errors) == 1
    assert "vm train-05: cannot power on: no host of cluster GPU-Cluster has GPU capacity" in plan.errors[0]
    assert "has no free SR-IOV virtual function on ConnectX-7 (0000:5e:00.0: 2 of 2 in use)" in plan.errors[0]


def test_vfs_held_by_running_vms_count() -> None:
    sriov = {"kind": "sriov", "network": "roce-fabric", "device": "0000:5e:00.0"}
    obs = with_vms(**{f"busy-{i}": running(f"busy-{i}", h, [dict(sriov, key=4000)])
                      for i, h in enumerate(["esx-01.gpu.sim"] * 2 + ["esx-02.gpu.sim"] * 2)})
    plan = plan_of(PAIR, obs)
    assert len(plan.errors) == 2 and all("no free SR-IOV virtual function" in e for e in plan.errors)


@pytest.mark.parametrize(
    ("adapter", "where", "message"),
    [
        ("{portgroup: storage}", "inv.yaml:9:21", "unknown port group 'storage' (port groups: mgmt, roce-b, "
                                                  "roce-fabric)"),
        ("{type: pvrdma, portgroup: mgmt}", "inv.yaml:9:16", "PVRDMA needs a port group of a vSphere Distributed "
                                                           "Switch; 'mgmt' is on a standard switch"),
        ("{type: sriov, device: ConnectX-6 Dx, portgroup: roce-fabric}", "inv.yaml:9:31",
         "vm one: host esx-01.gpu.sim has no NIC ConnectX-6 Dx (0000:5e:00.0 ConnectX-7 (vmnic4), 0000:d8:00.0 "
         "ConnectX-7 (vmnic5))"),
        ("{type: sriov, device: vmnic5, portgroup: roce-fabric}", "inv.yaml:9:31",
         "host esx-01.gpu.sim has no SR-IOV virtual functions on vmnic5: 0000:d8:00.0 (SR-IOV disabled)"),
        ("{type: passthrough, device: vmnic4}", "inv.yaml:9:37", "host esx-01.gpu.sim has vmnic4 (0000:5e:00.0) but "
                                                                "not enabled for passthrough"),
    ],
)
def test_bad_adapters_are_plan_errors(adapter: str, where: str, message: str) -> None:
    text = f"""\
apiVersion: vgpuctl/v1
vms:
  - name: one
    template: ubuntu-22.04-ml
    host: esx-01.gpu.sim
    vgpus: {{profile: grid_a100-40c}}
    network:
      - {{portgroup: mgmt}}
      - {adapter}
"""
    plan = plan_of(text)
    assert len(plan.errors) == 1, plan.errors
    assert plan.errors[0].startswith(where) and message in plan.errors[0], plan.errors[0]


def test_a_powered_off_vm_still_needs_the_nic() -> None:
    text = """\
apiVersion: vgpuctl/v1
vms:
  - name: cold
    template: ubuntu-22.04-ml
    host: esx-02.gpu.sim
    power: off
    network: [{type: sriov, device: "0000:d8:00.0", portgroup: roce-fabric}]
"""
    plan = plan_of(text)
    assert len(plan.errors) == 1 and plan.errors[0].startswith("inv.yaml:7:")
    assert "host esx-02.gpu.sim has no SR-IOV virtual functions on 0000:d8:00.0" in plan.errors[0]


def test_a_port_group_some_hosts_lack_narrows_the_hosts() -> None:
    plan = plan_of(PAIR.replace("train-{01..02}", "solo").replace("roce-fabric", "roce-b"))
    assert plan.errors == [] and plan.changes[0].clone.host == "esx-02.gpu.sim"


EXISTING = """\
apiVersion: vgpuctl/v1
vms:
  - name: old
    power: {power}
    network:
      - {{portgroup: roce-fabric, type: pvrdma, protocol: rocev2}}
    network_exclusive: {exclusive}
"""


def _old(power: str = "poweredOff") -> Observed:
    nics = [{"key": 4000, "kind": "vmxnet3", "network": "mgmt"},
            {"key": 4001, "kind": "pvrdma", "network": "roce-fabric", "protocol": "rocev1"},
            {"key": 4002, "kind": "e1000e", "network": "mgmt"}]
    vm = running("old", "esx-01.gpu.sim", nics, power=power)
    vm["memory_reservation_locked"] = False
    return with_vms(old=vm)


def test_a_pvrdma_protocol_is_changed_in_place_and_memory_reserved() -> None:
    plan = plan_of(EXISTING.format(power="off", exclusive="false"), _old())
    change = plan.changes[0]
    assert [(n.op, n.key, n.protocol, n.old) for n in change.nics] == [(Op.CHANGE, 4001, "rocev2", "rocev1")]
    assert [(f.field, f.new) for f in change.fields] == [("memoryReservationLockedToMax", True)]
    assert "~ nic pvrdma on roce-fabric (rocev2) (key 4001): was rocev1" in render_plan_text(plan)


def test_exclusive_removes_what_the_list_does_not_name() -> None:
    plan = plan_of(EXISTING.format(power="off", exclusive="true"), _old())
    nics = plan.changes[0].nics
    assert sorted((n.key, n.op) for n in nics) == [(4000, Op.REMOVE), (4001, Op.CHANGE), (4002, Op.REMOVE)]


def test_exclusive_repoints_a_leftover_adapter_of_the_same_type() -> None:
    text = EXISTING.format(power="off", exclusive="true").replace(
        "{portgroup: roce-fabric, type: pvrdma, protocol: rocev2}", "{portgroup: roce-fabric}")
    nics = plan_of(text, _old()).changes[0].nics
    assert [(n.op, n.key, n.portgroup, n.old) for n in nics if n.op == Op.CHANGE] == [
        (Op.CHANGE, 4000, "roce-fabric", "on mgmt")]
    assert sorted(n.key for n in nics if n.op == Op.REMOVE) == [4001, 4002]


def test_keep_refuses_an_adapter_change_on_a_running_vm() -> None:
    plan = plan_of(EXISTING.format(power="keep", exclusive="false"), _old("poweredOn"))
    assert len(plan.errors) == 1 and "power is 'keep'" in plan.errors[0]


def test_an_address_in_use_is_refused() -> None:
    obs = with_vms(other=running("other", "esx-02.gpu.sim", [], ips=["10.0.40.11"]))
    plan = plan_of(PAIR, obs)
    assert plan.errors == ["inv.yaml:14:31: vm train-02: address 10.0.40.11 (for train-02 on roce-fabric) is in "
                           "use by VM other"]


def test_a_mac_in_use_is_refused() -> None:
    text = PAIR.replace("train-{01..02}", "solo").replace("{portgroup: mgmt}",
                                                          '{portgroup: mgmt, mac: "00:50:56:aa:00:01"}')
    plan = plan_of(text)
    assert plan.errors == ["inv.yaml:9:32: vm solo: MAC address 00:50:56:aa:00:01 is in use by VM ubuntu-22.04-ml"]


def test_gpudirect_rdma_sets_p2p_and_warns_about_a_far_nic() -> None:
    text = PAIR.replace("train-{01..02}", "gdr").replace("count: 4", "count: 2") + "    gpudirect_rdma: true\n"
    text = text.replace("device: ConnectX-7", "device: vmnic5").replace("type: sriov", "type: passthrough").replace(
        ", portgroup: roce-fabric, traffic_class", ", traffic_class").replace("roce-fabric: {pool", "mgmt: {pool")
    plan = plan_of(text)
    assert plan.errors == []
    change = plan.changes[0]
    assert change.extra_config["pciPassthru.allowP2P"] == "true"
    assert change.extra_config["pciPassthru.RelaxACSforP2P"] == "true"
    assert change.clone.nics[0].device == "0000:d8:00.0"
    # The performance policy spreads the two vGPUs over 0000:3b and 0000:3c (NUMA node 0); the NIC is on node 1.
    assert any("GPUDirect RDMA: GPU 0000:3b:00.0 is on NUMA node 0 and NIC 0000:d8:00.0 on node 1" in w
               for w in plan.warnings)


def test_a_passthrough_nic_in_use_is_not_placed_twice() -> None:
    pt = {"key": 4000, "kind": "passthrough", "device": "0000:d8:00.0"}
    obs = with_vms(holder=running("holder", "esx-01.gpu.sim", [pt]))
    text = """\
apiVersion: vgpuctl/v1
vms:
  - name: wants
    template: ubuntu-22.04-ml
    host: esx-01.gpu.sim
    network: [{type: passthrough, device: "0000:d8:00.0"}]
"""
    plan = plan_of(text, obs)
    assert len(plan.errors) == 1 and "has no free passthrough NIC 0000:d8:00.0 (0000:d8:00.0 in use" in plan.errors[0]


def test_dynamic_directpath_by_model() -> None:
    text = """\
apiVersion: vgpuctl/v1
vms:
  - name: dyn
    template: ubuntu-22.04-ml
    host: esx-02.gpu.sim
    network: [{type: passthrough, device: ConnectX-7}]
"""
    add = plan_of(text).changes[0].clone.nics[0]
    assert add.allowed == [[0x15B3, 0x1021]] and add.device == "0000:d8:00.0"


def test_cloud_init_identity_is_written_by_the_reconfigure() -> None:
    plan = plan_of(PAIR.replace("identity:\n", "identity:\n        method: cloud-init\n"))
    change = plan.changes[0]
    assert change.cloud_init and change.needs_reconfigure
    assert "+ identity cloud-init: hostname train-01" in render_plan_text(plan)


def test_existing_nic_observed_matches_by_vmnic_name() -> None:
    text = EXISTING.format(power="off", exclusive="false").replace(
        "{portgroup: roce-fabric, type: pvrdma, protocol: rocev2}",
        "{type: sriov, device: vmnic4, portgroup: roce-fabric}")
    obs = with_vms(old=running("old", "esx-01.gpu.sim", [{"key": 4000, "kind": "sriov", "network": "roce-fabric",
                                                          "device": "0000:5e:00.0"}], power="poweredOff"))
    assert plan_of(text, obs).changes == []


def test_nic_change_label() -> None:
    assert NicChange(Op.ADD, "pvrdma", "roce", protocol="rocev2").label == "pvrdma on roce (rocev2)"
    assert ObservedNic(key=1, kind="vmxnet3").slot is None


def test_capacity_counts_free_vfs_and_passthrough_nics() -> None:
    sriov = {"key": 4000, "kind": "sriov", "network": "roce-fabric", "device": "0000:5e:00.0"}
    pt = {"key": 4001, "kind": "passthrough", "device": "0000:d8:00.0"}
    obs = with_vms(busy=running("busy", "esx-01.gpu.sim", [sriov, pt], 1),
                   idle=running("idle", "esx-02.gpu.sim", [sriov], 1, power="poweredOff"))
    report = capacity_report(what_fits(obs))
    one, two = report.hosts
    assert [(n.nic, n.type, n.total, n.free) for n in one.nics] == [("0000:5e:00.0", "sriov", 2, 1),
                                                                    ("0000:d8:00.0", "passthrough", 1, 0)]
    assert [(n.type, n.free) for n in two.nics] == [("sriov", 2), ("passthrough", 1)]  # a VM that is off holds none
    text = report.render_text()
    assert "  NIC 0000:5e:00.0 ConnectX-7: 1 of 2 SR-IOV virtual functions free" in text
    assert "  NIC 0000:d8:00.0 ConnectX-7: passthrough, in use" in text


def test_exclusive_never_removes_a_passthrough_device_that_is_not_a_nic() -> None:
    nics = [{"key": 4000, "kind": "vmxnet3", "network": "mgmt"},
            {"key": 13000, "kind": "passthrough", "device": "0000:af:00.0"},  # not a NIC of the host (an NVMe, ...)
            {"key": 13001, "kind": "passthrough", "device": "0000:d8:00.0"}]  # the host's ConnectX-7
    obs = with_vms(old=running("old", "esx-01.gpu.sim", nics, power="poweredOff"))
    text = EXISTING.format(power="off", exclusive="true").replace(
        "{portgroup: roce-fabric, type: pvrdma, protocol: rocev2}", "{portgroup: mgmt}")
    removed = sorted(n.key for n in plan_of(text, obs).changes[0].nics if n.op == Op.REMOVE)
    assert removed == [13001]


def test_dynamic_directpath_needs_vsphere_7() -> None:
    data = copy.deepcopy(FARM)
    for host in data["hosts"].values():
        host["api_version"] = "6.7.3"
    text = """\
apiVersion: vgpuctl/v1
vms:
  - name: dyn
    template: ubuntu-22.04-ml
    host: esx-02.gpu.sim
    network: [{type: passthrough, device: ConnectX-7}]
"""
    plan = plan_of(text, Observed.from_dict(data))
    assert plan.errors == ["inv.yaml:6:43: vm dyn: host esx-02.gpu.sim is vSphere 6.7.3: Dynamic DirectPath I/O "
                           "needs 7.0.0 or later"]


def test_export_writes_rdma_vms_adapters_so_that_the_export_plans_no_change() -> None:
    """Export: a VM with an RDMA device gets its adapters (PVRDMA with its protocol, a passthrough NIC by PCI
    id, a Dynamic DirectPath one by model); an adapter type vgpuctl does not describe is named in a comment;
    a VM with no RDMA device gets no network list. The export plans no change."""
    nics = [{"key": 4000, "kind": "vmxnet3", "network": "mgmt"},
            {"key": 4001, "kind": "pvrdma", "network": "roce-fabric", "protocol": "rocev1"},
            {"key": 4002, "kind": "e1000e", "network": "mgmt"}]
    obs = with_vms(**{
        "rdma-01": running("rdma-01", "esx-01.gpu.sim", nics, vgpus=1),
        "pt-01": running("pt-01", "esx-01.gpu.sim", [{"key": 4000, "kind": "passthrough", "device": "0000:d8:00.0"}],
                         vgpus=1),
        "dyn-01": running("dyn-01", "esx-02.gpu.sim", [{"key": 4000, "kind": "passthrough",
                                                         "allowed": [[0x15B3, 0x1021]]}], vgpus=1),
        "web-01": running("web-01", "esx-02.gpu.sim", [{"key": 4000, "kind": "vmxnet3", "network": "mgmt"}],
                          vgpus=1),
    })
    text = export_inventory(obs)
    assert "network:\n      - {type: vmxnet3, portgroup: mgmt}\n      - {type: pvrdma, portgroup: roce-fabric, " \
           "protocol: rocev1}\n" in text, text
    assert "# an adapter of type e1000e on mgmt left out" in text
    assert "network:\n      - {type: passthrough, device: '0000:d8:00.0'}\n" in text, text
    assert "network:\n      - {type: passthrough, device: ConnectX-7}\n" in text, text
    assert "PCI passthrough device(s) that are not vGPUs" not in text  # the NICs were written, not left out
    web = text[text.index("- name: web-01"):]
    assert "network" not in web.split("- name:")[1]
    plan = make_plan(load_inventory_text(text, "farm.yaml"), obs)
    assert plan.errors == [] and plan.is_empty, (plan.errors, [c.nics for c in plan.changes])


def test_adapters_a_vm_keeps_count_against_vsphere_limit() -> None:
    """The VM has 8 adapters the entry does not name and the entry adds 3 (network_exclusive: false keeps the 8):
    11, over vSphere's 10 (vgpuctl/data/vm-limits.yaml); with network_exclusive the 8 go and 3 stay."""
    nics = [{"key": 4000 + i, "kind": "vmxnet3", "network": "mgmt"} for i in range(8)]
    obs = with_vms(old=running("old", "esx-01.gpu.sim", nics, power="poweredOff"))
    text = ("apiVersion: vgpuctl/v1\nvms:\n  - name: old\n    power: 'off'\n    network:\n"
            + "      - {portgroup: roce-fabric}\n" * 3)
    plan = plan_of(text, obs)
    assert [str(p) for p in plan.problems if "network adapters" in str(p)] == [
        "inv.yaml:5:5: vm old: with the adapters it keeps: 11 network adapters; vSphere gives one VM "
        "at most 10 (vmxnet3, PVRDMA and SR-IOV adapters count, passthrough NICs do not)"], plan.problems
    exclusive = text.replace("    network:\n", "    network_exclusive: true\n    network:\n", 1)
    assert not [p for p in plan_of(exclusive, obs).problems if "network adapters" in str(p)]
