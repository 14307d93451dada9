"""The vgpuctl command against gpusim: plan/apply/status/profiles/vm vgpu, and the bad-input exits.

Commands run in-process through typer's CliRunner with the environment a user would export; results of
apply are checked with pyVmomi directly, not through vgpuctl's own reader.
"""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from planout import refused
from typer.testing import CliRunner

from vgpuctl.cli import sim as sim_cli
from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

# 3 hosts x 4 A100-40GB, an EFI template, a running VM with 2 vGPUs and a powered-off VM without any.
FARM = {
    "datacenter": "DC0",
    "clusters": [
        {
            "name": "GPU-Cluster",
            "hosts": 3,
            "gpus_per_host": 4,
            "model": "A100-40GB",
            "nvlink": "pairs",
            "graphics_type": "sharedDirect",
            "assignment_policy": "performance",
            "vgpu_mode": "sameSize",
        }
    ],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [
        {
            "name": "busy-01",
            "cpus": 4,
            "memory_mb": 8192,
            "firmware": "efi",
            "vgpus": ["grid_a100-20c", "grid_a100-20c"],
            "memory_locked": True,
            "power_on": True,
        },
        {"name": "idle-01", "cpus": 4, "memory_mb": 8192, "firmware": "efi"},
    ],
}


SLOW_FARM = {
    "datacenter": "DC0",
    "clusters": [
        {
            "name": "GPU-Cluster",
            "hosts": 1,
            "gpus_per_host": 4,
            "model": "A100-40GB",
            "nvlink": "none",
            "graphics_type": "sharedDirect",
            "vgpu_mode": "sameSize",
        }
    ],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [{"name": f"slow-0{i}", "cpus": 2, "memory_mb": 4096, "firmware": "efi"} for i in range(1, 5)],
}


@pytest.fixture(scope="module")
def sim(gpusim_session_factory: Any) -> Any:
    return gpusim_session_factory(FARM)


@pytest.fixture
def env(sim: Any, no_vgpuctl_env: None) -> dict[str, str]:
    return sim.vgpuctl_env(esxi=False)


def vgpuctl(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def inventory(tmp_path: Path, vms: str, name: str = "inv.yaml") -> Path:
    path = tmp_path / name
    path.write_text("apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nvms:\n" + textwrap.dedent(vms))
    return path


def direct_vgpus(sim: Any, vm_name: str) -> tuple[list[str], str, bool]:
    """(vGPU profiles, power state, memory locked) of a VM, read with pyVmomi directly."""
    from pyVim.connect import Disconnect, SmartConnect
    from pyVmomi import vim

    parts = urlsplit(sim.url)
    si = SmartConnect(
        host=parts.hostname,
        port=parts.port,
        user=sim.username,
        pwd=sim.password,
        sslContext=ssl._create_unverified_context(),
    )
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
        vm = next(v for v in view.view if v.name == vm_name)
        profiles = [
            d.backing.vgpu
            for d in vm.config.hardware.device
            if isinstance(d, vim.vm.device.VirtualPCIPassthrough)
            and isinstance(d.backing, vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo)
        ]
        return profiles, str(vm.runtime.powerState), bool(vm.config.memoryReservationLockedToMax)
    finally:
        Disconnect(si)


def one_line_error(result: Any) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


# ----------------------------------------------------------------------------------- plan and apply


def test_plan_apply_then_plan_is_empty(env: dict[str, str], sim: Any, tmp_path: Path) -> None:
    path = inventory(
        tmp_path,
        """\
        - name: conv-{01..02}
          template: ubuntu-22.04-ml
          cluster: GPU-Cluster
          cpus: 8
          memory_gb: 16
          vgpus: {profile: grid_a100-10c, count: 2}
        """,
    )
    before = vgpuctl(env, "plan", "-f", str(path), "--detailed-exitcode")
    assert before.exit_code == 2, before.output
    assert "+ vm conv-01" in before.stdout and "+ vgpu grid_a100-10c" in before.stdout

    applied = vgpuctl(env, "apply", "-f", str(path), "--yes")
    assert applied.exit_code == 0, applied.output
    assert "2 changed, 0 failed" in applied.stdout
    assert "conv-01: done" in applied.stderr  # progress goes to stderr

    for name in ("conv-01", "conv-02"):
        profiles, power, locked = direct_vgpus(sim, name)
        assert profiles == ["grid_a100-10c"] * 2 and power == "poweredOn" and locked

    after = vgpuctl(env, "plan", "-f", str(path), "--detailed-exitcode")
    assert after.exit_code == 0, after.output
    again = vgpuctl(env, "apply", "-f", str(path))  # nothing to do: no confirmation needed
    assert again.exit_code == 0 and "No changes" in again.stdout and "Apply" not in again.stdout


def test_plan_json_is_one_document_with_round_trips_only_with_v(env: dict[str, str], tmp_path: Path) -> None:
    path = inventory(tmp_path, "- name: idle-01\n  vgpus: {profile: grid_a100-40c, count: 1}\n  power: off\n")
    result = vgpuctl(env, "-o", "json", "plan", "-f", str(path))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kind"] == "plan" and [c["vm"] for c in doc["vm_changes"]] == ["idle-01"]
    assert "round_trips" not in doc
    loud = json.loads(vgpuctl(env, "-v", "-o", "json", "plan", "-f", str(path)).stdout)
    assert 0 < loud["round_trips"] <= 10
    verbose = vgpuctl(env, "-v", "plan", "-f", str(path))
    assert f"round trips: {loud['round_trips']}" in verbose.stderr


def test_apply_json_reports_the_outcome(env: dict[str, str], sim: Any, tmp_path: Path) -> None:
    path = inventory(
        tmp_path,
        "- name: json-01\n  template: ubuntu-22.04-ml\n  cluster: GPU-Cluster\n  power: off\n"
        "  vgpus: {profile: grid_a100-5c, count: 1}\n",
    )
    result = vgpuctl(env, "-o", "json", "apply", "-f", str(path), "--yes")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kind"] == "apply" and doc["changed"] == ["json-01"] and doc["failed"] == []
    assert doc["vms"][0]["status"] == "changed" and "round_trips" not in doc
    assert doc["plan"]["vm_changes"][0]["vm"] == "json-01" and doc["hosts"] == []
    assert direct_vgpus(sim, "json-01")[:2] == (["grid_a100-5c"], "poweredOff")


def test_confirmation_refused_without_terminal(env: dict[str, str], sim: Any, tmp_path: Path) -> None:
    path = inventory(tmp_path, "- name: idle-01\n  vgpus: {profile: grid_a100-8c, count: 1}\n  power: off\n")
    line = one_line_error(vgpuctl(env, "apply", "-f", str(path)))
    assert "--yes" in line
    assert direct_vgpus(sim, "idle-01")[0] == []  # nothing changed


# ----------------------------------------------------------------------------------- status/profiles


def test_status_text_and_json(env: dict[str, str], tmp_path: Path) -> None:
    path = inventory(
        tmp_path,
        "- name: map-01\n  template: ubuntu-22.04-ml\n  cluster: GPU-Cluster\n"
        "  vgpus: {profile: grid_a100-40c, count: 2}\n",
    )
    assert vgpuctl(env, "apply", "-f", str(path), "--yes").exit_code == 0
    doc = json.loads(vgpuctl(env, "-o", "json", "status").stdout)
    assert doc["kind"] == "status"
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert len(hosts) == 3
    gpus = [g for h in hosts.values() for g in h["gpus"]]
    assert len(gpus) == 12 and all("A100" in g["model"] for g in gpus)
    held = [g for g in gpus if any(v["vm"] == "map-01" for v in g["vms"])]
    assert len(held) == 2  # each of its vGPUs on its own GPU
    assert all(g["used_gb"] == 40 and g["free_gb"] == 0 for g in held)
    for host in hosts.values():  # NVLink pairs: two sets of two GPUs per host
        sets = [g["nvlink_group"] for g in host["gpus"]]
        assert None not in sets and sorted(sets.count(s) for s in set(sets)) == [2, 2], host["host"]
    vm = next(v for v in doc["vms"] if v["vm"] == "map-01")
    assert vm["vgpus"] == [{"profile": "grid_a100-40c", "count": 2}] and vm["power_state"] == "poweredOn"
    assert "round_trips" not in doc

    text = vgpuctl(env, "status")
    assert text.exit_code == 0, text.output
    # piped: plain lines, one per host, GPU and VM, nothing cut
    assert "│" not in text.stdout and "map-01 (grid_a100-40c)" in text.stdout
    assert "nvlink set 0" in text.stdout and "nvlink set 1" in text.stdout
    assert sum(line.startswith("  gpu ") for line in text.stdout.splitlines()) == 12


def test_profiles_text_and_json(env: dict[str, str]) -> None:
    doc = json.loads(vgpuctl(env, "-o", "json", "profiles").stdout)
    assert doc["kind"] == "profiles"
    rows = {r["profile"]: r for r in doc["hosts"][0]["profiles"]}
    assert rows["grid_a100-40c"]["fb_gb"] == 40 and rows["grid_a100-40c"]["max_per_gpu"] == 1
    assert rows["grid_a100-10c"]["max_per_gpu"] == 4 and rows["grid_a100-10c"]["series"] == "C"
    host = doc["hosts"][0]["host"]
    one = json.loads(vgpuctl(env, "-o", "json", "profiles", "--host", host).stdout)
    assert [h["host"] for h in one["hosts"]] == [host]
    short = json.loads(vgpuctl(env, "-o", "json", "profiles", "--host", host.split(".")[0]).stdout)
    assert [h["host"] for h in short["hosts"]] == [host]  # the short name status shows at 80 columns will do
    shown = json.loads(vgpuctl(env, "-o", "json", "host", "show", host.split(".")[0], "--no-shell").stdout)
    assert shown["host"] == host
    piped = vgpuctl(env, "profiles").stdout  # CliRunner is no terminal: plain lines
    assert f"host {host}  profile grid_a100-20c  framebuffer 20 GB" in piped and "│" not in piped
    text = vgpuctl(env, "profiles")
    assert "grid_a100-20c" in text.stdout and "time-sliced" in text.stdout
    assert "not found" in one_line_error(vgpuctl(env, "profiles", "--host", "nope.example"))


# ------------------------------------------------------------------------------------------ vm vgpu


def test_vm_vgpu_add_list_remove(env: dict[str, str], sim: Any, tmp_path: Path) -> None:
    path = inventory(tmp_path, "- name: solo-01\n  template: ubuntu-22.04-ml\n  cluster: GPU-Cluster\n  power: off\n")
    assert vgpuctl(env, "apply", "-f", str(path), "--yes").exit_code == 0

    added = vgpuctl(env, "vm", "vgpu", "add", "solo-01", "--profile", "grid_a100-20c", "--count", "3")
    assert added.exit_code == 0, added.output  # powered off: nothing disruptive, no confirmation
    assert direct_vgpus(sim, "solo-01") == (["grid_a100-20c"] * 3, "poweredOff", True)

    listed = json.loads(vgpuctl(env, "-o", "json", "vm", "vgpu", "list", "solo-01").stdout)
    assert listed["kind"] == "vm-vgpus" and listed["vgpus"] == [{"profile": "grid_a100-20c", "count": 3}]
    assert [d["profile"] for d in listed["devices"]] == ["grid_a100-20c"] * 3
    assert "grid_a100-20c" in vgpuctl(env, "vm", "vgpu", "list", "solo-01", "-f", str(path)).stdout

    removal = vgpuctl(env, "vm", "vgpu", "remove", "solo-01", "--count", "2")
    assert "--yes" in one_line_error(removal)  # removing is disruptive: confirmation needed
    assert vgpuctl(env, "vm", "vgpu", "remove", "solo-01", "--count", "2", "--yes").exit_code == 0
    assert direct_vgpus(sim, "solo-01")[0] == ["grid_a100-20c"]
    assert vgpuctl(env, "vm", "vgpu", "remove", "solo-01", "--all", "--yes").exit_code == 0
    assert direct_vgpus(sim, "solo-01")[0] == []

    too_many = vgpuctl(env, "vm", "vgpu", "add", "solo-01", "--profile", "grid_a100-4c", "--count", "9")
    assert "at most 8" in one_line_error(too_many)
    assert "not found" in one_line_error(vgpuctl(env, "vm", "vgpu", "list", "ghost-99"))


def test_vm_vgpu_add_restarts_a_running_vm(gpusim_factory: Any, tmp_path: Path) -> None:
    sim = gpusim_factory(SLOW_FARM)  # a farm of its own: the module's farm is full by now
    env = {**sim.env, "VGPUCTL_INSECURE": "1"}
    path = inventory(
        tmp_path,
        "- name: run-01\n  template: ubuntu-22.04-ml\n  cluster: GPU-Cluster\n"
        "  vgpus: {profile: grid_a100-4c, count: 1}\n",
    )
    created = vgpuctl(env, "apply", "-f", str(path), "--yes")
    assert created.exit_code == 0, created.output
    kept = vgpuctl(env, "vm", "vgpu", "add", "run-01", "--profile", "grid_a100-4c", "--power", "keep", "--yes")
    assert "keep" in one_line_error(kept)
    result = vgpuctl(env, "vm", "vgpu", "add", "run-01", "--profile", "grid_a100-4c", "--yes")
    assert result.exit_code == 0, result.output
    assert direct_vgpus(sim, "run-01")[:2] == (["grid_a100-4c"] * 2, "poweredOn")


def test_inventory_supplies_url_and_tls(env: dict[str, str], sim: Any, tmp_path: Path) -> None:
    """Without --url/VGPUCTL_URL/--insecure the inventory's vcenter section is used; flags and env win."""
    path = tmp_path / "vc.yaml"
    path.write_text(f"apiVersion: vgpuctl/v1\nvcenter: {{url: '{sim.url}', datacenter: DC0, tls: {{verify: false}}}}\n")
    bare = {k: v for k, v in env.items() if k not in ("VGPUCTL_URL", "VGPUCTL_INSECURE")}
    result = vgpuctl(bare, "-o", "json", "status", "-f", str(path))
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["hosts"]) == 3
    assert "warning: TLS certificate verification is disabled" in result.stderr
    overridden = vgpuctl({**bare, "VGPUCTL_URL": "https://127.0.0.1:1/sdk"}, "status", "-f", str(path))
    assert "127.0.0.1:1" in one_line_error(overridden)


# ------------------------------------------------------------------------------------------ bad input


def test_wrong_password_is_one_line(env: dict[str, str]) -> None:
    wrong = "not-the-Password-42"
    result = vgpuctl({**env, "VGPUCTL_PASSWORD": wrong}, "status")
    line = one_line_error(result)
    assert "wrong user name or password" in line
    loud = vgpuctl({**env, "VGPUCTL_PASSWORD": wrong}, "-vv", "status")
    assert loud.exit_code == 1 and "Traceback" in loud.stderr and wrong not in loud.output


def test_unreachable_vcenter_is_one_line(env: dict[str, str]) -> None:
    line = one_line_error(vgpuctl({**env, "VGPUCTL_URL": "https://127.0.0.1:1/sdk"}, "status"))
    assert line == "error: cannot reach vCenter at https://127.0.0.1:1/sdk: connection refused"


def test_tls_is_verified_by_default(env: dict[str, str]) -> None:
    secure = {k: v for k, v in env.items() if k != "VGPUCTL_INSECURE"}
    assert "not trusted" in one_line_error(vgpuctl(secure, "status"))
    pinned = one_line_error(vgpuctl(secure, "--thumbprint", "00" * 32, "status"))
    assert "thumbprint mismatch" in pinned


def test_missing_template(env: dict[str, str], tmp_path: Path) -> None:
    path = inventory(tmp_path, "- name: new-01\n  template: no-such-template\n  cluster: GPU-Cluster\n")
    assert any("no-such-template" in line for line in refused(vgpuctl(env, "plan", "-f", str(path))))


def test_nine_vgpus(env: dict[str, str], tmp_path: Path) -> None:
    path = inventory(tmp_path, "- name: idle-01\n  vgpus: {profile: grid_a100-4c, count: 9}\n")
    line = one_line_error(vgpuctl(env, "plan", "-f", str(path)))
    assert line.startswith(f"{path}:5:") and "9" in line


def test_profile_not_offered(env: dict[str, str], tmp_path: Path) -> None:
    path = inventory(tmp_path, "- name: idle-01\n  vgpus: {profile: grid_a100-3-20c, count: 1}\n  power: off\n")
    (line,) = refused(vgpuctl(env, "plan", "-f", str(path)))
    assert "grid_a100-3-20c" in line


def test_running_vm_under_power_keep(env: dict[str, str], sim: Any, tmp_path: Path) -> None:
    path = inventory(tmp_path, "- name: busy-01\n  vgpus: {profile: grid_a100-20c, count: 1}\n  power: keep\n")
    planned = vgpuctl(env, "plan", "-f", str(path))
    (line,) = refused(planned)
    assert line.startswith("vm busy-01: ") and "keep" in line
    assert planned.stdout.startswith("~ vm busy-01") and "    x cannot be carried out: " in planned.stdout
    applied = vgpuctl(env, "apply", "-f", str(path), "--yes")
    assert refused(applied) == [line]  # apply shows the same plan and refuses it before any change
    assert one_line_error(applied) == "error: the plan has 1 problem (shown with it): nothing was changed"
    assert direct_vgpus(sim, "busy-01")[:2] == (["grid_a100-20c"] * 2, "poweredOn")  # untouched


# ---------------------------------------------------------------------------------------------- sim


def test_sim_up_env_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`vgpuctl sim up` runs gpusim detached; its env works for other commands; `sim down` stops it."""
    monkeypatch.setenv("VGPUCTL_STATE_DIR", str(tmp_path / "state"))
    for name in list(os.environ):
        if name.startswith(("VGPUCTL_", "GOVC_")) and name != "VGPUCTL_STATE_DIR":
            monkeypatch.delenv(name)
    up = vgpuctl({}, "sim", "up", "--hosts", "1", "--gpus", "2")
    assert up.exit_code == 0, up.output
    pid = sim_cli.running_pid()
    assert pid is not None
    try:
        exports = sim_cli.parse_env_file(up.stdout)
        assert exports["VGPUCTL_URL"].startswith("https://127.0.0.1:")
        assert sim_cli.parse_env_file(vgpuctl({}, "sim", "env").stdout) == exports
        # the certificate is pinned by its thumbprint, never trusted blindly: no warning, and a wrong pin fails
        assert "VGPUCTL_INSECURE" not in exports and len(exports["VGPUCTL_THUMBPRINT"].split(":")) == 32
        pinned = vgpuctl(exports, "-o", "json", "status")
        assert [len(h["gpus"]) for h in json.loads(pinned.stdout)["hosts"]] == [2]
        assert "verification is disabled" not in pinned.stderr
        wrong = {**exports, "VGPUCTL_THUMBPRINT": "00" * 32}
        assert "thumbprint mismatch" in one_line_error(vgpuctl(wrong, "status"))
        assert "already running" in one_line_error(vgpuctl({}, "sim", "up"))
    finally:
        down = vgpuctl({}, "sim", "down")
    assert down.exit_code == 0 and f"pid {pid}" in down.stderr
    assert sim_cli.running_pid() is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# ------------------------------------------------------------------------------- failures mid-apply

SLOW_VMS = "- name: slow-{01..04}\n  vgpus: {profile: grid_a100-4c, count: 1}\n  power: 'off'\n"


def test_failed_vm_is_reported_and_a_second_run_converges(gpusim_factory: Any, tmp_path: Path) -> None:
    farm = gpusim_factory(SLOW_FARM)
    env = {**farm.env, "VGPUCTL_INSECURE": "1"}
    farm.arm_fault("slow-02", "ReconfigVM_Task", "InvalidState", message="armed by the test")
    path = inventory(tmp_path, SLOW_VMS)
    first = vgpuctl(env, "apply", "-f", str(path), "--yes")
    assert first.exit_code == 1
    assert "3 changed, 1 failed" in first.stdout
    assert "failed: slow-02: " in first.stdout and "InvalidState: armed by the test" in first.stdout
    assert first.stderr.strip().splitlines()[-1] == "error: apply failed for 1 of 4 VM(s): slow-02"
    assert direct_vgpus(farm, "slow-02")[0] == [] and direct_vgpus(farm, "slow-01")[0] == ["grid_a100-4c"]
    second = vgpuctl(env, "apply", "-f", str(path), "--yes")
    assert second.exit_code == 0 and "1 changed, 0 failed" in second.stdout
    assert vgpuctl(env, "plan", "-f", str(path), "--detailed-exitcode").exit_code == 0


def test_ctrl_c_stops_new_work_waits_and_exits_130(gpusim_factory: Any, tmp_path: Path) -> None:
    """A real SIGINT to a real `vgpuctl apply`: the VM in flight finishes, the others are not started."""
    farm = gpusim_factory(SLOW_FARM)
    farm.delay("slow-01", "ReconfigVM_Task", 3.0)
    path = inventory(tmp_path, SLOW_VMS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    env.update({**farm.env, "VGPUCTL_INSECURE": "1"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "vgpuctl", "apply", "-f", str(path), "--yes", "--parallel", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # progress lines: wait until slow-01's reconfigure task runs
        seen.append(line)
        # timestamped progress lines: date, time and UTC offset
        if re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d slow-01: reconfigure", line):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    err = "".join(seen) + err
    assert proc.returncode == 130, err
    assert "interrupted: no new step starts" in err
    assert "slow-01: done" in err  # the task in flight was waited for
    assert "Apply interrupted: 1 changed, 0 failed, 0 skipped, 3 not started, 0 unchanged." in out
    assert "  not started: slow-02, slow-03, slow-04" in out and "to continue: run the same apply again" in out
    assert "slow-02: not started" not in err and "skipped" not in err  # one vocabulary, no line per VM
    assert direct_vgpus(farm, "slow-01")[0] == ["grid_a100-4c"]
    assert all(direct_vgpus(farm, f"slow-0{i}")[0] == [] for i in (2, 3, 4))


MIG_PROFILES_FARM = {
    "datacenter": "DC0",
    "clusters": [
        {"name": "Mixed", "hosts": 1, "gpus_per_host": 1, "model": "A100-40GB", "nvlink": "none",
         "graphics_type": "sharedDirect", "assignment_policy": "performance", "vgpu_mode": "mixedSize"},
        {"name": "Mig", "hosts": 1, "gpus_per_host": 1, "model": "A100-40GB", "nvlink": "none",
         "graphics_type": "sharedDirect", "assignment_policy": "performance", "mig": True},
    ],
}


def test_profiles_show_nvidias_maximum_for_the_mode_and_the_hosts_mig_totals(
        gpusim_factory: Any, no_vgpuctl_env: None) -> None:
    """A mixed-size A100-40GB: NVIDIA's mixed-size maxima (A100-4C 8, not 40 / 4); a MIG one: the instance totals
    its `nvidia-smi mig -lgip` reports over SSH (A100-1-5C 7, A100-3-20C 2); without the shell, the catalogue's."""
    sim = gpusim_factory(MIG_PROFILES_FARM)
    for shell in ("--shell", "--no-shell"):
        result = vgpuctl(sim.vgpuctl_env(), "-o", "json", "profiles", shell)
        assert result.exit_code == 0, result.output
        rows = {h["host"]: {r["profile"]: r["max_per_gpu"] for r in h["profiles"]}
                for h in json.loads(result.stdout)["hosts"]}
        mixed, mig = rows["esx-01.gpu.sim"], rows["esx-02.gpu.sim"]
        assert mixed["grid_a100-4c"] == 8 and mixed["grid_a100-8c"] == 4 and mixed["grid_a100-10c"] == 4
        assert mig["grid_a100-1-5c"] == 7 and mig["grid_a100-3-20c"] == 2 and mig["grid_a100-7-40c"] == 1
