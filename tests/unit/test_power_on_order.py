"""The power-on order: plan places, apply powers on and capacity verifies the VMs of a host largest first
(vgpuctl.farm.placement.power_on_key); apply's workers wait for their turn per host (vgpuctl.vms.apply.PowerOnTurns)."""

from __future__ import annotations

import copy
import threading

import pytest

from vgpuctl.farm.placement import Gpu, add_vgpu, fits, power_on_key, profile_order
from vgpuctl.inventory import load_inventory_text
from vgpuctl.model import CloneSpec, Observed, ObservedGpu, ObservedHost, ObservedVgpu, ObservedVm, VmChange
from vgpuctl.planner import make_plan
from vgpuctl.vms.apply import PowerOnTurns, power_on_host, queue_order

pytestmark = pytest.mark.unit


def test_profile_order_is_largest_first_then_fewest_starts() -> None:
    names = ["grid_a100-1-5c", "grid_a100-3-20c", "grid_a100-4-20c", "grid_a100-1-10c", "grid_a100-2-10c",
             "grid_a100-40c", "grid_a100-7-40c"]
    assert sorted(names, key=profile_order) == [
        "grid_a100-40c", "grid_a100-7-40c",  # 40 GB: a time-sliced type (no starts) before the 7g.40gb (one)
        "grid_a100-4-20c", "grid_a100-3-20c",  # 4g.20gb starts at 0 only, 3g.20gb at 0 or 4
        "grid_a100-2-10c", "grid_a100-1-10c",  # 2g.10gb three starts, 1g.10gb four
        "grid_a100-1-5c"]
    assert profile_order("not-a-profile") == (0.0, 0, "not-a-profile")


def test_the_tie_break_keeps_a_4g_and_a_3g_instance_together() -> None:
    """A 4g.20gb starts only at slot 0: after a 3g.20gb (conservatively at 0) it no longer fits, before it the
    3g.20gb takes slot 4. The order puts it first."""
    gpu = Gpu("0000:3b:00.0", "a100", 40, vgpu_mode="multiInstanceGpu")
    for p in sorted(["grid_a100-3-20c", "grid_a100-4-20c"], key=profile_order):
        assert fits(gpu, p)
        add_vgpu(gpu, p)
    other = Gpu("0000:3b:00.0", "a100", 40, vgpu_mode="multiInstanceGpu")
    add_vgpu(other, "grid_a100-3-20c")
    assert not fits(other, "grid_a100-4-20c")


def test_power_on_key_puts_existing_vms_first_then_the_largest() -> None:
    vms = {
        "a-small": (["grid_a100-1-5c"], False),
        "b-big": (["grid_a100-3-20c"], False),
        "c-two": (["grid_a100-1-5c", "grid_a100-1-5c"], False),
        "z-old": (["grid_a100-1-5c"], True),
    }
    order = sorted(vms, key=lambda n: power_on_key(n, vms[n][0], exists=vms[n][1]))
    assert order == ["z-old", "b-big", "c-two", "a-small"]


def _observed() -> Observed:
    gpu = ObservedGpu("0000:3b:00.0", "NVIDIA A100-PCIE-40GB", memory_kb=40 * 1024 * 1024,
                      graphics_type="sharedDirect", vgpu_mode="multiInstanceGpu")
    host = ObservedHost("esx-01", cluster="C", default_graphics_type="sharedDirect", gpus=[gpu],
                        offered_profiles=["grid_a100-1-5c", "grid_a100-3-20c", "grid_a100-4-20c"])
    template = ObservedVm("tmpl", is_template=True, firmware="efi", host="esx-01", cluster="C")
    return Observed(hosts={"esx-01": host}, clusters={"C": ["esx-01"]}, vms={"tmpl": template})


INVENTORY = """\
apiVersion: vgpuctl/v1
vms:
  - name: infer-{1..2}
    template: tmpl
    host: esx-01
    vgpus: {profile: grid_a100-1-5c, count: 1}
  - name: wide
    template: tmpl
    host: esx-01
    vgpus: {profile: grid_a100-4-20c, count: 1}
"""


def test_plan_places_largest_first_and_records_the_rank() -> None:
    """By name the two 1g.5gb VMs come first and, conservatively placed, leave no room for the 4g.20gb (start 0
    only); in the power-on order the 4g.20gb goes first and all three fit. The plan records each VM's rank."""
    plan = make_plan(load_inventory_text(INVENTORY), _observed())
    assert plan.errors == []
    ranks = {c.vm: c.power_on_rank for c in plan.vm_changes}
    assert ranks == {"wide": 0, "infer-1": 1, "infer-2": 2}
    by_name = Gpu("0000:3b:00.0", "a100", 40, vgpu_mode="multiInstanceGpu")
    for p in ["grid_a100-1-5c", "grid_a100-1-5c"]:
        add_vgpu(by_name, p)
    assert not fits(by_name, "grid_a100-4-20c")


def test_a_vm_that_stays_off_has_no_rank() -> None:
    text = INVENTORY.replace("vgpus: {profile: grid_a100-4-20c, count: 1}",
                             "vgpus: {profile: grid_a100-4-20c, count: 1}\n    power: 'off'")
    plan = make_plan(load_inventory_text(text), _observed())
    assert {c.vm: c.power_on_rank for c in plan.vm_changes} == {"infer-1": 0, "infer-2": 1, "wide": None}


def test_plan_powers_on_a_vm_that_exists_before_a_larger_new_one() -> None:
    """An existing VM that is off and asked to run comes first, then the new ones largest first: here the existing
    1g.5gb VM keeps its place ahead of the 4g.20gb clone (and, conservatively placed first, leaves it no room)."""
    observed = _observed()
    observed.vms["old-1"] = ObservedVm("old-1", host="esx-01", cluster="C", firmware="efi",
                                       memory_reservation_locked=True,
                                       vgpus=[ObservedVgpu(13000, "grid_a100-1-5c")])
    text = INVENTORY.replace("name: infer-{1..2}", "name: infer-1") + (
        "  - name: old-1\n    vgpus: {profile: grid_a100-1-5c, count: 1}\n")
    plan = make_plan(load_inventory_text(text), observed)
    assert {c.vm: c.power_on_rank for c in plan.vm_changes} == {"old-1": 0, "wide": 1, "infer-1": 2}
    assert [e.split(": host")[0] for e in plan.errors] == ["vm wide: cannot power on"]


def test_a_vm_with_no_usable_host_does_not_keep_the_next_ones_from_their_rank() -> None:
    """The largest VM's host is in maintenance mode: it cannot power on, and the VMs after it are still placed."""
    observed = _observed()
    observed.hosts["esx-02"] = ObservedHost("esx-02", cluster="C", default_graphics_type="sharedDirect",
                                            in_maintenance=True, gpus=[copy.deepcopy(observed.hosts["esx-01"].gpus[0])],
                                            offered_profiles=list(observed.hosts["esx-01"].offered_profiles))
    observed.clusters["C"].append("esx-02")
    plan = make_plan(load_inventory_text(INVENTORY.replace("host: esx-01\n    vgpus: {profile: grid_a100-4-20c",
                                                           "host: esx-02\n    vgpus: {profile: grid_a100-4-20c")),
                     observed)
    assert plan.errors == ["vm wide: cannot power on: no usable host (esx-02; esx-02: in maintenance mode)"]
    assert {c.vm: c.power_on_rank for c in plan.vm_changes} == {"infer-1": 0, "infer-2": 1, "wide": None}


def _change(vm: str, rank: int | None, host: str | None = "esx-01") -> VmChange:
    return VmChange(vm, clone=CloneSpec("tmpl", host=host), power_on=rank is not None, power_on_rank=rank)


def test_queue_order_takes_vms_without_a_rank_first_then_by_rank() -> None:
    changes = [_change("c", 2), _change("off", None), _change("a", 0), _change("b", 1)]
    assert queue_order(changes) == [1, 2, 3, 0]


def test_power_on_host_is_the_clone_target_else_where_the_vm_is() -> None:
    observed = _observed()
    observed.vms["old"] = ObservedVm("old", host="esx-02")
    assert power_on_host(_change("new", 0), observed) == "esx-01"
    assert power_on_host(VmChange("old", power_on=True, power_on_rank=1), observed) == "esx-02"
    assert power_on_host(VmChange("gone", power_on=True, power_on_rank=1), observed) is None


def test_turns_are_per_host_and_released_by_done() -> None:
    observed = _observed()
    changes = [_change("b", 1), _change("a", 0), _change("c", 2), _change("x", 3, host="esx-02")]
    turns = PowerOnTurns(changes, observed)
    assert [turns.ready(v) for v in ("a", "b", "c", "x")] == [True, False, False, True]
    turns.done("b")  # b finished (failed, skipped) before its turn: c still waits for a
    assert not turns.ready("c")
    turns.done("a")
    assert turns.ready("c") and turns.ready("b")


def test_workers_power_on_in_rank_order_whatever_order_they_arrive_in() -> None:
    changes = [_change(f"vm-{i}", i) for i in range(4)]
    turns = PowerOnTurns(changes, _observed())
    order: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(changes))

    def worker(vm: str) -> None:
        start.wait()
        turns.wait(vm)
        with lock:
            order.append(vm)
        turns.done(vm)

    threads = [threading.Thread(target=worker, args=(c.vm,)) for c in reversed(changes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert order == ["vm-0", "vm-1", "vm-2", "vm-3"]
