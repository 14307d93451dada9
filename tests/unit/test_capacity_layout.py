"""Capacity's greedy layout and its verification, rule by rule (vgpuctl.capacity.layout): the order shapes are
taken in, how a host is tried (its policy, its NVLink sets, one time-sliced profile on a spreading host, idle GPUs
switched only when a VM needs it), and what verification keeps (the planner's word, the changes VMs land on)."""

from __future__ import annotations

from typing import Any

import pytest

from vgpuctl.capacity.demand import Demand
from vgpuctl.capacity.layout import HostLayout, Layout, _other_time_sliced_profile, greedy, verify
from vgpuctl.capacity.problem import build_problem
from vgpuctl.capacity.synthetic import RunningVm, SynthHost, make_farm
from vgpuctl.domain import GpuVgpuMode

pytestmark = pytest.mark.unit

MIG, SAME = GpuVgpuMode.MIG, GpuVgpuMode.SAME_SIZE
GPU0, GPU1, GPU2 = "0000:3b:00.0", "0000:3c:00.0", "0000:5e:00.0"


def demand(*items: dict[str, Any], allow: tuple[str, ...] = ()) -> Demand:
    return Demand.model_validate({"apiVersion": "vgpuctl/v1", "kind": "Demand", "allow": list(allow),
                                  "demand": list(items)})


def item(name: str, count: int, profile: str | None = None, n: int = 1, fb_gb: float | None = None,
         **extra: Any) -> dict[str, Any]:
    vgpus = {"profile": profile, "count": n} if profile else {"count": n, "fb_gb": fb_gb, "series": "c"}
    return {"name": name, "count": count, "vgpus": vgpus, **extra}


def vms(layout: Layout) -> dict[str, list[tuple[str, str]]]:
    return {host: hl.vms for host, hl in layout.items() if hl.vms}


# ------------------------------------------------------------------------------------------- order


def test_greedy_takes_the_higher_priority_first_then_the_larger_vms() -> None:
    """One A100-40GB: four 10 GB VMs of priority 2 beat one 40 GB VM of priority 1; of equal priority the 40 GB VM
    goes first, and `largest_first=False` (the solver's second starting point) takes the small ones first."""
    farm = make_farm([SynthHost("esx-01", gpus=1, nvlink="none", policy="consolidation")])
    by_priority = build_problem(farm, demand(item("big", 1, "grid_a100-40c"),
                                             item("small", 4, "grid_a100-10c", priority=2)))
    assert vms(greedy(by_priority)) == {"esx-01": [("small", "grid_a100-10c")] * 4}
    equal = build_problem(farm, demand(item("big", 1, "grid_a100-40c"), item("small", 4, "grid_a100-10c")))
    assert vms(greedy(equal)) == {"esx-01": [("big", "grid_a100-40c")]}
    assert vms(greedy(equal, largest_first=False)) == {"esx-01": [("small", "grid_a100-10c")] * 4}


def test_a_size_no_board_offers_is_left_out_and_the_rest_placed() -> None:
    """A 7 GB VM has no profile on an A100 (no option): greedy skips it and places the rest."""
    farm = make_farm([SynthHost("esx-01", gpus=1, nvlink="none")])
    problem = build_problem(farm, demand(item("odd", 1, fb_gb=7), item("b", 1, fb_gb=10)))
    assert problem.shapes[0].options == []
    assert vms(greedy(problem)) == {"esx-01": [("b", "grid_a100-10c")]}


# --------------------------------------------------------------------------------------- one host


def test_greedy_goes_on_to_the_next_host_when_one_is_full() -> None:
    farm = make_farm([SynthHost("esx-01", gpus=1, nvlink="none", running=[RunningVm("busy", ["grid_a100-40c"], [0])]),
                      SynthHost("esx-02", gpus=1, nvlink="none")])
    problem = build_problem(farm, demand(item("a", 1, "grid_a100-40c"), allow=("mig", "profile")))
    assert vms(greedy(problem)) == {"esx-02": [("a", "grid_a100-40c")]}


def test_greedy_places_nvlink_vms_only_on_an_nvlink_set() -> None:
    """Hosts tried by name: two idle GPUs without NVLink, two idle MIG GPUs (in no NVLink set: switched to
    same-size for the VM they still are in none), then a bridged pair; the NVLink VM lands on the pair."""
    farm = make_farm([SynthHost("a-plain", gpus=2, nvlink="none"), SynthHost("b-mig", gpus=2, modes=MIG),
                      SynthHost("c-pair", gpus=2, nvlink="pairs")])
    problem = build_problem(farm, demand(item("pair", 1, "grid_a100-40c", n=2, nvlink="required"), allow=("mig",)))
    layout = greedy(problem)
    assert vms(layout) == {"c-pair": [("pair", "grid_a100-40c")]}
    assert all(not hl.modes for hl in layout.values())


def test_verify_places_nvlink_vms_as_nvlink_vms() -> None:
    """A layout that puts an NVLink VM on GPUs no NVLink joins is refused by the planner, as plan would."""
    farm = make_farm([SynthHost("a-plain", gpus=2, nvlink="none")])
    problem = build_problem(farm, demand(item("pair", 1, "grid_a100-40c", n=2, nvlink="required")))
    checked = verify(problem, farm, {"a-plain": HostLayout(vms=[("pair", "grid_a100-40c")])})
    assert checked.placed == []
    assert checked.dropped == [("pair", "a-plain", "host a-plain has no NVLink-connected set of 2 GPUs with links up")]


def test_greedy_remembers_a_profile_that_failed_on_a_host_and_tries_the_next() -> None:
    """A 10 GB VM may be grid_a100-10c (no GPU of the host takes it: the same-size GPU holds a 20 GB vGPU) or a
    MIG instance (the MIG GPU takes two 1g.10gb): both VMs get the next profile on the same host."""
    farm = make_farm([SynthHost("esx-01", gpus=2, modes=[SAME, MIG], nvlink="none", policy="consolidation",
                                running=[RunningVm("r0", ["grid_a100-20c"], [0]),
                                         RunningVm("r1", ["grid_a100-1-5c"], [1])])])
    problem = build_problem(farm, demand(item("b", 2, fb_gb=10), allow=("profile",)))
    assert problem.shapes[0].options[0] == "grid_a100-10c"
    layout = greedy(problem)
    assert vms(layout) == {"esx-01": [("b", "grid_a100-1-10c")] * 2}
    assert len(verify(problem, farm, layout).placed) == 2


@pytest.mark.parametrize(
    ("placed", "opt", "other"),
    [
        ([], "grid_a100-10c", False),
        ([("a", "grid_a100-10c")], "grid_a100-10c", False),  # the same profile again
        ([("a", "grid_a100-10c")], "grid_a100-20c", True),
        ([("m", "grid_a100-3-20c")], "grid_a100-20c", False),  # MIG instances lock no same-size GPU
        ([("l", "grid_l40s-24c")], "grid_a100-20c", False),  # another board's GPUs
        ([("m", "grid_a100-3-20c"), ("a", "grid_a100-10c")], "grid_a100-10c", False),
    ],
)
def test_other_time_sliced_profile(placed: list[tuple[str, str]], opt: str, other: bool) -> None:
    assert _other_time_sliced_profile(HostLayout(vms=placed), opt) is other


def test_a_spreading_host_takes_one_time_sliced_profile_and_a_packing_host_several() -> None:
    """On a `performance` host with two GPUs the 20 GB VM spreads, and a 10 GB VM there could lock the second GPU
    to 10 GB whatever the layout meant: it goes to the next host. A `consolidation` host takes both sizes."""
    farm = make_farm([SynthHost("a-spread", gpus=2, nvlink="none"),
                      SynthHost("b-pack", gpus=1, nvlink="none", policy="consolidation")])
    problem = build_problem(farm, demand(item("x", 1, "grid_a100-20c"), item("y", 1, "grid_a100-10c")))
    assert vms(greedy(problem)) == {"a-spread": [("x", "grid_a100-20c")], "b-pack": [("y", "grid_a100-10c")]}
    packing = make_farm([SynthHost("b-pack", gpus=2, nvlink="none", policy="consolidation")])
    problem = build_problem(packing, demand(item("x", 1, "grid_a100-20c"), item("y", 1, "grid_a100-10c")))
    assert vms(greedy(problem)) == {"b-pack": [("x", "grid_a100-20c"), ("y", "grid_a100-10c")]}


def test_greedy_switches_an_idle_mig_gpu_to_same_size_for_a_time_sliced_vm() -> None:
    farm = make_farm([SynthHost("esx-01", gpus=1, modes=MIG, nvlink="none")])
    layout = greedy(build_problem(farm, demand(item("a", 1, "grid_a100-40c"), allow=("mig",))))
    assert layout["esx-01"].modes == {GPU0: SAME} and layout["esx-01"].vms == [("a", "grid_a100-40c")]
    assert greedy(build_problem(farm, demand(item("a", 1, "grid_a100-40c"))))["esx-01"].vms == []


def test_greedy_asks_placement_with_the_hosts_policy() -> None:
    """A packing host puts two 10 GB VMs on one GPU; when a two-vGPU MIG VM needs an idle GPU switched, it fills
    the MIG GPU it has and switches one idle GPU, not two."""
    farm = make_farm([SynthHost("esx-01", gpus=2, nvlink="none", policy="consolidation")])
    layout = greedy(build_problem(farm, demand(item("a", 2, "grid_a100-10c"))))
    assert layout["esx-01"].use == {GPU0: {("a", "grid_a100-10c"): 2}}
    farm = make_farm([SynthHost("esx-01", gpus=3, modes=[MIG, SAME, SAME], nvlink="none", policy="consolidation",
                                running=[RunningVm("r", ["grid_a100-1-5c"], [0])])])
    layout = greedy(build_problem(farm, demand(item("m", 1, "grid_a100-1-5c", n=2), allow=("mig",))))
    assert layout["esx-01"].modes == {GPU1: MIG}
    assert layout["esx-01"].use == {GPU0: {("m", "grid_a100-1-5c"): 1}, GPU1: {("m", "grid_a100-1-5c"): 1}}


# ------------------------------------------------------------------------------------------ verify


def _two_mig_switches() -> tuple[Any, Any]:
    farm = make_farm([SynthHost("esx-01", gpus=3, nvlink="none", policy="consolidation",
                                running=[RunningVm("busy", ["grid_a100-10c"], [0])])])
    return farm, build_problem(farm, demand(item("m", 3, "grid_a100-3-20c"), allow=("mig",)))


def test_verify_stops_dropping_after_its_rounds_and_keeps_what_the_last_placement_admits() -> None:
    farm, problem = _two_mig_switches()
    layout = {"esx-01": HostLayout({GPU1: MIG}, [("m", "grid_a100-3-20c")] * 3)}
    for rounds in (1, 5):
        checked = verify(problem, farm, layout, rounds=rounds)
        assert [v.name for v in checked.placed] == ["m-001", "m-002"]
        assert [d[:2] for d in checked.dropped] == [("m", "esx-01")]
        assert checked.modes == {("esx-01", GPU1): MIG}


def test_verify_leaves_out_a_mode_change_no_vm_lands_on_and_keeps_the_others() -> None:
    """Two GPUs switched to MIG, two 3g.20gb VMs on a packing host: both land on the first, so only its change is
    part of the answer (placing again with that change alone confirms it)."""
    farm, problem = _two_mig_switches()
    layout = {"esx-01": HostLayout({GPU1: MIG, GPU2: MIG}, [("m", "grid_a100-3-20c")] * 2)}
    checked = verify(problem, farm, layout)
    assert [v.name for v in checked.placed] == ["m-001", "m-002"] and checked.dropped == []
    assert checked.modes == {("esx-01", GPU1): MIG}
