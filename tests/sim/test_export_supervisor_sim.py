"""`vgpuctl export` of VM classes and supervisor namespaces against gpusim's supervisor cluster: classes made
by `vgpuctl k8s apply`, a seeded class without vGPUs and seeded namespaces; the exported file plans to no
change (`k8s plan` and `plan`) and one edited class or namespace plans exactly that change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

FARM = {
    "datacenter": "DC0",
    "clusters": [
        {"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB",
         "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"},
    ],
    "templates": [],
    "supervisor": {
        "clusters": ["GPU-Cluster"],
        "vm_classes": [{"name": "best-effort-small", "cpus": 2, "memory_mb": 4096}],
        "namespaces": [
            {"name": "ml-team", "cluster": "GPU-Cluster", "vm_classes": ["best-effort-small"]},
            {"name": "data-team", "cluster": "GPU-Cluster"},
            {"name": "web-team", "cluster": "GPU-Cluster", "vm_classes": ["best-effort-small"]},
        ],
    },
}

CLASSES = """\
apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
vm_classes:
  - {name: gpu-a100-40c, cpus: 16, memory_gb: 128, vgpus: {profile: grid_a100-40c, count: 2}}
  - name: gpu-mixed
    cpus: 8
    memory_gb: 64
    cpu_reservation: 50
    vgpus: [{profile: grid_a100-20c, count: 1}, {profile: grid_a100-10c, count: 1}]
    extra_config: {guest.tag: gpu}
namespaces:
  - {name: ml-team, vm_classes: [gpu-a100-40c, gpu-mixed]}
  - {name: data-team, vm_classes: [gpu-mixed]}
"""


@pytest.fixture(scope="module")
def sim(gpusim_session_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    sim = gpusim_session_factory(FARM)
    path = tmp_path_factory.mktemp("classes") / "classes.yaml"
    path.write_text(CLASSES)
    env = {"VGPUCTL_URL": sim.url, "VGPUCTL_USERNAME": sim.username, "VGPUCTL_PASSWORD": sim.password,
           "VGPUCTL_INSECURE": "1"}
    applied = CliRunner().invoke(app, ["k8s", "apply", "-f", str(path), "--yes"], env=env)
    assert applied.exit_code == 0, applied.output
    return sim


@pytest.fixture
def env(sim: Any, monkeypatch: pytest.MonkeyPatch, no_vgpuctl_env: None) -> dict[str, str]:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return sim.vgpuctl_env(esxi=False)


def vgpuctl(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def exported(env: dict[str, str], tmp_path: Path) -> Path:
    path = tmp_path / "farm.yaml"
    result = vgpuctl(env, "export", "--out", str(path))
    assert result.exit_code == 0, result.output
    return path


def test_export_writes_the_gpu_classes_and_their_namespaces(exported: Path) -> None:
    text = exported.read_text()
    section = text[text.index("vm_classes:"):]
    assert "  - name: gpu-a100-40c\n    cpus: 16\n    memory_gb: 128\n    vgpus: {profile: grid_a100-40c, count: 2}\n" \
        in section
    assert "    cpu_reservation: 50\n" in section and "    extra_config: {guest.tag: gpu}\n" in section
    assert "best-effort-small (no vGPUs: not written" in section and "web-team" not in section
    assert "  - name: ml-team\n    supervisor: GPU-Cluster\n" in section
    assert "    vm_classes: [gpu-a100-40c, gpu-mixed]\n" in section and "    vm_classes: [gpu-mixed]\n" in section


def test_export_plans_to_no_change(env: dict[str, str], exported: Path) -> None:
    assert vgpuctl(env, "validate", "-f", str(exported)).exit_code == 0
    k8s = vgpuctl(env, "-o", "json", "k8s", "plan", "-f", str(exported), "--detailed-exitcode")
    assert k8s.exit_code == 0, k8s.output
    doc = json.loads(k8s.stdout)
    assert doc["errors"] == [] and not any(doc["summary"].values()), doc["summary"]
    plan = vgpuctl(env, "plan", "-f", str(exported), "--detailed-exitcode")
    assert plan.exit_code == 0, plan.output


@pytest.mark.parametrize(
    ("old", "new", "shown"),
    [
        ("  - name: gpu-a100-40c\n    cpus: 16", "  - name: gpu-a100-40c\n    cpus: 8", "~ vm class gpu-a100-40c"),
        ("    vm_classes: [gpu-mixed]\n", "    vm_classes: []\n", "~ namespace data-team"),
    ],
)
def test_one_edit_plans_exactly_that_change(env: dict[str, str], exported: Path, old: str, new: str,
                                            shown: str) -> None:
    text = exported.read_text()
    assert text.count(old) == 1
    exported.write_text(text.replace(old, new))
    result = vgpuctl(env, "-o", "json", "k8s", "plan", "-f", str(exported), "--detailed-exitcode")
    assert result.exit_code == 2, result.output
    summary = {k: v for k, v in json.loads(result.stdout)["summary"].items() if v}
    assert sum(summary.values()) == 1, summary
    text_plan = vgpuctl(env, "k8s", "plan", "-f", str(exported))
    assert shown in text_plan.output
