"""`vgpuctl sim up --guests` end to end, as a newcomer runs it: gpusim with the namespace guests attached,
`provision -f inventory.sim-guests.yaml` against it (clones, power-on, the guests' addresses as VMware Tools would
report them, the playbooks in the guests), a VM powered off stops its guest, and `sim down` leaves no guest
process, network namespace, link or mount behind. Needs root (the guests) and gpusim (Go)."""

from __future__ import annotations

import copy
import json
import os
import re
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from guestlib import ROOT, missing_tools

from vgpuctl.cli.sim import parse_env_file
from vgpuctl.guest.addresses import read_addresses
from vgpuctl.vsphere.session import ConnectionSettings, open_session

pytestmark = pytest.mark.guests

INVENTORY = ROOT / "inventory.sim-guests.yaml"
PREFIX = f"s{os.getpid() % 100000:05d}"  # this run's own names and /24 (the guest tests' pairs use others)
NET = f"10.213.{220 + os.getpid() % 30}"


@dataclass
class Sim:
    state: Path
    env: dict[str, str]  # the process environment of a vgpuctl run against it

    def vgpuctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "vgpuctl", *args], capture_output=True, text=True,
                              env=self.env, check=False, timeout=1200)

    def guests(self) -> dict[str, dict[str, Any]]:
        """gpusim's guests by VM name, once every power event so far has reached its guest (GET /gpusim/guests)."""
        ctx = ssl._create_unverified_context()  # the control endpoint of a local test simulator
        url = self.env["GPUSIM_CONTROL"] + "/guests?settled=1"  # a VM's power-off ends before its guest has stopped
        with urllib.request.urlopen(url, context=ctx, timeout=300) as resp:
            return {g["vm"]: g for g in json.loads(resp.read())["guests"]}


def base_env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    env.update(VGPUCTL_STATE_DIR=str(state), VGPUCTL_GUEST_PREFIX=PREFIX, VGPUCTL_GUEST_NET=NET)
    return env


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    if os.geteuid() != 0:
        pytest.skip("guest tests need root (network namespaces, chroot)")
    missing = missing_tools()
    if missing:
        pytest.fail(f"guest tests need these tools on the host: {', '.join(missing)}")
    state = tmp_path / "state"
    env = base_env(state)
    up = subprocess.run([sys.executable, "-m", "vgpuctl", "sim", "up", "--guests"], capture_output=True, text=True,
                        env=env, check=False, timeout=1800)
    assert up.returncode == 0, up.stdout + up.stderr
    printed = parse_env_file(up.stdout)
    try:
        yield Sim(state, {**env, **printed})
    finally:
        subprocess.run([sys.executable, "-m", "vgpuctl", "sim", "down"], env=env, capture_output=True, check=False)


def reported_addresses(sim: Sim) -> dict[str, str | None]:
    """The demo VMs' guest addresses as vSphere reports them (what provision reads)."""
    settings = ConnectionSettings(url=sim.env["VGPUCTL_URL"], username=sim.env["VGPUCTL_USERNAME"],
                                  password=sim.env["VGPUCTL_PASSWORD"], thumbprint=sim.env["VGPUCTL_THUMBPRINT"])
    with open_session(settings) as session:
        return read_addresses(session, ["demo-01", "demo-02"])


def guest_netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if re.fullmatch(rf"{PREFIX}\d+", line.split()[0])]


def guest_links() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return [w for line in out.splitlines() for w in re.split(r"[:@\s]+", line)[:3]
            if re.fullmatch(rf"{PREFIX}(\d+[hg]?|br)", w)]


def processes_naming(folder: Path) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
            root = os.readlink(entry / "root")
        except OSError:
            continue
        if str(folder) in command or root.startswith(str(folder)):
            found.append(f"{entry.name}: {command.replace(chr(0), ' ')[:120]}")
    return found


def mounts_under(folder: Path) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            text = (entry / "mountinfo").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        found += [line for line in text.splitlines() if str(folder) in line]
    return found


def test_provision_against_the_simulator_with_guests_then_sim_down_leaves_nothing(sim: Sim, tmp_path: Path) -> None:
    assert {"GPUSIM_GUEST_PASSWORD", "GPUSIM_GUEST_KEY_FILE", "GPUSIM_GUEST_KNOWN_HOSTS"} <= set(sim.env)
    proc = sim.vgpuctl("-o", "json", "provision", "-f", str(INVENTORY), "--yes", "--ip-poll", "0.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert {o["vm"]: o["status"] for o in doc["apply"]["vms"]} == {"demo-01": "changed", "demo-02": "changed"}
    assert {h["vm"]: (h["status"], h["failed"]) for h in doc["guests"]["guests"]} == {
        "demo-01": ("changed", 0), "demo-02": ("changed", 0)}
    assert "guest IP addresses: 2/2 after" in proc.stderr
    assert sim.env["GPUSIM_GUEST_PASSWORD"] not in proc.stdout + proc.stderr

    # each VM's guest runs in a namespace of its own at the address vSphere reported, and was configured
    guests = sim.guests()
    addresses = {vm: guests[vm]["address"] for vm in ("demo-01", "demo-02")}
    assert all(g["state"] == "running" and g["address"].startswith(NET + ".") for g in guests.values()), guests
    assert len(guest_netns()) == len(guests)
    ssh = ["ssh", "-q", "-i", sim.env["GPUSIM_GUEST_KEY_FILE"], "-o", "BatchMode=yes", "-o",
           f"UserKnownHostsFile={sim.env['GPUSIM_GUEST_KNOWN_HOSTS']}", "-o", "StrictHostKeyChecking=yes"]
    hosts = subprocess.run([*ssh, f"root@{addresses['demo-01']}", "hostname; cat /etc/hosts"], capture_output=True,
                           text=True, check=True, timeout=120).stdout
    assert hosts.startswith("demo-01\n") and f"{addresses['demo-02']} demo-02" in hosts, hosts

    # a VM powered off stops its guest: vSphere has no address for it any more
    off = tmp_path / "off.yaml"
    doc_off = yaml.safe_load(INVENTORY.read_text())
    doc_off["vms"].append({**copy.deepcopy(doc_off["vms"][0]), "name": "demo-02", "power": "off"})
    doc_off["vms"][0]["name"] = "demo-01"
    off.write_text(yaml.safe_dump(doc_off, sort_keys=False))
    applied = sim.vgpuctl("apply", "-f", str(off), "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert sim.guests()["demo-02"]["state"] == "stopped"
    assert reported_addresses(sim) == {"demo-01": addresses["demo-01"], "demo-02": None}
    assert len(guest_netns()) == len(guests) - 1

    folder = sim.state / "guests"
    assert folder.is_dir()
    down = sim.vgpuctl("sim", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "guests stopped: no guest process, network namespace or mount is left" in down.stderr
    assert not folder.exists()
    assert guest_netns() == [] and guest_links() == []
    assert processes_naming(folder) == []
    assert mounts_under(folder) == []
