"""Every command of a shell block in README.md and docs/*.md, run as typed against gpusim (or marked in
tests/docs_commands.py with why it is not run here): each document's commands in their order, in a folder
with the files they name (inventory.yaml is inventory.example.yaml, or the document's own example), with the
environment gpusim prints. A prompt is answered yes (`--yes` added where a command would ask)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from gpusim import BINARY, catalogue_args, parse_export_line
from typer.testing import CliRunner

from vgpuctl.cli.main import app
from vgpuctl.cli.sim import parse_env_file, with_esxi_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from docs_commands import REPO, Command, block_commands, not_run_reason

pytestmark = pytest.mark.sim

ASKS = (("apply",), ("k8s", "apply"), ("experiment", "restore"))  # commands that ask before they change things
EVENTS = json.loads((REPO / "docs" / "schemas" / "event.schema.json").read_text())


def runnable(doc: str) -> list[Command]:
    return [c for c in block_commands(REPO / doc) if not_run_reason(c.text) is None]


def yaml_block(doc: str, index: int = 0) -> str:
    """The document's `index`-th YAML example."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", (REPO / doc).read_text(encoding="utf-8"), re.M | re.S)
    return str(blocks[index])


def vgpuctl(env: dict[str, str], text: str) -> Any:
    args = shlex.split(text)[1:]
    if any(tuple(a for a in args if not a.startswith("-"))[: len(ask)] == ask for ask in ASKS) and "--yes" not in args:
        args.append("--yes")  # the user answers the prompt
    return CliRunner().invoke(app, args, env=env)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_vgpuctl_env: None) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VGPUCTL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def farm_env(sim: Any, folder: Path) -> dict[str, str]:
    return {**sim.vgpuctl_env(folder / "state"), "VGPUCTL_ESXI_USER": sim.env["GPUSIM_SSH_USER"]}


def test_readme_use_against_a_vcenter(gpusim_factory: Callable[..., Any], folder: Path) -> None:
    """The README's walk through plan, saved plan, apply, scope, events, explain, status and profiles, on the
    default farm (which inventory.example.yaml applies to)."""
    sim = gpusim_factory()
    env = farm_env(sim, folder)
    (folder / "inventory.yaml").write_text((REPO / "inventory.example.yaml").read_text())
    commands = [c for c in runnable("README.md") if not c.text.startswith(("cd ", "eval ", "vgpuctl sim "))]
    assert len(commands) >= 10
    for command in commands:
        result = vgpuctl(env, command.text)
        assert result.exit_code == 0, f"{command}\n{result.output}"
        assert "Traceback" not in result.output
    lines = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    assert lines[0]["event"] == "run-start" and lines[-1]["event"] == "summary"
    for line in lines:
        jsonschema.validate(line, EVENTS)
    replan = vgpuctl(env, "vgpuctl plan -f inventory.yaml --detailed-exitcode")
    assert replan.exit_code == 0, replan.output  # the walk applied the inventory


def test_readme_simulator_commands(folder: Path) -> None:
    """`go run .` (the built gpusim, same flags) prints every variable `vgpuctl sim up` prints; sim up, eval of
    sim env (vgpuctl then talks to it), sim down."""
    commands = [c.text for c in runnable("README.md") if c.text.startswith(("cd ", "eval ", "vgpuctl sim "))]
    assert commands == ["cd tests/vcsim && go run . -hosts 2 -gpus 4", "vgpuctl sim up --hosts 2 --gpus 4",
                        'eval "$(vgpuctl sim env)"', "vgpuctl sim down"]
    flags = shlex.split(commands[0].split("go run .", 1)[1])
    proc = subprocess.Popen([str(BINARY), *flags, "-listen", "127.0.0.1:0", *catalogue_args()],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        printed = parse_export_line(proc.stdout.readline().strip())
    finally:
        proc.terminate()
        proc.wait()
    assert set(with_esxi_env(printed)) == set(printed)  # nothing sim up adds that gpusim does not print
    assert {"VGPUCTL_ESXI_HOSTS", "VGPUCTL_ESXI_KNOWN_HOSTS", "VGPUCTL_ESXI_PASSWORD"} <= set(printed)

    env = dict(os.environ)
    up = vgpuctl(env, commands[1])
    assert up.exit_code == 0, up.output
    try:
        shown = vgpuctl(env, "vgpuctl sim env")  # what eval "$(...)" reads
        assert shown.exit_code == 0 and shown.stdout.startswith("export ")
        evaluated = {**env, **parse_env_file(shown.stdout)}
        status = vgpuctl(evaluated, "vgpuctl status -o json")
        assert status.exit_code == 0, status.output
        assert len(json.loads(status.stdout)["hosts"]) == 2
    finally:
        down = vgpuctl(env, commands[3])
    assert down.exit_code == 0, down.output


SUPERVISOR_FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "supervisor": {"clusters": ["GPU-Cluster"], "vm_classes": [{"name": "best-effort-small", "cpus": 2,
                                                               "memory_mb": 4096}],
                   "namespaces": [{"name": "ml-team", "cluster": "GPU-Cluster"}]},
}  # fmt: skip


def test_k8s_page(gpusim_factory: Callable[..., Any], folder: Path) -> None:
    """docs/k8s.md's commands with its own example inventory, on a farm with a supervisor."""
    sim = gpusim_factory(SUPERVISOR_FARM)
    env = sim.vgpuctl_env(folder / "state", esxi=False)
    (folder / "inventory.yaml").write_text("apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\n"
                                           + yaml_block("docs/k8s.md"))
    commands = runnable("docs/k8s.md")
    assert len(commands) == 4
    for command in commands:
        result = vgpuctl(env, command.text)
        assert result.exit_code == 0, f"{command}\n{result.output}"
    assert (folder / "manifests" / "virtualmachine-gpu-a100-40c.yaml").is_file()
    assert "gpu-a100-40c" in vgpuctl(env, "vgpuctl k8s status").stdout


def test_experiments_page(gpusim_factory: Callable[..., Any], folder: Path) -> None:
    """docs/experiments.md's example against the shipped inventory: it validates (a MIG variant needs nothing
    more), and restore applies the base."""
    sim = gpusim_factory()
    env = farm_env(sim, folder)
    (folder / "inventory.yaml").write_text((REPO / "inventory.example.yaml").read_text())
    (folder / "nvlink.yaml").write_text(yaml_block("docs/experiments.md"))
    commands = runnable("docs/experiments.md")
    assert [c.text.split()[2] for c in commands] == ["validate", "restore"]
    for command in commands:
        result = vgpuctl(env, command.text)
        assert result.exit_code == 0, f"{command}\n{result.output}"


def test_usage_page(gpusim_factory: Callable[..., Any], folder: Path) -> None:
    """docs/usage.md's commands on a farm with a VM on a busy GPU and one on an idle GPU, its intervals at level 4."""
    vms = [{"name": name, "host": host, "memory_mb": 8192, "memory_locked": True, "firmware": "efi",
            "vgpus": ["grid_a100-20c"], "power_on": True}
           for name, host in (("train-01", "esx-01.gpu.sim"), ("notebook-01", "esx-02.gpu.sim"))]
    sim = gpusim_factory({**SUPERVISOR_FARM, "supervisor": None, "vms": vms})
    sim.set_perf([{"host": "esx-02.gpu.sim", "counter": "utilization", "points": [{"ago_s": 8 * 86400, "value": 1}]}],
                 statistics_level=4)
    env = sim.vgpuctl_env(folder / "state", esxi=False)
    commands = runnable("docs/usage.md")
    assert len(commands) == 4
    for command in commands:
        result = vgpuctl(env, command.text)
        assert result.exit_code == 0, f"{command}\n{result.output}"
        assert "warning:" not in result.stdout, f"{command}\n{result.output}"
    idle = json.loads(vgpuctl(env, commands[-1].text).stdout)
    assert [v["vm"] for v in idle["idle"]] == ["notebook-01"] and idle["idle_fb_gb"] == 20
