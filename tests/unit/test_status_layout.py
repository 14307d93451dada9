"""`status` layouts against golden files: a terminal 80 and 200 columns wide, and piped (plain lines).

Regenerate the golden files after an intended change with VGPUCTL_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rich.console import Console

from vgpuctl.model import Observed, ObservedGpu, ObservedHost, ObservedProfile, ObservedVgpu, ObservedVm
from vgpuctl.reports.status import status_report
from vgpuctl.reports.statusview import GUESS_NOTE, NO_MANAGER, common_suffix, render_status, short_pci

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
DOMAIN = ".gpu-farm.example.com"


def farm() -> Observed:
    a100 = {"device_name": "NVIDIA A100-PCIE-40GB", "memory_kb": 40 * 1024 * 1024, "graphics_type": "sharedDirect"}
    offered = ["grid_a100-10c", "grid_a100-20c", "grid_a100-40c", "grid_a100-3-20c"]
    h1 = ObservedHost(
        name="esx-01" + DOMAIN, cluster="GPU-Cluster", default_graphics_type="sharedDirect", offered_profiles=offered,
        gpus=[
            ObservedGpu(pci_id="0000:3b:00.0", vgpu_mode="mixedSize", vms=["mixed-01"], nvlink_set=0, **a100),
            ObservedGpu(pci_id="0000:5e:00.0", vgpu_mode="mixedSize", vms=["mixed-01", "train-01"], nvlink_set=0,
                        **a100),
            ObservedGpu(pci_id="0000:86:00.0", vgpu_mode="multiInstanceGpu", vms=["mig-01"], **a100),
        ],
        profiles={"grid_a100-3-20c": ObservedProfile("grid_a100-3-20c", 20, "mig")},
    )  # fmt: skip
    h2 = ObservedHost(name="esx-02" + DOMAIN, cluster="GPU-Cluster", default_graphics_type="sharedDirect",
                      offered_profiles=offered, in_maintenance=True,
                      gpus=[ObservedGpu(pci_id="0000:3b:00.0", vgpu_mode="sameSize", **a100)])  # fmt: skip
    h3 = ObservedHost(
        name="esx-03" + DOMAIN, cluster="GPU-Cluster", gpus=[ObservedGpu(pci_id="0000:3b:00.0", **a100)]
    )  # no vGPU manager: nothing offered
    vms = {
        "mixed-01": ObservedVm("mixed-01", host=h1.name, power_state="poweredOn",
                               vgpus=[ObservedVgpu(1, "grid_a100-10c"), ObservedVgpu(2, "grid_a100-20c")]),
        "train-01": ObservedVm("train-01", host=h1.name, power_state="poweredOn",
                               vgpus=[ObservedVgpu(1, "grid_a100-10c")]),
        "mig-01": ObservedVm("mig-01", host=h1.name, power_state="poweredOn",
                             vgpus=[ObservedVgpu(1, "grid_a100-3-20c")]),
        "web-01": ObservedVm("web-01", host=h2.name),
    }  # fmt: skip
    return Observed(datacenter="DC0", hosts={h.name: h for h in (h1, h2, h3)}, vms=vms)


def rendered(width: int | None) -> str:
    report = status_report(farm())
    if width is None:
        return render_status(report, plain=True) + "\n"
    console = Console(width=width, record=True, file=open(os.devnull, "w"), color_system=None)  # noqa: SIM115
    for item in render_status(report, width):
        console.print(item)
    return console.export_text()


@pytest.mark.parametrize(
    ("name", "width"), [("status-80.txt", 80), ("status-200.txt", 200), ("status-piped.txt", None)]
)
def test_status_matches_its_golden_file(name: str, width: int | None) -> None:
    got = rendered(width)
    path = GOLDEN / name
    if os.environ.get("VGPUCTL_UPDATE_GOLDEN"):
        path.write_text(got)
    assert got == path.read_text()


def test_80_columns_fit_and_still_tell_hosts_and_gpus_apart() -> None:
    text = rendered(80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text  # cells wrap, never cut
    for host in ("esx-01", "esx-02", "esx-03"):
        assert f"│ {host} " in text
    assert f"(*{DOMAIN})" in text  # the shared domain said once
    for pci in ("3b:00.0", "5e:00.0", "86:00.0"):
        assert pci in text
    assert "│ esx-03 │ connected; no vGPU types  │" in text  # the host without a vGPU manager, wrapped not cut


def test_piped_is_plain_full_and_uncut() -> None:
    text = rendered(None)
    assert "│" not in text and "…" not in text
    assert f"host esx-01{DOMAIN}  cluster GPU-Cluster" in text
    assert "  gpu 1 0000:5e:00.0 NVIDIA A100-PCIE-40GB" in text
    assert "mixed-01 (grid_a100-10c?)" in text and "train-01 (grid_a100-10c)" in text  # only the mixing VM guessed
    assert text.rstrip().endswith(GUESS_NOTE)
    assert f"state {NO_MANAGER}" not in text and f"connected; {NO_MANAGER}" in text
    assert "state maintenance" in text


def test_guessed_assignments_in_the_json_too() -> None:
    doc = status_report(farm()).to_dict()
    held = [v for h in doc["hosts"] for g in h["gpus"] for v in g["vms"]]
    assert {(v["vm"], v["guessed"]) for v in held} == {("mixed-01", True), ("train-01", False), ("mig-01", False)}
    assert [h["vgpu_types"] for h in doc["hosts"]] == [4, 4, 0]


def test_short_names_only_when_they_share_a_domain() -> None:
    assert common_suffix(["a.x.com", "b.x.com"]) == ".x.com"
    assert common_suffix(["a.x.com", "b.y.com"]) == "" and common_suffix(["a", "b"]) == ""
    assert short_pci(["0000:3b:00.0", "0000:5e:00.0"]) == 5 and short_pci(["0000:3b:00.0", "0001:3b:00.0"]) == 0
