"""The driver upgrade window (vgpuctl.hosts.window, through hosts.plan.plan_hosts and make_plan, pure): guest
drivers the new vGPU Manager would refuse move first to a release both managers accept, then the hosts in apply's
batches, each emptied on the cluster as it is at that moment, then the guest drivers to their group's release;
what cannot keep a VM on a pair NVIDIA lists is a plan error naming the VM, the versions and the rule."""

from __future__ import annotations

from typing import Any

import pytest

from vgpuctl.domain import EvacuationKind, WindowStage
from vgpuctl.hosts import plan as hostplan
from vgpuctl.inventory import load_inventory_text
from vgpuctl.model import (
    EvacuationAction,
    Observed,
    ObservedGpu,
    ObservedHost,
    ObservedVgpu,
    ObservedVm,
)
from vgpuctl.planner import make_plan
from vgpuctl.releases import pair
from vgpuctl.settings.facts import GUEST_DRIVERS, RUNNING_MANAGER, HostFacts
from vgpuctl.settings.vgpu_manager import DEPOT, SOFTWARE, DepotRead, Offered, Software

pytestmark = pytest.mark.unit

OLD, NEW = "550.90.05", "580.65.05"
GUEST_OLD, INTERIM, TARGET = "550.90.07", "535.161.07", "580.65.06"
HOSTS = ["esx-01", "esx-02", "esx-03"]
ZIP = "nvidia/NVD-AIE-800_580.65.05.zip"
A100 = {"device_name": "NVIDIA A100-PCIE-40GB", "device_id": 0x20F1, "memory_kb": 40 * 1024 * 1024,
        "vgpu_mode": "sameSize", "graphics_type": "sharedDirect"}


def farm(per_host: dict[str, list[str]], gpus: int = 2) -> Observed:
    """Three hosts of cluster C, `gpus` A100-40GB each; per host the VMs running one grid_a100-40c each."""
    hosts, vms = {}, {}
    for name in HOSTS:
        host = ObservedHost(name, cluster="C", default_graphics_type="sharedDirect",
                            gpus=[ObservedGpu(f"0000:{0x3b + i:02x}:00.0", **A100) for i in range(gpus)],
                            offered_profiles=["grid_a100-20c", "grid_a100-40c"])
        for i, vm in enumerate(per_host.get(name, [])):
            host.gpus[i].vms.append(vm)
            vms[vm] = ObservedVm(vm, host=name, cluster="C", power_state="poweredOn", firmware="efi",
                                 memory_reservation_locked=True, vgpus=[ObservedVgpu(4000, "grid_a100-40c")])
        hosts[name] = host
    return Observed(hosts=hosts, clusters={"C": list(HOSTS)}, vms=vms)


def facts(observed: Observed, drivers: dict[str, str | None], manager: str = OLD,
          installed: str | None = None) -> dict[str, HostFacts]:
    out = {}
    for name in HOSTS:
        f = HostFacts(name, shell=True)
        f.values[RUNNING_MANAGER.name] = {"0000:3b:00.0": manager}
        f.values[GUEST_DRIVERS.name] = {vm: d for vm, d in drivers.items() if observed.vms[vm].host == name}
        f.values[SOFTWARE.name] = Software(installed or manager, "NVD-AIE_ESXi_8.0.0_Driver", "domain-c1")
        f.values[DEPOT.name] = DepotRead(f"/vmfs/volumes/ds1/{ZIP}",
                                         (Offered("NVD-AIE-800", f"{NEW}-1OEM.800.1.0.20613240", "NVIDIA"),))
        out[name] = f
    return out


def inventory(vms: list[str], interim: bool = True, evacuate: str = "migrate", max_unavailable: int = 1,
              target: str = TARGET) -> Any:
    interim_vars = (f"        vgpu_guest_driver_interim_src: files/NVIDIA-Linux-x86_64-{INTERIM}-grid.run\n"
                    "        vgpu_guest_driver_interim_sha256: bbb\n") if interim else ""
    entries = "".join(f"  - name: {vm}\n    guest: {{group: trainers}}\n" for vm in vms)
    return load_inventory_text(f"""apiVersion: vgpuctl/v1
hosts:
  - cluster: C
    vgpu_manager: {{version: {NEW}, source: {{datastore: ds1, path: {ZIP}}}}}
    maintenance: {{evacuate: {evacuate}, max_unavailable: {max_unavailable}}}
vms:
{entries}guests:
  groups:
    trainers:
      roles: [vgpu_guest_driver]
      vars:
        vgpu_guest_driver_src: files/NVIDIA-Linux-x86_64-{target}-grid.run
        vgpu_guest_driver_sha256: aaa
{interim_vars}""")


def plan(observed: Observed, inv: Any, f: dict[str, HostFacts], migration: bool = True) -> Any:
    return hostplan.plan_hosts(inv.hosts, observed, f, vms=inv.vms, vgpu_migration=migration, guests=inv.guests)


def moves(result: Any) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for c in result.changes:
        if isinstance(c.new, EvacuationAction):
            out.setdefault(c.host, []).append((c.target, str(c.new.destination or c.new.kind)))
    return out


def test_guests_first_then_hosts_one_at_a_time_then_guests() -> None:
    """Two branches behind: R550 guests under R550 managers, R580 wanted. R580 refuses R550 (two branches apart),
    so they move first to R535, which R550 (the branch before) and R580 (the LTS branch before) accept; the hosts
    go one at a time, each emptied onto the others; then the guests get R580's own driver."""
    observed = farm({"esx-01": ["train-01"], "esx-02": ["train-02"], "esx-03": ["train-03"]})
    vms = ["train-01", "train-02", "train-03"]
    inv = inventory(vms)
    result = plan(observed, inv, facts(observed, dict.fromkeys(vms, GUEST_OLD)))
    assert result.errors == []
    window = result.window
    assert window.batches == [["esx-01"], ["esx-02"], ["esx-03"]]
    assert window.managers == {h: [OLD, NEW] for h in HOSTS}
    assert [(m.vm, m.old, m.new, m.stage) for m in window.before] == [
        (vm, GUEST_OLD, INTERIM, WindowStage.BEFORE) for vm in vms]
    assert window.before[0].src.endswith(f"{INTERIM}-grid.run") and window.before[0].sha256 == "bbb"
    assert "does not accept 550.90.07" in window.before[0].why
    assert [(m.vm, m.old, m.new) for m in window.after] == [(vm, INTERIM, TARGET) for vm in vms]
    # esx-01's VM goes to esx-02 (no host is upgraded yet); esx-02's two go to esx-01, upgraded by then;
    # esx-03's to esx-01 and esx-02: no VM ever lands on a host it has to leave again in a later batch but the first
    assert moves(result) == {"esx-01": [("train-01", "esx-02")],
                             "esx-02": [("train-01", "esx-01"), ("train-02", "esx-01")],
                             "esx-03": [("train-03", "esx-02")]}
    # every step keeps every VM on a pair NVIDIA lists: the interim release runs under both managers
    assert pair(OLD, INTERIM).ok and pair(NEW, INTERIM).ok and pair(NEW, TARGET).ok and not pair(NEW, GUEST_OLD).ok


def test_a_guest_the_new_manager_accepts_is_not_moved_first() -> None:
    observed = farm({"esx-01": ["train-01"]})
    inv = inventory(["train-01"])
    result = plan(observed, inv, facts(observed, {"train-01": INTERIM}))
    assert result.errors == [] and result.window.before == []
    assert [(m.vm, m.new) for m in result.window.after] == [("train-01", TARGET)]


def test_without_a_release_both_accept_the_plan_names_the_vm_versions_and_rule() -> None:
    observed = farm({"esx-01": ["train-01"]})
    result = plan(observed, inventory(["train-01"], interim=False), facts(observed, {"train-01": GUEST_OLD}))
    error = result.errors[0]  # (it then also cannot start again on its host: a second error says so)
    assert error.startswith("host esx-01: VM train-01: its guest driver 550.90.07 would run under vGPU Manager "
                            "580.65.05, which NVIDIA does not list (")
    assert "more than one branch" in error and "R535" in error and "vgpu_guest_driver_interim_src" in error


def test_an_unknown_guest_driver_is_a_plan_error() -> None:
    observed = farm({"esx-01": ["train-01"]})
    inv = load_inventory_text(f"""apiVersion: vgpuctl/v1
hosts:
  - cluster: C
    vgpu_manager: {{version: {NEW}, source: {{datastore: ds1, path: {ZIP}}}}}
    maintenance: {{evacuate: migrate}}
""")
    result = plan(observed, inv, facts(observed, {"train-01": None}))
    assert any("VM train-01 runs vGPUs and its guest driver is unknown" in e for e in result.errors)


def test_a_saturated_cluster_cannot_empty_a_host_and_says_what_is_missing() -> None:
    """VMs no entry lets vgpuctl power off (not in the inventory here) must move; with every GPU taken none can."""
    full = {h: [f"{h}-a", f"{h}-b"] for h in HOSTS}  # every GPU of every host holds a whole-GPU vGPU
    observed = farm(full)
    vms = [v for vs in full.values() for v in vs]
    result = plan(observed, inventory([]), facts(observed, dict.fromkeys(vms, INTERIM)))
    errors = [e for e in result.errors if "cannot migrate" in e]
    assert errors, result.errors
    assert ("host esx-01: VM esx-01-a cannot migrate (needs 1 x grid_a100-40c free while esx-01 is in maintenance; "
            "the rest of cluster C has 0)") in errors[0]


def test_max_unavailable_makes_batches_and_a_batch_never_receives_its_own_vms() -> None:
    observed = farm({"esx-01": ["train-01"], "esx-02": ["train-02"]}, gpus=2)
    vms = ["train-01", "train-02"]
    result = plan(observed, inventory(vms, max_unavailable=2), facts(observed, dict.fromkeys(vms, INTERIM)))
    assert result.window.batches == [["esx-01", "esx-02"], ["esx-03"]]
    # the first batch's VMs go to esx-03, which they leave again in the second batch, for the upgraded hosts
    assert moves(result) == {"esx-01": [("train-01", "esx-03")], "esx-02": [("train-02", "esx-03")],
                             "esx-03": [("train-01", "esx-01"), ("train-02", "esx-01")]}


def test_power_off_evacuation_must_start_again_under_the_new_manager() -> None:
    observed = farm({"esx-01": ["train-01"]})
    inv = inventory(["train-01"], evacuate="power-off")
    result = plan(observed, inv, facts(observed, {"train-01": GUEST_OLD}))
    assert result.errors == []  # it is moved to R535 first: R580 then accepts it at its power-on
    assert moves(result)["esx-01"] == [("train-01", str(EvacuationKind.RESTORE_AFTER))]


def test_hosts_done_leave_only_the_guests_to_their_release() -> None:
    """What a rerun after the hosts sees: every host runs R580, the guests still the interim release."""
    observed = farm({"esx-01": ["train-01"]})
    inv = inventory(["train-01"])
    result = plan(observed, inv, facts(observed, {"train-01": INTERIM}, manager=NEW))
    assert result.changes == [] and result.window.batches == []
    assert [(m.vm, m.old, m.new) for m in result.window.after] == [("train-01", INTERIM, TARGET)]
    done = plan(observed, inv, facts(observed, {"train-01": TARGET}, manager=NEW))
    assert done.window.is_empty


def test_make_plan_carries_the_window_and_it_is_not_empty() -> None:
    observed = farm({"esx-01": ["train-01"]})
    inv = inventory(["train-01"])
    the_plan = make_plan(inv, observed, host_facts=facts(observed, {"train-01": INTERIM}, manager=NEW),
                         vgpu_migration=True)
    assert the_plan.window is not None and not the_plan.is_empty
    assert the_plan.to_dict()["window"]["after"][0]["vm"] == "train-01"
