"""The report from a recorded results directory: tables, spread, ratios, flags, plots, Markdown and JSON.

The benchmark outputs are the published real ones in tests/fixtures/experiment. They come from different
machines (an H100 pair of VMs for one variant, two RTX 2080 Ti for the other): only the report's mechanics
are checked, not what the numbers say about NVLink.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vgpuctl.experiment.parsers import parse_nccl_tests, parse_p2p_bandwidth_latency
from vgpuctl.experiment.report import build_report, human_size, render_markdown, write_plots
from vgpuctl.experiment.runner import parse_output
from vgpuctl.experiment.schema import WorkloadSpec
from vgpuctl.experiment.store import BASE, ResultsDir, RunRecord

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "experiment"
H100 = (FIXTURES / "all_reduce_perf.h100-2vms-16gpus.txt").read_text()
OLD = (FIXTURES / "nccl-tests.old-format.2080ti-2gpus.excerpt.txt").read_text()
P2P = (FIXTURES / "p2pBandwidthLatencyTest.a100-4gpus-nvlink-pairs.txt").read_text()
TOPO_PAIRS = (FIXTURES / "topo-m.a100-4gpus-nvlink-pairs.txt").read_text()
# Written for this test in nvidia-smi's layout (not captures): two GPUs with and without NVLink.
TOPO_NV = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV12\t0-23\nGPU1\tNV12\t X \t0-23\n"
TOPO_PCIE = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-23\nGPU1\tPIX\t X \t0-23\n"
GPUS = "550.90.07, GRID A100-40C\n550.90.07, GRID A100-40C\n"

NCCL = {"builtin": "nccl-tests", "test": "all_reduce_perf", "scope": "across-vms",
        "key": "nccl-tests.all_reduce_perf.across-vms", "label": "all_reduce_perf (across-vms)"}
P2PW = {"builtin": "p2pBandwidthLatencyTest", "key": "p2pBandwidthLatencyTest", "label": "p2pBandwidthLatencyTest"}


def facts(topo: str, host_links: int, gpus: str = GPUS) -> dict:
    return {"guests": {"train-01": {"topo": topo, "nvlink": "", "gpus": gpus}},
            "hosts": {"esx-01": {"gpus": {"0000:3b:00.0": {"pci_id": "0000:3b:00.0", "nvlink_active": host_links,
                                                           "mig_current": False}}}},
            "vm_hosts": {"train-01": "esx-01"}}


def nccl_record(variant: str, rep: int, text: str, status: str = "ok") -> RunRecord:
    parsed = {"train-01": parse_nccl_tests(text).to_dict()} if status == "ok" else {}
    return RunRecord(variant, rep, NCCL, status, {"train-01": {"rc": 0 if status == "ok" else 1}}, parsed,
                     [] if status == "ok" else ["train-01: exit status 1: Test NCCL failure"])


@pytest.fixture
def results(tmp_path: Path) -> ResultsDir:
    r = ResultsDir(tmp_path / "results")
    r.write_experiment({"title": "nvlink", "vms": ["train-01"], "repetitions": 3, "variants": [
        {"name": "nvlink-on", "description": "NVLink as shipped", "workload": NCCL},
        {"name": "nvlink-off", "description": None, "workload": NCCL},
        {"name": "p2p", "description": None, "workload": P2PW},
    ]})
    on = {"nvlink": "on", "profiles": {"train-01": ["grid_a100-40c"] * 2}, "mig": {"train-01": False}}
    off = {**on, "nvlink": "off"}
    r.write_expectations("nvlink-on", on)
    r.write_expectations("nvlink-off", off)
    r.write_expectations("p2p", {**on, "profiles": {"train-01": ["grid_a100-40c"] * 4}})
    r.record(nccl_record("nvlink-on", 1, H100), {"train-01": H100}, facts(TOPO_NV, 12))
    r.record(nccl_record("nvlink-on", 2, H100), {"train-01": H100}, facts(TOPO_NV, 12))
    r.record(nccl_record("nvlink-off", 1, OLD), {"train-01": OLD}, facts(TOPO_PCIE, 0))
    r.record(nccl_record("nvlink-off", 2, H100), {"train-01": H100}, facts(TOPO_NV, 12))  # NVLink was up
    r.record(nccl_record("nvlink-off", 3, "", "failed"), {"train-01": "Test NCCL failure\n"}, facts(TOPO_PCIE, 0))
    p2p = RunRecord("p2p", 1, P2PW, "ok", {"train-01": {"rc": 0}},
                    {"train-01": parse_p2p_bandwidth_latency(P2P).to_dict()})
    r.record(p2p, {"train-01": P2P}, facts(TOPO_PAIRS, 12, GPUS + GPUS))
    r.set_applied("nvlink-off")
    return r


def test_flags_failed_and_contradicting_runs(results):
    report = build_report(results)
    flags = [(f.variant, f.repetition, f.kind) for f in report.flags]
    assert flags == [
        ("nvlink-off", 2, "nvlink-up-when-off"),
        ("nvlink-off", 2, "nvlink-up-when-off"),
        ("nvlink-off", 3, "workload-failed"),
        ("p2p", 1, "p2p-not-nvlink"),
        ("p2p", 1, "p2p-not-nvlink"),
    ]
    assert report.flags[0].message == "NVLink links up in an 'off' run: train-01: GPU0-GPU1 NV12"
    assert report.flags[2].message == "train-01: exit status 1: Test NCCL failure"
    assert report.applied == "nvlink-off"


def test_nccl_table_spread_ratio_and_flagged_runs_left_out(results):
    report = build_report(results)
    table = report.tables[0]
    assert table.key == "nccl-tests.all_reduce_perf.across-vms" and table.variants == ["nvlink-on", "nvlink-off"]
    assert table.header == ["size", "nvlink-on busbw GB/s", "nvlink-on time us", "nvlink-off busbw GB/s",
                            "nvlink-off time us", "nvlink-off / nvlink-on busbw"]
    by_size = {e["size_bytes"]: e for e in table.data}
    on = by_size[134217728]["variants"]["nvlink-on"]["busbw_gbs"]
    assert (on["median"], on["n"]) == (152.32, 2)  # two repetitions
    off = by_size[134217728]["variants"]["nvlink-off"]["busbw_gbs"]
    assert (off["median"], off["n"]) == (20.34, 1)  # repetition 2 contradicts, repetition 3 failed: left out
    assert by_size[134217728]["ratio"]["nvlink-off"] == pytest.approx(20.34 / 152.32)
    assert by_size[8]["variants"]["nvlink-off"]["busbw_gbs"] is None  # the excerpt starts at 64 KiB
    row = next(r for r in table.rows if r[0] == "128 MiB")
    assert row == ["128 MiB", "152.32", "1652.2", "20.34", "3298.6", "0.13x"]


def test_p2p_table(results):
    table = build_report(results).tables[1]
    assert table.kind == "p2pBandwidthLatencyTest" and table.variants == ["p2p"]
    assert table.data == []  # its only run contradicts an 'on' variant (pairs without NVLink): not counted


def test_markdown_json_and_plots(results, tmp_path):
    report = build_report(results)
    plots = write_plots(report, results.root / "plots")
    assert [p.name for p in plots] == ["nccl-tests.all_reduce_perf.across-vms.png"]
    assert plots[0].stat().st_size > 10_000 and plots[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = render_markdown(report)
    assert "# Experiment: nvlink" in text
    assert "Farm now: variant 'nvlink-off' (the base inventory is not restored" in text
    assert "![all_reduce_perf (across-vms)](plots/nccl-tests.all_reduce_perf.across-vms.png)" in text
    assert "| 128 MiB | 152.32 | 1652.2 | 20.34 | 3298.6 | 0.13x |" in text
    assert "| nvlink-off | 2 | nvlink-up-when-off | NVLink links up in an 'off' run: train-01: GPU0-GPU1 NV12 |" in text
    assert "host esx-01: 12 NVLink link(s) up, no GPU in MIG mode" in text
    assert "train-01 on esx-01: GRID A100-40C, GRID A100-40C; driver 550.90.07; topology 0-1 PIX" in text
    doc = json.loads(json.dumps(report.to_dict()))
    assert doc["tables"][0]["plot"] == "plots/nccl-tests.all_reduce_perf.across-vms.png"


def test_values_from_the_results_never_become_markdown_structure(results):
    """A description with a line break, a heading and a table column, and a flag message with a link, stay text."""
    exp = results.experiment()
    exp["variants"][0]["description"] = "fast\n## Fake heading | col [x](http://evil) <b>"
    results.write_experiment(exp)
    text = render_markdown(build_report(results))
    assert "\n## Fake heading" not in text and "<b>" not in text
    assert "fast ## Fake heading \\| col \\[x\\](http://evil) \\<b\\>" in text


def test_restored_farm_and_sizes(results):
    results.set_applied(BASE, "restored")
    assert "Farm now: the base inventory (restored)." in render_markdown(build_report(results))
    assert [human_size(n) for n in (8, 1024, 3000, 1 << 20, 8 << 30)] == ["8 B", "1 KiB", "3000 B", "1 MiB", "8 GiB"]


def test_p2p_table_and_plot_per_gpu_pair(tmp_path):
    r = ResultsDir(tmp_path / "p2p")
    r.write_experiment({"title": "p2p", "variants": [{"name": "pairs", "description": None, "workload": P2PW}]})
    r.write_expectations("pairs", {"nvlink": None, "profiles": {}, "mig": {}})
    parsed = {"train-01": parse_p2p_bandwidth_latency(P2P).to_dict()}
    for rep in (1, 2):
        r.record(RunRecord("pairs", rep, P2PW, "ok", {"train-01": {"rc": 0}}, parsed), {"train-01": P2P},
                 facts(TOPO_PAIRS, 12, GPUS + GPUS))
    report = build_report(r)
    table = report.tables[0]
    assert report.flags == [] and table.header == ["GPU pair", "pairs bidir GB/s", "pairs unidir GB/s",
                                                   "pairs latency us"]
    assert table.rows[0] == ["0-1", "516.19", "275.07", "2.25"] and len(table.rows) == 6
    assert table.data[0]["variants"]["pairs"]["bidirectional_gbs"]["n"] == 2
    plots = write_plots(report, r.root / "plots")
    assert plots[0].name == "p2pBandwidthLatencyTest.png" and plots[0].stat().st_size > 10_000


RDMA_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "rdma"


def test_a_run_across_hosts_over_sockets_is_flagged_and_its_bandwidth_is_inter_host(tmp_path: Path) -> None:
    """Two VMs with RDMA adapters on two hosts: the run whose NCCL log says NET/Socket (NVIDIA/nccl#1267's
    lines) is flagged like nvlink-up-when-off and left out; the one over NET/IB (nccl-tests#185's) counts."""
    workload = WorkloadSpec(builtin="nccl-tests", test="all_reduce_perf", scope="across-vms")
    r = ResultsDir(tmp_path / "results")
    r.write_experiment({"title": "roce", "vms": ["train-01", "train-02"], "repetitions": 2,
                        "variants": [{"name": "roce", "description": None, "workload": NCCL}]})
    r.write_expectations("roce", {"nvlink": None, "profiles": {}, "mig": {}, "rdma": True})
    two_hosts = {"guests": {}, "hosts": {}, "vm_hosts": {"train-01": "esx-01", "train-02": "esx-02"}}
    for rep, log in ((1, "nccl-ib-nccl-tests-185.txt"), (2, "nccl-socket-nccl-1267.txt")):
        text = (RDMA_DIR / log).read_text() + H100
        rec = RunRecord("roce", rep, NCCL, "ok", {"train-01": {"rc": 0}}, {"train-01": parse_output(workload, text)})
        r.record(rec, {"train-01": text}, two_hosts)
    report = build_report(r)
    assert [(f.repetition, f.kind) for f in report.flags] == [(2, "net-socket-fallback")]
    assert report.flags[0].message == ("NCCL ran over NET/Socket (TCP sockets), not NET/IB, in a run across VMs with "
                                       "RDMA adapters: train-01 launched it")
    table = report.tables[0]
    assert table.label == "all_reduce_perf (across-vms), inter-host over 2 hosts"
    assert {e["size_bytes"]: e for e in table.data}[134217728]["variants"]["roce"]["busbw_gbs"]["n"] == 1
