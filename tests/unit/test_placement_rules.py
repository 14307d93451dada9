"""Placement rules no other unit test decides: the host's assignment policy on the way from observe to
place_farm, the mixed-size framebuffer sum for types without placement ids, the placement-id mask of a GPU
holding several vGPUs, and the catalogue's NVLink group sizes where a host reports no device groups."""

from __future__ import annotations

import dataclasses

import pytest

from vgpuctl.farm.placement import (
    DEFAULT_API,
    Gpu,
    GroupSizes,
    _mask,
    _mig_fits_some_way,
    _mixed_fits_some_way,
    _mixed_placement,
    _mixed_room,
    _series_masks,
    add_vgpu,
    catalogue_group_sizes,
    fits,
    gpus_from_observed,
    group_profiles,
    group_refusal,
    group_sizes,
    nvlink_sets,
    place_vm,
    power_on_key,
    remove_vgpu,
    whole_gpu_compute_types,
    why_not,
)
from vgpuctl.farm.state import Request, farm_from_observed, place_farm
from vgpuctl.model import Observed, ObservedGpu, ObservedHost
from vgpuctl.profiles import BOARDS, load_catalogue, parse_profile

pytestmark = pytest.mark.unit


def _farm(policy: str) -> Observed:
    gpus = [ObservedGpu(pci, "NVIDIA A100-PCIE-40GB", memory_kb=40 * 1024 * 1024, graphics_type="sharedDirect",
                        vgpu_mode="sameSize") for pci in ("0000:3b:00.0", "0000:5e:00.0")]
    return Observed(hosts={"h": ObservedHost("h", cluster="C", assignment_policy=policy, gpus=gpus)},
                    clusters={"C": ["h"]})


@pytest.mark.parametrize(("policy", "second"), [("performance", "0000:5e:00.0"), ("consolidation", "0000:3b:00.0")])
def test_the_hosts_assignment_policy_reaches_place_farm(policy: str, second: str) -> None:
    """docs/gpu-rules.md rule 3: a spreading host puts the second vGPU on the emptier GPU, a packing host on the
    fuller one; farm_from_observed carries the host's policy to place_farm."""
    state = farm_from_observed(_farm(policy))
    assert state.policy == {"h": policy}
    res = place_farm(state, [Request("a", ["grid_a100-10c"], ["h"]), Request("b", ["grid_a100-10c"], ["h"])])
    assert res["a"].assign == ["0000:3b:00.0"] and res["b"].assign == [second]


def test_mixed_size_without_placement_ids_sums_the_framebuffer() -> None:
    """48 GB boards have no published placement ids (docs/vgpu-catalogue.md): a mixed-size A40 or L40 takes
    vGPUs while their framebuffers sum to at most 48 GB and each type stays within its mixed-size maximum."""
    a40 = Gpu("0000:3b:00.0", "a40", 48, vgpu_mode="mixedSize", vgpus=["grid_a40-24c", "grid_a40-16c"])
    assert place_vm([a40], "v", ["grid_a40-8c"]).ok  # 24 + 16 + 8 = 48
    refused = place_vm([a40], "v", ["grid_a40-16c"])  # 56 GB
    assert refused.reason is not None and "framebuffer full" in refused.reason
    l40 = Gpu("0000:3b:00.0", "l40", 48, vgpu_mode="mixedSize", vgpus=["grid_l40-8c"])
    assert "framebuffer full" in (place_vm([l40], "v", ["grid_l40-48c"]).reason or "")
    assert place_vm([l40], "v", ["grid_l40-24c"]).ok
    assert place_vm([l40], "v", ["grid_l40-24c"]).placements == [-1]  # placed by framebuffer, not by id


def test_the_placement_mask_covers_every_vgpu_on_the_gpu() -> None:
    assert _mask([(0, 10)]) == (1 << 10) - 1
    assert _mask([(0, 10), (20, 5)]) == ((1 << 10) - 1) | (((1 << 5) - 1) << 20)
    assert _mask([(0, 10), (20, 5), (10, 5)]) == ((1 << 15) - 1) | (((1 << 5) - 1) << 20)
    # A100-40GB (B.5): 10C at 0 and 20 (conservative), the third goes to 10; with a 10C at 0 and 5C at 20 and
    # 10, the next 10C and the next 5C both take 30: each choice counts what all placed vGPUs cover
    two = Gpu("0000:3b:00.0", "a100", 40, vgpu_mode="mixedSize", vgpus=["grid_a100-10c", "grid_a100-10c"])
    assert two.mixed_used == [(0, 10), (20, 10)]
    assert _mixed_placement(two, parse_profile("grid_a100-10c")) == (10, 10)
    three = Gpu("0000:3b:00.0", "a100", 40, vgpu_mode="mixedSize",
                vgpus=["grid_a100-10c", "grid_a100-5c", "grid_a100-5c"])
    assert three.mixed_used == [(0, 10), (20, 5), (10, 5)]
    assert _mixed_placement(three, parse_profile("grid_a100-10c")) == (30, 10)
    assert _mixed_placement(three, parse_profile("grid_a100-5c")) == (30, 5)


@pytest.mark.parametrize(
    ("board", "members", "sizes"),
    [
        ("a100dx", 8, (2, 4, 8)),  # NVSwitch (HGX): groups of 2, 4 and 8 as far as the set has them
        ("a100dx", 6, (2, 4)),
        ("h100xm", 2, (2,)),
        ("a100", 2, (2,)),  # a bridge set is one group of all its GPUs
        ("a100", 4, (4,)),
        ("h200", 4, (4,)),  # H200 NVL: bridges of 2 or 4 GPUs
        ("h200", 2, (2,)),
        ("a100", 1, ()),  # one GPU is no group
        ("l40s", 2, ()),  # no NVLink
        (None, 2, ()),
    ],
)
def test_catalogue_group_sizes_where_the_host_reports_none(board: str | None, members: int,
                                                           sizes: tuple[int, ...]) -> None:
    assert catalogue_group_sizes(board, members) == sizes


def test_group_sizes_say_where_they_come_from() -> None:
    def nvset(board: str, n: int, reported: tuple[int, ...] = ()) -> list[Gpu]:
        return [Gpu(f"0000:{i:02x}:00.0", board, 80, nvlink_set=0, nvlink_groups=reported) for i in range(n)]

    fallback = group_sizes(nvset("h100xm", 8))
    assert fallback == GroupSizes((2, 4, 8), False, "nvswitch")
    assert fallback.text() == ("the host reported no NVLink device groups; by the board's topology (nvswitch): "
                               "2, 4 or 8")
    reported = group_sizes(nvset("h100xm", 8, (2, 8, 16)))  # a size beyond the set is not offered
    assert reported == GroupSizes((2, 8), True) and reported.text() == "the host offers groups of 2 or 8"


# ------------------------------------------------------------------------------------------- one GPU


def test_a_type_without_a_published_maximum_is_bounded_by_the_framebuffer() -> None:
    """A profile no catalogue row describes (here a 13 GB one) takes as many vGPUs as the framebuffer divides."""
    gpu = Gpu("0000:3b:00.0", "a100", 40, vgpus=["grid_a100-13c"] * 2)
    assert fits(gpu, "grid_a100-13c")
    add_vgpu(gpu, "grid_a100-13c")
    assert why_not(gpu, parse_profile("grid_a100-13c")) == "full"


def test_a_mig_history_that_does_not_fit_blocks_the_gpu_and_keeps_every_vgpu() -> None:
    gpu = Gpu("0000:3b:00.0", "a100", 40, vgpu_mode="multiInstanceGpu",
              vgpus=["grid_a100-7-40c", "grid_a100-7-40c", "grid_a100-1-5c"])
    assert gpu.blocked and gpu.vgpus == ["grid_a100-7-40c", "grid_a100-7-40c", "grid_a100-1-5c"]
    assert gpu.blocked_reason == "holds vGPU 'grid_a100-7-40c', which does not fit its MIG geometry"


def test_removing_the_vgpu_that_blocked_a_gpu_makes_it_whole_again() -> None:
    """Once the unexplained vGPU leaves, the GPU is as if it never held it: not blocked, for no reason, by no
    history, and its lists are lists again (placement copies them)."""
    gpu = Gpu("0000:3b:00.0", "a100", 40, vgpus=["grid_a100-10c", "grid_a100-1-5xme"])
    assert gpu.blocked and gpu.history_blocked
    remove_vgpu(gpu, "grid_a100-1-5xme")
    assert (gpu.blocked, gpu.blocked_reason, gpu.history_blocked, gpu.mig_used) == (False, None, False, [])
    assert place_vm([gpu], "v", ["grid_a100-10c"]).ok
    gpu.block("used by a VM whose vGPUs were not read", history=False)
    remove_vgpu(gpu, "grid_a100-10c")
    assert gpu.blocked  # a block that is not about what the GPU holds stays


# ------------------------------------------------------------------------------------------- reasons


def test_a_shortfall_names_the_first_vgpu_that_did_not_fit_and_every_gpus_reason() -> None:
    """An A100 pair holding a 10 GB and a 5 GB vGPU: a VM of a 20 GB and a 10 GB vGPU gets neither; the reason
    lists what it asks for, how many fitted, and why each GPU refuses the first one missing."""
    gpus = [Gpu("0000:3b:00.0", "a100", 40, vgpus=["grid_a100-10c"]),
            Gpu("0000:5e:00.0", "a100", 40, vgpus=["grid_a100-5c"])]
    res = place_vm(gpus, "v", ["grid_a100-10c", "grid_a100-20c"])
    assert (res.ok, res.fitted) == (False, 0)
    assert res.reason == ("lacks GPU capacity for 1 x grid_a100-20c + 1 x grid_a100-10c on separate GPUs: 0 of 2 fit "
                          "(grid_a100-20c: holds another profile (same-size mode))")
    mixed = [Gpu("0000:3b:00.0", "a100", 40, vgpus=["grid_a100-10c"]),
             Gpu("0000:5e:00.0", "a100", 40, vgpu_mode="multiInstanceGpu")]
    assert place_vm(mixed, "v", ["grid_a100-20c"]).reason == (
        "lacks GPU capacity for 1 x grid_a100-20c: 0 of 1 fit (grid_a100-20c: holds another profile (same-size "
        "mode); in MIG mode (time-sliced profiles need MIG off))")


def test_a_shortfall_where_a_gpu_has_room_names_no_gpu() -> None:
    """Two 10 GB vGPUs on an idle GPU and one holding 20 GB: the first fits, the second is refused by the other GPU
    but the first still has room (a VM takes one vGPU per GPU), so no GPU's reason explains the shortfall."""
    gpus = [Gpu("0000:3b:00.0", "a100", 40), Gpu("0000:5e:00.0", "a100", 40, vgpus=["grid_a100-20c"])]
    res = place_vm(gpus, "v", ["grid_a100-10c"] * 2)
    assert (res.fitted, res.reason) == (1, "lacks GPU capacity for 2 x grid_a100-10c on separate GPUs: 1 of 2 fit")


# -------------------------------------------------------------------------------------------- NVLink


def _nvswitch(held: dict[int, list[str]] | None = None, profiles: tuple[str, ...] = ()) -> list[Gpu]:
    """Four A100 on one NVLink set whose host reports groups of 2 and 4, for `profiles` when it names them."""
    return [Gpu(f"0000:{i + 1:02x}:00.0", "a100", 40, nvlink_set=0, nvlink_groups=(2, 4), nvlink_profiles=profiles,
                vgpus=list((held or {}).get(i, []))) for i in range(4)]


@pytest.mark.parametrize(("policy", "assign"), [("performance", ["0000:01:00.0", "0000:02:00.0"]),
                                               ("consolidation", ["0000:03:00.0", "0000:01:00.0"])])
def test_an_nvlink_vm_follows_the_hosts_policy_within_its_set(policy: str, assign: list[str]) -> None:
    """Groups named for a 20 GB type, the third GPU holding one: spreading takes the two emptiest GPUs, packing
    puts the first vGPU beside the one there."""
    gpus = _nvswitch({2: ["grid_a100-20c"]}, ("grid_a100-20c",))
    res = place_vm(gpus, "v", ["grid_a100-20c"] * 2, policy, nvlink=True, host="h")
    assert (res.ok, res.vm, res.host, res.fitted, res.assign) == (True, "v", "h", 2, assign)


def test_an_nvlink_vm_that_does_not_fit_its_set_says_how_many_fitted() -> None:
    none_free = _nvswitch({i: ["grid_a100-40c"] for i in range(4)})
    res = place_vm(none_free, "v", ["grid_a100-40c"] * 2, nvlink=True, host="h")
    assert (res.ok, res.vm, res.host, res.fitted) == (False, "v", "h", 0)
    assert res.reason == ("lacks GPU capacity for 2 x grid_a100-40c on one NVLink-connected set: 0 of 2 fit "
                          "(grid_a100-40c: full)")
    one_free = _nvswitch({i: ["grid_a100-40c"] for i in range(3)})
    assert place_vm(one_free, "v", ["grid_a100-40c"] * 2, nvlink=True).fitted == 1
    refused = place_vm(_nvswitch(), "v", ["grid_a100-40c"] * 3, nvlink=True, host="h")
    assert (refused.vm, refused.host, refused.fitted) == ("v", "h", 0)
    assert refused.reason == "has no NVLink device group of 3 GPUs (the host offers groups of 2 or 4)"


def test_a_set_one_of_whose_gpus_is_in_mig_mode_is_a_set_of_one() -> None:
    """A bridged pair whose second GPU runs MIG: the set left has one GPU, which is no device group."""
    pair = [Gpu("0000:3b:00.0", "a100", 40, nvlink_set=0),
            Gpu("0000:5e:00.0", "a100", 40, vgpu_mode="multiInstanceGpu", nvlink_set=0)]
    assert [[g.id for g in s] for s in nvlink_sets(pair)] == [["0000:3b:00.0"]]
    assert group_sizes(nvlink_sets(pair)[0]) == GroupSizes((), False, "bridge-pairs")
    res = place_vm(pair, "v", ["grid_a100-40c"] * 2, nvlink=True)
    assert res.reason == ("has no NVLink device group of 2 GPUs (the host reported no NVLink device groups; by the "
                          "board's topology (bridge-pairs): none)")
    assert group_refusal(nvlink_sets(pair)[0], ["nvidia_a100-20c"]) == (
        "has NVLink device groups only for nvidia_a100-40c (by the catalogue: the board's whole-GPU C-series types), "
        "not for nvidia_a100-20c")


def test_nvlink_refusals_of_several_sets_are_listed_and_spelled_as_the_vm_spells_its_profiles() -> None:
    """Two sets: one names its groups for two 20 GB types, one for the whole-GPU type; a VM of 10 GB vGPUs hears
    from both, in the spelling it used (`nvidia_`)."""
    named = [Gpu(f"0000:{i + 1:02x}:00.0", "a100", 40, nvlink_set=0,
                 nvlink_profiles=("grid_a100-20c", "nvidia_a100-40c")) for i in range(2)]
    plain = [Gpu(f"0000:{i + 5:02x}:00.0", "a100", 40, nvlink_set=1) for i in range(2)]
    res = place_vm(named + plain, "v", ["nvidia_a100-10c"] * 2, nvlink=True)
    assert res.reason == (
        "has NVLink device groups only for nvidia_a100-20c, nvidia_a100-40c (the host's group names), not for "
        "nvidia_a100-10c; has NVLink device groups only for nvidia_a100-40c (by the catalogue: the board's "
        "whole-GPU C-series types), not for nvidia_a100-10c")


def test_a_group_name_that_is_a_type_name_counts_as_that_type() -> None:
    """A host may name its groups by NVIDIA's type name rather than a profile name: `A100-40C` (any case) is the
    type of grid_a100-40c."""
    pair = [Gpu(f"0000:{i + 1:02x}:00.0", "a100", 40, nvlink_set=0, nvlink_profiles=("a100-40c",)) for i in range(2)]
    assert group_profiles(pair) == (("A100-40C",), True)
    assert place_vm(pair, "v", ["grid_a100-40c"] * 2, nvlink=True).ok


def test_an_unknown_board_offers_no_nvlink_group() -> None:
    unknown = [Gpu(f"0000:{i + 1:02x}:00.0", None, 40, nvlink_set=0) for i in range(2)]
    assert group_sizes(unknown) == GroupSizes((), False, "none")
    assert group_sizes(unknown).text() == (
        "the host reported no NVLink device groups; by the board's topology (none): none")
    assert whole_gpu_compute_types(None) == ()


def test_the_whole_gpu_type_is_the_largest_c_type_within_half_a_gb_of_the_framebuffer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """NVLink P2P needs vGPUs that each take a whole GPU: the board's largest C-series type, when it takes the
    framebuffer (to half a GB, the catalogue's rounding); else the board offers none."""
    assert whole_gpu_compute_types("a100") == ("A100-40C",)
    a100 = BOARDS["a100"]
    for fb, whole in ((40.5, ("A100-40C",)), (40.6, ()), (41, ())):
        monkeypatch.setitem(load_catalogue().boards, "a100-like", dataclasses.replace(a100, fb_gb=fb))
        assert whole_gpu_compute_types("a100-like") == whole, fb
    halves = {k: t for k, t in a100.types.items() if t.fb_gb < 40}
    monkeypatch.setitem(load_catalogue().boards, "a100-like", dataclasses.replace(a100, types=halves))
    assert whole_gpu_compute_types("a100-like") == ()


def test_power_on_key_takes_a_vm_as_new_unless_told_and_puts_vms_without_vgpus_last() -> None:
    keys = {"new": power_on_key("new", ["grid_a100-1-5c"]),
            "old": power_on_key("old", ["grid_a100-1-5c"], exists=True),
            "bare": power_on_key("bare", []),
            "big": power_on_key("big", ["grid_a100-40c"])}
    assert sorted(keys, key=keys.__getitem__) == ["old", "big", "new", "bare"]


# ------------------------------------------------------------------------------ GPUs from what observe read

GB_KB = 1024 * 1024


def _host_of(*gpus: ObservedGpu, offered: tuple[str, ...] = (), api: str = "8.0.3.0") -> ObservedHost:
    return ObservedHost("h", cluster="C", gpus=list(gpus), offered_profiles=list(offered), api_version=api)


def test_the_board_comes_from_the_device_id_then_the_name_then_the_offered_profiles_by_memory() -> None:
    """profiles.board_for_device through gpus_from_observed: an unknown name with A100 80GB's device id is that
    board; with neither, the offered profiles of two boards are narrowed by the GPU's memory (80 GB, reported a
    little under); a GPU no table knows keeps its memory as its framebuffer and is blocked once a VM uses it,
    not by its history (a VM leaving does not unblock it)."""
    by_id = ObservedGpu("0000:01:00.0", "GPU 20B5", device_id=0x20B5, memory_kb=80 * GB_KB)
    by_memory = ObservedGpu("0000:02:00.0", "GPU", memory_kb=int(78.5 * GB_KB))
    unknown = ObservedGpu("0000:03:00.0", "GPU Z", memory_kb=24 * GB_KB)
    used = ObservedGpu("0000:04:00.0", "GPU Z", memory_kb=24 * GB_KB, vms=["x"])
    host = _host_of(by_id, by_memory, unknown, used, offered=("grid_a100-40c", "grid_a100d-80c"))
    gpus = gpus_from_observed(host, {"x": ["grid_a100-10c"]})
    assert [(g.id, g.board, g.fb_gb) for g in gpus] == [
        ("0000:01:00.0", "a100d", 80), ("0000:02:00.0", "a100d", 80), ("0000:03:00.0", None, 24),
        ("0000:04:00.0", None, 24)]
    assert [g.blocked for g in gpus] == [False, False, False, True]
    assert gpus[3].blocked_reason == "GPU GPU Z is not a board any vGPU type table lists"
    assert not gpus[3].history_blocked


def test_a_vm_whose_vgpus_were_not_read_blocks_its_gpu_for_good_and_a_host_api_and_groups_carry_over() -> None:
    og = ObservedGpu("0000:3b:00.0", "NVIDIA A100-PCIE-40GB", memory_kb=40 * GB_KB, vms=["ghost", "ghost"],
                     nvlink_set=1, nvlink_groups=[2], nvlink_profiles=["grid_a100-40c"])
    gpu = gpus_from_observed(_host_of(og, api="8.0.1.0"), {})[0]
    assert gpu.blocked and gpu.blocked_reason == "used by ghost, whose vGPUs were not read"
    assert not gpu.history_blocked
    assert (gpu.api_version, gpu.nvlink_groups, gpu.nvlink_profiles) == ("8.0.1.0", (2,), ("grid_a100-40c",))
    assert gpus_from_observed(_host_of(og, api=""), {})[0].api_version == DEFAULT_API


def test_each_gpu_gets_the_vms_vgpu_that_matches_what_it_already_holds() -> None:
    """vSphere says which VMs use a GPU, not which of their vGPUs: a VM with a 20C and a 10C on two GPUs gives
    the GPU that already holds another VM's 10C its 10C (same-size GPUs hold one type), the other its 20C."""
    name = "NVIDIA A100-PCIE-40GB"
    host = _host_of(ObservedGpu("0000:3b:00.0", name, vms=["a", "b"]), ObservedGpu("0000:5e:00.0", name, vms=["b"]))
    gpus = gpus_from_observed(host, {"a": ["grid_a100-10c"], "b": ["grid_a100-20c", "grid_a100-10c"]})
    assert [g.vgpus for g in gpus] == [["grid_a100-10c", "grid_a100-10c"], ["grid_a100-20c"]]
    assert not any(g.blocked for g in gpus)


# ------------------------------------------------------------------------------------- one VM, one GPU

A100 = "NVIDIA A100-PCIE-40GB"


def test_a_placement_names_its_vm_and_host_and_how_many_fitted_on_every_path() -> None:
    gpus = [Gpu("0000:3b:00.0", "a100", 40), Gpu("0000:5e:00.0", "a100", 40)]
    unknown = place_vm(gpus, "v", ["grid_zz-1c"], host="h")
    empty = place_vm(gpus, "v", [], host="h")
    short = place_vm(gpus, "v", ["grid_a100-40c"] * 3, host="h")
    fitted = place_vm(gpus, "v", ["grid_a100-40c"] * 2, host="h")
    assert [(p.vm, p.host, p.fitted, p.ok) for p in (unknown, empty, short, fitted)] == [
        ("v", "h", 0, False), ("v", "h", 0, True), ("v", "h", 2, False), ("v", "h", 2, True)]
    assert short.reason is not None and short.reason.startswith(
        "lacks GPU capacity for 3 x grid_a100-40c on separate GPUs: 2 of 3 fit (grid_a100-40c: ")


def test_a_vm_without_vgpus_powers_on_before_one_with_a_type_no_table_explains() -> None:
    """power_on_key's default for a VM without vGPUs: ahead of every VM with a vGPU of unknown size (which sorts
    as 0 GB by name), so that a VM that cannot be sized never delays one that needs no GPU."""
    keys = sorted([power_on_key("b", ["AAA"]), power_on_key("a", [])])
    assert [k[-1] for k in keys] == ["a", "b"]


def test_removing_from_a_same_size_gpu_keeps_it_same_size_and_unblocked() -> None:
    gpu = Gpu("0000:3b:00.0", "a100", 40, vgpus=["grid_a100-10c", "grid_a100-10c"])
    remove_vgpu(gpu, "grid_a100-10c")
    assert (gpu.vgpus, gpu.blocked, gpu.mixed_used) == (["grid_a100-10c"], False, [])


def test_a_mig_history_that_does_not_fit_takes_the_whole_gpu() -> None:
    gpu = Gpu("0000:3b:00.0", "a100", 40, vgpu_mode="multiInstanceGpu",
              vgpus=["grid_a100-7-40c", "grid_a100-7-40c"])  # two whole-GPU instances: the second cannot be
    assert gpu.blocked and gpu.mig_used == [(0, gpu.mig_slots)]


def test_some_way_searches_refuse_what_has_no_geometry_or_no_placement_ids() -> None:
    """The any-packing checks behind the conservative-rule reasons: a MIG GPU asked for a time-sliced type, or
    holding a name no table explains, fits nothing some other way; a mixed-size GPU of a board without published
    placement ids (A40) neither."""
    mig = Gpu("0000:3b:00.0", "a100", 40, vgpu_mode="multiInstanceGpu")
    assert _mig_fits_some_way(mig, parse_profile("grid_a100-1-5c"))
    assert not _mig_fits_some_way(mig, parse_profile("grid_a100-10c"))
    odd = Gpu("0000:3b:00.0", "a100", 40, vgpu_mode="multiInstanceGpu")
    odd.vgpus = ["grid_zz-1c"]
    assert not _mig_fits_some_way(odd, parse_profile("grid_a100-1-5c"))
    a40 = Gpu("0000:3b:00.0", "a40", 48, vgpu_mode="mixedSize")
    assert not _mixed_fits_some_way(a40, [parse_profile("grid_a40-8c")])
    a100 = Gpu("0000:3b:00.0", "a100", 40, vgpu_mode="mixedSize")
    assert _mixed_fits_some_way(a100, [parse_profile("grid_a100-10c")])


def test_mixed_room_counts_each_free_placement_id_once() -> None:
    a100 = Gpu("0000:3b:00.0", "a100", 40, vgpu_mode="mixedSize")
    masks = _series_masks("a100", "C")
    assert masks and _mixed_room(a100, "C", 0) == len(masks)
    assert _mixed_room(a100, "C", _mask([(0, 64)])) == 0  # every unit taken
