"""`experiment run` end to end with real guests: gpusim applies the variants, the guests (Debian chroots over
SSH) run playbooks/experiment.yml through ansible-runner, and a stand-in benchmark binary prints a recorded
real all_reduce_perf output (tests/fixtures/experiment/all_reduce_perf.h100-2vms-16gpus.txt, published; see
its README). Collection, parsing, the facts (fake nvidia-smi in the guests, gpusim's ESXi shell for the hosts),
a failure, resumption, a contradiction and the report all run for real. Needs root and gpusim (Go)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from guestlib import Files, Guests, guest_pair

from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.experiment import vsphere_farm
from vgpuctl.experiment.runner import run_experiment
from vgpuctl.experiment.schema import checked_variants, load_experiment
from vgpuctl.experiment.store import BASE, ResultsDir
from vgpuctl.inventory import load_inventory

pytestmark = pytest.mark.guests


@pytest.fixture(scope="module")
def guests() -> Iterator[Guests]:
    """A pair of its own: the experiment deploys into its guests, which the deploy tests expect fresh."""
    yield from guest_pair()

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "experiment" / "all_reduce_perf.h100-2vms-16gpus.txt"
BIN = "opt/vgpuctl/benchmarks/bin"
# The stand-in for nccl-tests' all_reduce_perf: it prints a recorded real output (not made up), logs each call,
# and fails like a broken NCCL setup while /etc/fake-bench/fail exists (that failure line is written for the test).
STAND_IN = """#!/bin/sh
echo "$(hostname) $*" >> /var/log/fake-bench.calls
if [ -f /etc/fake-bench/fail ]; then
    echo "$(hostname): Test NCCL failure common.cu:1005 'unhandled system error' (test stand-in)" >&2
    exit 1
fi
cat /opt/vgpuctl/benchmarks/recorded/all_reduce_perf.txt
"""

FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 4, "model": "A100-40GB", "nvlink": "pairs",
                  "graphics_type": "sharedDirect", "assignment_policy": "performance", "vgpu_mode": "sameSize"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
}


def base_inventory(guests: Guests) -> dict[str, Any]:
    return {
        "apiVersion": "vgpuctl/v1",
        "vcenter": {"datacenter": "DC0"},
        "hosts": [{"cluster": "GPU-Cluster", "nvlink": "enabled", "gpus": [{"select": "all", "mode": "time-sliced"}],
                   "maintenance": {"evacuate": "power-off"}}],
        "vms": [{"name": "train-{01..02}", "template": "ubuntu-22.04-ml", "cluster": "GPU-Cluster", "cpus": 8,
                 "memory_gb": 16, "vgpus": {"profile": "grid_a100-40c", "count": 2}, "guest": {"group": "trainers"}}],
        "guests": {"connection": {"user": "root", "key_file": str(guests.key)},
                   "groups": {"trainers": {"roles": [], "vars": {"experiment_build": False}}}},
    }


EXPERIMENT = {
    "apiVersion": "vgpuctl/v1",
    "kind": "Experiment",
    "name": "nvlink",
    "inventory": "inventory.yaml",
    "vms": ["train-01", "train-02"],
    "repetitions": 2,
    "on_failure": "continue",
    "workload": {"builtin": "nccl-tests", "test": "all_reduce_perf", "scope": "per-vm",
                 "args": ["-b", "8", "-e", "8G", "-f", "2"]},
    "variants": [{"name": "nvlink-on"},
                 {"name": "nvlink-off", "hosts": [{"cluster": "GPU-Cluster", "nvlink": "disabled"}]}],
}


def install(guests: Guests, files: Files) -> None:
    for g in guests.guests:
        (g.root / "tmp" / "driver.run").write_bytes(files.driver.read_bytes())
        guests.ssh(g, "sh /tmp/driver.run --silent && rm -f /var/log/fake-bench.calls")
        (g.root / BIN).mkdir(parents=True, exist_ok=True)
        (g.root / BIN / "all_reduce_perf").write_text(STAND_IN)
        (g.root / BIN / "all_reduce_perf").chmod(0o755)
        recorded = g.root / "opt/vgpuctl/benchmarks/recorded/all_reduce_perf.txt"
        recorded.parent.mkdir(parents=True, exist_ok=True)
        recorded.write_text(RECORDED.read_text())


def calls(guests: Guests) -> list[int]:
    out = []
    for g in guests.guests:
        log = g.root / "var/log/fake-bench.calls"
        out.append(len(log.read_text().splitlines()) if log.exists() else 0)
    return out


def test_experiment_runs_in_the_guests_resumes_and_reports(
    gpusim_factory: Any, guests: Guests, files: Files, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = gpusim_factory(FARM)
    for name, value in (("VGPUCTL_ESXI_HOSTS", sim.env["GPUSIM_SSH_HOSTS"]),
                        ("VGPUCTL_ESXI_KNOWN_HOSTS", sim.env["GPUSIM_SSH_KNOWN_HOSTS"]),
                        ("VGPUCTL_ESXI_PASSWORD", sim.password), ("VGPUCTL_PASSWORD", sim.password),
                        ("VGPUCTL_STATE_DIR", str(tmp_path / "state"))):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GPUSIM_SSH_HOSTS", raising=False)
    install(guests, files)
    g1, g2 = guests.guests[:2]
    names = {"train-01": g1, "train-02": g2}
    (tmp_path / "inventory.yaml").write_text(yaml.safe_dump(base_inventory(guests), sort_keys=False))
    (tmp_path / "experiment.yaml").write_text(yaml.safe_dump(EXPERIMENT, sort_keys=False))
    exp = load_experiment(tmp_path / "experiment.yaml")
    base = load_inventory(tmp_path / "inventory.yaml")
    results = ResultsDir(tmp_path / "results")
    farm = vsphere_farm(GlobalOptions(url=sim.url, username=sim.username, insecure=True), yes=True,
                       ip_timeout_s=120, ip_poll_s=0.2, state=tmp_path / "state")

    def hypervisor(kind: str, data: dict[str, Any]) -> None:
        """What VMware Tools and the vGPU manager show the guests once a variant is applied."""
        if kind != "applied":
            return
        nvlink = data["variant"] == "nvlink-on"
        for vm, g in names.items():
            sim.set_guest(vm, ip=g.address, state="running")
            guests.set_vgpus(g, count=2, profile="A100-40C", nvlink=nvlink)
        if not nvlink:  # the contradiction: train-01's guest still sees its GPUs over NVLink in the 'off' variant
            guests.set_vgpus(g1, count=2, profile="A100-40C", nvlink=True)
        fail = g2.root / "etc/fake-bench/fail"
        if nvlink and not (tmp_path / "second-run").exists():
            fail.parent.mkdir(parents=True, exist_ok=True)
            fail.write_text("")
        else:
            fail.unlink(missing_ok=True)

    first = run_experiment(exp, checked_variants(exp), base, results, farm, events=hypervisor)
    assert first.variants == {"nvlink-on": {"ran": 2, "skipped": 0, "failed": 2},
                              "nvlink-off": {"ran": 2, "skipped": 0, "failed": 0}}
    assert calls(guests) == [4, 4]
    failed = results.load("nvlink-on", 1)
    assert failed.status == "failed" and failed.errors[0].startswith("train-02: exit status 1: ")
    assert "Test NCCL failure" in results.output("nvlink-on", 1, "train-02")
    ok = results.load("nvlink-off", 2)
    assert ok.status == "ok" and set(ok.parsed) == {"train-01", "train-02"}
    assert ok.parsed["train-02"]["rows"][-1]["out_of_place"]["busbw_gbs"] == 338.82
    assert results.output("nvlink-off", 2, "train-01") == RECORDED.read_text().rstrip("\n")
    facts = results.facts("nvlink-off", 1)
    assert facts["guests"]["train-02"]["gpus"].splitlines() == ["550.90.07, NVIDIA A100-40C"] * 2
    assert "PIX" in facts["guests"]["train-02"]["topo"] and "NV12" in facts["guests"]["train-01"]["topo"]
    assert set(facts["vm_hosts"]) == {"train-01", "train-02"} and facts["hosts"]
    assert results.state()["applied"] == BASE

    # the rerun repeats only the failed repetitions
    (tmp_path / "second-run").write_text("")
    second = run_experiment(exp, checked_variants(exp), base, results, farm, events=hypervisor)
    assert second.variants["nvlink-on"] == {"ran": 2, "skipped": 0, "failed": 0}
    assert second.variants["nvlink-off"] == {"ran": 0, "skipped": 2, "failed": 0}
    assert calls(guests) == [6, 6]

    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-m", "vgpuctl", "-o", "json", "experiment", "report", str(results.root)],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert [(f["variant"], f["kind"]) for f in doc["flags"]] == [("nvlink-off", "nvlink-up-when-off")] * 2
    assert "train-01: GPU0-GPU1 NV12" in doc["flags"][0]["message"]
    table = doc["tables"][0]
    largest = table["data"][-1]
    assert largest["size_bytes"] == 8589934592
    assert largest["variants"]["nvlink-on"]["busbw_gbs"]["n"] == 4  # 2 repetitions x 2 VMs
    assert largest["variants"]["nvlink-off"]["busbw_gbs"] is None  # both runs contradict the variant
    assert (results.root / "plots" / "nccl-tests.all_reduce_perf.per-vm.png").stat().st_size > 10_000
    assert "## Flagged runs" in (results.root / "report.md").read_text()
