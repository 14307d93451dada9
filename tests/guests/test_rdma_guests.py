"""The RoCE stack over real SSH into two Debian chroot guests: rdma_roce finds the RDMA port and the RoCE v2 GID of
the adapter's address, nccl writes NCCL_IB_GID_INDEX / NCCL_IB_HCA / NCCL_SOCKET_IFNAME / NCCL_IB_TC, and
gpu_validate runs perftest between the pair and a two-VM NCCL all-reduce that must report NET/IB.

Two ways:
- recorded: the guests' sysfs holds a ConnectX GID table (as tests/fixtures/rdma/sysfs-mlx5-two-netdevs.yaml lays
  it out) for each guest's own address; perftest and mpirun are stand-ins that print recorded real outputs
  (tests/fixtures/rdma, see its README). Always runs (root needed).
- soft-RoCE: where the test kernel offers rdma_rxe, each guest gets a real soft-RoCE device on its eth0 (the
  role's rdma_roce_soft_roce), its real sysfs, and real perftest runs between the guests. NCCL cannot run
  without a GPU, so the all-reduce is a stand-in that prints NCCL's log lines for the transport NCCL would pick:
  NET/IB when the verbs device of NCCL_IB_HCA is there (ibv_devinfo), NET/Socket otherwise. Skipped, with the
  reason, on kernels without rdma_rxe.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from guestlib import DRIVER_VERSION, ENV, FAKE_INSTALLER, Guest, Guests, guest_pair

from vgpuctl.guest.runner import deploy
from vgpuctl.inventory import load_inventory

pytestmark = pytest.mark.guests

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "rdma"
NET = ENV["VGPUCTL_GUEST_NET"]  # guest i has NET.(10+i)/24 on eth0

FAKE_PERFTEST = """#!/bin/sh
# stand-in for perftest's {tool}: the server (no host argument) waits a moment and ends; the client logs its
# arguments and prints a recorded real result
last=$(eval echo "\\${{$#}}")
case "$last" in
    *.*.*.*) echo "{tool} $*" >> /var/log/fake-perftest.calls; cat /opt/fake-perftest/{tool}.out ;;
    *) echo "{tool} server $*" >> /var/log/fake-perftest.calls; sleep 1 ;;
esac
"""
FAKE_MPIRUN = """#!/bin/sh
# stand-in for mpirun + all_reduce_perf: logs its arguments and prints what NCCL printed in a recorded run
echo "$*" >> /var/log/fake-mpirun.calls
cat /opt/fake-nccl/output.txt
"""


def gid_table(root: Path, address: str) -> None:
    """A ConnectX port in RoCE mode (mlx5_0 port 1) whose GIDs 0-3 belong to eth0 with `address`: link-local v1 and
    v2, IPv4-mapped v1 and v2 (the layout of tests/fixtures/rdma/sysfs-mlx5-two-netdevs.yaml)."""
    mapped = "0000:0000:0000:0000:0000:ffff:" + "{:02x}{:02x}:{:02x}{:02x}".format(*map(int, address.split(".")))
    port = root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    shutil.rmtree(root / "sys" / "class" / "infiniband", ignore_errors=True)
    files = {"link_layer": "Ethernet", "state": "4: ACTIVE"}
    for i, (gid, kind) in enumerate([("fe80:0000:0000:0000:a4ed:ccff:fe8b:0001", "IB/RoCE v1"),
                                     ("fe80:0000:0000:0000:a4ed:ccff:fe8b:0001", "RoCE v2"),
                                     (mapped, "IB/RoCE v1"), (mapped, "RoCE v2")]):
        files[f"gids/{i}"] = gid
        files[f"gid_attrs/types/{i}"] = kind
        files[f"gid_attrs/ndevs/{i}"] = "eth0"
    for rel, content in files.items():
        (port / rel).parent.mkdir(parents=True, exist_ok=True)
        (port / rel).write_text(content + "\n")


def install(root: Path, rel: str, text: str, mode: int = 0o755) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def fake_driver(guests: Guests, g: Guest) -> None:
    """nvidia-smi for gpu_validate's GPU checks: the fake installer the driver tests use."""
    install(g.root, "tmp/fake-installer.sh", FAKE_INSTALLER.read_text().replace("@VERSION@", DRIVER_VERSION))
    guests.set_vgpus(g, count=1, profile="A100-40C", nvlink=False)
    guests.ssh(g, "sh /tmp/fake-installer.sh --silent")


def inventory(path: Path, guests: Guests, roles: list[str], group_vars: dict) -> Path:
    first, last = guests.guests[0].address, guests.guests[-1].address
    vm = {
        "template": "t",
        "vgpus": {"profile": "grid_a100-40c", "count": 1},
        "network": [{"portgroup": "mgmt"},
                    {"type": "sriov", "device": "ConnectX-7", "portgroup": "roce", "traffic_class": 106}],
        "guest": {"group": "trainers", "identity": {"addresses": {"roce": {"pool": f"{first}-{last}/24"}}}},
    }
    names = [g.name for g in guests.guests]
    doc = {"apiVersion": "vgpuctl/v1",
           "vms": [{"name": f"guest{{{names[0][-1]}..{names[-1][-1]}}}", **vm}],
           "guests": {"connection": {"user": "root", "key_file": str(guests.key)},
                      "groups": {"trainers": {"roles": roles, "vars": group_vars}}}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


STACK = {"rdma_roce_load_modules": False, "nccl_packages": [], "gpu_validate_nccl_allreduce": True,
         "gpu_validate_nccl_test": "/opt/fake-nccl/all_reduce_perf", "gpu_validate_mpirun": "/opt/fake-nccl/mpirun"}
ROLES = ["rdma_roce", "nccl", "gpu_validate"]


# ------------------------------------------------------------------------------------------------ recorded


@pytest.fixture(scope="module")
def guests() -> Iterator[Guests]:
    """A pair of its own: its sysfs and tool stand-ins must not leak into the deploy tests' guests."""
    yield from guest_pair()


@pytest.fixture(scope="module")
def recorded(guests: Guests) -> Guests:
    for g in guests.guests:
        fake_driver(guests, g)
        gid_table(g.root, g.address)
        for tool, out in (("ib_write_bw", "ib_write_bw-gpu-operator.txt"),
                          ("ib_read_lat", "ib_read_lat-kube-ansible.txt")):
            install(g.root, f"opt/fake-perftest/{tool}", FAKE_PERFTEST.format(tool=tool))
            install(g.root, f"opt/fake-perftest/{tool}.out", (RECORDED / out).read_text(), 0o644)
        install(g.root, "opt/fake-nccl/mpirun", FAKE_MPIRUN)
        install(g.root, "opt/fake-nccl/all_reduce_perf", "#!/bin/sh\nexit 0\n")
        install(g.root, "opt/fake-nccl/output.txt", (RECORDED / "nccl-ib-nccl-tests-185.txt").read_text(), 0o644)
    return guests


def test_the_roce_stack_finds_its_gid_and_validates_over_net_ib(recorded: Guests, tmp_path: Path) -> None:
    g1, g2 = recorded.guests
    inv = inventory(tmp_path / "inv.yaml", recorded, ROLES,
                    dict(STACK, gpu_validate_perftest_dir="/opt/fake-perftest"))
    result = deploy(load_inventory(inv), {g.name: g.address for g in recorded.guests}, state=tmp_path / "state")
    assert [h.status for h in result.hosts] == ["changed", "changed"], [(h.host, h.message) for h in result.hosts]
    for g in recorded.guests:
        nccl = set(recorded.ssh(g, "cat /etc/nccl.conf").stdout.splitlines())
        # the RoCE v2 GID holding the address vgpuctl gave the adapter (index 3), the device exactly, its interface
        # and the adapter's traffic class
        assert {"NCCL_IB_GID_INDEX=3", "NCCL_IB_HCA==mlx5_0:1", "NCCL_SOCKET_IFNAME=eth0", "NCCL_IB_TC=106"} <= nccl
        report = json.loads(recorded.ssh(g, "cat /var/lib/vgpuctl/validate.json").stdout)
        assert float(report["rdma"]["write_bw_gbps"]) == 92.38  # both ends report the pair's result
        assert float(report["rdma"]["read_lat_us"]) == 2.69
    # the pair: guest2 measured against guest1's address over the GID found, guest1 served and ran NCCL
    calls = recorded.ssh(g2, "cat /var/log/fake-perftest.calls").stdout.splitlines()
    assert calls[0] == (f"ib_write_bw -d mlx5_0 -i 1 -x 3 -F -s 65536 -n 5000 --report_gbits {g1.address}")
    assert recorded.ssh(g1, "cat /var/log/fake-perftest.calls").stdout.startswith("ib_write_bw server -d mlx5_0")
    mpirun = recorded.ssh(g1, "cat /var/log/fake-mpirun.calls").stdout
    assert f"--host {g1.name}:1,{g2.name}:1 -x NCCL_DEBUG=INFO" in mpirun
    assert json.loads(recorded.ssh(g1, "cat /var/lib/vgpuctl/validate.json").stdout)["rdma"]["nccl_network"] == "IB"


def test_a_run_over_tcp_sockets_fails_in_one_line(recorded: Guests, tmp_path: Path) -> None:
    g1, g2 = recorded.guests
    install(g1.root, "opt/fake-nccl/output.txt", (RECORDED / "nccl-socket-nccl-1267.txt").read_text(), 0o644)
    try:
        inv = inventory(tmp_path / "inv.yaml", recorded, ROLES,
                        dict(STACK, gpu_validate_perftest_dir="/opt/fake-perftest"))
        result = deploy(load_inventory(inv), {g.name: g.address for g in recorded.guests}, state=tmp_path / "state")
    finally:
        install(g1.root, "opt/fake-nccl/output.txt", (RECORDED / "nccl-ib-nccl-tests-185.txt").read_text(), 0o644)
    by_host = {h.host: h for h in result.hosts}
    assert by_host[g1.name].status == "failed"
    assert by_host[g1.name].message == (
        f"gpu_validate: NCCL used NET/Socket (TCP sockets), not NET/IB, between the VMs with {g2.name}: check "
        "NCCL_IB_HCA, NCCL_IB_GID_INDEX and the RDMA device")


def test_no_gid_for_the_address_fails_with_what_there_is(recorded: Guests, tmp_path: Path) -> None:
    g1, _ = recorded.guests
    gid_table(g1.root, "192.0.2.7")  # the adapter's address is not on the RoCE port
    try:
        inv = inventory(tmp_path / "inv.yaml", recorded, ["rdma_roce"], STACK)
        result = deploy(load_inventory(inv), {g.name: g.address for g in recorded.guests}, state=tmp_path / "state")
    finally:
        gid_table(g1.root, g1.address)
    failed = {h.host: h for h in result.hosts}[g1.name]
    assert failed.status == "failed"
    assert failed.message.startswith(f"rdma_roce: no RoCE v2 GID with an IPv4 address holding {g1.address} "
                                     "(mlx5_0:1 0 v1 fe80:")


# ------------------------------------------------------------------------------------------------ soft-RoCE

STAND_IN_ALLREDUCE = """#!/bin/sh
# stand-in for mpirun + all_reduce_perf (no GPU here): NCCL's own log lines for the transport it would pick.
# NCCL takes NET/IB when the verbs device of NCCL_IB_HCA answers, else NET/Socket.
hca=$(sed -n 's/^NCCL_IB_HCA==\\{0,1\\}\\([^:]*\\).*/\\1/p' /etc/nccl.conf)
host=$(hostname)
if [ -n "$hca" ] && ibv_devinfo -d "$hca" 2>/dev/null | grep -q PORT_ACTIVE; then
    echo "$host:1:1 [0] NCCL INFO NET/IB : Using [0]$hca:1/RoCE [RO]; OOB eth0:$(hostname -I | cut -d' ' -f1)<0>"
    echo "$host:1:1 [0] NCCL INFO Using network IB"
else
    echo "$host:1:1 [0] NCCL INFO NET/IB : No device found."
    echo "$host:1:1 [0] NCCL INFO Using network Socket"
fi
"""


def soft_roce_unavailable() -> str | None:
    if shutil.which("modprobe") is None and not Path("/sys/module/rdma_rxe").exists():
        return "the test machine has no modprobe and no rdma_rxe loaded: soft-RoCE cannot be set up"
    if not Path("/sys/module/rdma_rxe").exists():
        probe = subprocess.run(["modprobe", "rdma_rxe"], capture_output=True, text=True, check=False)
        if probe.returncode != 0:
            why = probe.stderr.strip() or f"exit status {probe.returncode}"
            return f"the test kernel offers no soft-RoCE (modprobe rdma_rxe: {why})"
    return None


@pytest.fixture(scope="module")
def soft_roce() -> Iterator[Guests]:
    why = soft_roce_unavailable()
    if why:
        pytest.skip(why)
    for pair in guest_pair():
        mounted = []
        try:
            for g in pair.guests:
                fake_driver(pair, g)
                shutil.rmtree(g.root / "sys", ignore_errors=True)
                (g.root / "sys").mkdir()
                subprocess.run(["nsenter", "-t", str(pair.init_pid(g)), "-m", "-n", "mount", "-t", "sysfs", "sysfs",
                                str(g.root / "sys")], check=True, capture_output=True)
                mounted.append(g)
                install(g.root, "opt/fake-nccl/mpirun", STAND_IN_ALLREDUCE)
                install(g.root, "opt/fake-nccl/all_reduce_perf", "#!/bin/sh\nexit 0\n")
            yield pair
        finally:
            for g in mounted:
                subprocess.run(["nsenter", "-t", str(pair.init_pid(g)), "-m", "-n", "rdma", "link", "delete",
                                "rxe_eth0"], check=False, capture_output=True)
                subprocess.run(["nsenter", "-t", str(pair.init_pid(g)), "-m", "umount", str(g.root / "sys")],
                               check=False, capture_output=True)


def test_soft_roce_between_two_guests_runs_perftest_and_reports_net_ib(soft_roce: Guests, tmp_path: Path) -> None:
    g1, g2 = soft_roce.guests
    inv = inventory(tmp_path / "inv.yaml", soft_roce, ROLES,
                    dict(STACK, rdma_roce_soft_roce=True, rdma_roce_interface="eth0"))
    result = deploy(load_inventory(inv), {g.name: g.address for g in soft_roce.guests}, state=tmp_path / "state")
    assert [h.status for h in result.hosts] == ["changed", "changed"], [(h.host, h.message) for h in result.hosts]
    for g in soft_roce.guests:
        assert "rxe_eth0" in soft_roce.ssh(g, "rdma link show").stdout
        nccl = set(soft_roce.ssh(g, "cat /etc/nccl.conf").stdout.splitlines())
        assert {"NCCL_IB_HCA==rxe_eth0:1", "NCCL_SOCKET_IFNAME=eth0"} <= nccl
    report = json.loads(soft_roce.ssh(g2, "cat /var/lib/vgpuctl/validate.json").stdout)["rdma"]
    assert float(report["write_bw_gbps"]) > 0 and float(report["read_lat_us"]) > 0  # real perftest over rxe
    first = json.loads(soft_roce.ssh(g1, "cat /var/lib/vgpuctl/validate.json").stdout)["rdma"]
    assert first["nccl_network"] == "IB"
