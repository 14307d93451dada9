"""Profile grammar, mixing rules, board data, per-VM limits and the MMIO sizing rule."""

from __future__ import annotations

import pytest

from vgpuctl.profiles import (
    BOARDS,
    ProfileError,
    board_for_device,
    board_for_model,
    compatible_in_one_vm,
    gi_geometry,
    max_vgpus_per_vm,
    mixing_problem,
    mmio_size_gb,
    next_pow2,
    parse_profile,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "board", "slices", "fb", "series", "gi"),
    [
        ("grid_a100-40c", "a100", None, 40, "c", None),
        ("grid_a100-3-20c", "a100", 3, 20, "c", "3g.20gb"),
        ("grid_a100-1-10c", "a100", 1, 10, "c", "1g.10gb"),
        ("grid_a100d-7-80c", "a100d", 7, 80, "c", "7g.80gb"),
        ("grid_h100-1-10c", "h100", 1, 10, "c", "1g.10gb"),
        ("grid_l40s-48q", "l40s", None, 48, "q", None),
        ("grid_l40s-1b", "l40s", None, 1, "b", None),
        ("grid_l40s-48a", "l40s", None, 48, "a", None),
    ],
)
def test_parse(name: str, board: str, slices: int | None, fb: int, series: str, gi: str | None) -> None:
    p = parse_profile(name)
    assert (p.name, p.board, p.slices, p.fb_gb, p.series, p.gi_profile) == (name, board, slices, fb, series, gi)
    assert p.is_mig == (slices is not None)
    assert p.large_bar == (series == "c")


@pytest.mark.parametrize(
    "bad",
    ["a100-40c", "grid_a100-40", "grid_a100-40x", "GRID_A100-40C", "grid_-40c", "grid_a100-0c", "grid_a100-8-40c",
     "grid_a100-3-20c-x", "", "grid_a100_40c", "grid_a100--40c"],
)
def test_parse_rejects(bad: str) -> None:
    with pytest.raises(ProfileError, match="not a vGPU profile name"):
        parse_profile(bad)


def test_parse_rejects_non_string() -> None:
    with pytest.raises(ProfileError):
        parse_profile(40)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("profiles", "problem"),
    [
        (["grid_a40-48c", "grid_a40-16c"], None),
        (["grid_a100-4-20c", "grid_a100-2-10c"], None),
        (["grid_a100-40c"] * 8, None),
        ([], None),
        (["grid_a100-40c", "grid_a100d-40c"], "must share a board type (got a100, a100d)"),
        (["grid_l40s-48q", "grid_l40s-48c"], "must share a series (got C, Q)"),
    ],
)
def test_mixing(profiles: list[str], problem: str | None) -> None:
    got = mixing_problem(profiles)
    assert (got is None) == (problem is None)
    if problem:
        assert got is not None and problem in got
    assert compatible_in_one_vm(profiles) == (problem is None)


def test_geometry_tables() -> None:
    g = gi_geometry("a100", "1g.10gb")
    assert g is not None and (g.size, g.starts) == (2, (0, 2, 4, 6))
    g = gi_geometry("a100d", "1g.10gb")
    assert g is not None and (g.size, g.starts) == (1, (0, 1, 2, 3, 4, 5, 6))
    g = gi_geometry("h100", "3g.40gb")
    assert g is not None and (g.size, g.starts) == (4, (0, 4))
    assert gi_geometry("a100", "3g.40gb") is None
    assert gi_geometry("l40s", "1g.5gb") is None
    assert not BOARDS["l40s"].mig_capable and BOARDS["a100"].mig_capable


@pytest.mark.parametrize(
    ("device", "mem", "board"),
    [
        ("NVIDIA A100-PCIE-40GB", 40, "a100"),
        ("NVIDIA A100 80GB PCIe", 80, "a100d"),
        ("NVIDIA A100-SXM4-80GB", None, "a100d"),
        ("NVIDIA A100", 80, "a100d"),
        ("NVIDIA H100 PCIe", 80, "h100"),
        ("NVIDIA L40S", 48, "l40s"),
        ("NVIDIA A40", 48, "a40"),
        ("Matrox G200", None, None),
    ],
)
def test_board_for_device(device: str, mem: int | None, board: str | None) -> None:
    assert board_for_device(device, mem) == board


def test_board_for_model() -> None:
    assert board_for_model("A100-40GB") == "a100"
    assert board_for_model("A100-80GB") == "a100d"
    assert board_for_model("H100-80GB") == "h100"
    assert board_for_model("l40s") == "l40s"
    assert board_for_model("V100") is None


@pytest.mark.parametrize(("version", "limit"), [("6.7.3", 4), ("7.0.3.0", 4), ("8.0.0.1", 8), ("8.0.3.0", 8),
                                                 ("9.0", 8), ("garbage", 4)])
def test_vgpus_per_vm_limit(version: str, limit: int) -> None:
    assert max_vgpus_per_vm(version) == limit


@pytest.mark.parametrize(
    ("fbs", "size"),
    [
        ([40], 128),  # DOMAIN.md: 128 GB per A100-40GB
        ([80], 256),  # 256 GB per 80 GB GPU
        ([40, 40, 40, 40], 512),
        ([40, 40, 40], 512),  # 384 GB guideline -> next power of two
        ([80] * 8, 2048),
        ([10], 64),  # 32 GB -> minimum 64
        ([20], 64),
        ([20, 10], 128),  # 96 -> 128
        ([], 64),
    ],
)
def test_mmio_size(fbs: list[int], size: int) -> None:
    got = mmio_size_gb(fbs)
    assert got == size
    assert got & (got - 1) == 0
    assert got >= sum(fbs) * 128 / 40


def test_next_pow2() -> None:
    assert [next_pow2(n) for n in (0, 1, 2, 3, 64, 65, 384)] == [1, 1, 2, 4, 64, 128, 512]
