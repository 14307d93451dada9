"""The SR-IOV and PVRDMA host settings (vgpuctl.settings.sriov, .pvrdma): planned from the observed NICs
and the host's network facts, with their phases, errors and warnings; predicted for VM placement; shown by
status and export. The farm is tests/fixtures/network/_farm.yaml (two ConnectX-7 per host: 0000:5e:00.0 with
2 of at most 16 virtual functions, 0000:d8:00.0 enabled for passthrough)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kinds
import pytest
from hostfacts import host_facts
from ruamel.yaml import YAML

from vgpuctl.domain import Phase
from vgpuctl.hosts import plan as hostplan
from vgpuctl.inventory import HostSpec, load_inventory_text
from vgpuctl.model import HostChange, Observed, ObservedHost
from vgpuctl.planner import make_plan
from vgpuctl.records.netfacts import HostNetFacts, RdmaDevice, Vmknic
from vgpuctl.reports.explain import explain_host
from vgpuctl.reports.plan import render_plan_text
from vgpuctl.settings import SETTINGS, decoders, wants_network
from vgpuctl.settings.facts import HostFacts
from vgpuctl.settings.pvrdma import SETTING as PVRDMA
from vgpuctl.settings.sriov import SETTING as SRIOV
from vgpuctl.settings.sriov import state_text, vfs_of

pytestmark = pytest.mark.unit

FARM = YAML(typ="safe").load((Path(__file__).resolve().parents[1] / "fixtures" / "network" / "_farm.yaml").read_text())
HOST = "esx-01.gpu.sim"


def observed() -> Observed:
    return Observed.from_dict(copy.deepcopy(FARM))


def host() -> ObservedHost:
    return observed().hosts[HOST]


def spec(**entry: Any) -> HostSpec:
    return HostSpec.model_validate({"name": HOST, **entry})


def net(**over: Any) -> HostNetFacts:
    base: dict[str, Any] = {
        "vmknics": [Vmknic("vmk0", "Management Network"), Vmknic("vmk1", "", "50 2f dv")],
        "switches": ["dvs-roce"], "rdma_devices": [RdmaDevice("vmrdma0", "vmnic4", "active")],
        "pvrdma_vmknic": "", "rulesets": {"pvrdma": False, "sshServer": True}, "rebind": False,
    }
    return HostNetFacts(**{**base, **over})


def facts(network: HostNetFacts | None = None, error: str | None = None) -> HostFacts:
    return host_facts(HOST, network=network, network_error=error)


def rows(changes: list[HostChange]) -> list[tuple[str, str, Any, Any, str]]:
    return [(str(c.kind), c.target, c.old, c.new, str(c.phase)) for c in changes]


# ------------------------------------------------------------------------------------------------ SR-IOV


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        # by model: both ConnectX-7; the first has 2 VFs now
        ([{"device": "ConnectX-7", "vfs": 8}], [("sriov", "0000:5e:00.0", "2 VFs", "8 VFs", "reboot"),
                                                ("sriov", "0000:d8:00.0", "off", "8 VFs", "reboot")]),
        ([{"device": "vmnic4", "vfs": 2}], []),  # in sync
        ([{"device": "0000:5E:00.0", "vfs": 0}], [("sriov", "0000:5e:00.0", "2 VFs", "off", "reboot")]),
        ([{"device": "vmnic5", "vfs": 0}], []),  # off already
    ],
)
def test_sriov_plans_each_nic_an_item_names(items: list[dict[str, Any]], expected: list[Any]) -> None:
    result = hostplan.plan_host(spec(sriov=items), host(), facts(net()))
    assert (rows(result.changes), result.errors) == (expected, [])


def test_a_host_that_rebinds_devices_needs_maintenance_mode_but_no_reboot() -> None:
    result = hostplan.plan_host(spec(sriov=[{"device": "vmnic4", "vfs": 4}]), host(), facts(net(rebind=True)))
    assert [c.phase for c in result.changes] == [Phase.MAINTENANCE]
    unknown = hostplan.plan_host(spec(sriov=[{"device": "vmnic4", "vfs": 4}]), host(), None)
    assert [c.phase for c in unknown.changes] == [Phase.REBOOT]  # not known: a reboot, to be safe


def test_configured_but_not_in_effect_is_planned_again_with_the_reboot() -> None:
    h = host()
    nic = h.nics[0]
    nic.num_vf_requested, nic.sriov_active = 8, False  # written, host not rebooted yet
    assert state_text(nic) == "2 VFs (8 VFs after reboot)"
    result = hostplan.plan_host(spec(sriov=[{"device": "vmnic4", "vfs": 8}]), h, None)
    assert rows(result.changes) == [("sriov", "0000:5e:00.0", "2 VFs (8 VFs after reboot)", "8 VFs", "reboot")]


@pytest.mark.parametrize(
    ("items", "nic_over", "error"),
    [
        ([{"device": "ConnectX-6", "vfs": 4}], {},
         "sriov: no NIC ConnectX-6 (0000:5e:00.0 ConnectX-7 (vmnic4), 0000:d8:00.0"),
        ([{"device": "vmnic4", "vfs": 17}], {}, "vmnic4: 0000:5e:00.0 (vmnic4) supports at most 16 virtual functions, "
                                                "not 17"),
        ([{"device": "vmnic4", "vfs": 4}], {"sriov_capable": False}, "0000:5e:00.0 (vmnic4) is not SR-IOV capable"),
        ([{"device": "ConnectX-7", "vfs": 4}, {"device": "vmnic4", "vfs": 2}], {},
         "0000:5e:00.0 (vmnic4) is named by ConnectX-7 and vmnic4 with other virtual function counts"),
    ],
)
def test_sriov_refuses_what_a_nic_cannot_do(items: list[dict[str, Any]], nic_over: dict[str, Any], error: str) -> None:
    h = host()
    for k, v in nic_over.items():
        setattr(h.nics[0], k, v)
    result = hostplan.plan_host(spec(sriov=items), h, None)
    assert len(result.errors) == 1 and error in result.errors[0], result.errors


def test_sriov_entries_are_checked_when_the_inventory_is_read() -> None:
    problems = SRIOV.problems(spec(sriov=[{"device": "vmnic4", "vfs": 2}, {"device": "VMNIC4", "vfs": 4}]))
    assert problems == [(("sriov", 1, "device"), "VMNIC4 is already listed (item 1)")]
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        spec(sriov=[{"device": "vmnic4", "vfs": -1}])
    with pytest.raises(ValueError, match="virtual_functions"):
        spec(sriov=[{"device": "vmnic4", "virtual_functions": 2}])


def test_the_predicted_host_has_the_virtual_functions_vm_placement_uses() -> None:
    """A VM plan with an SR-IOV adapter on a NIC whose VFs the same plan turns on: placed, no error."""
    obs = observed()
    for h in obs.hosts.values():
        nic = h.nics[0]
        nic.sriov_enabled = nic.sriov_active = False
        nic.num_vf = nic.num_vf_requested = 0
    inv = load_inventory_text("""\
apiVersion: vgpuctl/v1
hosts:
  - cluster: GPU-Cluster
    sriov: [{device: vmnic4, vfs: 4}]
vms:
  - name: train-01
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    memory_gb: 64
    vgpus: {profile: grid_a100-40c, count: 4}
    network: [{portgroup: mgmt}, {type: sriov, device: vmnic4, portgroup: roce-fabric}]
""", "inv.yaml")
    plan = make_plan(inv, obs)
    assert plan.errors == []
    assert sorted((c.host, c.kind, c.new) for c in plan.host_changes) == [
        ("esx-01.gpu.sim", kinds.SRIOV, "4 VFs"), ("esx-02.gpu.sim", kinds.SRIOV, "4 VFs")]
    [change] = plan.changes
    assert change.depends_on_hosts and [n.device for n in change.clone.nics if n.kind == "sriov"] == ["0000:5e:00.0"]
    text = render_plan_text(plan)
    assert "~ host esx-01.gpu.sim sriov 0000:5e:00.0: off -> 4 VFs  (disruptive, reboot)" in text


def test_sriov_status_and_export_show_the_nics_with_virtual_functions() -> None:
    h = host()
    h.nics[0].num_vf_requested = 8
    assert [(s.key, s.value, s.after_reboot) for s in SRIOV.status(h, None)] == [("sriov[vmnic4]", "2 VFs", "8 VFs")]
    assert SRIOV.export(h, None).values == {"sriov": [{"device": "vmnic4", "vfs": 8}]}
    assert SRIOV.explain("sriov", h, None) is None
    assert vfs_of("8 VFs") == 8 and vfs_of("1 VF") == 1 and vfs_of("off") == 0


# ------------------------------------------------------------------------------------------------ PVRDMA


def test_pvrdma_tags_the_vmknic_and_enables_the_ruleset_online() -> None:
    result = hostplan.plan_host(spec(pvrdma={"vmknic": "vmk1"}), host(), facts(net()))
    assert rows(result.changes) == [("pvrdma.vmknic", "host", None, "vmk1", "online"),
                                    ("pvrdma.firewall", "host", "disabled", "enabled", "online")]
    assert result.errors == [] and result.warnings == []
    done = net(pvrdma_vmknic="vmk1", rulesets={"pvrdma": True})
    assert hostplan.plan_host(spec(pvrdma={"vmknic": "vmk1"}), host(), facts(done)).changes == []
    left = hostplan.plan_host(spec(pvrdma={"vmknic": "vmk1", "firewall": False}), host(), facts(net()))
    assert [c.kind for c in left.changes] == [kinds.PVRDMA_VMKNIC]  # firewall: false leaves the ruleset


@pytest.mark.parametrize(
    ("network", "error"),
    [
        (None, "pvrdma: its network state is unknown (not read)"),
        (net(pvrdma_vmknic=None), "has no advanced option Net.PVRDMAVmknic (PVRDMA needs ESXi 6.5 or later)"),
        (net(vmknics=[Vmknic("vmk0", "Management Network")]), "pvrdma.vmknic: no VMkernel adapter vmk1 (vmk0)"),
        (net(switches=[]), "is a member of no vSphere Distributed Switch, which PVRDMA needs"),
        (net(rulesets={}), "pvrdma.firewall: the host's firewall has no ruleset pvrdma"),
    ],
)
def test_pvrdma_refuses_a_host_that_cannot_do_it(network: HostNetFacts | None, error: str) -> None:
    result = hostplan.plan_host(spec(pvrdma={"vmknic": "vmk1"}), host(), facts(network))
    assert result.changes == [] and len(result.errors) == 1 and error in result.errors[0], result.errors


def test_pvrdma_says_why_the_network_state_is_unknown() -> None:
    result = hostplan.plan_host(spec(pvrdma={"vmknic": "vmk1"}), host(), facts(None, "NoPermission: Host.Config"))
    assert result.errors == [f"host {HOST}: pvrdma: its network state is unknown (NoPermission: Host.Config)"]


def test_pvrdma_warns_of_a_standard_vmknic_and_a_host_without_an_rdma_device() -> None:
    network = net(vmknics=[Vmknic("vmk1", "pvrdma-pg")], rdma_devices=[])
    result = hostplan.plan_host(spec(pvrdma={"vmknic": "vmk1"}), host(), facts(network))
    assert result.errors == [] and len(result.warnings) == 2
    assert "vmk1 is on the standard port group 'pvrdma-pg', not on a distributed switch" in result.warnings[0]
    assert "no RDMA device; PVRDMA to VMs on other hosts falls back to TCP" in result.warnings[1]
    older = hostplan.plan_host(spec(pvrdma={"vmknic": "vmk1"}), host(), facts(net(rdma_devices=None)))
    assert older.warnings == []  # before API 7.0 the host does not list RDMA devices: nothing said


def test_pvrdma_entry_checks_status_and_export() -> None:
    assert PVRDMA.problems(spec(pvrdma={"vmknic": "eth1"})) == [
        (("pvrdma", "vmknic"), "must name a VMkernel adapter such as vmk1 (got 'eth1')")]
    tagged = facts(net(pvrdma_vmknic="vmk1", rulesets={"pvrdma": True}))
    assert [(s.key, s.value) for s in PVRDMA.status(host(), tagged)] == [("pvrdma.vmknic", "vmk1"),
                                                                         ("pvrdma.firewall", "enabled")]
    assert PVRDMA.status(host(), None) == [] and PVRDMA.export(host(), facts(net())).values == {}
    assert PVRDMA.export(host(), tagged).values == {"pvrdma.vmknic": "vmk1", "pvrdma.firewall": True}


def test_the_network_facts_are_read_only_for_a_host_whose_entry_sets_one() -> None:
    assert not wants_network(None) and not wants_network(spec())
    assert wants_network(spec(pvrdma={"vmknic": "vmk1"})) and wants_network(spec(sriov=[{"device": "x", "vfs": 1}]))
    assert not wants_network(spec(sriov=[]))
    assert [s.key for s in SETTINGS][-3:-1] == ["sriov", "pvrdma"]  # then vgpu_manager, planned last


def test_network_facts_survive_a_round_trip() -> None:
    f = facts(net(nics=host().nics))
    again = HostFacts.from_dict(f.to_dict(), decoders())
    assert again == f


def test_plan_explain_shows_the_sriov_items_and_no_vcenter_value_for_them() -> None:
    inv = load_inventory_text("apiVersion: vgpuctl/v1\nhosts:\n  - cluster: GPU-Cluster\n"
                              "    sriov: [{device: vmnic4, vfs: 4}, {device: vmnic5, vfs: 0}]\n", "inv.yaml")
    obs = observed()
    report = explain_host(HOST, inv, obs, make_plan(inv, obs))
    [row] = [s for s in report.settings if s.setting == "sriov"]
    assert (row.value, row.vcenter, row.differs) == ("vmnic4: 4 VFs, vmnic5: off", None, None)
    assert [c for c in report.changes if "sriov" in str(c)]
