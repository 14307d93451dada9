"""The guest-side RDMA parsers of the rdma_roce and gpu_validate roles, from recorded outputs and sysfs trees
(tests/fixtures/rdma; its README names where each recording comes from): the RoCE v2 GID index NCCL gets, the
devices `rdma link` and `ibv_devinfo` list, perftest's results, the transport NCCL used, and the NIC's ATS."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from vgpuctl.experiment.parsers import nccl_transport

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "rdma"


def module(role: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "playbooks" / "roles" / role / "library" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ports = module("rdma_roce", "rdma_roce_ports")
validate = module("gpu_validate", "gpu_validate_rdma")


def sysfs(tmp_path: Path, name: str) -> str:
    """A recorded sysfs tree written out as files."""
    for rel, content in yaml.safe_load((FIXTURES / name).read_text()).items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{content}\n")
    return str(tmp_path)


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_sysfs_ports_and_their_gids(tmp_path: Path) -> None:
    found = ports.read_sysfs(sysfs(tmp_path, "sysfs-mlx5-two-netdevs.yaml"))
    assert [(p["device"], p["port"], p["link_layer"], p["state"]) for p in found] == [
        ("mlx5_0", 1, "Ethernet", "ACTIVE"), ("mlx5_7", 1, "InfiniBand", "ACTIVE")]
    gids = found[0]["gids"]
    assert [g["index"] for g in gids] == list(range(8))  # the all-zero GID at 8 has no type: skipped
    assert gids[3] == {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a00:280a", "version": 2, "ndev": "eth0",
                       "ipv4": "10.0.40.10"}
    assert gids[6]["ipv4"] == "10.152.0.12" and gids[6]["version"] == 1


@pytest.mark.parametrize(
    ("interface", "address", "index", "netdev"),
    [
        ("", "", 3, "eth0"),  # the first RoCE v2 IPv4 GID
        ("net1", "", 7, "net1"),  # not the link-local v2 GID at 5, not the v1 one at 6
        ("", "10.152.0.12", 7, "net1"),  # by the address the adapter was given
    ],
)
def test_the_roce_v2_gid_of_the_configured_interface(tmp_path: Path, interface: str, address: str, index: int,
                                                     netdev: str) -> None:
    found = ports.read_sysfs(sysfs(tmp_path, "sysfs-mlx5-two-netdevs.yaml"))
    selected, why = ports.choose(found, interface, address)
    assert why == "" and (selected["hca"], selected["gid_index"], selected["netdev"]) == ("mlx5_0:1", index, netdev)


def test_no_gid_says_what_there_is(tmp_path: Path) -> None:
    found = ports.read_sysfs(sysfs(tmp_path, "sysfs-mlx5-two-netdevs.yaml"))
    selected, why = ports.choose(found, "ens224")
    assert selected == {}
    assert why.startswith("no RoCE v2 GID with an IPv4 address on ens224 (mlx5_0:1 0 v1 fe80:")
    assert "3 v2 10.0.40.10 eth0" in why
    assert ports.choose([], "")[1].startswith("no RoCE port")


def test_soft_roce_gids(tmp_path: Path) -> None:
    found = ports.read_sysfs(sysfs(tmp_path, "sysfs-rxe.yaml"))
    selected, _ = ports.choose(found)
    assert (selected["hca"], selected["gid_index"], selected["ipv4"]) == ("rxe_eth0:1", 1, "10.213.20.11")


def test_show_gids_output() -> None:
    found = ports.parse_show_gids(text("show_gids-nccl-1573.txt"))
    assert [(g["index"], g["version"], g["ipv4"], g["ndev"]) for g in found[0]["gids"]] == [
        (4, 1, "", "net1"), (5, 2, "", "net1"), (6, 1, "10.152.0.12", "net1"), (7, 2, "10.152.0.12", "net1")]
    assert ports.choose(found)[0]["gid_index"] == 7
    assert ports.parse_show_gids(text("show_gids-empty.txt")) == []


def test_show_gids_is_used_when_sysfs_has_no_gids(tmp_path: Path) -> None:
    result = ports.run({"sysfs_root": str(tmp_path), "show_gids": text("show_gids-nccl-1573.txt"),
                        "rdma_link": text("rdma-link-3fs-283.txt")})
    assert result["selected"]["gid_index"] == 7
    assert result["not_in_sysfs"] == ["mlx5_1"]  # rdma link lists a device show_gids does not


def test_rdma_link_outputs() -> None:
    assert ports.parse_rdma_link(text("rdma-link-3fs-283.txt")) == [
        {"device": "mlx5_0", "port": 1, "state": "ACTIVE", "physical_state": "LINK_UP", "netdev": "p1p1"},
        {"device": "mlx5_1", "port": 1, "state": "ACTIVE", "physical_state": "LINK_UP", "netdev": "p1p2"}]
    assert ports.parse_rdma_link(text("rdma-link-rxe-3fs-263.txt"))[0]["device"] == "rxe_0"
    ib = ports.parse_rdma_link(text("rdma-link-ib-rccl-1423.txt"))[0]
    assert (ib["device"], ib["state"], ib["netdev"]) == ("mlx5_7", "ACTIVE", "")
    old = ports.parse_rdma_link("0/1: mlx5_0/1: state ACTIVE physical_state LINK_UP")  # iproute2 before 5.5
    assert old[0]["device"] == "mlx5_0"
    as_json = ports.parse_rdma_link('[{"ifindex":0,"ifname":"rxe_eth0","port":1,"state":"ACTIVE",'
                                    '"physical_state":"LINK_UP","netdev":"eth0","netdev_index":2}]')
    assert as_json[0]["netdev"] == "eth0"


def test_ibv_devinfo_outputs() -> None:
    (cx5,) = ports.parse_ibv_devinfo(text("ibv_devinfo-cx5-kube-ansible.txt"))
    assert cx5 == {"device": "mlx5_0", "vendor_id": "0x02c9", "vendor_part_id": "4119",
                   "ports": [{"port": 1, "state": "PORT_ACTIVE", "link_layer": "Ethernet"}]}
    (rxe,) = ports.parse_ibv_devinfo(text("ibv_devinfo-rxe-rxe-dev-46.txt"))
    assert rxe["device"] == "rxe0" and rxe["ports"][0]["state"] == "PORT_ACTIVE"


def test_perftest_bandwidth_in_each_unit() -> None:
    mb = validate.parse_bandwidth(text("ib_write_bw-kube-ansible.txt"))  # a warning line between header and row
    assert (mb["bytes"], mb["bw_average"], mb["unit"], mb["average_gbps"]) == (65536, 11024.71, "MB/sec", 88.198)
    gb = validate.parse_bandwidth(text("ib_write_bw-gpu-operator.txt"))
    assert (gb["unit"], gb["average_gbps"]) == ("Gb/sec", 92.38)
    mib = validate.parse_bandwidth(text("ib_write_bw-kube-ansible.txt").replace("MB/sec", "MiB/sec"))
    assert mib["average_gbps"] == 92.482


def test_perftest_latency() -> None:
    lat = validate.parse_latency(text("ib_read_lat-kube-ansible.txt"))
    assert (lat["bytes"], lat["t_min_us"], lat["t_typical_us"], lat["t_avg_us"]) == (2, 2.64, 2.69, 2.69)


def test_a_failed_perftest_is_one_line() -> None:
    result, message = validate.check("bandwidth", " Couldn't connect to 10.0.40.11:18515\n", "train-02")
    assert result == {} and message == ("perftest bandwidth with train-02 failed: no perftest bandwidth header "
                                        "(#bytes #iterations BW peak[...]): Couldn't connect to 10.0.40.11:18515")
    _, low = validate.check("bandwidth", text("ib_write_bw-gpu-operator.txt"), "b", min_gbps=100)
    assert low == "RDMA write bandwidth with b is 92.38 Gb/s, below 100"


@pytest.mark.parametrize(
    ("name", "network", "rdma", "gdr"),
    [
        ("nccl-ib-nccl-tests-185.txt", "IB", True, False),
        ("nccl-socket-nccl-1267.txt", "Socket", False, False),
        ("nccl-channels-socket-nccl-1232.txt", "Socket", False, False),
        ("nccl-channels-ib-gdr-nccl-707.txt", "IB", True, True),
    ],
)
def test_nccl_transport_on_the_guest_and_in_vgpuctl(name: str, network: str, rdma: bool, gdr: bool) -> None:
    guest = validate.nccl_transport(text(name))
    assert (guest["network"], guest["rdma"], guest["gdr"]) == (network, rdma, gdr)
    assert nccl_transport(text(name)).to_dict() == guest  # one rule, two places: they must agree


def test_nccl_over_sockets_fails_in_one_line() -> None:
    _, message = validate.check("nccl", text("nccl-socket-nccl-1267.txt"), "train-02")
    assert message == ("NCCL used NET/Socket (TCP sockets), not NET/IB, between the VMs with train-02: check "
                       "NCCL_IB_HCA, NCCL_IB_GID_INDEX and the RDMA device")
    assert validate.check("nccl", "no NCCL lines", "x")[1].startswith("the NCCL run with x printed no transport")
    assert validate.nccl_transport(text("nccl-ib-nccl-tests-185.txt"))["ib_devices"] == [
        "[0]mlx5_10:1/RoCE", "[1]mlx5_11:1/RoCE"]


LSPCI = """\
1a:00.0 Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]
\tCapabilities: [480 v1] Address Translation Service (ATS)
\t\tATSCap:\tInvalidate Queue Depth: 00
\t\tATSCtl:\tEnable+, Smallest Translation Unit: 00
1b:00.1 Ethernet controller: Mellanox Technologies ConnectX Family mlx5Gen Virtual Function
\tCapabilities: [480 v1] Address Translation Service (ATS)
\t\tATSCtl:\tEnable-, Smallest Translation Unit: 00
1c:00.0 Ethernet controller: Mellanox Technologies MT2892 Family [ConnectX-6 Dx]
"""


def test_ats_from_lspci() -> None:
    result, message = validate.check("ats", LSPCI)
    assert [(d["pci"], d["ats"]) for d in result["devices"]] == [
        ("1a:00.0", True), ("1b:00.1", False), ("1c:00.0", None)]
    assert message.startswith("ATS is disabled on 1b:00.1 Ethernet controller: Mellanox Technologies ConnectX Family")
    assert validate.check("ats", LSPCI.replace("Enable-", "Enable+"))[1] == ""
