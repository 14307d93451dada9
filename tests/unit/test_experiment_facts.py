"""Expectations from a merged inventory, facts from raw outputs, and the contradictions between them."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpuctl.experiment.facts import contradictions, expectations, host_gpus, summarize
from vgpuctl.experiment.parsers import parse_p2p_bandwidth_latency
from vgpuctl.inventory import load_inventory_text
from vgpuctl.inventory.network import AdapterSpec

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "experiment"
TOPO_NV_PAIRS = (FIXTURES / "topo-m.a100-4gpus-nvlink-pairs.txt").read_text()  # published: NV12 in pairs, SYS across
P2P_PAIRS = (FIXTURES / "p2pBandwidthLatencyTest.a100-4gpus-nvlink-pairs.txt").read_text()
# A two-GPU matrix without NVLink, in nvidia-smi's layout (written for this test, not a capture).
TOPO_PCIE = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-23\nGPU1\tPIX\t X \t0-23\n"
TOPO_NV = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV12\t0-23\nGPU1\tNV12\t X \t0-23\n"
NVLINK_UP = "GPU 0: GRID A100-40C (UUID: GPU-1)\n\t Link 0: 25 GB/s\n\t Link 1: 25 GB/s\n"
NVLINK_DOWN = "GPU 0: GRID A100-40C (UUID: GPU-1)\n\t Link 0: <inactive>\n"
GPUS_40C = "550.90.07, GRID A100-40C\n550.90.07, GRID A100-40C\n"
GPUS_MIG = "550.90.07, GRID A100-3-20C\n"

INVENTORY = """\
apiVersion: vgpuctl/v1
hosts:
  - {cluster: C, nvlink: NVLINK}
vms:
  - {name: a, cluster: C, memory_gb: 64, vgpus: {profile: PROFILE, count: COUNT}}
  - {name: b, cluster: C, memory_gb: 64}
"""


def expect(nvlink: str, profile: str = "grid_a100-40c", count: int = 2) -> dict:
    text = INVENTORY.replace("NVLINK", nvlink).replace("PROFILE", profile).replace("COUNT", str(count))
    return expectations(load_inventory_text(text), ["a"])


def test_rdma_is_expected_when_every_vm_has_an_rdma_adapter():
    text = INVENTORY.replace("NVLINK", "enabled").replace("PROFILE", "grid_a100-40c").replace("COUNT", "2")
    inv = load_inventory_text(text)
    inv.vms[0].network = [AdapterSpec(type="sriov", device="ConnectX-7", portgroup="roce")]
    assert expectations(inv, ["a"])["rdma"] is True
    inv.vms[0].network = [AdapterSpec(portgroup="mgmt")]
    assert expectations(inv, ["a"])["rdma"] is False


def raw(topo: str = "", nvlink: str = "", gpus: str = GPUS_40C, host_links: int = 0, mig: bool = False) -> dict:
    return {
        "guests": {"a": {"topo": topo, "nvlink": nvlink, "gpus": gpus}},
        "hosts": {"esx-01": {"gpus": {"0000:3b:00.0": {"pci_id": "0000:3b:00.0", "nvlink_active": host_links,
                                                       "mig_current": mig}}}},
        "vm_hosts": {"a": "esx-01"},
    }


def test_expectations():
    assert expect("enabled") == {"nvlink": "on", "profiles": {"a": ["grid_a100-40c"] * 2}, "mig": {"a": False},
                                 "p2p": {"a": "nvlink"}, "rdma": False}
    assert expect("disabled")["nvlink"] == "off" and expect("disabled")["p2p"] == {"a": "pcie"}
    mig = expect("enabled", "grid_a100-3-20c", 1)
    assert mig["mig"] == {"a": True} and mig["profiles"] == {"a": ["grid_a100-3-20c"]}


@pytest.mark.parametrize(
    ("kind", "profile", "count", "way"),
    [
        # NVIDIA vGPU, "Peer-to-Peer CUDA Transfers": only time-sliced C-series vGPUs allocated all of the physical
        # GPU's framebuffer on GPUs that support NVLink; MIG-backed vGPUs are not supported
        ("whole-GPU time-sliced C-series", "grid_a100-40c", 2, "nvlink"),
        ("whole-GPU time-sliced C-series, nvidia_ spelling", "nvidia_a100-40c", 2, "nvlink"),
        ("MIG-backed", "grid_a100-3-20c", 2, "pcie"),
        ("MIG-backed, whole GPU", "grid_a100-7-40c", 2, "pcie"),
        ("fractional time-sliced", "grid_a100-20c", 2, "pcie"),
        ("whole-GPU Q-series", "grid_a40-48q", 2, "pcie"),
        ("board without NVLink", "grid_l40s-48c", 2, "pcie"),
    ],
)
def test_a_variant_expects_nvlink_p2p_only_for_whole_gpu_time_sliced_c_series(kind: str, profile: str,
                                                                                 count: int, way: str) -> None:
    assert expect("enabled", profile, count)["p2p"] == {"a": way}, kind


def test_a_mig_variant_with_nvlink_on_counts_its_pcie_runs():
    """docs/experiments.md's `mig-3g` variant: hosts keep NVLink enabled, the VMs' MIG-backed vGPUs see PCIe
    between them; that is what NVIDIA allows, not a contradiction."""
    mig = expect("enabled", "grid_a100-3-20c", 2)
    facts = summarize(raw(TOPO_PCIE, NVLINK_DOWN, gpus="550.90.07, GRID A100-3-20C\n" * 2, host_links=12, mig=True))
    assert contradictions(mig, facts) == []
    nv = summarize(raw(TOPO_NV, gpus="550.90.07, GRID A100-3-20C\n" * 2, host_links=12, mig=True))
    assert [c.message for c in contradictions(mig, nv)] == [
        "NVLink between vGPUs NVIDIA connects over PCIe (MIG-backed or fractional): a: GPU0-GPU1 NV12"]


def test_a_fractional_variant_with_nvlink_on_counts_its_pcie_runs():
    half = expect("enabled", "grid_a100-20c", 2)
    facts = summarize(raw(TOPO_PCIE, gpus="550.90.07, GRID A100-20C\n" * 2, host_links=12))
    assert contradictions(half, facts) == []


def test_results_written_before_p2p_was_recorded_expect_nvlink_for_every_vm():
    old = {k: v for k, v in expect("enabled", "grid_a100-20c", 2).items() if k != "p2p"}
    facts = summarize(raw(TOPO_PCIE, gpus="550.90.07, GRID A100-20C\n" * 2, host_links=12))
    assert [c.kind for c in contradictions(old, facts)] == ["p2p-not-nvlink"]


def test_summarize_reads_topology_links_gpus_and_hosts():
    f = summarize({**raw(TOPO_NV_PAIRS, NVLINK_UP, host_links=12, mig=True)})
    assert f.guest_links["a"] == {"0-1": "NV12", "0-2": "SYS", "0-3": "SYS", "1-2": "SYS", "1-3": "SYS", "2-3": "NV12"}
    assert f.guest_nvlink_up == {"a": 2}
    assert f.gpu_names == {"a": ["GRID A100-40C", "GRID A100-40C"]} and f.drivers == {"a": ["550.90.07"]}
    assert f.host_nvlink_up == {"esx-01": 12} and f.host_mig == {"esx-01": ["0000:3b:00.0"]}
    assert summarize({"guests": {"a": {"topo": "garbage"}}}).unreadable[0].startswith("a: nvidia-smi topo -m:")


@pytest.mark.parametrize(
    "nvlink, facts, kinds",
    [
        ("disabled", raw(TOPO_PCIE, NVLINK_DOWN), []),
        ("disabled", raw(TOPO_NV), ["nvlink-up-when-off"]),
        ("disabled", raw(TOPO_PCIE, NVLINK_UP), ["nvlink-up-when-off"]),
        ("disabled", raw(TOPO_PCIE, host_links=4), ["nvlink-up-when-off"]),
        ("enabled", raw(TOPO_NV, NVLINK_UP, host_links=12), []),
        ("enabled", raw(TOPO_PCIE, NVLINK_UP, host_links=12), ["p2p-not-nvlink"]),
        ("enabled", raw(TOPO_NV, NVLINK_UP, host_links=0), ["p2p-not-nvlink"]),
        ("enabled", raw(TOPO_NV, host_links=12, gpus=GPUS_MIG), ["profile-mismatch"]),
    ],
)
def test_contradictions(nvlink, facts, kinds):
    found = contradictions(expect(nvlink), summarize(facts))
    assert [c.kind for c in found] == kinds


def test_contradiction_messages():
    off = contradictions(expect("disabled"), summarize(raw(TOPO_NV, host_links=4)))
    assert [c.message for c in off] == [
        "NVLink links up in an 'off' run: a: GPU0-GPU1 NV12",
        "NVLink links up in an 'off' run: host esx-01: 4 link(s) active",
    ]
    mig = contradictions(expect("enabled", "grid_a100-3-20c", 1),
                         summarize(raw(TOPO_PCIE, host_links=1, gpus="550.90.07, GRID A100-2-10C\n")))
    assert [c.message for c in mig] == [
        "MIG slice different from the one asked: a asked grid_a100-3-20c; the guest shows GRID A100-2-10C"]


def test_p2p_without_peer_access_in_an_on_run():
    p2p = {"a": parse_p2p_bandwidth_latency(P2P_PAIRS).to_dict()}
    found = contradictions(expect("enabled"), summarize(raw(TOPO_NV_PAIRS, host_links=12,
                                                            gpus=GPUS_40C + GPUS_40C)), p2p)
    assert [c.message for c in found] == [
        "P2P not over NVLink in an 'on' run: a: GPU0-GPU2 SYS, GPU0-GPU3 SYS, GPU1-GPU2 SYS, GPU1-GPU3 SYS",
        "P2P not over NVLink in an 'on' run: a: p2pBandwidthLatencyTest: no peer access for GPU pair(s) "
        "0-2, 0-3, 1-2, 1-3",
        "vGPU profile different from the one asked: a asked grid_a100-40c, grid_a100-40c; the guest shows "
        "GRID A100-40C, GRID A100-40C, GRID A100-40C, GRID A100-40C",
    ]


def test_an_experiment_keeps_each_gpus_links_up_and_mig_mode_from_the_host_facts():
    from hostfacts import host_facts

    facts = host_facts("esx-01", shell=True, gpus={
        "0000:3b:00.0": {"mig_current": True, "nvlink_links": 12, "nvlink_active": 12},
        "0000:3c:00.0": {"mig_current": False}})
    kept = host_gpus(facts)
    assert kept["gpus"]["0000:3b:00.0"] == {"pci_id": "0000:3b:00.0", "nvlink_active": 12, "mig_current": True}
    assert kept["gpus"]["0000:3c:00.0"]["nvlink_active"] == 0
    summary = summarize({"hosts": {"esx-01": kept}})
    assert summary.host_nvlink_up == {"esx-01": 12} and summary.host_mig == {"esx-01": ["0000:3b:00.0"]}
