"""vgpuctl against govmomi's own simulator, unmodified (tests/vcsim/cmd/vcsim, built from the pinned module): 4
hosts without GPUs, no HostKernelModuleSystem, no HostImageConfigManager, hand-made VMs. Every read command
degrades instead of dying: status, export and capacity exit 0 with the unreadable fields unknown and one warning
per cause naming the hosts; export followed by plan plans no change; plan refuses only what it cannot decide."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpusim import PlainVcsim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

HOSTS = ["DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2", "DC0_H0"]


@pytest.fixture(scope="module")
def vcsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlainVcsim]:
    sim = PlainVcsim.start(tmp_path_factory.mktemp("vcsim"))
    yield sim
    sim.stop()


@pytest.fixture
def runner(vcsim: PlainVcsim, no_vgpuctl_env: None) -> CliRunner:
    return CliRunner(env={**vcsim.vgpuctl_env(), "VGPUCTL_ESXI_HOSTS": "", "VGPUCTL_ESXI_PASSWORD": "",
                          "VGPUCTL_ESXI_KEY_FILE": "", "SSH_AUTH_SOCK": ""})


def test_status_reads_every_host_and_warns_once_per_cause(runner: CliRunner) -> None:
    result = runner.invoke(app, ["-o", "json", "status"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert sorted(hosts) == HOSTS
    assert all(h["nvlink"] == "unknown" and h["scheduler"] == "unknown" for h in hosts.values())
    unread = [w for w in doc["warnings"] if "nvidia module options are unknown" in w]
    assert unread == [f"the nvidia module options are unknown on 4 hosts {', '.join(HOSTS)}: ManagedObjectNotFound: "
                      "managed object not found: HostKernelModuleSystem:kernelModuleSystem"]
    text = runner.invoke(app, ["status"])
    assert text.exit_code == 0 and text.stdout.count("nvidia module options are unknown") == 1


def test_export_then_plan_plans_no_change(runner: CliRunner, tmp_path: Path) -> None:
    farm = tmp_path / "farm.yaml"
    result = runner.invoke(app, ["export", "--all-vms", "--out", str(farm)])
    assert result.exit_code == 0, result.output
    text = farm.read_text()
    assert "DC0_H0_VM{0..1}" in text and "DC0_C0_RP0_VM{0..1}" in text
    plan = runner.invoke(app, ["plan", "-f", str(farm), "--detailed-exitcode"])
    assert plan.exit_code == 0, plan.output
    assert "No changes" in plan.stdout


def test_capacity_exits_0_and_says_why_nothing_fits(runner: CliRunner) -> None:
    result = runner.invoke(app, ["capacity"])
    assert result.exit_code == 0, result.output
    assert "no host with GPUs" in result.stdout
    doc = json.loads(runner.invoke(app, ["-o", "json", "capacity"]).stdout)
    assert doc["kind"] == "capacity" and doc["hosts"] == []


def test_plan_refuses_only_what_it_cannot_read(runner: CliRunner, tmp_path: Path) -> None:
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("""\
apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
hosts:
  - name: DC0_H0
    nvlink: enabled
vms:
  - name: DC0_H0_VM0
    host: DC0_H0
    cpus: 2
    power: restart
""")
    result = runner.invoke(app, ["-o", "json", "plan", "-f", str(inventory)])
    assert result.exit_code == 1
    details = [d["message"] for d in json.loads(result.stdout)["error"]["details"]]
    assert details == ["host DC0_H0: the nvidia module options are unknown (host-21: "
                       "vmodl.fault.ManagedObjectNotFound: managed object not found: "
                       "HostKernelModuleSystem:kernelModuleSystem): nvlink and scheduler cannot be planned"]
    inventory.write_text(inventory.read_text().replace("    nvlink: enabled\n", ""))
    ok = runner.invoke(app, ["plan", "-f", str(inventory)])
    assert ok.exit_code == 0, ok.output
    assert "~ vm DC0_H0_VM0" in ok.stdout


def test_preflight_against_an_estate_without_gpus_fails_no_gpu_host(runner: CliRunner) -> None:
    """No host has an NVIDIA GPU or a vGPU Manager: preflight without an inventory fails that check (it checked
    no host before and passed), and names the hosts it saw."""
    result = runner.invoke(app, ["-o", "json", "preflight"])
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    assert error["type"] == "PreflightFailed"
    assert "host.gpu: no GPU host in datacenter DC0: 4 host(s), none with an NVIDIA GPU" in error["message"], error
    text = runner.invoke(app, ["preflight"])
    assert text.exit_code == 1 and "FAIL  host.gpu" in text.output

