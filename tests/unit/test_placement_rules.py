"""Placement rules no other unit test decides: the host's assignment policy on the way from observe to
place_farm, the mixed-size framebuffer sum for types without placement ids, the placement-id mask of a GPU
holding several vGPUs, and the catalogue's NVLink group sizes where a host reports no device groups."""

from __future__ import annotations

import pytest

from vgpuctl.model import Observed, ObservedGpu, ObservedHost
from vgpuctl.profiles import parse_profile
from vgpuctl.vms.farm import Request, farm_from_observed, place_farm
from vgpuctl.vms.placement import Gpu, GroupSizes, _mask, _mixed_placement, catalogue_group_sizes, group_sizes, place_vm

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
