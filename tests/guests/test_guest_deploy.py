"""The guest playbooks over real SSH into two Debian chroot guests (see conftest.py). Runs in file order:
bad input first (on fresh guests), then a full deploy, its re-run, check mode, --limit and the licence wait."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from guestlib import (
    DRIVER_VERSION,
    GUEST_PASSWORD,
    TOKEN_CONTENT,
    VCENTER_PASSWORD,
    Files,
    Guests,
)

from vgpuctl.guest.runner import DeployResult, deploy
from vgpuctl.guest.targets import ROLES
from vgpuctl.inventory import load_inventory

pytestmark = pytest.mark.guests

# site.yml always runs gpu_facts; the inventory names the rest.
ALL_ROLES = [role for role in ROLES if role != "gpu_facts"]


def stack_vars(files: Files, **override) -> dict:
    """The full stack with the package-installing parts pointed at what the offline guests have."""
    out = {
        "vgpu_driver_src": str(files.driver),
        "vgpu_driver_sha256": files.driver_sha256,
        "vgpu_guest_driver_install_build_deps": False,  # no kernel headers for a chroot
        "vgpu_license_token_src": str(files.token),
        "vgpu_licensing_timeout_s": 30,
        "vgpu_licensing_poll_s": 1,
        "cuda_toolkit_install": False,  # NVIDIA's repository is not reachable from the tests
        "nccl_socket_ifname": "eth0",
        "nccl_ib_hca": "mlx5_0:1",
        "nccl_ib_traffic_class": 106,
        "rdma_roce_load_modules": False,  # no kernel modules in a chroot
        "ml_stack_torch_packages": ["vgpuctl-probe==0.1"],
        "ml_stack_wheel_src": str(files.wheels),
        "horovod_install": False,  # a Horovod build needs CUDA
    }
    out.update(override)
    return out


def write_inventory(path: Path, vms: list[dict], groups: dict, connection: dict) -> Path:
    doc = {"apiVersion": "vgpuctl/v1", "vms": vms, "guests": {"connection": connection, "groups": groups}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def vm(name: str, group: str, count: int = 2, nvlink: bool = True) -> dict:
    return {
        "name": name,
        "template": "t",
        "vgpus": {"profile": "grid_a100-40c", "count": count},
        "nvlink": "required" if nvlink else "none",
        "guest": {"group": group},
    }


def key_connection(guests: Guests) -> dict:
    return {"user": "root", "key_file": str(guests.key)}


def by_host(result: DeployResult) -> dict:
    return {h.host: h for h in result.hosts}


def addresses(guests: Guests, **extra) -> dict:
    return {g.name: g.address for g in guests.guests} | extra


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def test_check_mode_on_fresh_guests_reports_changes_and_touches_nothing(guests: Guests, files: Files, tmp_path, state):
    inv = write_inventory(
        tmp_path / "inv.yaml",
        [vm(g.name, "trainers") for g in guests.guests],
        {"trainers": {"roles": ALL_ROLES, "vars": stack_vars(files)}},
        key_connection(guests),
    )
    result = deploy(load_inventory(inv), addresses(guests), state=state, check=True)
    assert [(h.status, h.message) for h in result.hosts] == [("changed", "")] * 2
    assert all(h.changed > 5 for h in result.hosts)
    for g in guests.guests:
        for path in ("usr/bin/nvidia-smi", "etc/nccl.conf", "etc/nvidia", "opt/vgpuctl", "root/.ssh/config"):
            assert not (g.root / path).exists(), path


def test_bad_input_stops_each_host_with_its_own_message(guests: Guests, files: Files, tmp_path, state):
    g1, g2 = guests.guests
    guests.set_secure_boot(g2, True)
    try:
        inv = write_inventory(
            tmp_path / "inv.yaml",
            [vm(g1.name, "badsha"), vm(g2.name, "secboot"), vm("ghost", "secboot")],
            {
                "badsha": {"roles": ["vgpu_guest_driver"], "vars": stack_vars(files, vgpu_driver_sha256="0" * 64)},
                "secboot": {"roles": ["vgpu_guest_driver"], "vars": stack_vars(files)},
                "empty": {"roles": ["gpu_validate"]},
            },
            key_connection(guests),
        )
        result = deploy(load_inventory(inv), addresses(guests), state=state)
    finally:
        guests.set_secure_boot(g2, False)
    hosts = by_host(result)
    assert hosts[g1.name].status == "failed"
    assert f"sha256 mismatch for {files.driver}" in hosts[g1.name].message
    assert files.driver_sha256 in hosts[g1.name].message
    assert hosts[g2.name].status == "failed"
    assert "Secure Boot is enabled" in hosts[g2.name].message
    assert hosts["ghost"].status == "unreachable" and "no guest IP" in hosts["ghost"].message
    assert hosts["group empty"].status == "failed" and "has no VMs" in hosts["group empty"].message
    # the checks come before any change
    for g in (g1, g2):
        assert not (g.root / "etc/modprobe.d/blacklist-nouveau.conf").exists()
        assert not (g.root / "usr/bin/nvidia-smi").exists()


def run_cli(args: list[str], state: Path, **env) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "VGPUCTL_STATE_DIR": str(state), "COLUMNS": "250", **env}
    return subprocess.run(
        [sys.executable, "-m", "vgpuctl", *args], capture_output=True, text=True, env=full_env, check=False, timeout=900
    )


def test_missing_files_and_unreachable_guest_via_cli(guests: Guests, files: Files, tmp_path, state):
    g1, g2 = guests.guests
    inv = write_inventory(
        tmp_path / "inv.yaml",
        [vm(g1.name, "nodriver"), vm(g2.name, "notoken"), vm("far", "notoken")],
        {
            "nodriver": {
                "roles": ["vgpu_guest_driver"],
                "vars": stack_vars(files, vgpu_driver_src="missing/x-1.2.3.run"),
            },
            "notoken": {
                "roles": ["vgpu_guest_driver", "vgpu_licensing"],
                "vars": stack_vars(files, vgpu_license_token_src=str(tmp_path / "none.tok")),
            },
        },
        key_connection(guests),
    )
    addr = tmp_path / "addresses.yaml"
    unused = guests.guests[-1].address.rsplit(".", 1)[0] + ".250"
    addr.write_text(yaml.safe_dump(addresses(guests, far=unused)))
    proc = run_cli(["-o", "json", "guest", "deploy", "-f", str(inv), "--addresses", str(addr)], state)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "guest deploy failed for 3 of 3 host(s)" in proc.stderr
    hosts = {h["vm"]: h for h in json.loads(proc.stdout)["guests"]}
    assert f"driver file {tmp_path / 'missing/x-1.2.3.run'} not found on the controller" in hosts[g1.name]["message"]
    assert f"token file {tmp_path / 'none.tok'} not found on the controller" in hosts[g2.name]["message"]
    assert hosts["far"]["status"] == "unreachable" and "Failed to connect" in hosts["far"]["message"]
    # guest2's driver went in before the licence step failed; that success is kept
    assert guests.ssh(g2, "nvidia-smi --query-gpu=driver_version,name --format=csv,noheader").stdout.startswith(
        DRIVER_VERSION
    )


@pytest.fixture(scope="module")
def converged(guests: Guests, files: Files, tmp_path_factory):
    """The full stack, connecting with a password only (sshpass), with a vCenter password in the environment:
    both must stay out of every artifact."""
    tmp = tmp_path_factory.mktemp("converged")
    for g in guests.guests:
        guests.ssh(g, f"echo 'root:{GUEST_PASSWORD}' | chpasswd")
        guests.set_vgpus(g, count=2, profile="A100-40C", nvlink=True)
        guests.set_nouveau_loaded(g, True)  # a stock guest: nouveau holds the GPU until the first reboot
        fake_rdma_ports(g.root, g.address)
    events_before = {g.name: len(guests.events(g)) for g in guests.guests}
    inv_path = write_inventory(
        tmp / "inv.yaml",
        [vm(g.name, "trainers") for g in guests.guests],
        # no nccl_ib_hca: the RoCE port rdma_roce finds fills it
        {"trainers": {"roles": ALL_ROLES, "vars": stack_vars(files, nccl_ib_hca="")}},
        {"user": "root", "password_env": "GUEST_PW"},
    )
    state = tmp / "state"
    mp = pytest.MonkeyPatch()
    mp.setenv("GUEST_PW", GUEST_PASSWORD)
    mp.setenv("VGPUCTL_PASSWORD", VCENTER_PASSWORD)
    mp.setenv("HOME", str(tmp))  # no ~/.ssh keys of the host: the password is the only way in
    try:
        first = deploy(load_inventory(inv_path), addresses(guests), state=state)
        events_first = {g.name: guests.events(g)[events_before[g.name] :] for g in guests.guests}
        second = deploy(load_inventory(inv_path), addresses(guests), state=state)
        events_second = {
            g.name: guests.events(g)[events_before[g.name] + len(events_first[g.name]) :] for g in guests.guests
        }
    finally:
        mp.undo()
    return {
        "inv": inv_path,
        "state": state,
        "first": first,
        "second": second,
        "events": (events_first, events_second),
    }


def fake_rdma_ports(root: Path, address: str) -> None:
    """What sysfs shows for a ConnectX in RoCE mode (mlx5_0, port 1 on eth0 with `address`: GIDs 0-3 link-local
    and IPv4-mapped, RoCE v1 and v2, as tests/fixtures/rdma/sysfs-mlx5-two-netdevs.yaml lays them out) and one in
    InfiniBand mode."""
    mapped = "0000:0000:0000:0000:0000:ffff:" + "{:02x}{:02x}:{:02x}{:02x}".format(*map(int, address.split(".")))
    gids = [("fe80:0000:0000:0000:a4ed:ccff:fe8b:0001", "IB/RoCE v1"), ("fe80:0000:0000:0000:a4ed:ccff:fe8b:0001",
            "RoCE v2"), (mapped, "IB/RoCE v1"), (mapped, "RoCE v2")]
    for dev, layer, ndev in (("mlx5_0", "Ethernet", "eth0"), ("mlx5_1", "InfiniBand", "")):
        port = root / "sys" / "class" / "infiniband" / dev / "ports" / "1"
        for sub in ("gids", "gid_attrs/ndevs", "gid_attrs/types"):
            (port / sub).mkdir(parents=True, exist_ok=True)
        (port / "link_layer").write_text(layer + "\n")
        if ndev:
            for i, (gid, kind) in enumerate(gids):
                (port / "gids" / str(i)).write_text(gid + "\n")
                (port / "gid_attrs" / "types" / str(i)).write_text(kind + "\n")
                (port / "gid_attrs" / "ndevs" / str(i)).write_text(ndev + "\n")


def test_full_stack_succeeds_on_every_guest(converged, guests: Guests):
    first = converged["first"]
    assert [h.status for h in first.hosts] == ["changed", "changed"], first.hosts
    assert not first.failed


def test_driver_goes_in_after_the_nouveau_reboot(converged, guests: Guests):
    events_first, events_second = converged["events"]
    g1, g2 = guests.guests
    # guest1 had no driver: initramfs without nouveau, reboot, then the installer (which refuses while nouveau
    # is loaded); guest2 got the driver earlier in this file, so only the reboot that unloads nouveau
    assert events_first[g1.name] == ["initramfs", "reboot", f"installer {DRIVER_VERSION}"]
    assert events_first[g2.name] == ["initramfs", "reboot"]
    assert events_second == {g1.name: [], g2.name: []}
    for g in guests.guests:
        assert guests.ssh(g, "test -e /sys/module/nouveau", check=False).returncode == 1


def test_second_run_changes_nothing(converged):
    second = converged["second"]
    assert [(h.host, h.status, h.changed, h.failed) for h in second.hosts] == [
        (h.host, "ok", 0, 0) for h in second.hosts
    ]


def test_files_modes_and_services_in_each_guest(converged, guests: Guests, files: Files):
    for g in guests.guests:
        args = guests.ssh(g, "cat /var/lib/fake-nvidia/installer.args").stdout.split()
        assert args == ["--silent", "--dkms"]
        out = guests.ssh(g, "cat /etc/modprobe.d/blacklist-nouveau.conf").stdout
        assert "blacklist nouveau" in out and "options nouveau modeset=0" in out
        assert not guests.ssh(g, "ls /var/cache/vgpuctl", check=False).stdout.strip()  # installer not left behind

        token = f"/etc/nvidia/ClientConfigToken/{files.token.name}"
        assert guests.ssh(g, f"stat -c '%a %U' {token}").stdout.split() == ["744", "root"]
        assert guests.ssh(g, f"cat {token}").stdout.strip() == TOKEN_CONTENT
        assert "FeatureType=1" in guests.ssh(g, "cat /etc/nvidia/gridd.conf").stdout.splitlines()
        assert guests.ssh(g, "service nvidia-gridd status", check=False).returncode == 0
        assert guests.ssh(g, "ls /etc/rc2.d").stdout.count("nvidia-gridd") == 1  # enabled at boot
        assert "License Status                    : Licensed" in guests.ssh(g, "nvidia-smi -q").stdout

        nccl = guests.ssh(g, "cat /etc/nccl.conf").stdout.splitlines()
        # the RoCE port rdma_roce found, exactly, and its RoCE v2 GID (index 3: NCCL before 2.21 would take 0)
        expected = {"NCCL_SOCKET_IFNAME=eth0", "NCCL_IB_HCA==mlx5_0:1", "NCCL_IB_TC=106", "NCCL_IB_GID_INDEX=3"}
        assert expected <= set(nccl)
        assert guests.ssh(g, "cat /etc/modules-load.d/vgpuctl-rdma.conf").stdout.split()[-2:] == [
            "ib_uverbs",
            "rdma_ucm",
        ]
        assert (
            guests.ssh(g, "/opt/vgpuctl/venv/bin/python -c 'import vgpuctl_probe; print(vgpuctl_probe.VALUE)'").stdout
            == "42\n"
        )
        assert guests.ssh(g, "grep -c cuda-12.4 /etc/profile.d/cuda.sh").stdout.strip() != "0"

        hostfile = guests.ssh(g, "cat /etc/vgpuctl/hostfile").stdout.splitlines()
        assert hostfile == [f"{h.name} slots=2" for h in guests.guests]
        assert guests.ssh(g, "stat -c %a /usr/local/bin/vgpuctl-train").stdout.strip() == "755"
        assert "HOROVOD_GPU_OPERATIONS=NCCL" in guests.ssh(g, "cat /etc/vgpuctl/horovod-build.env").stdout

        assert guests.ssh(g, "stat -c %a /root/.ssh/id_ed25519_trainers").stdout.strip() == "600"
        report = yaml.safe_load(guests.ssh(g, "cat /var/lib/vgpuctl/validate.json").stdout)
        assert report["vgpu_count"] == 2 and report["licensed"] is True and report["nvlink"] is True
        assert report["peers_reached"] == [h.name for h in guests.guests if h.name != g.name]


def test_workers_reach_each_other_over_ssh_without_prompts(converged, guests: Guests):
    g1, g2 = guests.guests
    keys = {guests.ssh(g, "cat /root/.ssh/id_ed25519_trainers.pub").stdout for g in guests.guests}
    assert len(keys) == 1  # one key pair per group
    for src, dst in ((g1, g2), (g2, g1)):
        for target in (dst.name, dst.address):
            # no -o options: the group's ssh config and known_hosts must be enough; stdin closed, no tty
            out = guests.ssh(src, f"ssh {target} hostname </dev/null", check=False)
            assert out.returncode == 0, out.stderr
            assert out.stdout.strip() == dst.name


FAKE_TORCHRUN = """#!/bin/sh
# test stand-in for torchrun: records its arguments, working directory and network environment
out=/var/tmp/fake-torchrun
{ echo "$*"; pwd; env | grep -E '^(NCCL|GLOO)_' | sort; } > "$out"
[ ! -f /var/tmp/fake-torchrun-fail ] || exit 3
"""


def test_torchrun_starts_on_every_worker_with_the_network_settings(converged, guests: Guests):
    g1, g2 = guests.guests
    for g in guests.guests:
        torchrun = g.root / "opt" / "vgpuctl" / "venv" / "bin" / "torchrun"
        torchrun.write_text(FAKE_TORCHRUN)
        torchrun.chmod(0o755)
        guests.ssh(g, "rm -f /var/tmp/fake-torchrun /var/tmp/fake-torchrun-fail")
    run = guests.ssh(g1, 'cd /tmp && vgpuctl-train /opt/job.py --name "it\'s" </dev/null', check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    for g in guests.guests:
        args, cwd, *env = guests.ssh(g, "cat /var/tmp/fake-torchrun").stdout.splitlines()
        assert args == (
            f"--nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint {g1.name}:29500"
            " --rdzv-id vgpuctl-trainers /opt/job.py --name it's"
        )
        assert cwd == "/tmp"
        # NCCL_IB_HCA from the RoCE port rdma_roce found, the interface from the nccl settings
        assert env == [
            "GLOO_SOCKET_IFNAME=eth0",
            "NCCL_IB_GID_INDEX=3",
            "NCCL_IB_HCA==mlx5_0:1",
            "NCCL_IB_TC=106",
            "NCCL_SOCKET_IFNAME=eth0",
        ]
    # one worker failing fails the launch
    guests.ssh(g2, "touch /var/tmp/fake-torchrun-fail")
    failed = guests.ssh(g1, "cd /tmp && vgpuctl-train /opt/job.py </dev/null", check=False)
    assert failed.returncode == 1
    assert guests.ssh(g1, "vgpuctl-train --launcher mpirun x </dev/null", check=False).returncode == 2

    # horovodrun: one launch here, the hostfile, and the interface Gloo must use (not what the host name resolves to)
    horovodrun = g1.root / "opt" / "vgpuctl" / "venv" / "bin" / "horovodrun"
    horovodrun.write_text(FAKE_TORCHRUN)
    horovodrun.chmod(0o755)
    guests.ssh(g1, "cd /tmp && vgpuctl-train --launcher horovodrun /opt/job.py </dev/null")
    args = guests.ssh(g1, "cat /var/tmp/fake-torchrun").stdout.splitlines()[0]
    assert args == "-np 4 --hostfile /etc/vgpuctl/hostfile --network-interfaces eth0 python /opt/job.py"


def test_artifacts_hold_no_token_and_no_password(converged):
    runs = converged["state"] / "runs"
    run_dirs = sorted(runs.iterdir())
    assert len(run_dirs) == 2
    assert all((d / "job_events").is_dir() and any((d / "job_events").iterdir()) for d in run_dirs)
    assert all((d / "command").is_file() for d in run_dirs)
    for secret in (TOKEN_CONTENT, GUEST_PASSWORD, VCENTER_PASSWORD):
        proc = subprocess.run(["grep", "-rlF", secret, str(converged["state"])], capture_output=True, text=True)
        assert proc.returncode == 1, f"{secret!r} leaked into {proc.stdout}"
    # ansible-runner records the environment it ran with; the secret-looking variables were taken out
    env = json.loads((run_dirs[0] / "command").read_text())["env"]
    assert "VGPUCTL_PASSWORD" not in env and "GUEST_PW" not in env
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)


def test_check_mode_reports_drift_and_changes_nothing(converged, guests: Guests, tmp_path):
    g1, g2 = guests.guests
    guests.ssh(g1, "echo NCCL_DEBUG=TRACE >> /etc/nccl.conf")
    proc = run_cli(
        ["guest", "deploy", "-f", str(converged["inv"]), "--check", "--addresses", str(_addr_file(guests, tmp_path))],
        converged["state"],
        GUEST_PW=GUEST_PASSWORD,
        HOME=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # piped, one plain line per guest: "guest NAME  group G  status S  ok N ..."
    rows = {w[1]: dict(zip(w[2::2], w[3::2], strict=False)) for line in proc.stdout.splitlines()
            if (w := line.split()) and w[0] == "guest"}
    assert rows[g1.name]["status"] == "changed" and rows[g2.name]["status"] == "ok"
    assert "NCCL_DEBUG=TRACE" in guests.ssh(g1, "cat /etc/nccl.conf").stdout  # check mode left it


def _addr_file(guests: Guests, tmp_path: Path) -> Path:
    path = tmp_path / "addresses.yaml"
    path.write_text(yaml.safe_dump(addresses(guests)))
    return path


def test_limit_runs_only_matching_guests_and_prunes_runs(converged, guests: Guests, monkeypatch):
    g1 = guests.guests[0]
    monkeypatch.setenv("GUEST_PW", GUEST_PASSWORD)
    result = deploy(
        load_inventory(converged["inv"]), addresses(guests), state=converged["state"], limit=g1.name, keep_runs=2
    )
    assert [h.host for h in result.hosts] == [g1.name]
    assert result.hosts[0].status == "changed"  # the drift from the check-mode test is fixed
    assert "NCCL_DEBUG" not in guests.ssh(g1, "cat /etc/nccl.conf").stdout
    assert len(list((converged["state"] / "runs").iterdir())) == 2


def test_licence_wait_times_out_with_a_clear_message(guests: Guests, files: Files, tmp_path, state):
    g1 = guests.guests[0]
    inv = write_inventory(
        tmp_path / "inv.yaml",
        [vm(g1.name, "unlicensed")],
        {
            "unlicensed": {
                "roles": ["vgpu_licensing"],
                "vars": stack_vars(files, vgpu_licensing_feature_type=0, vgpu_licensing_timeout_s=2),
            }
        },
        key_connection(guests),
    )
    result = deploy(load_inventory(inv), addresses(guests), state=state)
    (host,) = result.hosts
    assert host.status == "failed"
    assert "vgpu_licensing: not licensed after 2 s" in host.message
    assert "Unlicensed (Unrestricted)" in host.message


def test_secure_boot_guest_with_signing_keys_gets_a_signed_upgrade(guests: Guests, files: Files, tmp_path, state):
    g2 = guests.guests[1]
    newer = tmp_path / "NVIDIA-Linux-x86_64-550.90.08-grid.run"
    newer.write_text(files.driver.read_text().replace(DRIVER_VERSION, "550.90.08"))
    key, cert = tmp_path / "mok.key", tmp_path / "mok.der"
    key.write_text("-----BEGIN PRIVATE KEY-----\nvgpuctl-test-signing-key-0c1d\n-----END PRIVATE KEY-----\n")
    cert.write_text("test certificate\n")
    inv = write_inventory(
        tmp_path / "inv.yaml",
        [vm(g2.name, "signed")],
        {
            "signed": {
                "roles": ["vgpu_guest_driver"],
                "vars": stack_vars(
                    files,
                    vgpu_driver_src=str(newer),
                    vgpu_driver_sha256=hashlib.sha256(newer.read_bytes()).hexdigest(),
                    vgpu_guest_driver_signing_key=str(key),
                    vgpu_guest_driver_signing_cert=str(cert),
                ),
            }
        },
        key_connection(guests),
    )
    guests.set_secure_boot(g2, True)
    try:
        first = deploy(load_inventory(inv), addresses(guests), state=state)
        second = deploy(load_inventory(inv), addresses(guests), state=state)
    finally:
        guests.set_secure_boot(g2, False)
    assert [(h.status, h.message) for h in first.hosts] == [("changed", "")]
    assert [(h.status, h.changed) for h in second.hosts] == [("ok", 0)]
    args = guests.ssh(g2, "tail -n 1 /var/lib/fake-nvidia/installer.args").stdout.split()
    assert args == [
        "--silent",
        "--dkms",
        "--module-signing-secret-key=/etc/vgpuctl/signing/signing.key",
        "--module-signing-public-key=/etc/vgpuctl/signing/signing.crt",
    ]
    assert guests.ssh(g2, "stat -c %a /etc/vgpuctl/signing/signing.key").stdout.strip() == "600"
    assert "mok_signing_key=" in guests.ssh(g2, "cat /etc/dkms/framework.conf.d/vgpuctl-signing.conf").stdout
    assert guests.ssh(g2, "nvidia-smi --query-gpu=driver_version,name --format=csv,noheader").stdout.startswith(
        "550.90.08"
    )
    proc = subprocess.run(
        ["grep", "-rlF", "vgpuctl-test-signing-key-0c1d", str(state)], capture_output=True, check=False
    )
    assert proc.returncode == 1, proc.stdout


def newer_driver(files: Files, tmp_path: Path, version: str) -> tuple[Path, str]:
    driver = tmp_path / f"NVIDIA-Linux-x86_64-{version}-grid.run"
    driver.write_text(files.driver.read_text().replace(DRIVER_VERSION, version))
    return driver, hashlib.sha256(driver.read_bytes()).hexdigest()


def driver_group(guests: Guests, files: Files, tmp_path: Path, version: str, **extra) -> Path:
    driver, sha = newer_driver(files, tmp_path, version)
    g1 = guests.guests[0]
    return write_inventory(
        tmp_path / "inv.yaml",
        [vm(g1.name, "drivers")],
        {
            "drivers": {
                "roles": ["vgpu_guest_driver"],
                "vars": stack_vars(files, vgpu_driver_src=str(driver), vgpu_driver_sha256=sha, **extra),
            }
        },
        key_connection(guests),
    )


def test_fake_installer_refuses_while_nouveau_is_loaded(guests: Guests, files: Files):
    g1 = guests.guests[0]
    (g1.root / "var" / "tmp" / "installer.run").write_text(files.driver.read_text())
    guests.set_nouveau_loaded(g1, True)
    try:
        out = guests.ssh(g1, "sh /var/tmp/installer.run --silent --dkms", check=False)
    finally:
        guests.set_nouveau_loaded(g1, False)
    assert out.returncode == 1 and "Nouveau kernel driver is currently in use" in out.stderr
    assert guests.events(g1)[-1] == "installer refused: nouveau loaded"


def test_nouveau_loaded_without_reboot_permission_stops_before_the_installer(guests, files, tmp_path, state):
    g1 = guests.guests[0]
    inv = driver_group(guests, files, tmp_path, "550.90.09", vgpu_guest_driver_reboot_allowed=False)
    guests.set_nouveau_loaded(g1, True)
    before = len(guests.events(g1))
    try:
        result = deploy(load_inventory(inv), addresses(guests), state=state)
    finally:
        guests.set_nouveau_loaded(g1, False)
    (host,) = result.hosts
    assert host.status == "failed"
    assert "nouveau is loaded and the NVIDIA installer refuses to run while it is" in host.message
    assert "vgpu_guest_driver_reboot_allowed: true" in host.message
    assert guests.events(g1)[before:] == ["initramfs"]  # no reboot, no installer
    assert not guests.ssh(g1, "nvidia-smi --query-gpu=driver_version,name --format=csv,noheader").stdout.startswith(
        "550.90.09"
    )


def test_nouveau_back_after_the_reboot_fails_without_installing(guests, files, tmp_path, state):
    """Without the initramfs regenerated, the early-boot nouveau comes back: the role says so and stops."""
    g1 = guests.guests[0]
    inv = driver_group(guests, files, tmp_path, "550.90.10", vgpu_guest_driver_update_initramfs=False)
    (g1.root / "var" / "lib" / "fake-boot" / "initramfs-without-nouveau").unlink(missing_ok=True)
    guests.set_nouveau_loaded(g1, True)
    before = len(guests.events(g1))
    try:
        result = deploy(load_inventory(inv), addresses(guests), state=state)
    finally:
        guests.set_nouveau_loaded(g1, False)
    (host,) = result.hosts
    assert host.status == "failed"
    assert "nouveau is still loaded after the reboot" in host.message
    assert guests.events(g1)[before:] == ["reboot"]
