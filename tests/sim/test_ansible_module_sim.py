"""vgpuctl.guest.vgpuctl_apply through ansible-playbook against gpusim: check mode shows the plan as the diff and
changes nothing, apply changes the farm and returns its document, a second run is unchanged, failures are failed
tasks with vgpuctl's error, and the password shows nowhere (-vvv, the process list).

The collection is the repository's playbooks/ folder (ANSIBLE_COLLECTIONS_PATH to a tree that links it); the
module runs on localhost with this interpreter, so it finds the vgpuctl command of this virtual environment."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyVim.connect import Disconnect
from pyVmomi import vim

pytestmark = pytest.mark.sim

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MODULE = "vgpuctl.guest.vgpuctl_apply"
PASSWORD = "Ans1ble-vc-7e0f"  # gpusim's, and nothing else's

FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB",
                  "graphics_type": "sharedDirect"}],
    "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [{"name": "idle-01", "cpus": 2, "memory_mb": 4096, "firmware": "efi"}],
}  # fmt: skip

INVENTORY = {
    "apiVersion": "vgpuctl/v1",
    "vcenter": {"datacenter": "DC0"},
    "vms": [
        {"name": "idle-01", "vgpus": {"profile": "grid_a100-20c"}},
        {"name": "train-01", "template": "ubuntu-22.04-ml", "cluster": "GPU-Cluster",
         "vgpus": {"profile": "grid_a100-40c"}},
    ],
}  # fmt: skip


@pytest.fixture
def sim(gpusim_factory: Any) -> Any:
    return gpusim_factory(FARM, args=["-password", PASSWORD])


class Runner:
    """ansible-playbook in a folder of its own, with the repository's collection and only the VGPUCTL_*
    variables a test gives (as AWX credentials inject them)."""

    def __init__(self, folder: Path, vgpuctl_env: dict[str, str]):
        self.folder = folder
        (folder / "home").mkdir(parents=True)
        collections = folder / "collections" / "ansible_collections" / "vgpuctl"
        collections.mkdir(parents=True)
        (collections / "guest").symlink_to(ROOT / "playbooks")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_", "ANSIBLE_"))}
        env.update(vgpuctl_env)
        env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", HOME=str(folder / "home"),
                   VGPUCTL_STATE_DIR=str(folder / "state"), ANSIBLE_COLLECTIONS_PATH=str(folder / "collections"),
                   ANSIBLE_LOCAL_TEMP=str(folder / "tmp"), ANSIBLE_REMOTE_TMP=str(folder / "remote-tmp"),
                   ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
        self.env = env

    def write_play(self, tasks: list[dict[str, Any]], name: str = "play.yml") -> Path:
        play = [{"name": "vgpuctl", "hosts": "localhost", "connection": "local", "gather_facts": False,
                 "tasks": tasks}]
        path = self.folder / name
        path.write_text(yaml.safe_dump(play, sort_keys=False))
        return path

    def run(self, play: Path, *args: str, callback: str = "ansible.builtin.json") -> subprocess.CompletedProcess[str]:
        interpreter = json.dumps({"ansible_python_interpreter": sys.executable})
        return subprocess.run([BIN / "ansible-playbook", "-i", "localhost,", "-e", interpreter, *args, str(play)],
                              env={**self.env, "ANSIBLE_STDOUT_CALLBACK": callback}, cwd=self.folder,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)

    def results(self, play: Path, *args: str) -> tuple[int, list[dict[str, Any]]]:
        """The exit status and each task's result on localhost (the json callback's document)."""
        proc = self.run(play, *args)
        try:
            doc = json.loads(proc.stdout)
        except ValueError:
            pytest.fail(f"ansible-playbook printed no JSON (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        tasks = [{"task": t["task"]["name"], **t["hosts"]["localhost"]} for p in doc["plays"] for t in p["tasks"]]
        return proc.returncode, tasks


def env_connection(sim: Any) -> dict[str, str]:
    """vCenter from the environment, as vgpuctl reads it (TLS pinned by gpusim's thumbprint)."""
    return {"VGPUCTL_URL": sim.url, "VGPUCTL_USERNAME": sim.username, "VGPUCTL_PASSWORD": sim.password,
            "VGPUCTL_THUMBPRINT": sim.printed["VGPUCTL_THUMBPRINT"]}


def vm_state(sim: Any) -> dict[str, int]:
    """Every VM's name and vGPU count, read with pyVmomi."""
    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
        vmiop = vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo
        return {vm.name: sum(isinstance(getattr(d, "backing", None), vmiop) for d in vm.config.hardware.device)
                for vm in view.view if not vm.config.template}
    finally:
        Disconnect(si)


def plan_text(runner: Runner, inventory: Path, *scope: str) -> str:
    """What `vgpuctl plan` prints for the inventory (piped: plain lines)."""
    proc = subprocess.run([BIN / "vgpuctl", "plan", "-f", str(inventory), *scope], env=runner.env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_check_mode_shows_the_plan_as_the_diff_and_changes_nothing(sim: Any, tmp_path: Path) -> None:
    runner = Runner(tmp_path, env_connection(sim))
    before = vm_state(sim)
    play = runner.write_play([
        {"name": "whole", MODULE: {"content": INVENTORY}},
        {"name": "scoped", MODULE: {"content": INVENTORY, "vms": ["train-01"]}},
        {"name": "as text", MODULE: {"content": yaml.safe_dump(INVENTORY)}},
    ])
    rc, (whole, scoped, as_text) = runner.results(play, "--check", "--diff")
    assert rc == 0, whole
    assert whole["changed"] is True and whole["plan"]["kind"] == "plan"
    assert sorted(c["vm"] for c in whole["plan"]["vm_changes"]) == ["idle-01", "train-01"]
    (tmp_path / "inventory.yaml").write_text(yaml.safe_dump(INVENTORY))
    assert whole["diff"]["prepared"] == plan_text(runner, tmp_path / "inventory.yaml")
    assert "+ vm train-01" in whole["diff"]["prepared"] and "report" not in whole
    assert [c["vm"] for c in scoped["plan"]["vm_changes"]] == ["train-01"]
    assert scoped["plan"]["scope"]["vms"] == ["train-01"] and "idle-01" in scoped["diff"]["prepared"]  # out of scope
    assert as_text["changed"] is True and as_text["plan"] == whole["plan"]
    assert vm_state(sim) == before == {"idle-01": 0}
    assert sim.assignments() == []


def test_apply_changes_the_farm_and_a_second_run_is_unchanged(sim: Any, tmp_path: Path) -> None:
    """The playbook of docs/awx.md, its inventory beside it, vCenter from the environment."""
    runner = Runner(tmp_path, env_connection(sim))
    text = (ROOT / "docs" / "awx.md").read_text()
    play = tmp_path / "vgpu.yml"
    play.write_text(re.findall(r"^```yaml\n(.*?)^```", text, re.M | re.S)[0])
    (tmp_path / "inventory.yaml").write_text(yaml.safe_dump(INVENTORY))

    rc, (applied, shown) = runner.results(play)
    assert rc == 0, applied
    assert applied["changed"] is True
    report = applied["report"]
    assert report["kind"] == "apply" and sorted(report["changed"]) == ["idle-01", "train-01"]
    assert {v["vm"]: v["status"] for v in report["vms"]} == {"idle-01": "changed", "train-01": "changed"}
    assert "error" not in report and "diff" not in applied
    assert sorted(shown["vgpu.report.changed"]) == ["idle-01", "train-01"]
    assert vm_state(sim) == {"idle-01": 1, "train-01": 1}

    rc, (again, _) = runner.results(play)
    assert rc == 0 and again["changed"] is False, again
    assert again["report"]["changed"] == [] and again["report"]["plan"]["vm_changes"] == []

    rc, (checked, _) = runner.results(play, "--check", "--diff")
    assert rc == 0 and checked["changed"] is False and checked["plan"]["vm_changes"] == []
    assert checked["diff"]["prepared"] == plan_text(runner, tmp_path / "inventory.yaml")
    assert vm_state(sim) == {"idle-01": 1, "train-01": 1}


def test_apply_with_diff_applies_the_plan_it_shows(sim: Any, tmp_path: Path) -> None:
    runner = Runner(tmp_path, env_connection(sim))
    (tmp_path / "inventory.yaml").write_text(yaml.safe_dump(INVENTORY))
    shown = plan_text(runner, tmp_path / "inventory.yaml", "--cluster", "GPU-*")
    play = runner.write_play([{"name": "apply", MODULE: {"src": str(tmp_path / "inventory.yaml"),
                                                         "clusters": ["GPU-*"], "parallel": 1}}])
    rc, (applied,) = runner.results(play, "--diff")
    assert rc == 0, applied
    assert applied["changed"] is True and applied["diff"]["prepared"] == shown
    assert sorted(applied["report"]["changed"]) == ["idle-01", "train-01"]
    assert applied["report"]["plan"]["scope"]["clusters"] == ["GPU-*"]  # the saved plan kept the scope
    rc, (again,) = runner.results(play, "--diff")
    assert rc == 0 and again["changed"] is False and again["report"]["changed"] == []


def test_a_failed_vm_is_a_failed_task_with_the_error_and_the_report(sim: Any, tmp_path: Path) -> None:
    runner = Runner(tmp_path, env_connection(sim))
    sim.arm_fault("idle-01", "ReconfigVM_Task", "SystemError", message="injected by the test")
    only_idle = {**INVENTORY, "vms": INVENTORY["vms"][:1]}
    play = runner.write_play([{"name": "apply", MODULE: {"content": only_idle}}])
    rc, (failed,) = runner.results(play)
    assert rc != 0
    assert failed["failed"] is True and failed["changed"] is False
    assert failed["msg"] == "apply failed for 1 of 1 VM(s): idle-01"
    assert failed["error"] == failed["report"]["error"] and failed["error"]["type"] == "VgpuctlError"
    assert failed["report"]["failed"] == ["idle-01"]
    (vm,) = failed["report"]["vms"]
    assert vm["fault_type"] == "vmodl.fault.SystemError" and "injected by the test" in vm["message"]
    assert vm_state(sim) == {"idle-01": 0}

    rc, (retried,) = runner.results(play)  # the fault was armed once: the same task now succeeds
    assert rc == 0 and retried["changed"] is True and retried["report"]["changed"] == ["idle-01"]


def test_an_impossible_or_wrong_inventory_fails_before_anything_changes(sim: Any, tmp_path: Path) -> None:
    runner = Runner(tmp_path, env_connection(sim))
    big = {"name": "big-{01..05}", "template": "ubuntu-22.04-ml", "cluster": "GPU-Cluster",
           "vgpus": {"profile": "grid_a100-40c"}}  # five whole GPUs on a farm of four
    impossible = yaml.safe_dump({**INVENTORY, "vms": [big]})
    wrong = {**INVENTORY, "vms": [{"name": "idle-01", "vgpus": {"profile": "grid_a100-20c", "count": "two"}}]}
    play = runner.write_play([
        {"name": "plan the impossible", MODULE: {"content": impossible}, "check_mode": True, "ignore_errors": True},
        {"name": "apply the impossible", MODULE: {"content": impossible}, "ignore_errors": True},
        {"name": "a mistake", MODULE: {"content": wrong}, "ignore_errors": True},
    ])
    rc, (planned, applied, mistake) = runner.results(play)
    assert rc == 0  # every failure ignored
    for failed in (planned, applied, mistake):
        assert failed["failed"] is True and failed["changed"] is False, failed
        assert "report" not in failed and "plan" not in failed
    for failed in (planned, applied):
        assert re.fullmatch(r"vm big-0\d: cannot power on: no host of cluster GPU-Cluster has GPU capacity \(.*\)",
                            failed["msg"]), failed["msg"]
        assert failed["error"]["type"] == "PlanRefused"  # the plan was printed with its problems, then refused
        assert [d["message"] for d in failed["error"]["details"]] == [failed["msg"]]
    assert mistake["error"]["type"] == "InventoryErrors"
    (detail,) = mistake["error"]["details"]
    assert detail["path"] == "vms[0].vgpus.count" and detail["line"] > 1
    assert mistake["msg"].endswith("vms[0].vgpus.count: must be an integer (got 'two')")
    assert vm_state(sim) == {"idle-01": 0}


def shim(folder: Path) -> tuple[Path, Path]:
    """A vgpuctl that records its command line and whether a password reached it, then runs the real one."""
    log = folder / "argv.log"
    script = folder / "vgpuctl-shim"
    script.write_text(f'#!/bin/sh\necho "$* | password: ${{VGPUCTL_PASSWORD:+given}}" >> {log}\n'
                      f'exec {BIN / "vgpuctl"} "$@"\n')
    script.chmod(0o755)
    return script, log


def subcommand(line: str) -> str:
    return next(word for word in line.split() if word in ("plan", "show", "apply"))


def test_the_password_never_shows(sim: Any, tmp_path: Path) -> None:
    """vCenter from the task's options; -vvv shows module arguments and commands, never the password, and
    vgpuctl's command line never holds it. A password in the URL is refused and masked too."""
    runner = Runner(tmp_path / "run", {})
    script, log = shim(runner.folder)
    (runner.folder / "inventory.yaml").write_text(yaml.safe_dump(INVENTORY))
    connection = {"src": str(runner.folder / "inventory.yaml"), "executable": str(script), "url": sim.url,
                  "username": sim.username, "password": "{{ vcenter_password }}",
                  "thumbprint": sim.printed["VGPUCTL_THUMBPRINT"]}
    url = sim.url.replace("https://", f"https://{sim.username}:{PASSWORD}@")
    play = runner.write_play([
        {"name": "plan", MODULE: connection, "check_mode": True},
        {"name": "apply", MODULE: connection, "register": "applied"},
        {"name": "changed VMs", "ansible.builtin.debug": {"var": "applied.report.changed"}},
        {"name": "url with a password", MODULE: {**connection, "url": "{{ url_with_password }}", "password": None},
         "ignore_errors": True},
    ])
    secrets = tmp_path / "secrets.yml"  # outside the run's folder, where nothing may hold the password
    secrets.write_text(yaml.safe_dump({"vcenter_password": PASSWORD, "url_with_password": url}))
    proc = runner.run(play, "-vvv", "--diff", "-e", f"@{secrets}", callback="ansible.builtin.default")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "+ vm train-01" in output and '"train-01"' in output  # the plan's diff, then the report
    assert "url: do not put a password in the URL; use the password option" in output
    assert re.search(r"localhost +: ok=4 +changed=2 +unreachable=0 +failed=0 .* ignored=1", output), output[-3000:]
    assert PASSWORD not in output
    assert vm_state(sim) == {"idle-01": 1, "train-01": 1}
    lines = log.read_text().splitlines()
    assert PASSWORD not in log.read_text()
    # check mode: plan and its text; apply: plan, its text, apply of the saved plan; the URL: refused at once
    assert [(subcommand(line), line.endswith("password: given")) for line in lines] == [
        ("plan", True), ("show", False), ("plan", True), ("show", False), ("apply", True)]
    leftovers = [p for p in runner.folder.rglob("*") if p.is_file() and PASSWORD in p.read_text("latin-1")]
    assert leftovers == []
