"""The benchmark parsers against published real outputs (tests/fixtures/experiment, sources in its README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpuctl.errors import OutputFormatError
from vgpuctl.experiment import parsers as p

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "experiment"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_every_fixture_is_listed_with_its_source():
    readme = read("README.md")
    for f in FIXTURES.glob("*.txt"):
        assert f"`{f.name}`" in readme, f"{f.name} has no row in the README"


def test_all_reduce_two_vms_sixteen_ranks():
    r = p.parse_nccl_tests(read("all_reduce_perf.h100-2vms-16gpus.txt"))
    assert len(r.rows) == 31
    assert r.rows[0].size_bytes == 8 and r.rows[-1].size_bytes == 8589934592
    last = r.rows[-1]
    assert (last.redop, last.root, last.dtype) == ("sum", -1, "float")
    assert last.out_of_place == p.NcclMeasure(47535.0, 180.71, 338.82, 0.0)
    assert last.in_place.busbw_gbs == 337.35
    assert r.avg_busbw_gbs == pytest.approx(70.742)
    assert r.out_of_bounds == 0
    assert len(r.ranks) == 16 and r.hosts == ["ztan-mig-235z", "ztan-mig-gq73"]
    assert r.ranks[8] == p.NcclRank(8, "ztan-mig-gq73", 0, "0000:04:00", "NVIDIA H100 80GB HBM3")
    assert r.n_gpus == 1 and r.header["maxBytes"] == "8589934592"
    assert r.points()[12] == {"size_bytes": 32768, "busbw_gbs": 0.40, "time_us": 155.2}


def test_sendrecv_table_only_with_na_wrong_column():
    r = p.parse_nccl_tests(read("sendrecv_perf.a100-8gpus.txt"))
    assert [row.size_bytes for row in r.rows] == [134217728, 268435456, 536870912, 1073741824]
    assert r.rows[3].out_of_place.busbw_gbs == 195.10
    assert r.rows[3].in_place.wrong is None  # N/A
    assert r.avg_busbw_gbs is None and r.ranks == ()


def test_old_release_without_redop_and_root():
    r = p.parse_nccl_tests(read("nccl-tests.old-format.2080ti-2gpus.excerpt.txt"))
    assert len(r.rows) == 12
    first = r.rows[0]
    assert (first.size_bytes, first.count, first.redop, first.root) == (65536, 8192, None, None)
    assert first.out_of_place == p.NcclMeasure(16.57, 1.98, 1.98, 0.0)
    assert r.avg_busbw_gbs == pytest.approx(6.6972)


def test_nccl_mpirun_noise_is_ignored():
    text = "Warning: Permanently added '[10.0.0.2]:22' (ED25519) to the list of known hosts.\n" + read(
        "sendrecv_perf.a100-8gpus.txt"
    )
    assert len(p.parse_nccl_tests(text).rows) == 4


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no result rows"),
        ("bash: all_reduce_perf: command not found\n", "no result rows"),
        ("host1: Test NCCL failure common.cu:1005 'unhandled system error'\n", "Test NCCL failure"),
        ("  8   2  float  sum  -1  x.y  0.00  0.00  0  123.5  0.00  0.00  0\n", "not a measurement"),
    ],
)
def test_nccl_bad_output(text, message):
    with pytest.raises(OutputFormatError, match=message):
        p.parse_nccl_tests(text)


def test_p2p_four_gpus_in_nvlink_pairs():
    r = p.parse_p2p_bandwidth_latency(read("p2pBandwidthLatencyTest.a100-4gpus-nvlink-pairs.txt"))
    assert [d.index for d in r.devices] == [0, 1, 2, 3]
    assert r.devices[0].name == "NVIDIA A100 80GB PCIe"
    assert r.peer_access[(0, 1)] is True and r.peer_access[(0, 2)] is False
    assert sorted(r.matrices) == sorted([
        p.BW_UNI_OFF, p.BW_UNI_ON, p.BW_BI_OFF, p.BW_BI_ON, p.LAT_GPU_OFF, p.LAT_CPU_OFF, p.LAT_GPU_ON, p.LAT_CPU_ON,
    ])
    assert r.matrices[p.BW_UNI_ON][(0, 1)] == 275.07
    assert r.matrices[p.BW_BI_ON][(2, 3)] == 517.45
    assert r.matrices[p.LAT_GPU_ON][(1, 0)] == 2.22
    assert r.matrices[p.LAT_CPU_ON][(3, 3)] == 2.07
    assert r.matrices[p.LAT_GPU_OFF][(0, 1)] == 21.89
    assert all(len(m) == 16 for m in r.matrices.values())
    pairs = {row["pair"]: row for row in r.pair_table()}
    assert pairs["0-1"] == {"pair": "0-1", "peer_access": True, "unidirectional_gbs": 275.07,
                            "bidirectional_gbs": 516.19, "latency_us": 2.25}
    assert pairs["1-2"]["peer_access"] is False


def test_p2p_short_row_and_empty_output():
    good = read("p2pBandwidthLatencyTest.a100-4gpus-nvlink-pairs.txt")
    broken = good.replace("     0 1502.40 275.07  21.62  21.60 ", "     0 1502.40 275.07  21.62 ")
    with pytest.raises(OutputFormatError, match="has 3 values for 4 columns"):
        p.parse_p2p_bandwidth_latency(broken)
    with pytest.raises(OutputFormatError, match="no bandwidth or latency matrix"):
        p.parse_p2p_bandwidth_latency(
            "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]\nTwo or more GPUs with Peer-to-Peer access capability"
            " are required\n"
        )
