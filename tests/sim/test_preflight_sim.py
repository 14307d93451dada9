"""`vgpuctl preflight` against gpusim: every check's pass and fail, with what gpusim models of a real estate
(the vGPU Manager package per host, a privilege-limited user, lockdown mode, the SSH service's state, RDMA
devices), and the bad input (unreachable vCenter, wrong credentials, unknown SSH key, a missing token file):
one line each, exit 1, one JSON error document with -o json. plan refuses with preflight's lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from gpusim import Gpusim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

SCHEMA = json.loads((Path(__file__).parents[2] / "docs/schemas/preflight.schema.json").read_text())
HOSTS = ["esx-01.gpu.sim", "esx-02.gpu.sim"]


def cluster(name: str = "GPU-Cluster", **extra: Any) -> dict[str, Any]:
    return {"name": name, "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "pairs",
            "graphics_type": "sharedDirect", **extra}


FARM = {
    "clusters": [cluster(rdma_devices=1)],
    "templates": [{"name": "tmpl-efi", "firmware": "efi"}, {"name": "tmpl-bios", "firmware": "bios"}],
    "vms": [{"name": "busy-01", "host": "esx-01.gpu.sim", "memory_mb": 8192, "memory_locked": True,
             "vgpus": ["grid_a100-20c"], "power_on": True}],
    "users": [{"name": "viewer", "password": "secret", "privileges": ["VirtualMachine.Interact.PowerOn"]}],
}


@pytest.fixture(scope="module")
def sim(gpusim_session_factory: Any) -> Gpusim:
    return gpusim_session_factory(FARM)


@pytest.fixture(autouse=True)
def env(sim: Gpusim, monkeypatch: pytest.MonkeyPatch, no_vgpuctl_env: None) -> None:
    for key, value in sim.vgpuctl_env().items():
        monkeypatch.setenv(key, value)


@pytest.fixture(autouse=True)
def restore_access(sim: Gpusim) -> Any:
    yield
    for host in HOSTS:
        sim.access(host, ssh_running=True, ssh_policy="on", lockdown="lockdownDisabled", lockdown_exceptions=[],
                   vgpu_manager="550.90.05")


def inventory(tmp_path: Path, text: str, files: bool = True) -> Path:
    if files:
        (tmp_path / "client_configuration_token.tok").write_text("secret-token-content\n")
        (tmp_path / "NVIDIA-Linux-x86_64-550.90.07-grid.run").write_text("#!/bin/sh\n")
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    return path


BASE = """\
apiVersion: vgpuctl/v1
hosts:
  - cluster: GPU-Cluster
    nvlink: enabled
    scheduler: equal-share
vms:
  - name: busy-01
    vgpus: {profile: grid_a100-20c, count: 1}
    power: keep
    guest: {group: trainers}
  - name: new-01
    template: tmpl-efi
    cluster: GPU-Cluster
    vgpus: {profile: grid_a100-40c, count: 2}
    power: off
    guest: {group: trainers}
guests:
  groups:
    trainers:
      roles: [vgpu_guest_driver, vgpu_licensing, rdma_roce]
      vars:
        vgpu_driver_src: NVIDIA-Linux-x86_64-550.90.07-grid.run
        vgpu_license_token_src: client_configuration_token.tok
"""


def run(path: Path, *options: str) -> Any:
    return CliRunner().invoke(app, [*options, "preflight", "-f", str(path)])


def report(path: Path, *options: str) -> tuple[int, dict[tuple[str, str | None], dict[str, Any]]]:
    """Exit code and the checks by (id, subject), from the text run's JSON twin: a passing preflight prints its
    report with -o json, a failing one the error document, so the checks are taken from the report API."""
    out = run(path, "-o", "json", *options)
    doc = json.loads(out.stdout)
    if "error" in doc:
        return out.exit_code, {("error", None): doc["error"]}
    jsonschema.validate(doc, SCHEMA)
    return out.exit_code, {(c["id"], c.get("subject")): c for c in doc["checks"]}


def lines(out: Any, status: str) -> list[str]:
    return [line for line in out.stdout.splitlines() if line.startswith(status.upper())]


def test_a_sound_estate_passes_every_check(sim: Gpusim, tmp_path: Path) -> None:
    code, checks = report(inventory(tmp_path, BASE))
    assert code == 0, checks
    statuses = {k: c["status"] for k, c in checks.items()}
    assert statuses[("vcenter.version", None)] == "pass"
    for host in HOSTS:
        assert statuses[("host.vgpu-manager", host)] == "pass"
        assert "550.90.05, R550 (vGPU 17)" in checks[("host.vgpu-manager", host)]["evidence"]
        assert statuses[("host.ssh", host)] == statuses[("host.lockdown", host)] == "pass"
        assert statuses[("host.graphics", host)] == statuses[("host.rdma", host)] == "pass"
    assert checks[("guest.driver-branch", "group trainers")]["status"] == "pass"
    assert checks[("guest.license-token", "group trainers")]["status"] == "pass"
    assert "secret-token-content" not in json.dumps(list(checks.values()))
    assert checks[("template", "tmpl-efi")]["status"] == "pass"
    assert {k[0] for k in checks} >= {"privileges.read", "privileges.vm-clone", "privileges.vm-reconfigure",
                                      "privileges.host-settings", "privileges.host-maintenance",
                                      "privileges.work-records", "privileges.leases", "privileges.host-packages"}
    assert all(c["status"] == "pass" for k, c in checks.items() if k[0].startswith("privileges."))
    text = run(inventory(tmp_path, BASE))
    assert text.exit_code == 0 and "0 fail" in text.stdout


def test_a_host_without_vgpu_manager_and_a_guest_driver_newer_than_the_manager(sim: Gpusim, tmp_path: Path) -> None:
    sim.access(HOSTS[0], vgpu_manager="none")
    sim.access(HOSTS[1], vgpu_manager="535.161.05")
    out = run(inventory(tmp_path, BASE))
    assert out.exit_code == 1
    failed = "\n".join(lines(out, "fail"))
    assert f"host.vgpu-manager {HOSTS[0]}: no NVIDIA vGPU Manager VIB installed" in failed
    assert ("guest.driver-branch group trainers: guest driver 550.90.07: the guest driver's R550 (vGPU 17) is newer "
            "than the vGPU Manager's R535 (vGPU 16)") in failed
    assert "fix: install NVIDIA's vGPU Manager" in out.stdout


def test_the_previous_branch_is_compatible_with_a_warning(sim: Gpusim, tmp_path: Path) -> None:
    for host in HOSTS:
        sim.access(host, vgpu_manager="570.124.03")
    code, checks = report(inventory(tmp_path, BASE))
    assert code == 0
    check = checks[("guest.driver-branch", "group trainers")]
    assert check["status"] == "warn" and "the branch before the vGPU Manager's R570 (vGPU 18)" in check["evidence"]


def test_ssh_service_stopped_is_named_with_its_fix(sim: Gpusim, tmp_path: Path) -> None:
    sim.access(HOSTS[1], ssh_running=False, ssh_policy="off")
    out = run(inventory(tmp_path, BASE))
    assert out.exit_code == 1
    line = next(line for line in lines(out, "fail") if line.startswith(f"FAIL  host.ssh {HOSTS[1]}"))
    assert "the SSH service (TSM-SSH) is stopped, policy off" in line
    assert "ssh: {service: manage}" in out.stdout


def test_lockdown_without_an_exception_for_the_ssh_user(sim: Gpusim, tmp_path: Path) -> None:
    sim.access(HOSTS[0], lockdown="lockdownNormal", lockdown_exceptions=["svc-vgpu"])
    out = run(inventory(tmp_path, BASE))
    assert out.exit_code == 1
    failed = lines(out, "fail")
    assert f"FAIL  host.ssh {HOSTS[0]}: login as root refused; the host is in lockdownNormal" in failed
    assert any(line.startswith(f"FAIL  host.lockdown {HOSTS[0]}: lockdownNormal and root is not an exception user "
                               "(exceptions: svc-vgpu)") for line in failed)
    assert "vgpuctl never turns lockdown mode off" in out.stdout
    sim.access(HOSTS[0], lockdown_exceptions=["svc-vgpu", "root"])
    code, checks = report(inventory(tmp_path, BASE))
    assert code == 0 and checks[("host.lockdown", HOSTS[0])]["evidence"] == "lockdownNormal; root is an exception user"


def test_unknown_ssh_host_key(sim: Gpusim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    monkeypatch.setenv("VGPUCTL_ESXI_KNOWN_HOSTS", str(known))
    path = inventory(tmp_path, BASE)
    out = run(path)
    assert out.exit_code == 1
    failed = [line for line in lines(out, "fail") if line.startswith("FAIL  host.ssh")]
    assert [line.split(":")[0] for line in failed] == [f"FAIL  host.ssh {h}" for h in HOSTS]  # one line each
    assert all("is not in known_hosts" in line for line in failed)
    assert "--ssh-trust-on-first-use" in out.stdout
    assert known.read_text() == ""  # preflight never records a key
    as_json = run(path, "-o", "json")
    doc = json.loads(as_json.stdout)
    assert as_json.exit_code == 1 and doc["error"]["type"] == "PreflightFailed"
    assert [d["message"][:8] for d in doc["error"]["details"]] == ["host.ssh", "host.ssh"]


def test_missing_licence_token(sim: Gpusim, tmp_path: Path) -> None:
    path = inventory(tmp_path, BASE.replace("client_configuration_token.tok", "gone.tok"))
    out = run(path)
    assert out.exit_code == 1
    assert f"FAIL  guest.license-token group trainers: {tmp_path / 'gone.tok'}: no such file" in lines(out, "fail")
    (tmp_path / "gone.tok").mkdir()
    doc = json.loads(run(path, "-o", "json").stdout)
    assert [d["message"] for d in doc["error"]["details"]] == [
        f"guest.license-token group trainers: {tmp_path / 'gone.tok'}: a directory, not a regular file (vgpuctl reads "
        "this only from a file); fix: put the file there (readable by this user), or correct vgpu_license_token_src"]


def test_template_and_rdma(sim: Gpusim, tmp_path: Path, gpusim_factory: Any) -> None:
    text = BASE.replace("template: tmpl-efi", "template: tmpl-bios")
    out = run(inventory(tmp_path, text))
    assert "FAIL  template tmpl-bios: template, BIOS, vmx-21: C-series vGPUs need EFI firmware" in lines(out, "fail")
    other = gpusim_factory({**FARM, "clusters": [cluster()], "users": []})
    env = other.vgpuctl_env()
    result = CliRunner(env=env).invoke(app, ["preflight", "-f", str(inventory(tmp_path, BASE))])
    assert result.exit_code == 1
    rdma = [line for line in lines(result, "fail") if line.startswith("FAIL  host.rdma")]
    assert rdma == [f"FAIL  host.rdma {HOSTS[0]}: no RDMA device (config.network.rdmaDevice is empty); busy-01, new-01 "
                    "set up RDMA",
                    f"FAIL  host.rdma {HOSTS[1]}: no RDMA device (config.network.rdmaDevice is empty); new-01 set up "
                    "RDMA"]


def test_a_limited_user_is_told_which_privileges_it_lacks_and_plan_refuses_with_the_same_line(
    sim: Gpusim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VGPUCTL_USERNAME", "viewer")
    monkeypatch.setenv("VGPUCTL_PASSWORD", "secret")
    path = inventory(tmp_path, BASE)
    out = run(path)
    assert out.exit_code == 1
    failed = lines(out, "fail")
    reconfigure = next(line for line in failed if line.startswith("FAIL  privileges.vm-reconfigure"))
    assert reconfigure.startswith("FAIL  privileges.vm-reconfigure: missing VirtualMachine.Config.AddRemoveDevice on "
                                  "folder / (new vm new-01); VirtualMachine.Config.AdvancedConfig on vm busy-01, "
                                  "folder / (new vm new-01)")
    assert any(line.startswith("FAIL  privileges.host-settings: missing Host.Config.Settings on host esx-01.gpu.sim, "
                               "host esx-02.gpu.sim") for line in failed)
    warned = "\n".join(lines(out, "warn"))
    assert "privileges.host-packages: missing Host.Config.Image" in warned
    # the vGPU Manager then comes from the ESXi shell
    assert f"host.vgpu-manager {HOSTS[0]}, {HOSTS[1]}: 550.90.05" in out.stdout
    assert "from esxcli software vib list (ESXi shell)" in out.stdout
    plan = CliRunner().invoke(app, ["-o", "json", "plan", "-f", str(path)])
    assert plan.exit_code == 1
    details = json.loads(plan.stdout)["errors"]  # the plan document, with its problems
    wanted = reconfigure.removeprefix("FAIL  ")
    assert any(d.startswith(wanted) for d in details), details


def test_vcenter_version_against_the_inventory(gpusim_factory: Any, tmp_path: Path) -> None:
    old = gpusim_factory({"api_version": "7.0.3.0", "clusters": [cluster()],
                          "templates": [{"name": "tmpl-efi", "firmware": "efi"}]})
    text = """\
apiVersion: vgpuctl/v1
vms:
  - name: big-01
    template: tmpl-efi
    cluster: GPU-Cluster
    vgpus: {profile: grid_a100-10c, count: 8}
"""
    path = inventory(tmp_path, text, files=False)
    runner = CliRunner(env=old.vgpuctl_env())
    out = runner.invoke(app, ["preflight", "-f", str(path)])
    assert out.exit_code == 1
    line = next(line for line in lines(out, "fail") if line.startswith("FAIL  vcenter.version"))
    assert "8 vGPUs per VM (vm big-01) needs 8.0" in line
    plan = runner.invoke(app, ["plan", "-f", str(path)])
    assert plan.exit_code == 1 and "vcenter.version: " + line.split("vcenter.version: ", 1)[1] in plan.output


def test_unreachable_vcenter_and_wrong_credentials_are_one_line(sim: Gpusim, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VGPUCTL_PASSWORD", "wrong")
    out = CliRunner().invoke(app, ["preflight"])
    assert out.exit_code == 1
    assert [line for line in out.output.splitlines() if line.startswith("error:")] == [
        f"error: login to {sim.url} as 'user' failed: wrong user name or password"]
    doc = json.loads(CliRunner().invoke(app, ["-o", "json", "preflight"]).stdout)
    assert doc["error"]["type"] == "AuthenticationError"
    monkeypatch.setenv("VGPUCTL_URL", "https://127.0.0.1:9/sdk")
    out = CliRunner().invoke(app, ["preflight"])
    assert out.exit_code == 1 and "Traceback" not in out.output
    assert [line for line in out.output.splitlines() if line.startswith("error:")] == [
        "error: cannot reach vCenter at https://127.0.0.1:9/sdk: connection refused"]
    as_json = CliRunner().invoke(app, ["-o", "json", "preflight"])
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)["error"]["type"] == "ConnectionFailure"


def test_without_an_inventory_every_gpu_host_is_checked(sim: Gpusim) -> None:
    out = CliRunner().invoke(app, ["-o", "json", "preflight"])
    doc = json.loads(out.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert out.exit_code == 0 and doc["ok"]
    assert {c.get("subject") for c in doc["checks"] if c["id"] == "host.vgpu-manager"} == set(HOSTS)


def test_plan_names_lockdown_and_a_stopped_ssh_service(sim: Gpusim, tmp_path: Path) -> None:
    sim.access(HOSTS[0], lockdown="lockdownStrict")
    sim.access(HOSTS[1], ssh_running=False, ssh_policy="off")
    out = CliRunner().invoke(app, ["-o", "json", "plan", "-f", str(inventory(tmp_path, BASE))])
    assert out.exit_code == 1
    details = json.loads(out.stdout)["errors"]  # the plan document, with its problems
    locked = next(d for d in details if d.startswith(f"host {HOSTS[0]}: scheduler changes need ESXi SSH"))
    assert "SSH authentication failed for user root; the host is in lockdownStrict" in locked
    assert "vgpuctl never turns lockdown mode off" in locked
    stopped = next(d for d in details if d.startswith(f"host {HOSTS[1]}: scheduler changes need ESXi SSH"))
    assert "its SSH service (TSM-SSH) is stopped: set ssh: {service: manage}" in stopped
