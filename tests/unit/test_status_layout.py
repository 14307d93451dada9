"""`status` layouts against golden files: a terminal 80, 140 and 200 columns wide, and piped (plain lines).

Regenerate the golden files after an intended change with VGPUCTL_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hostfacts import host_facts
from rich.console import Console

from vgpuctl.model import Observed, ObservedGpu, ObservedHost, ObservedProfile, ObservedVgpu, ObservedVm
from vgpuctl.reports.host import HostReport, host_status
from vgpuctl.reports.status import (
    GUESS_NOTE,
    NO_MANAGER,
    StatusReport,
    common_suffix,
    merge_status,
    render_status,
    short_pci,
    status_report,
)

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
    l40s = {"device_name": "NVIDIA L40S", "memory_kb": 48 * 1024 * 1024, "graphics_type": "sharedDirect",
            "vgpu_mode": "sameSize"}
    h4 = ObservedHost(name="esx-04" + DOMAIN, cluster="GPU-Cluster", default_graphics_type="sharedDirect",
                      offered_profiles=["grid_l40s-24q", "grid_l40s-48q"],
                      gpus=[ObservedGpu(pci_id="0000:3b:00.0", **l40s), ObservedGpu(pci_id="0000:5e:00.0", **l40s)])
    # a board without MIG
    vms = {
        "mixed-01": ObservedVm("mixed-01", host=h1.name, power_state="poweredOn",
                               vgpus=[ObservedVgpu(1, "grid_a100-10c"), ObservedVgpu(2, "grid_a100-20c")]),
        "train-01": ObservedVm("train-01", host=h1.name, power_state="poweredOn",
                               vgpus=[ObservedVgpu(1, "grid_a100-10c")]),
        "mig-01": ObservedVm("mig-01", host=h1.name, power_state="poweredOn",
                             vgpus=[ObservedVgpu(1, "grid_a100-3-20c")]),
        "web-01": ObservedVm("web-01", host=h2.name),
    }  # fmt: skip
    return Observed(datacenter="DC0", hosts={h.name: h for h in (h1, h2, h3, h4)}, vms=vms)


def shell_rows(observed: Observed) -> dict[str, HostReport]:
    """What the ESXi shell says: MIG pending on one A100; nothing it can tell about MIG on the L40S."""
    a100 = host_facts("esx-01" + DOMAIN, shell=True, gpus={"0000:3b:00.0": {"mig_current": False, "mig_pending": True}})
    l40s = host_facts("esx-04" + DOMAIN, shell=True, gpus={p: {} for p in ("0000:3b:00.0", "0000:5e:00.0")})
    return {f.host: host_status(observed.hosts[f.host], f) for f in (a100, l40s)}


def report() -> StatusReport:
    observed = farm()
    return merge_status(status_report(observed), shell_rows(observed))


def rendered(width: int | None) -> str:
    report_ = report()
    if width is None:
        return render_status(report_, plain=True) + "\n"
    console = Console(width=width, record=True, file=open(os.devnull, "w"), color_system=None)  # noqa: SIM115
    for item in render_status(report_, width):
        console.print(item)
    return console.export_text()


@pytest.mark.parametrize(
    ("name", "width"),
    [("status-80.txt", 80), ("status-140.txt", 140), ("status-200.txt", 200), ("status-piped.txt", None)],
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
    assert "│ esx-03 │ connected; no vGPU │" in text and "Manager missing?" in text  # wrapped, not cut


def test_piped_is_plain_full_and_uncut() -> None:
    text = rendered(None)
    assert "│" not in text and "…" not in text
    assert f"host esx-01{DOMAIN}  cluster GPU-Cluster" in text
    assert "  gpu 1 0000:5e:00.0 NVIDIA A100-PCIE-40GB" in text
    assert "mixed-01 (grid_a100-10c?)" in text and "train-01 (grid_a100-10c)" in text  # only the mixing VM guessed
    assert text.rstrip().endswith(GUESS_NOTE)
    assert f"state {NO_MANAGER}" not in text and f"connected; {NO_MANAGER}" in text
    assert "state maintenance" in text


@pytest.mark.parametrize("width", [140, 200])
def test_wide_layouts_keep_each_gpu_on_one_line(width: int) -> None:
    text = rendered(width)
    assert max(len(line) for line in text.splitlines()) <= width
    rows = [line for line in text.splitlines() if line.startswith("│ ") and "0000:" in line]
    assert len(rows) == 7  # one line per GPU: nothing wrapped but the VMs cell
    continued = [line for line in text.splitlines() if line.startswith("│   │              │")]
    assert len(continued) <= 1  # only the GPU with two VMs may continue its VMs cell at 140


def test_no_mig_column_for_a_board_without_mig() -> None:
    for width in (80, 140, 200):
        text = rendered(width)
        maps = text.split("GPU map: ")
        l40s = next(m for m in maps if m.startswith("esx-04"))
        a100 = next(m for m in maps if m.startswith("esx-01"))
        assert "MIG" not in l40s.split("\n", 1)[1] and "off?" not in l40s
        if width >= 140:
            assert re.search(r"┃ MIG +┃", a100) and "off (on pending)" in a100
    piped = rendered(None)
    assert all("mig" not in line for line in piped.splitlines() if "L40S" in line)
    assert "mig off (on pending)" in piped
    doc = report().to_dict()
    by_host = {h["host"]: h for h in doc["hosts"]}
    assert {g["mig_capable"] for g in by_host["esx-04" + DOMAIN]["gpus"]} == {False}
    assert "mig" not in by_host["esx-04" + DOMAIN]["gpus"][0]


def test_guessed_assignments_in_the_json_too() -> None:
    doc = status_report(farm()).to_dict()
    held = [v for h in doc["hosts"] for g in h["gpus"] for v in g["vms"]]
    assert {(v["vm"], v["guessed"]) for v in held} == {("mixed-01", True), ("train-01", False), ("mig-01", False)}
    assert [h["vgpu_types"] for h in doc["hosts"]] == [4, 4, 0, 2]


def test_short_names_only_when_they_share_a_domain() -> None:
    assert common_suffix(["a.x.com", "b.x.com"]) == ".x.com"
    assert common_suffix(["a.x.com", "b.y.com"]) == "" and common_suffix(["a", "b"]) == ""
    assert short_pci(["0000:3b:00.0", "0000:5e:00.0"]) == 5 and short_pci(["0000:3b:00.0", "0001:3b:00.0"]) == 0


def test_vgpu_manager_and_guest_drivers_where_the_shell_says_them() -> None:
    """The manager a host runs (its GPUs' driver) and each running vGPU VM's guest driver (`nvidia-smi vgpu -q`),
    in every layout; hosts and VMs the shell did not read say nothing of them."""
    observed = farm()
    rows = shell_rows(observed)
    facts = host_facts("esx-01" + DOMAIN, shell=True, gpus={"0000:3b:00.0": {}})
    facts.values["manager"] = {"0000:3b:00.0": "580.65.05"}
    facts.values["guest_drivers"] = {"train-01": "580.65.06", "mixed-01": None}
    rows["esx-01" + DOMAIN] = host_status(observed.hosts["esx-01" + DOMAIN], facts)
    report_ = merge_status(status_report(observed), rows)
    doc = report_.to_dict()
    assert {h["host"]: h.get("vgpu_manager") for h in doc["hosts"]}["esx-01" + DOMAIN] == "580.65.05"
    assert "vgpu_manager" not in {h["host"]: h for h in doc["hosts"]}["esx-04" + DOMAIN]
    drivers = {v["vm"]: v.get("guest_driver") for v in doc["vms"]}
    assert drivers == {"mig-01": None, "mixed-01": None, "train-01": "580.65.06", "web-01": None}
    plain = render_status(report_, plain=True)
    assert "  vgpu manager 580.65.05\n" in plain
    assert "vm train-01  host esx-01" in plain and plain.count("guest driver 580.65.06") == 1
    for width in (80, 200):
        console = Console(width=width, record=True, file=open(os.devnull, "w"), color_system=None)  # noqa: SIM115
        for item in render_status(report_, width):
            console.print(item)
        text = console.export_text()
        assert "580.65.05" in text and "580.65.06" in text and "guest driver" in text
        assert max(len(line) for line in text.splitlines()) <= width
    assert "host esx-01" in rows["esx-01" + DOMAIN].render_text()
    assert "guest drivers: mixed-01 none, train-01 580.65.06" in rows["esx-01" + DOMAIN].render_text()
