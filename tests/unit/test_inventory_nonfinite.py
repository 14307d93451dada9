"""Non-finite numbers (YAML's .inf and .nan, JSON's Infinity and NaN) are refused where a number is read, located."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vgpuctl import planfile
from vgpuctl.capacity.demand import load_demand
from vgpuctl.errors import InventoryError, InventoryErrors
from vgpuctl.experiment.schema import load_experiment
from vgpuctl.inventory import load_inventory_text

pytestmark = pytest.mark.unit

NON_FINITE = [(".inf", "inf"), ("-.inf", "-inf"), (".Inf", "inf"), (".nan", "nan"), (".NaN", "nan")]


def _messages(text: str) -> list[str]:
    with pytest.raises(InventoryErrors) as info:
        load_inventory_text(text, "f.yaml")
    return [e.located() for e in info.value.errors]


@pytest.mark.parametrize(("written", "read"), NON_FINITE)
def test_vm_memory(written: str, read: str) -> None:
    text = f"apiVersion: vgpuctl/v1\nvms:\n  - name: a\n    memory_gb: {written}\n"
    assert _messages(text) == [f"f.yaml:4:16: vms[0].memory_gb: must be a finite number (got {read})"]


@pytest.mark.parametrize(("written", "read"), NON_FINITE)
def test_vm_class_memory(written: str, read: str) -> None:
    text = f"apiVersion: vgpuctl/v1\nvm_classes:\n  - {{name: c, cpus: 2, memory_gb: {written}}}\n"
    assert _messages(text) == [f"f.yaml:3:35: vm_classes[0].memory_gb: must be a finite number (got {read})"]


def test_plain_nan_is_a_string_not_a_number() -> None:
    text = "apiVersion: vgpuctl/v1\nvms:\n  - {name: a, memory_gb: nan, cpus: .inf}\n"
    assert _messages(text) == [
        "f.yaml:3:26: vms[0].memory_gb: must be a number (got 'nan')",
        "f.yaml:3:37: vms[0].cpus: must be an integer (got inf)",
    ]


def test_demand_memory(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("apiVersion: vgpuctl/v1\nkind: Demand\ndemand:\n  - name: a\n    count: 1\n"
                    "    vgpus: {profile: grid_a100-10c}\n    memory_gb: .inf\n")
    with pytest.raises(InventoryError) as info:
        load_demand(path)
    assert info.value.located() == f"{path}:7:16: demand[0].memory_gb: must be a finite number (got inf)"


def test_experiment_numbers(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text("apiVersion: vgpuctl/v1\nkind: Experiment\ninventory: i.yaml\nvms: [a]\nrepetitions: .nan\n"
                    "workload: {builtin: nccl-tests}\nvariants: [{name: v}]\n")
    with pytest.raises(InventoryError) as info:
        load_experiment(path)
    assert info.value.located() == f"{path}:5:14: repetitions: must be an integer (got nan)"


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_plan_file_constants(tmp_path: Path, constant: str) -> None:
    document = {"format": planfile.FORMAT, "vcenter": "v", "inventory_path": "NaN Infinity", "basis": "b",
                "plan": {"x": "PLACEHOLDER"}, "inventory": ""}
    text = json.dumps(document, indent=2).replace('"PLACEHOLDER"', constant)
    path = tmp_path / "plan.json"
    path.write_text(text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if constant in s and '"x"' in s)
    col = text.splitlines()[line - 1].index(constant) + 1
    with pytest.raises(planfile.PlanFileError) as info:
        planfile.load(path)
    assert str(info.value) == f"{path}:{line}:{col}: not a vgpuctl plan file ({constant} is not a JSON number)"
