"""Profile grammar, mixing rules, board data, per-VM limits and the MMIO sizing rule."""

from __future__ import annotations

import pytest

from vgpuctl.profiles import (
    BOARDS,
    ProfileError,
    api_at_least,
    board_for_device,
    board_for_model,
    catalogue_digest,
    catalogue_path,
    class_mmio_size_gb,
    compatible_in_one_vm,
    gi_geometry,
    is_host_spelling,
    is_profile,
    known_models,
    max_vgpus_per_vm,
    mixing_problem,
    mmio_size_gb,
    next_pow2,
    offered_alternatives,
    parse_profile,
    try_parse,
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
    ("device", "mem", "device_id", "offered", "board"),
    [
        ("NVIDIA A100-PCIE-40GB", 40, 0, (), "a100"),
        ("NVIDIA A100 80GB PCIe", 80, 0, (), "a100d"),
        ("NVIDIA A100-SXM4-80GB", None, 0, (), "a100dx"),
        ("NVIDIA A100-SXM4-40GB", None, 0, (), "a100x"),
        ("NVIDIA H100 80GB HBM3", 80, 0, (), "h100xm"),
        ("NVIDIA H100 PCIe", 80, 0, (), "h100"),
        ("NVIDIA H100 NVL", 94, 0, (), "h100l"),
        ("NVIDIA L40S", 48, 0, (), "l40s"),
        ("NVIDIA A40", 48, 0, (), "a40"),
        ("NVIDIA A16", 16, 0, (), "a16"),
        # the pci.ids names `esxcli graphics device list` prints (no device id at hand)
        ("GA100 [A100 PCIe 40GB]", None, None, (), "a100"),
        ("GA100 [A100 SXM4 80GB]", None, None, (), "a100dx"),
        ("GH100 [H100 PCIe]", None, None, (), "h100"),
        ("GH100[H100 SXM5 80GB]", None, None, (), "h100xm"),  # pci.ids 2023.04.10's spelling
        ("GA102GL  [A40]", None, None, (), "a40"),
        ("GA107GL [A2 / A16]", None, None, (), None),  # two boards: not guessed
        # the PCI device id wins over the name
        ("GPU", None, 0x2330, (), "h100xm"),
        ("NVIDIA A100-PCIE-40GB", None, 0x20b2, (), "a100dx"),
        # no substring guessing: an unknown name says nothing ...
        ("NVIDIA A100", 80, 0, (), None),
        ("Matrox G200", None, None, (), None),
        # ... unless the host's offered profiles name exactly one board
        ("NVIDIA A100", 80, 0, ("grid_a100dx-80c", "grid_a100dx-40c"), "a100dx"),
        ("NVIDIA A100", 40, 0, ("grid_a100x-40c", "grid_a100dx-80c"), "a100x"),
        ("NVIDIA A100", None, 0, ("grid_a100x-40c", "grid_a100dx-80c"), None),
        ("Some GPU", None, 0, ("nvidia_h100l-94c", "weird-name"), "h100l"),
    ],
)
def test_board_for_device(device: str, mem: int | None, device_id: int | None, offered: tuple[str, ...],
                          board: str | None) -> None:
    assert board_for_device(device, mem, device_id, offered) == board


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
    ("profiles", "size"),
    [
        # NVIDIA AI Enterprise 6, "Using NVIDIA vGPU (C-Series) on GPUs Requiring 64GB or More of MMIO Space with
        # Large-Memory VMs", Table 18: the MMIO space each GPU requires, whatever the vGPU's framebuffer
        (["grid_a100-40c"], 128),  # A100 40GB: 128GB
        (["grid_a100-10c"], 128),  # a fraction of the same GPU needs the same (framebuffer-based: 64)
        (["grid_a100d-80c"], 256),  # A100 80GB: 256GB
        (["grid_a100-40c"] * 4, 512),  # per VM: the vGPUs' GPUs together
        (["grid_a100-40c"] * 3, 512),  # 384 -> next power of two
        (["grid_h100-80c"] * 8, 2048),  # H100: 256GB each
        (["grid_h100-10c"], 256),
        (["grid_h200-141c"] * 2, 1024),  # H200: 512GB each
        (["grid_a10-4c"], 64),  # A10: 64GB
        (["grid_l40-48c"], 128),  # L40: 128GB
        (["grid_a100-20c", "grid_a100-10c"], 256),
        # not in the table: the KB 2142307 guideline for the physical GPU's framebuffer (conservative)
        (["grid_l40s-8c"], 256),  # 48 GB x 128 / 40 = 154 -> 256
        (["grid_a16-4c"], 64),  # 16 GB x 128 / 40 = 52 -> 64
        ([], 64),
    ],
)
def test_mmio_size_is_by_the_physical_gpu(profiles: list[str], size: int) -> None:
    parsed = [parse_profile(p) for p in profiles]
    got = mmio_size_gb(parsed)
    assert got == size
    assert got & (got - 1) == 0
    assert got >= max(64, sum(p.fb_gb for p in parsed))  # at least 64 GB and the vGPUs' framebuffer


def test_a_board_outside_the_catalogue_is_sized_by_its_vgpus_framebuffer() -> None:
    assert mmio_size_gb([parse_profile("grid_z900-40c")]) == 128


def test_vm_classes_leave_vm_operators_default_unless_the_vgpus_need_more() -> None:
    """vm-operator sets 512 GB of MMIO on VMs with PCI devices unless the class sets a value: a class sets none
    while 512 is enough, and never a value below it."""
    assert class_mmio_size_gb([parse_profile("grid_a100-40c")] * 4) is None  # 512 is vm-operator's
    assert class_mmio_size_gb([parse_profile("grid_h100-80c")] * 4) == 1024
    assert class_mmio_size_gb([parse_profile("grid_h200-141c")]) is None


def test_next_pow2() -> None:
    assert [next_pow2(n) for n in (0, 1, 2, 3, 64, 65, 384)] == [1, 1, 2, 4, 64, 128, 512]


# ------------------------------------------------------------------------------ catalogue-backed names


@pytest.mark.parametrize(
    ("name", "board", "fb", "series", "gi", "media"),
    [
        ("grid_a100x-40c", "a100x", 40, "c", None, False),
        ("nvidia_a100x-40c", "a100x", 40, "c", None, False),
        ("nvidia_h100l-94c", "h100l", 94, "c", None, False),
        ("grid_h100l-3-47c", "h100l", 47, "c", "3g.47gb", False),
        ("grid_a100-1-5cme", "a100", 5, "c", "1g.5gb+me", True),
        ("nvidia_a100d-1-10cme", "a100d", 10, "c", "1g.10gb+me", True),
        ("grid_h100xm-1-10cme", "h100xm", 10, "c", "1g.10gb+me", True),
        ("grid_a30-1-6c", "a30", 6, "c", "1g.6gb", False),
        ("grid_a16-1b", "a16", 1, "b", None, False),
    ],
)
def test_catalogue_names_with_both_prefixes(name: str, board: str, fb: int, series: str, gi: str | None,
                                            media: bool) -> None:
    p = parse_profile(name)
    assert (p.board, p.fb_gb, p.series, p.gi_profile, p.media, p.known) == (board, fb, series, gi, media, True)
    assert p.vgpu_type is not None and p.vgpu_type.name == p.type_name


def test_grammar_names_outside_the_catalogue_parse_as_unknown() -> None:
    p = parse_profile("grid_t4-16q")
    assert (p.board, p.fb_gb, p.series, p.known, p.vgpu_type) == ("t4", 16, "q", False, None)
    p = parse_profile("nvidia_zz9-2-24cme")
    assert (p.gi_profile, p.media, p.known) == ("2g.24gb+me", True, False)
    assert try_parse("grid_a100-40cme") is None  # media extensions exist only on MIG types
    assert try_parse("something else") is None
    assert not is_profile("nvidia_") and is_profile("nvidia_a100-40c")


def test_catalogue_rows_carry_published_maxima() -> None:
    l40s = BOARDS["l40s"]
    one_b = l40s.type("grid_l40s-1b")
    assert one_b is not None and one_b.max_equal == 32  # capped below 48 / 1
    a100_8c = parse_profile("grid_a100-8c").vgpu_type
    assert a100_8c is not None and (a100_8c.max_equal, a100_8c.max_mixed) == (5, 4)
    assert BOARDS["a100"].mig_needs_reboot and not BOARDS["h100xm"].mig_needs_reboot
    assert BOARDS["h100xm"].nvlink_topology == "nvswitch" and BOARDS["a100"].nvlink_topology == "bridge-pairs"
    assert not BOARDS["a16"].nvlink_capable
    row = BOARDS["a100"].type("A100-40C")
    assert row is not None and row.vsphere_names == ("grid_a100-40c", "nvidia_a100-40c")


def test_models_and_catalogue_file() -> None:
    assert board_for_model("H100-SXM5-80GB") == "h100xm"
    assert board_for_model("a100-sxm4-80gb") == "a100dx"  # an alias
    assert {"A100-40GB", "A100-80GB", "H100-80GB", "L40S", "A100-HGX-40GB", "A16"} <= set(known_models())
    assert catalogue_path().name == "vgpu-catalogue.yaml" and catalogue_path().is_file()
    assert len(catalogue_digest()) == 64


def test_offered_alternatives_put_the_same_board_first() -> None:
    offered = ["grid_l40s-48q", "grid_a100-20c", "grid_a100-40c", "grid_a100-10c", "odd"]
    assert offered_alternatives("grid_a100-25c", offered, limit=3) == ["grid_a100-20c", "grid_a100-10c",
                                                                       "grid_a100-40c"]
    assert offered_alternatives("nonsense", offered)[:1] == ["grid_a100-10c"]


@pytest.mark.parametrize(("version", "ok"), [("8.0.1.0", True), ("8.0.3", True), ("8.0.0.1", False), ("7.0.3", False),
                                             ("", False), ("9", True)])
def test_api_at_least(version: str, ok: bool) -> None:
    assert api_at_least(version, (8, 0, 1)) == ok


@pytest.mark.parametrize(
    ("name", "spelled"),
    [("grid_a100-40c", True), ("nvidia_h100l-3-47c", True), ("nvidia_a100-1-5cme2", True), ("grid_zz9-2-24q", True),
     ("grid_a100-40", False), ("grid_a100-3-20", False), ("grid_a100-c", False), ("nvidia_a100", False),
     ("grid_a100-40c-", False), ("a100-40c", False)],
)
def test_host_spelling_needs_a_size_and_a_series_letter_at_the_end(name: str, spelled: bool) -> None:
    """What validate leaves to the host (a newer driver's type) still ends in a frame buffer size and a series."""
    assert is_host_spelling(name) is spelled
