"""playbooks/experiment.yml: syntax, and its run and facts tasks on localhost (local connection, a command
workload and a stand-in nvidia-smi), read back the way vgpuctl reads the guests' events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "experiment.yml"
BIN = Path(sys.executable).parent
# Prints a `topo -m` matrix for `topo -m`, fails for anything else (like a driver without NVLink support).
FAKE_SMI = """#!/bin/sh
if [ "$*" = "topo -m" ]; then printf '\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV12\\nGPU1\\tNV12\\t X \\n'; exit 0; fi
if [ "$*" = "--query-gpu=driver_version,name --format=csv,noheader" ]; then echo "550.90.07, GRID A100-40C"; exit 0; fi
echo "unsupported: $*" >&2; exit 2
"""


def run_play(tmp_path: Path, extra: dict) -> tuple[int, dict]:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps({"experiment_nvidia_smi": str(smi), "ansible_become": False,
                                     "ansible_python_interpreter": sys.executable, **extra}))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}
    proc = subprocess.run(
        [BIN / "ansible-playbook", "-i", "localhost,", "-c", "local", "-e", f"@{vars_file}", str(PLAYBOOK)],
        env=env, capture_output=True, text=True, check=False,
    )
    doc = json.loads(proc.stdout)
    tasks = {t["task"]["name"]: t["hosts"].get("localhost", {}) for p in doc["plays"] for t in p["tasks"]}
    return proc.returncode, tasks


def test_syntax(tmp_path):
    proc = subprocess.run([BIN / "ansible-playbook", "--syntax-check", "-i", "localhost,", str(PLAYBOOK)],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "ANSIBLE_LOCAL_TEMP": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_command_workload_reports_output_exit_status_and_facts(tmp_path):
    workload = {"builtin": None, "command": "echo out; echo err >&2; exit 3", "timeout_s": 60}
    rc, tasks = run_play(tmp_path, {"experiment_workload": workload, "experiment_vms": ["localhost"],
                                    "experiment_build": False})
    assert rc == 0, tasks
    result = tasks["Report the result to vgpuctl"]["experiment_result"]
    assert result["ran"] in (True, "True") and int(result["rc"]) == 3
    assert result["output"] == "out\nerr"
    assert "NV12" in result["topo"] and result["nvlink"] == ""  # nvlink -s failed: no fact, no failure
    assert result["gpus"] == "550.90.07, GRID A100-40C"


def test_a_missing_benchmark_is_a_failed_run_not_a_failed_play(tmp_path):
    workload = {"builtin": "p2pBandwidthLatencyTest", "command": None, "timeout_s": 60}
    rc, tasks = run_play(tmp_path, {"experiment_workload": workload, "experiment_vms": ["localhost"],
                                    "experiment_build": False, "experiment_bin_dir": str(tmp_path / "nothing")})
    assert rc == 0
    result = tasks["Report the result to vgpuctl"]["experiment_result"]
    assert result["ran"] in (True, "True") and result["rc"] not in (0, "0")
    assert result["message"] and result["output"] == ""  # Ansible's message stands in for the missing output


def test_building_without_a_source_is_refused(tmp_path):
    workload = {"builtin": "nccl-tests", "command": None, "test": "all_reduce_perf", "scope": "per-vm",
                "args": [], "source": None, "timeout_s": 60}
    rc, tasks = run_play(tmp_path, {"experiment_workload": workload, "experiment_vms": ["localhost"]})
    assert rc != 0
    assert "set workload.source" in tasks["Refuse to build without a source"]["msg"]
