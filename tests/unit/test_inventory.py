"""Inventory loading and validation, table-driven from tests/fixtures/inventory/{good,bad}/*.yaml.

A bad fixture lists its expected errors in `# expect: LINE:COL: message` header lines (all of them, in
order); a good one lists its expanded VM names in a `# vms: [...]` header line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from vgpuctl.errors import InventoryError, InventoryErrors
from vgpuctl.inventory import (
    Inventory,
    expand_name,
    format_path,
    group_repeated,
    load_inventory,
    load_inventory_text,
    ranges,
    validate,
)
from vgpuctl.inventory import load as load_module
from vgpuctl.inventory.yamlpos import _unwrap

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "inventory"
GOOD = sorted((FIXTURES / "good").glob("*.yaml"))
BAD = sorted((FIXTURES / "bad").glob("*.yaml"))


def _header(path: Path, prefix: str) -> list[str]:
    return [line[len(prefix):] for line in path.read_text().splitlines() if line.startswith(prefix)]


def _errors(path: Path) -> list[str]:
    try:
        validate(load_inventory(path))
    except InventoryErrors as exc:
        assert all(e.file == str(path) for e in exc.errors)
        return [e.located() for e in exc.errors]
    except InventoryError as exc:
        return [exc.located()]
    return []


def test_fixture_counts() -> None:
    assert len(GOOD) >= 4 and len(BAD) >= 20


@pytest.mark.parametrize("path", GOOD, ids=[p.stem for p in GOOD])
def test_good(path: Path) -> None:
    inv = load_inventory(path)
    validate(inv)
    assert inv.source_path == str(path)
    (names,) = _header(path, "# vms: ")
    assert [vm.name for vm in inv.vms] == YAML(typ="safe").load(names)


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad(path: Path) -> None:
    expected = [f"{path}:{e}" for e in _header(path, "# expect: ")]
    assert expected, f"{path} has no '# expect:' line"
    assert _errors(path) == expected


def test_example_documents_and_validates() -> None:
    path = ROOT / "inventory.example.yaml"
    inv = load_inventory(path)
    validate(inv)
    assert inv.api_version == "vgpuctl/v1"
    assert [vm.name for vm in inv.vms] == [
        "train-01", "train-02", "pair-01", "infer-01", "infer-02", "infer-03", "infer-04",
    ]
    text = path.read_text()
    # Every key of the schema appears in the example (documented in comments beside it).
    for model in _all_models(Inventory):
        for name, info in model.model_fields.items():
            key = info.alias or name
            assert f"{key}:" in text, f"{model.__name__}.{key} is not in inventory.example.yaml"


def _all_models(model: type) -> set[type]:
    from pydantic import BaseModel

    seen: set[type] = set()
    todo = [model]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for info in m.model_fields.values():
            inner = _unwrap(info.annotation)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                todo.append(inner)
    return seen


def test_full_fixture_values() -> None:
    inv = load_inventory(FIXTURES / "good" / "full.yaml")
    assert inv.vcenter.tls.thumbprint_hex == "ABCDEF0123456789" * 4
    h0, h1 = inv.hosts
    assert h0.target == "cluster GPU-Cluster" and h1.target == "host esx-09.gpu.sim"
    assert h0.scheduler is not None and h0.scheduler.policy == "equal-share"
    assert h1.scheduler is not None and h1.scheduler.timeslice_ms == 24
    assert h0.gpus[1].select == "0000:3b:00.0"  # bus ids are normalised to lower case
    assert h0.ssh.port == 2222 and h0.maintenance.max_unavailable == 2
    assert h1.maintenance.max_unavailable == 1 and h1.maintenance.evacuate == "refuse"  # defaults
    pair, solo = inv.vms
    assert pair.memory_mb == 1536
    assert pair.vgpu_profiles == ["grid_h100-80c", "grid_h100-80c"] and pair.vgpu_count == 2
    assert solo.vgpus == [] and solo.power == "off" and solo.nvlink == "none"
    assert inv.guests.groups["trainers"].vars["nested"] == {"a": [1, 2]}
    assert inv.vm("solo") is solo and inv.vm("nope") is None


def test_defaults() -> None:
    inv = load_inventory_text("apiVersion: vgpuctl/v1\nvms: [{name: a, vgpus: {profile: grid_a100-40c}}]\n")
    vm = inv.vms[0]
    assert (vm.power, vm.nvlink, vm.vgpu_profiles, vm.memory_mb) == ("restart", "none", ["grid_a100-40c"], None)
    assert inv.vcenter.tls.verify is True and inv.vcenter.url is None


def test_empty_sections() -> None:
    inv = load_inventory_text("apiVersion: vgpuctl/v1\nhosts:\nvms:\n")
    assert inv.hosts == [] and inv.vms == []


def test_yaml_12_off_is_a_string() -> None:
    inv = load_inventory_text("apiVersion: vgpuctl/v1\nvms: [{name: a, power: off}]\n")
    assert inv.vms[0].power == "off"


def test_load_text_names_the_source() -> None:
    with pytest.raises(InventoryErrors) as info:
        load_inventory_text("apiVersion: vgpuctl/v1\nvms: [{name: a, cpus: 0}]\n", "inline.yaml")
    assert str(info.value) == "inline.yaml:2:23: vms[0].cpus: must be at least 1 (got 0)"


def test_missing_file() -> None:
    with pytest.raises(InventoryError, match="inventory file not found") as info:
        load_inventory(FIXTURES / "nope.yaml")
    assert info.value.file is not None and info.value.file.endswith("nope.yaml")


def test_errors_are_one_per_line_and_typed() -> None:
    path = FIXTURES / "bad" / "hosts-bad.yaml"
    with pytest.raises(InventoryErrors) as info:
        load_inventory(path)
    err = info.value
    assert isinstance(err, InventoryError) and err.exit_code == 1
    assert len(str(err).splitlines()) == len(err.errors) == 9
    assert all(e.line is not None and e.col is not None for e in err.errors)


def test_programmatic_inventory_errors_have_no_position() -> None:
    inv = Inventory.model_validate({"apiVersion": "vgpuctl/v1", "vms": [{"name": "a"}, {"name": "a"}]})
    with pytest.raises(InventoryErrors) as info:
        validate(inv)
    assert str(info.value) == "<inventory>: vms[0].name: duplicate VM name 'a'"


@pytest.mark.parametrize(
    ("name", "names"),
    [
        ("train-{01..04}", ["train-01", "train-02", "train-03", "train-04"]),
        ("n{8..11}", ["n8", "n9", "n10", "n11"]),
        ("n{08..11}", ["n08", "n09", "n10", "n11"]),
        ("n{1..010}", [f"n{i:03d}" for i in range(1, 11)]),
        ("{1..2}{1..2}", ["11", "12", "21", "22"]),
        ("plain", ["plain"]),
        ("x{3..3}", ["x3"]),
    ],
)
def test_expand_name(name: str, names: list[str]) -> None:
    assert expand_name(name) == names


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("a{2..1}", "2 is greater than 1"),
        ("a{x..y}", "expected {FIRST..LAST}"),
        ("a{1..2", "unbalanced braces"),
        ("a}1..2{", "unbalanced braces"),
        ("a{1...2}", "expected {FIRST..LAST}"),
        ("a{{1..2}}", "unbalanced braces"),
        ("a{0..99999}", "expands to 100000 names (at most 10000 per entry)"),
        ("a{0..999999999}", "expands to 1000000000 names"),
        ("a{0..99}{0..99}{0..9}", "expands to 100000 names"),
        ("a{1..1234567890}", "at most 9 digits per bound"),
    ],
)
def test_expand_name_errors(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        expand_name(name)


def test_format_path() -> None:
    assert format_path(("vms", 3, "vgpus", 0, "count")) == "vms[3].vgpus[0].count"
    assert format_path(("vms", 3, "vgpus", 0, "count"), {("vms", 3, "vgpus")}) == "vms[3].vgpus.count"
    assert format_path(()) == ""


def test_inventory_wide_vm_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ranges, "MAX_INVENTORY_VMS", 25)
    text = "apiVersion: vgpuctl/v1\nvms:\n  - name: a-{1..20}\n  - name: b\n  - name: c-{1..9}\n  - name: d-{1..9}\n"
    with pytest.raises(InventoryErrors) as info:
        load_inventory_text(text, "f.yaml")
    assert [str(e) for e in info.value.errors] == [
        "f.yaml:5:11: vms[2].name: the inventory names more than 25 VMs (split it into several inventories)"
    ]


def test_entries_past_the_vm_cap_are_never_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A small file of many ranges once expanded every entry for the checks that run beside the cap's error (10
    million names from 30 kB); the checks stop at the entry that passes the cap."""
    monkeypatch.setattr(ranges, "MAX_INVENTORY_VMS", 250)
    seen: list[int] = []
    expand = load_module.expand_vms
    monkeypatch.setattr(load_module, "expand_vms",
                        lambda inv, indices=None: (seen.append(len(inv.vms)), expand(inv, indices))[1])
    text = "apiVersion: vgpuctl/v1\nvms:\n" + "".join(f"  - name: r{i}-{{1..10}}-{{1..10}}\n" for i in range(50))
    with pytest.raises(InventoryErrors) as info:
        load_inventory_text(text, "f.yaml")
    assert [str(e) for e in info.value.errors] == [
        "f.yaml:5:11: vms[2].name: the inventory names more than 250 VMs (split it into several inventories)"
    ]
    assert seen == [2]  # the two entries within the cap, checked as usual
    assert ranges.name_count("r-{1..100}-{01..100}") == 10_000


def test_vgpus_unset_is_left_alone_and_empty_list_removes() -> None:
    text = ("apiVersion: vgpuctl/v1\nvms:\n  - {name: a}\n  - {name: b, vgpus: []}\n  - {name: c, vgpus: null}\n"
            "  - name: d-{1..2}\n    vgpus: {profile: grid_a100-40c}\n")
    inv = load_inventory_text(text)
    managed = {vm.name: vm.manages_vgpus for vm in inv.vms}
    assert managed == {"a": False, "b": True, "c": False, "d-1": True, "d-2": True}
    assert all(vm.vgpus == [] for vm in inv.vms[:3])


def test_nvlink_required_needs_vgpus_listed() -> None:
    inv = load_inventory_text("apiVersion: vgpuctl/v1\nvms:\n  - {name: a, nvlink: required}\n", "f.yaml")
    with pytest.raises(InventoryErrors) as info:
        validate(inv)
    assert str(info.value) == (
        "f.yaml:3:23: vms[0].nvlink: NVLink needs the VM's 'vgpus' listed (its device group is made of them)"
    )


def test_one_pass_with_unreadable_guests_judges_no_group() -> None:
    text = "apiVersion: vgpuctl/v1\nvms:\n  - {name: a, guest: {group: x}, cpus: 0}\n  - {name: a}\nguests: 5\n"
    with pytest.raises(InventoryErrors) as info:
        load_inventory_text(text, "f.yaml")
    assert [e.message for e in info.value.errors] == [
        "vms[0].cpus: must be at least 1 (got 0)",
        "vms[1].name: duplicate VM name 'a' (first defined at line 3)",
        "guests: must be a mapping (got int)",
    ]


def test_one_vm_name_in_two_folders_is_two_vms() -> None:
    text = ("apiVersion: vgpuctl/v1\nvms:\n  - {name: a, folder: teamA}\n  - {name: a, folder: /teamB/}\n"
            "  - {name: a, folder: /}\n  - {name: a}\n")
    inv = load_inventory_text(text, "f.yaml")
    validate(inv)
    assert [(vm.name, vm.folder) for vm in inv.vms] == [("a", "teamA"), ("a", "/teamB/"), ("a", "/"), ("a", None)]


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ("{name: a}", "vms[1].name: duplicate VM name 'a' (first defined at line 3)"),
        ("{name: a, folder: /ml/train/}", "vms[1].name: duplicate VM name 'a' in folder '/ml/train/' "
                                          "(first defined at line 3)"),
    ],
)
def test_one_vm_name_twice_in_one_folder_is_an_error(second: str, message: str) -> None:
    first = "{name: a}" if "folder" not in second else "{name: a, folder: ml/train}"
    text = f"apiVersion: vgpuctl/v1\nvms:\n  - {first}\n  - {second}\n"
    inv = load_inventory_text(text, "f.yaml")
    with pytest.raises(InventoryErrors) as info:
        validate(inv)
    (error,) = info.value.errors
    assert (error.file, error.line, error.message) == ("f.yaml", 4, message)


def test_two_errors_of_one_cause_stay_apart_three_are_grouped() -> None:
    errs = [InventoryError(f"vms[{i}].cpus: must be at least 1 (got 0)", "f", 10 + i, 3) for i in range(3)]
    assert [e.located() for e in group_repeated(errs[:2])] == [e.located() for e in errs[:2]]
    (one,) = group_repeated(errs)
    assert one.located() == ("f:10:3: vms[0].cpus: must be at least 1 (got 0) "
                             "(the same in 2 more entries, at lines 11, 12: one cause, fix them alike)")
