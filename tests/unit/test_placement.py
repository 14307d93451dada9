"""Placement: the shared vectors (tests/fixtures/placement/cases.yaml, also run by gpusim) plus our own
(python_cases.yaml, same format), the observed-state adapter and the farm-level function."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from vgpuctl import profiles
from vgpuctl.farm.placement import Gpu, add_vgpu, fits, gpus_from_observed, place_vm, remove_vgpu, why_not
from vgpuctl.farm.state import FarmState, Request, farm_from_observed, place_farm
from vgpuctl.model import Observed, ObservedGpu, ObservedHost, ObservedVgpu, ObservedVm
from vgpuctl.profiles import BOARDS, board_for_model, parse_profile

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "placement"
CASE_FILES = sorted(FIXTURES.glob("*.yaml"))  # every vector file; gpusim runs the same set


def _cases() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in CASE_FILES:
        for case in YAML(typ="safe").load(path.read_text(encoding="utf-8")) or []:
            out.append((f"{path.stem}: {case['name']}", case))
    return out


CASES = _cases()


def gpu_from_case(g: dict[str, Any], api_version: str = "8.0.3.0") -> Gpu:
    board = board_for_model(g["model"])
    assert board is not None, g["model"]
    mode = "multiInstanceGpu" if g.get("mode") == "mig" else g.get("vgpu_mode", "sameSize")
    return Gpu(
        id=g["id"], board=board, fb_gb=BOARDS[board].fb_gb, vgpu_mode=mode,
        graphics_type=g.get("graphics_type", "sharedDirect"), nvlink_set=g.get("nvlink_set"),
        nvlink_up=g.get("nvlink_up", True), vgpus=list(g.get("used") or []), api_version=api_version,
        types_may_mix=g.get("types_may_mix"),
    )


def test_shared_vectors_present() -> None:
    assert (FIXTURES / "cases.yaml").exists() or (FIXTURES / "python_cases.yaml").exists()
    assert len(CASES) >= 20


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[n for n, _ in CASES])
def test_vector(case: dict[str, Any]) -> None:
    gpus = [gpu_from_case(g, case.get("api_version", "8.0.3.0")) for g in case["gpus"]]
    reported = case.get("nvlink_groups") or {}  # NVLink set -> the device group sizes the host reports for it
    for g in gpus:
        g.nvlink_groups = tuple(reported.get(g.nvlink_set, ()))
    before = [(g.id, list(g.vgpus), list(g.mig_used)) for g in gpus]
    req = case["request"]
    res = place_vm(gpus, "vm", req["profiles"], case.get("policy", "performance"), nvlink=req.get("nvlink", False))
    expect = case["expect"]
    assert res.ok == expect["fits"], res.reason
    if expect["fits"]:
        assert res.assign == expect["assign"]
        if "starts" in expect:
            assert res.starts == expect["starts"]
        if "placements" in expect:
            assert res.placements == expect["placements"]
    else:
        assert res.reason and res.placed == []
    assert [(g.id, g.vgpus, g.mig_used) for g in gpus] == before  # place_vm does not mutate its input


# -------------------------------------------------------------------------------------- single rules


def a100(id_: str, mode: str = "sameSize", used: list[str] | None = None, **kw: Any) -> Gpu:
    return Gpu(id_, "a100", 40, mode, vgpus=list(used or []), **kw)


def test_mig_slots_follow_removal() -> None:
    g = a100("0000:3b:00.0", "multiInstanceGpu", ["grid_a100-4-20c", "grid_a100-3-20c"])
    assert g.mig_used == [(0, 4), (4, 4)]
    assert not fits(g, "grid_a100-1-5c")
    remove_vgpu(g, "grid_a100-4-20c")
    assert g.vgpus == ["grid_a100-3-20c"]
    assert g.mig_used == [(0, 4)]  # re-placed at its lowest free start
    assert add_vgpu(g, "grid_a100-2-10c") == 4


def test_unknown_mig_history_blocks_gpu() -> None:
    g = a100("0000:3b:00.0", "multiInstanceGpu", ["grid_a100-7-40c", "grid_a100-7-40c"])
    assert g.blocked
    assert not fits(g, "grid_a100-1-5c")


@pytest.mark.parametrize("mode", ["multiInstanceGpu", "sameSize", "mixedSize"])
def test_a_running_vgpu_no_table_explains_never_raises(mode: str) -> None:
    g = a100("0000:3b:00.0", mode, ["grid_a100-1-5c", "grid_a100-1-5xme"])
    assert g.blocked and g.blocked_reason == "holds vGPU 'grid_a100-1-5xme', which no vGPU type table explains"
    assert why_not(g, parse_profile("grid_a100-1-5c")) == g.blocked_reason
    g.rebuild_mig()  # used to raise ProfileError
    res = place_vm([g], "vm", ["grid_a100-1-5c"])
    assert not res.ok and res.reason is not None and "grid_a100-1-5xme" in res.reason
    remove_vgpu(g, "grid_a100-1-5xme")  # once it is gone the GPU is usable again
    assert not g.blocked and (mode != "multiInstanceGpu" or fits(g, "grid_a100-1-5c"))


def test_media_mig_types_place_and_count() -> None:
    g = a100("0000:3b:00.0", "multiInstanceGpu", ["grid_a100-1-5cme"])
    assert not g.blocked and g.mig_used == [(0, 1)]
    assert why_not(g, parse_profile("nvidia_a100-1-5cme")) == "holds the maximum of A100-1-5CME (1)"
    assert fits(g, "grid_a100-1-5c")


def test_a_request_no_table_explains_is_a_reason_not_an_exception() -> None:
    res = place_vm([a100("0000:3b:00.0")], "vm", ["grid_a100-40c", "bogus"])
    assert res.reason == "asks for bogus, which no vGPU type table explains"
    assert not fits(a100("0000:3b:00.0"), "bogus")


def test_conservative_mig_start_says_so_when_it_refuses() -> None:
    g = a100("0000:3b:00.0", "multiInstanceGpu", ["grid_a100-1-10c"])
    assert g.mig_used == [(0, 2)]  # the start that leaves the least room (0 and 2 tie: lowest)
    res = place_vm([g], "vm", ["grid_a100-4-20c"])
    assert res.reason is not None and "conservative MIG start rule" in res.reason
    full = a100("0000:3b:00.0", "multiInstanceGpu", ["grid_a100-7-40c"])
    assert why_not(full, parse_profile("grid_a100-1-5c")) == "no free MIG placement"


@pytest.mark.parametrize(("api", "ok"), [("8.0.2.0", True), ("8.0.3.0", True), ("8.0.1.0", False), ("8.0.0.1", False),
                                         ("7.0.3", False)])
def test_equal_size_types_of_one_size_share_from_8_0_u2(api: str, ok: bool) -> None:
    g = Gpu("0000:3b:00.0", "a40", 48, "sameSize", vgpus=["grid_a40-8q"], api_version=api)
    assert fits(g, "grid_a40-8c") == ok
    assert fits(g, "nvidia_a40-8q")  # the identical type in the other spelling always may
    assert not fits(g, "grid_a40-16q")
    if not ok:
        assert why_not(g, parse_profile("grid_a40-8c")) == (
            "holds another profile (same-size mode; before vSphere API 8.0.2 only the identical type)")


def test_a_driver_that_runs_one_type_per_gpu_wins_over_the_api_version() -> None:
    g = Gpu("0000:3b:00.0", "a40", 48, "sameSize", vgpus=["grid_a40-8q"], api_version="8.0.3.0", types_may_mix=False)
    assert not fits(g, "grid_a40-8c") and fits(g, "grid_a40-8q")
    assert why_not(g, parse_profile("grid_a40-8c")) == (
        "holds another profile (same-size mode; the host's driver runs one type per GPU)")
    g.types_may_mix = True
    assert fits(g, "grid_a40-8c")


def test_mixed_size_needs_published_data() -> None:
    g = Gpu("0000:3b:00.0", "a40", 48, "mixedSize")
    assert why_not(g, parse_profile("grid_a40-24q")) == "A40-24Q has no published mixed-size maximum"
    h = a100("0000:3b:00.0", "mixedSize", ["grid_a100-8c"] * 4)
    assert why_not(h, parse_profile("grid_a100-8c")) == "holds the mixed-size maximum of A100-8C (4)"
    # 8 GB are free, but at 8 and 28, where no A100-4C placement id (0, 6, 10, ..., 36) starts
    assert why_not(h, parse_profile("grid_a100-4c")) == "no free mixed-size placement id"


def test_mixed_size_placement_ids_when_published(monkeypatch: pytest.MonkeyPatch) -> None:
    index = profiles._type_index()
    row = index["a100-10c"]
    # a made-up placement layout, only to exercise the rule: ids 0 and 20, size 20 for a 10 GB type
    fake = dataclasses.replace(row, placement_size=20, placement_ids=(0, 20))
    monkeypatch.setitem(index, "a100-10c", fake)
    g = a100("0000:3b:00.0", "mixedSize", ["grid_a100-10c", "grid_a100-10c"])
    assert g.mixed_used == [(0, 20), (20, 20)]
    assert why_not(g, parse_profile("grid_a100-10c")) == "no free mixed-size placement id"
    remove_vgpu(g, "grid_a100-10c")
    assert g.mixed_used == [(0, 20)] and fits(g, "grid_a100-10c")


def test_conservative_mixed_placement_takes_the_id_that_leaves_least_room() -> None:
    g = a100("0000:3b:00.0", "mixedSize", ["grid_a100-10c"])
    assert add_vgpu(g, "grid_a100-10c") == -1
    assert g.mixed_used == [(0, 10), (20, 10)]  # 10 would leave 13 free ids, 20 and 30 leave 12: tie -> 20
    res = place_vm([g], "vm", ["grid_a100-20c"])
    assert res.reason == ("lacks GPU capacity for 1 x grid_a100-20c: 0 of 1 fit (grid_a100-20c: no free mixed-size "
                          "placement id under the conservative placement id rule; it may fit if the host chooses "
                          "other placement ids for its vGPUs)")
    remove_vgpu(g, "grid_a100-10c")  # the one left is replayed at 0: both 20 GB ids free again
    assert g.mixed_used == [(0, 10)] and place_vm([g], "vm", ["grid_a100-20c"]).placements == [20]


def test_mixed_refusal_without_the_hint_when_no_packing_fits() -> None:
    h = a100("0000:3b:00.0", "mixedSize", ["grid_a100-8c"] * 4 + ["grid_a100-4c"])
    # four 8C cover every 8 GB id (0, 12, 20, 32); the gaps at 8 and 28 start no 4 GB id, whatever the packing
    assert h.blocked and h.blocked_reason == "holds vGPU 'grid_a100-4c', which gets no free mixed-size placement id"


def test_mixed_history_the_rule_cannot_replay_blocks_until_it_shrinks() -> None:
    g = a100("0000:3b:00.0", "mixedSize", ["grid_a100-10c", "grid_a100-5c", "grid_a100-20c"])
    assert g.blocked and g.blocked_reason is not None
    assert g.blocked_reason.startswith("holds vGPU 'grid_a100-20c', which gets no free mixed-size placement id under")
    res = place_vm([g], "vm", ["grid_a100-5c"])
    assert not res.ok and res.reason is not None and "conservative placement id rule" in res.reason
    remove_vgpu(g, "grid_a100-5c")  # 10C at 0 and 20C at 20: the history fits again
    assert not g.blocked and g.mixed_used == [(0, 10), (20, 20)] and fits(g, "grid_a100-5c")


def test_farm_commits_mixed_vgpus_by_the_conservative_rule() -> None:
    state = FarmState({"h1": [a100("0000:3b:00.0", "mixedSize")]}, {"h1": "performance"})
    reqs = [Request("a", ["grid_a100-10c"], ["h1"]), Request("b", ["grid_a100-10c"], ["h1"]),
            Request("c", ["grid_a100-20c"], ["h1"])]
    out = place_farm(state, reqs)
    assert out["a"].placements == [0] and out["b"].placements == [20]
    assert out["c"].reason is not None and "conservative placement id rule" in out["c"].reason


def test_mixed_packing_search_stays_small_on_a_full_80gb_gpu() -> None:
    # 16 vGPUs of two types whose ids interleave: an exhaustive search of the orders would not end
    g = Gpu("0000:3b:00.0", "h100", 80, "mixedSize", vgpus=["grid_h100-5c"] * 8 + ["grid_h100-4c"] * 8)
    assert not g.blocked
    assert why_not(g, parse_profile("grid_h100-4c")) == "no free mixed-size placement id"


def test_reason_names_capacity_shortfall() -> None:
    gpus = [a100("0000:3b:00.0", used=["grid_a100-40c"]), a100("0000:5e:00.0")]
    res = place_vm(gpus, "vm", ["grid_a100-40c", "grid_a100-40c"])
    assert not res.ok
    assert res.fitted == 1
    assert res.reason == "lacks GPU capacity for 2 x grid_a100-40c on separate GPUs: 1 of 2 fit (grid_a100-40c: full)"


def test_reason_when_nothing_fits_lists_why() -> None:
    res = place_vm([a100("0000:3b:00.0", graphics_type="shared")], "vm", ["grid_a100-40c"])
    assert res.reason == ("lacks GPU capacity for 1 x grid_a100-40c: 0 of 1 fit "
                          "(grid_a100-40c: graphics type is shared, vGPUs need sharedDirect)")


def test_mig_profile_on_time_sliced_gpu() -> None:
    res = place_vm([a100("0000:3b:00.0")], "vm", ["grid_a100-3-20c"])
    assert res.reason is not None and "not in MIG mode" in res.reason


def test_empty_request_fits() -> None:
    assert place_vm([], "vm", []).ok


# --------------------------------------------------------------------------------------------- observed


def _host(name: str, gpus: list[ObservedGpu], policy: str = "performance") -> ObservedHost:
    return ObservedHost(name, cluster="C", assignment_policy=policy, gpus=gpus)


def _ogpu(pci: str, vms: list[str], mode: str = "sameSize", nvlink_set: int | None = None) -> ObservedGpu:
    return ObservedGpu(pci, "NVIDIA A100-PCIE-40GB", memory_kb=40 * 1024 * 1024, graphics_type="sharedDirect",
                       vgpu_mode=mode, vms=vms, nvlink_set=nvlink_set)


def test_gpus_from_observed_infers_profiles() -> None:
    host = _host("h", [_ogpu("0000:5e:00.0", ["a", "b"]), _ogpu("0000:3b:00.0", ["a"])])
    gpus = gpus_from_observed(host, {"a": ["grid_a100-10c", "grid_a100-20c"], "b": ["grid_a100-10c"]})
    assert [g.id for g in gpus] == ["0000:3b:00.0", "0000:5e:00.0"]
    assert gpus[0].board == "a100" and gpus[0].fb_gb == 40
    # 3b gets a's larger vGPU; 5e already shows b's 10c, so a's remaining 10c is the natural match.
    assert gpus[0].vgpus == ["grid_a100-20c"]
    assert sorted(gpus[1].vgpus) == ["grid_a100-10c", "grid_a100-10c"]


def test_unknown_vm_blocks_gpu() -> None:
    gpus = gpus_from_observed(_host("h", [_ogpu("0000:3b:00.0", ["ghost"])]), {})
    assert gpus[0].blocked and not fits(gpus[0], "grid_a100-4c")


def _farm() -> Observed:
    hosts = {
        "h1": _host("h1", [_ogpu("0000:3b:00.0", ["run"]), _ogpu("0000:5e:00.0", [])]),
        "h2": _host("h2", [_ogpu("0000:3b:00.0", []), _ogpu("0000:5e:00.0", [])], policy="consolidation"),
    }
    vms = {"run": ObservedVm("run", host="h1", power_state="poweredOn", vgpus=[ObservedVgpu(1, "grid_a100-40c")])}
    return Observed(hosts=hosts, vms=vms, clusters={"C": ["h1", "h2"]})


def test_farm_places_in_order_and_commits() -> None:
    state = farm_from_observed(_farm())
    results = place_farm(state, [
        Request("a", ["grid_a100-40c", "grid_a100-40c"], ["h1", "h2"], cluster="C"),
        Request("b", ["grid_a100-20c"], ["h2"]),
        Request("c", ["grid_a100-40c", "grid_a100-40c"], ["h1", "h2"], cluster="C"),
    ])
    assert results["a"].host == "h2"  # h1 has one GPU left
    assert results["b"].reason == ("host h2 lacks GPU capacity for 1 x grid_a100-20c: 0 of 1 fit "
                                   "(grid_a100-20c: holds another profile (same-size mode))")
    assert results["c"].reason is not None
    assert results["c"].reason.startswith("no host of cluster C has GPU capacity (h1: lacks GPU capacity")
    assert [g.vgpus for g in state.gpus["h2"]] == [["grid_a100-40c"], ["grid_a100-40c"]]


def test_farm_release_frees_gpus() -> None:
    state = farm_from_observed(_farm(), release=["run"])
    assert all(not g.vgpus for g in state.gpus["h1"])
    res = place_farm(state, [Request("x", ["grid_a100-40c", "grid_a100-40c"], ["h1"])])
    assert res["x"].ok and res["x"].assign == ["0000:3b:00.0", "0000:5e:00.0"]


def _started_unlisted(second: str = "grid_a100-40c") -> Observed:
    """h1's GPUs name no VM, but the VMs' read shows `late` running there: it powered on after h1 was read."""
    hosts = {"h1": _host("h1", [_ogpu("0000:3b:00.0", []), _ogpu("0000:5e:00.0", [])])}
    vgpus = [ObservedVgpu(1, "grid_a100-40c"), ObservedVgpu(2, second)]
    vms = {"late": ObservedVm("late", host="h1", power_state="poweredOn", vgpus=vgpus)}
    return Observed(hosts=hosts, vms=vms, clusters={"C": ["h1"]})


def test_farm_places_a_vm_that_started_after_its_host_was_read() -> None:
    state = farm_from_observed(_started_unlisted())
    assert [g.vgpus for g in state.gpus["h1"]] == [["grid_a100-40c"], ["grid_a100-40c"]]
    res = place_farm(state, [Request("x", ["grid_a100-40c"], ["h1"])])
    assert not res["x"].ok


def test_farm_a_vm_to_be_released_that_started_unlisted_holds_nothing() -> None:
    state = farm_from_observed(_started_unlisted(), release=["late"])
    assert all(not g.vgpus and not g.blocked for g in state.gpus["h1"])


def test_farm_an_unlisted_running_vm_that_does_not_fit_blocks_its_hosts_gpus() -> None:
    state = farm_from_observed(_started_unlisted(second="grid_a100-1-5xme"))  # no table explains it
    assert all(g.blocked for g in state.gpus["h1"])
    assert state.gpus["h1"][0].blocked_reason == (
        "late runs on h1 with vGPUs that no GPU listed when the host was read")


def test_farm_unknown_host() -> None:
    res = place_farm(farm_from_observed(_farm()), [Request("x", ["grid_a100-40c"], ["nope"])])
    assert res["x"].reason == "host nope is not a known host"


def test_farm_with_a_running_vgpu_no_table_explains() -> None:
    hosts = {"h": _host("h", [_ogpu("0000:3b:00.0", ["odd"]), _ogpu("0000:5e:00.0", ["run"])])}
    vms = {
        "odd": ObservedVm("odd", host="h", power_state="poweredOn", vgpus=[ObservedVgpu(1, "grid_a100-1-5xme")]),
        "run": ObservedVm("run", host="h", power_state="poweredOn", vgpus=[ObservedVgpu(1, "grid_a100-20c")]),
    }
    state = farm_from_observed(Observed(hosts=hosts, vms=vms, clusters={"C": ["h"]}))
    res = place_farm(state, [Request("a", ["grid_a100-20c"], ["h"]), Request("b", ["grid_a100-20c"], ["h"])])
    assert res["a"].assign == ["0000:5e:00.0"]
    assert res["b"].reason is not None and "holds vGPU 'grid_a100-1-5xme'" in res["b"].reason


def test_observed_board_identity_from_device_id_and_offered_profiles() -> None:
    hgx = ObservedGpu("0000:07:00.0", "NVIDIA A100", device_id=0x20B0, memory_kb=40 * 1024 * 1024,
                      graphics_type="sharedDirect", vgpu_mode="sameSize")
    odd = ObservedGpu("0000:0f:00.0", "NVIDIA A100", memory_kb=80 * 1024 * 1024, graphics_type="sharedDirect",
                      vgpu_mode="sameSize")
    host = ObservedHost("h", gpus=[hgx, odd], offered_profiles=["nvidia_a100x-40c", "nvidia_a100dx-80c"],
                        api_version="8.0.0.1")
    gpus = gpus_from_observed(host, {})
    assert [(g.board, g.fb_gb, g.api_version) for g in gpus] == [("a100x", 40, "8.0.0.1"), ("a100dx", 80, "8.0.0.1")]
