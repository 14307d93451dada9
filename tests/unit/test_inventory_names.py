"""Names from files that become structure are checked when the file is read, located FILE:LINE:COL: VM names
(inventory and capacity demand entries) and experiment names (a results folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpuctl.capacity.demand import MAX_DEMAND_NAME, MAX_DEMAND_VMS, load_demand
from vgpuctl.errors import InventoryError, InventoryErrors
from vgpuctl.experiment.schema import load_experiment
from vgpuctl.inventory import MAX_VM_NAME, load_inventory_text, validate

pytestmark = pytest.mark.unit

ESCAPED = "vSphere stores '/', '\\' and '%' escaped, so the VM would not be found by this name"

# (the name as written in YAML, the message after `vms[0].name: `)
HOSTILE = [
    ('"a/b"', f"must not contain '/' (in 'a/b'): {ESCAPED}"),
    ("'a\\b'", f"must not contain '\\\\' (in 'a\\\\b'): {ESCAPED}"),
    ("a%2fb", f"must not contain '%' (in 'a%2fb'): {ESCAPED}"),
    ('"a\\nb"', "must not contain control or invisible characters (found '\\n' in 'a\\nb')"),
    ('"a\\tb"', "must not contain control or invisible characters (found '\\t' in 'a\\tb')"),
    ('"a\\u202eb"', "must not contain control or invisible characters (found '\\u202e' in 'a\\u202eb')"),
    ('"a\\u2028b"', "must not contain control or invisible characters (found '\\u2028' in 'a\\u2028b')"),
    ('"a\\x7fb"', "must not contain control or invisible characters (found '\\x7f' in 'a\\x7fb')"),
    ("'  '", "must not be empty"),
    ("x" * (MAX_VM_NAME + 1), f"is {MAX_VM_NAME + 1} characters long; vSphere takes VM names of at most {MAX_VM_NAME}"),
    ("p/{1..2}", f"must not contain '/' (in 'p/{{1..2}}'): {ESCAPED}"),
]


def _vm_errors(name: str) -> list[str]:
    text = f"apiVersion: vgpuctl/v1\nvms:\n  - name: {name}\n    cpus: 2\n"
    with pytest.raises(InventoryErrors) as info:
        load_inventory_text(text, "f.yaml")
    return [e.located() for e in info.value.errors]


@pytest.mark.parametrize(("name", "message"), HOSTILE, ids=[n for n, _ in HOSTILE])
def test_hostile_vm_names_are_refused_at_the_name(name: str, message: str) -> None:
    assert _vm_errors(name) == [f"f.yaml:3:11: vms[0].name: {message}"]


def test_a_range_is_measured_by_the_names_it_makes() -> None:
    stem = "v" * (MAX_VM_NAME - 2)
    inv = load_inventory_text(f"apiVersion: vgpuctl/v1\nvms: [{{name: '{stem}{{1..12}}'}}]\n")
    assert inv.vms[-1].name == stem + "12"
    name = f"{stem}{{1..100}}"
    longest = stem + "100"
    assert _vm_errors(name) == [
        f"f.yaml:3:11: vms[0].name: {name!r} names VMs of {MAX_VM_NAME + 1} characters ({longest!r}); "
        f"vSphere takes VM names of at most {MAX_VM_NAME}"
    ]


@pytest.mark.parametrize("name", ["x" * MAX_VM_NAME, "train 01", "日本-vm", "a.b_c-d+e(f)", "vm#1", "'a: b'"])
def test_names_vsphere_takes_are_kept(name: str) -> None:
    inv = load_inventory_text(f"apiVersion: vgpuctl/v1\nvms:\n  - name: {name}\n")
    validate(inv)
    assert inv.vms[0].name == name.strip("'")


def test_a_hostile_name_is_reported_with_the_files_other_problems() -> None:
    text = "apiVersion: vgpuctl/v1\nvms:\n  - {name: \"a/b\", cpus: 0}\n  - {name: c, cpus: 0}\n"
    with pytest.raises(InventoryErrors) as info:
        load_inventory_text(text, "f.yaml")
    assert [e.message for e in info.value.errors] == [
        f"vms[0].name: must not contain '/' (in 'a/b'): {ESCAPED}",
        "vms[0].cpus: must be at least 1 (got 0)",
        "vms[1].cpus: must be at least 1 (got 0)",
    ]


# ------------------------------------------------------------------------------------------------- demand

DEMAND = ("apiVersion: vgpuctl/v1\nkind: Demand\ndemand:\n  - name: {name}\n    count: 2\n"
          "    vgpus: {{profile: grid_a100-10c}}\n")


def _demand(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "d.yaml"
    path.write_text(DEMAND.format(name=name))
    return path


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ('"a\\nb"', "must not contain control or invisible characters (found '\\n' in 'a\\nb')"),
        ("a/b", f"must not contain '/' (in 'a/b'): {ESCAPED}"),
        ("a%b", f"must not contain '%' (in 'a%b'): {ESCAPED}"),
        ("x" * (MAX_DEMAND_NAME + 1), f"is {MAX_DEMAND_NAME + 1} characters long; a demand name takes at most "
                                      f"{MAX_DEMAND_NAME}, so that its VMs' names (NAME-NNN) fit vSphere's 80"),
    ],
)
def test_hostile_demand_names_are_refused(tmp_path: Path, name: str, message: str) -> None:
    path = _demand(tmp_path, name)
    with pytest.raises(InventoryError) as info:
        load_demand(path)
    assert info.value.located() == f"{path}:4:11: demand[0].name: {message}"


def test_the_longest_demand_name_makes_vm_names_vsphere_takes(tmp_path: Path) -> None:
    name = "x" * MAX_DEMAND_NAME
    assert load_demand(_demand(tmp_path, name)).demand[0].name == name
    assert len(f"{name}-{MAX_DEMAND_VMS}") == MAX_VM_NAME  # the widest number capacity gives a VM of an entry


# --------------------------------------------------------------------------------------------- experiment

EXPERIMENT = ("apiVersion: vgpuctl/v1\nkind: Experiment\n{name}inventory: i.yaml\nvms: [a]\n"
              "workload: {{builtin: nccl-tests}}\nvariants: [{{name: v}}]\n")


@pytest.mark.parametrize("name", ["../escape", ".", "..", "a/b", "''", ".hidden", "-x", '"a\\nb"', "x" * 64])
def test_experiment_names_are_one_safe_folder_name(tmp_path: Path, name: str) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(EXPERIMENT.format(name=f"name: {name}\n"))
    with pytest.raises(InventoryError) as info:
        load_experiment(path)
    (error,) = info.value.errors if isinstance(info.value, InventoryErrors) else [info.value]
    assert error.located().startswith(f"{path}:3:7: name: must be letters, digits, '.', '_' or '-' (it names a folder)")


@pytest.mark.parametrize("name", ["nvlink", "nvlink-on.2024_01", "x" * 63])
def test_experiment_names_kept(tmp_path: Path, name: str) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(EXPERIMENT.format(name=f"name: {name}\n"))
    assert load_experiment(path).title == name


def test_an_unnamed_experiment_whose_file_name_is_no_folder_name(tmp_path: Path) -> None:
    path = tmp_path / "...yaml"  # its stem is '..'
    path.write_text(EXPERIMENT.format(name=""))
    with pytest.raises(InventoryError) as info:
        load_experiment(path)
    assert info.value.located() == f"{path}:1:1: the file name does not name a results folder ('..'): set 'name'"
