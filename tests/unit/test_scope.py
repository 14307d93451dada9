"""Scoped plans (--host, --cluster, --vm) from fixtures: what the patterns select, the host changes a VM in scope
pulls in, the VMs a host change in scope hands over, and everything else left out; the plan's text and report."""

from __future__ import annotations

import textwrap

import pytest

from vgpuctl.errors import NotFound, UsageError
from vgpuctl.hosts.plan import resolve_hosts
from vgpuctl.inventory import Inventory, load_inventory_text, validate
from vgpuctl.model import Observed, ObservedGpu, ObservedHost, ObservedVgpu, ObservedVm, Plan
from vgpuctl.names import host_named, matching
from vgpuctl.planner import make_plan
from vgpuctl.reports.base import TextLayout
from vgpuctl.reports.plan import plan_report
from vgpuctl.scope import Scope, ScopeResult, candidate_hosts, restricted, result, select, settle

pytestmark = pytest.mark.unit

OFFERED = ["grid_a100-4c", "grid_a100-5c", "grid_a100-8c", "grid_a100-10c", "grid_a100-20c", "grid_a100-40c"]
H1, H2, H3, H4 = "esx-01.gpu.sim", "esx-02.gpu.sim", "esx-03.gpu.sim", "esx-04.gpu.sim"


def host(name: str, cluster: str, graphics: str) -> ObservedHost:
    gpus = [ObservedGpu(pci_id=f"0000:{bus}:00.0", device_name="NVIDIA A100-PCIE-40GB", device_id=0x20F1,
                        memory_kb=40 * 1024 * 1024, graphics_type="sharedDirect", vgpu_mode="sameSize")
            for bus in ("3b", "5e", "86", "af")]  # fmt: skip
    return ObservedHost(name=name, cluster=cluster, default_graphics_type=graphics, offered_profiles=OFFERED,
                        gpus=gpus)


def vm(name: str, on: str, running: bool, profiles: list[str]) -> ObservedVm:
    return ObservedVm(name, host=on, cluster="GPU-Cluster" if on != H4 else "Spare", firmware="efi",
                      power_state="poweredOn" if running else "poweredOff", memory_reservation_locked=True,
                      vgpus=[ObservedVgpu(i + 1, p) for i, p in enumerate(profiles)])


def farm() -> Observed:
    """esx-01 and esx-02 still have the Shared default graphics type the inventory changes; esx-03 and esx-04
    (another cluster) are as the inventory wants them."""
    hosts = [host(H1, "GPU-Cluster", "shared"), host(H2, "GPU-Cluster", "shared"),
             host(H3, "GPU-Cluster", "sharedDirect"), host(H4, "Spare", "sharedDirect")]
    vms = [vm("train-01", H1, True, ["grid_a100-20c"]), vm("train-02", H1, True, ["grid_a100-20c"]),
           vm("infer-01", H2, False, ["grid_a100-10c"]), vm("infer-02", H3, False, ["grid_a100-10c"]),
           vm("spare-01", H4, False, [])]  # fmt: skip
    return Observed(datacenter="DC0", hosts={h.name: h for h in hosts},
                    clusters={"GPU-Cluster": [H1, H2, H3], "Spare": [H4]}, vms={v.name: v for v in vms})


INVENTORY = """
apiVersion: vgpuctl/v1
hosts:
  - cluster: GPU-Cluster
    graphics: {default_type: sharedDirect}
    maintenance: {evacuate: power-off}
  - cluster: Spare
    graphics: {default_type: sharedDirect}
vms:
  - {name: train-01, vgpus: {profile: grid_a100-20c, count: 2}, power: restart}
  - {name: train-02, vgpus: {profile: grid_a100-40c, count: 1}, power: restart}
  - {name: infer-01, vgpus: {profile: grid_a100-20c, count: 1}, power: off}
  - {name: infer-02, vgpus: {profile: grid_a100-20c, count: 1}, power: off}
  - {name: spare-01, vgpus: {profile: grid_a100-10c, count: 1}, power: off}
"""


def inventory() -> Inventory:
    inv = load_inventory_text(textwrap.dedent(INVENTORY), "inv.yaml")
    validate(inv)
    return inv


def scoped(scope: Scope) -> tuple[Plan, ScopeResult]:
    """pipeline.plan_in_scope without vCenter: the same selection, closure and planner (no shell facts)."""
    inv, observed = inventory(), farm()
    selection = select(scope, inv, observed)
    resolved, _ = resolve_hosts(inv.hosts, observed)

    def plan_for(hosts: set[str], vms: set[str]) -> Plan:
        return make_plan(restricted(inv, resolved, hosts), observed, only_vms=vms)

    the_plan, kept, vms, handed = settle(selection, candidate_hosts(selection, inv, observed), plan_for)
    return the_plan, result(scope, selection, the_plan, kept, vms, handed, resolved, inv)


def hosts_changed(the_plan: Plan) -> list[str]:
    return sorted({c.host for c in the_plan.host_changes})


def test_the_whole_inventory_changes_two_hosts_and_every_vm() -> None:
    full = make_plan(inventory(), farm())
    assert not full.errors, full.errors
    assert hosts_changed(full) == [H1, H2]
    assert sorted(c.vm for c in full.changes) == ["infer-01", "infer-02", "spare-01", "train-01", "train-02"]


def test_a_vm_pulls_in_the_host_change_it_waits_for_and_the_vms_that_host_change_hands_over() -> None:
    the_plan, scope = scoped(Scope(vms=["train-01"]))
    assert not the_plan.errors, the_plan.errors
    assert hosts_changed(the_plan) == [H1]
    assert scope.pulled_in_hosts == {H1: ["train-01", "train-02"]}
    # train-02 runs on esx-01 and changes its vGPUs: the host change hands it to its own change
    assert scope.pulled_in_vms == {"train-02": H1}
    assert sorted(c.vm for c in the_plan.changes) == ["train-01", "train-02"]
    assert scope.out_of_scope_hosts == [H2, H3, H4] and scope.out_of_scope_vms == ["infer-01", "infer-02", "spare-01"]


def test_a_host_takes_its_changes_and_its_vms_only() -> None:
    the_plan, scope = scoped(Scope(hosts=["esx-02"]))  # the short name of esx-02.gpu.sim
    assert hosts_changed(the_plan) == [H2]
    assert [c.vm for c in the_plan.changes] == ["infer-01"]
    assert scope.selected_hosts == [H2] and scope.pulled_in_hosts == {} and scope.pulled_in_vms == {}
    assert scope.out_of_scope_vms == ["infer-02", "spare-01", "train-01", "train-02"]


def test_a_vm_on_a_host_without_changes_pulls_nothing_in() -> None:
    the_plan, scope = scoped(Scope(vms=["infer-0[2]"]))
    assert the_plan.host_changes == [] and [c.vm for c in the_plan.changes] == ["infer-02"]
    assert scope.pulled_in_hosts == {} and scope.out_of_scope_hosts == [H1, H2, H3, H4]


def test_globs_and_clusters() -> None:
    the_plan, scope = scoped(Scope(clusters=["Spare"]))
    assert scope.selected_hosts == [H4] and [c.vm for c in the_plan.changes] == ["spare-01"]
    the_plan, scope = scoped(Scope(hosts=["esx-0[12]*"], vms=["spare-*"]))
    assert hosts_changed(the_plan) == [H1, H2]
    assert sorted(c.vm for c in the_plan.changes) == ["infer-01", "spare-01", "train-01", "train-02"]


@pytest.mark.parametrize(("scope", "message"), [
    (Scope(hosts=["esx-09"]), "host 'esx-09' not found"),
    (Scope(hosts=["nope-*"]), "--host nope-*: no host matches"),
    (Scope(clusters=["Nope"]), "--cluster Nope: no cluster matches"),
    (Scope(vms=["web-*"]), "--vm web-*: no VM of the inventory matches"),
])  # fmt: skip
def test_a_pattern_that_matches_nothing_is_one_clear_error(scope: Scope, message: str) -> None:
    with pytest.raises((UsageError, NotFound), match=message.replace("*", r"\*").replace("(", r"\(")):
        select(scope, inventory(), farm())


def test_the_report_and_text_say_what_was_pulled_in_and_left_out() -> None:
    the_plan, scope = scoped(Scope(vms=["train-01"]))
    report = plan_report(the_plan, scope=scope)
    doc = report.to_dict()
    assert doc["scope"]["pulled_in_hosts"] == [H1] and doc["scope"]["pulled_in_vms"] == ["train-02"]
    assert {h["pulled_in_by"] == ["train-01", "train-02"] for h in doc["host_changes"]} == {True}
    text = str(report.render_text(TextLayout(80, True)))
    assert f"~ host {H1} graphics.default_type: shared -> sharedDirect" in text
    assert "pulled in by train-01, train-02" in text
    assert "Scope: --vm train-01" in text
    assert f"out of scope, untouched: hosts {H2}, {H3}, {H4}" in text
    assert "out of scope, untouched: VMs infer-01, infer-02, spare-01" in text


def test_short_host_names() -> None:
    hosts = [H1, H2, "esx-01.other.lab", "10.0.0.5"]
    assert host_named("esx-02", hosts) == H2 and host_named("ESX-02.GPU.SIM", hosts) == H2
    assert host_named("10.0.0.5", hosts) == "10.0.0.5"
    with pytest.raises(UsageError, match="short name of 2 hosts"):
        host_named("esx-01", hosts)
    with pytest.raises(NotFound, match="host 'esx-7' not found"):
        host_named("esx-7", hosts)
    assert matching("esx-0?", hosts, short_names=True) == sorted([H1, H2, "esx-01.other.lab"])
