"""`vgpuctl profiles`: NVIDIA's maximum per GPU for the GPU's current mode, from the catalogue (equal-size,
mixed-size, MIG), the host's own figure when it gives one; golden output for an L40S host and a mixed-size A100.

Regenerate the golden files after an intended change with VGPUCTL_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rich.console import Console

from vgpuctl.hosts.status import mig_instance_totals
from vgpuctl.model import ObservedGpu, ObservedHost, ObservedProfile
from vgpuctl.profiles import BOARDS, max_per_gpu, parse_profile
from vgpuctl.reports.base import TextLayout
from vgpuctl.reports.profiles import host_profiles, profiles_report, with_reported_maxima

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
KB_PER_GB = 1024 * 1024


def _host(name: str, board: str, device: str, modes: list[str], offered: list[str]) -> ObservedHost:
    gb = BOARDS[board].fb_gb
    gpus = [ObservedGpu(f"0000:{0x3b + i:02x}:00.0", device, memory_kb=int(gb * KB_PER_GB),
                        graphics_type="sharedDirect", vgpu_mode=mode) for i, mode in enumerate(modes)]
    return ObservedHost(name, cluster="GPU-Cluster", default_graphics_type="sharedDirect", gpus=gpus,
                        offered_profiles=offered)


def l40s() -> ObservedHost:
    """An L40S in equal-size mode: the tables cap the 1 GB types at 32 (48 GB / 1 GB would be 48)."""
    offered = ["grid_l40s-1b", "grid_l40s-1q", "grid_l40s-2b", "grid_l40s-4c", "grid_l40s-8q", "grid_l40s-12c",
               "grid_l40s-24q", "grid_l40s-48c"]
    return _host("esx-l40s", "l40s", "NVIDIA L40S", ["sameSize"], offered)


def a100_mixed() -> ObservedHost:
    """An A100-40GB in mixed-size mode beside one in MIG mode: mixed-size maxima (A100-4C 8, A100-8C 4, not
    framebuffer / size), MIG maxima (A100-1-5C 7, the media type A100-1-5CME 1)."""
    offered = ["grid_a100-4c", "grid_a100-5c", "grid_a100-8c", "grid_a100-10c", "grid_a100-20c", "grid_a100-40c",
               "grid_a100-1-5c", "grid_a100-1-5cme", "grid_a100-2-10c", "grid_a100-3-20c", "grid_a100-7-40c"]
    return _host("esx-a100", "a100", "NVIDIA A100-PCIE-40GB", ["mixedSize", "multiInstanceGpu"], offered)


def rendered(host: ObservedHost) -> str:
    console = Console(width=100, record=True, file=open(os.devnull, "w"), color_system=None)  # noqa: SIM115
    rendered_items = profiles_report([host]).render_text()
    for item in rendered_items if isinstance(rendered_items, list) else [rendered_items]:
        console.print(item)
    return console.export_text()


@pytest.mark.parametrize(("name", "host"), [("profiles-l40s.txt", l40s), ("profiles-a100-mixed.txt", a100_mixed)])
def test_profiles_matches_its_golden_file(name: str, host: object) -> None:
    got = rendered(host())  # type: ignore[operator]
    path = GOLDEN / name
    if os.environ.get("VGPUCTL_UPDATE_GOLDEN"):
        path.write_text(got)
    assert got == path.read_text()


def test_the_maximum_is_nvidias_for_the_current_mode() -> None:
    l40s_rows = {r.profile: r.max_per_gpu for r in host_profiles(l40s())}
    assert l40s_rows["grid_l40s-1b"] == 32 and l40s_rows["grid_l40s-1q"] == 32  # not 48
    assert l40s_rows["grid_l40s-4c"] == 12 and l40s_rows["grid_l40s-48c"] == 1
    a100 = {r.profile: r.max_per_gpu for r in host_profiles(a100_mixed())}
    assert a100["grid_a100-4c"] == 8 and a100["grid_a100-8c"] == 4  # mixed-size (equal-size: 10 and 5)
    assert a100["grid_a100-1-5c"] == 7 and a100["grid_a100-1-5cme"] == 1 and a100["grid_a100-3-20c"] == 2
    same = a100_mixed()
    same.gpus[0].vgpu_mode = "sameSize"
    assert {r.profile: r.max_per_gpu for r in host_profiles(same)}["grid_a100-4c"] == 10


def test_gpus_in_both_time_sliced_modes_show_the_smaller_maximum() -> None:
    host = _host("esx", "a100", "NVIDIA A100-PCIE-40GB", ["sameSize", "mixedSize"], ["grid_a100-4c"])
    assert host_profiles(host)[0].max_per_gpu == 8


def test_a_type_without_a_mixed_size_maximum_shows_none_on_a_mixed_size_gpu() -> None:
    host = _host("esx", "l40s", "NVIDIA L40S", ["mixedSize"], ["grid_l40s-1b", "grid_l40s-4c"])
    assert {r.profile: r.max_per_gpu for r in host_profiles(host)} == {"grid_l40s-1b": None, "grid_l40s-4c": 8}


def test_the_hosts_own_maximum_wins() -> None:
    host = a100_mixed()
    host.profiles = {"grid_a100-1-5c": ObservedProfile("grid_a100-1-5c", 5, "mig", max_per_gpu=6)}
    assert {r.profile: r.max_per_gpu for r in host_profiles(host)}["grid_a100-1-5c"] == 6


def test_max_per_gpu_outside_the_catalogue_is_framebuffer_over_size_in_equal_size_mode() -> None:
    unknown = parse_profile("grid_a100-6c")  # follows the grammar, not in the catalogue
    assert max_per_gpu(unknown, "sameSize", 40) == 6
    assert max_per_gpu(unknown, "mixedSize", 40) is None
    assert max_per_gpu(parse_profile("grid_a100-2-10c"), "multiInstanceGpu") == 3


LGIP = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi" / "a100-40gb.mig-lgip.txt"


def test_the_hosts_mig_instance_totals_become_its_maxima() -> None:
    """`nvidia-smi mig -lgip` (a real A100-40GB capture) gives each GPU instance profile's total; the offered
    MIG-backed types take them (the host wins), time-sliced ones keep the catalogue's maximum."""
    text = LGIP.read_text()
    totals = mig_instance_totals(lambda command: text)
    assert totals["1g.5gb"] == 7 and totals["1g.5gb+me"] == 1 and totals["3g.20gb"] == 2
    host = a100_mixed()
    with_reported_maxima(host, {**totals, "1g.5gb": 5})  # a host that says 5 is believed
    rows = {r.profile: r.max_per_gpu for r in host_profiles(host)}
    assert rows["grid_a100-1-5c"] == 5 and rows["grid_a100-1-5cme"] == 1 and rows["grid_a100-7-40c"] == 1
    assert rows["grid_a100-4c"] == 8
    assert host.profiles["grid_a100-1-5c"].fb_gb == 5 and host.profiles["grid_a100-1-5c"].sharing == "mig"


def test_the_smallest_total_over_the_hosts_mig_gpus_is_its_figure() -> None:
    one = LGIP.read_text()
    two = one.replace("|   0  MIG 3g.20gb        9     2/2", "|   1  MIG 3g.20gb        9     1/1")
    assert mig_instance_totals(lambda command: one + two)["3g.20gb"] == 1


def test_a_published_maximum_the_framebuffer_cannot_hold_is_capped_and_said() -> None:
    """NVIDIA AI Enterprise 7 lists 6 x H100-16C per 80 GB GPU; 6 x 16 GB does not fit: 5, and `profiles` says
    what NVIDIA lists. The mixed-size maximum (4) fits and carries no note."""
    host = _host("esx-h100", "h100", "NVIDIA H100 PCIe", ["sameSize"], ["grid_h100-16c", "grid_h100-20c"])
    rows = {r.profile: r for r in host_profiles(host)}
    assert (rows["grid_h100-16c"].max_per_gpu, rows["grid_h100-16c"].published_max) == (5, 6)
    assert (rows["grid_h100-20c"].max_per_gpu, rows["grid_h100-20c"].published_max) == (4, None)
    assert "5 (NVIDIA lists 6, more than the framebuffer holds)" in profiles_report([host]).render_text(
        TextLayout(width=200, plain=True))
    mixed = _host("esx-h100", "h100", "NVIDIA H100 PCIe", ["mixedSize"], ["grid_h100-16c"])
    assert (host_profiles(mixed)[0].max_per_gpu, host_profiles(mixed)[0].published_max) == (4, None)
    assert max_per_gpu(parse_profile("grid_h100xm-16c"), "sameSize") == 5
    assert max_per_gpu(parse_profile("grid_h200-3-71c"), "multiInstanceGpu") == 2  # MIG: the geometry holds it
