"""Composed inventories (vgpuctl.inventory.compose): `include:`, `overlays:` with --env, values files with
--values. What they merge to, that every error still points at the FILE:LINE:COL of the file holding the value,
and each bad input refused in one line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from vgpuctl import filelimits
from vgpuctl.errors import InventoryError, UsageError
from vgpuctl.inventory import Inventory, load_inventory, load_inventory_text, validate
from vgpuctl.inventory import compose as compose_mod
from vgpuctl.inventory.compose import Composition, merged_yaml_of
from vgpuctl.inventory.merge import merge_hosts, possible_conflicts
from vgpuctl.model import Observed
from vgpuctl.planner import make_plan
from vgpuctl.reports.plan import plan_to_json

pytestmark = pytest.mark.unit

FARM = Path(__file__).resolve().parents[1] / "fixtures" / "plan" / "_default_farm.yaml"

HOSTS = """\
apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
hosts:
  - cluster: GPU-Cluster
    graphics: {default_type: sharedDirect, assignment_policy: performance}
guests:
  connection: {user: ubuntu}
  groups:
    trainers:
      roles: [nccl]
      vars: {nccl_version: '2.21'}
"""
VMS = """\
vms:
  - name: train-{01..02}
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    cpus: 8
    memory_gb: 64
    vgpus: {profile: grid_a100-40c, count: 2}
    guest: {group: trainers}
"""
TOP = """\
apiVersion: vgpuctl/v1
include: [common/hosts.yaml, common/vms.yaml]
vms:
  - name: infer-01
    template: ubuntu-22.04-ml
    host: esx-04.gpu.sim
    vgpus: {profile: grid_a100-10c}
overlays:
  prod:
    vms:
      - name: train-{01..02}
        cpus: 16
        vgpus: [{profile: grid_a100-40c, count: 4}]
    guests:
      groups:
        trainers:
          vars: {extra: 'yes'}
    add:
      vms:
        - {name: prod-01, template: ubuntu-22.04-ml, cluster: GPU-Cluster, vgpus: {profile: grid_a100-20c}}
"""
FLAT = """\
apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
hosts:
  - cluster: GPU-Cluster
    graphics: {default_type: sharedDirect, assignment_policy: performance}
vms:
  - name: train-{01..02}
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    cpus: 8
    memory_gb: 64
    vgpus: {profile: grid_a100-40c, count: 2}
    guest: {group: trainers}
  - name: infer-01
    template: ubuntu-22.04-ml
    host: esx-04.gpu.sim
    vgpus: {profile: grid_a100-10c}
guests:
  connection: {user: ubuntu}
  groups:
    trainers:
      roles: [nccl]
      vars: {nccl_version: '2.21'}
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / next(iter(files))


def lab(tmp_path: Path, top: str = TOP, **more: str) -> Path:
    return write(tmp_path, {"lab.yaml": top, "common/hosts.yaml": HOSTS, "common/vms.yaml": VMS, **more})


def load(path: Path, **composition: Any) -> Inventory:
    inv = load_inventory(path, Composition(**composition))
    validate(inv)
    return inv


def refusal(path: Path, **composition: Any) -> str:
    """The one line a bad composed inventory is refused with."""
    with pytest.raises(InventoryError) as info:
        load(path, **composition)
    text = info.value.located()
    assert len(text.splitlines()) == 1, text
    return text


def same(a: Inventory, b: Inventory) -> None:
    assert a.model_dump(mode="json") == b.model_dump(mode="json")
    assert [vm.name for vm in a.vms] == [vm.name for vm in b.vms]


def planned(inv: Inventory) -> dict[str, Any]:
    observed = Observed.from_dict(YAML(typ="safe").load(FARM.read_text()))
    return plan_to_json(make_plan(inv, observed))


# ---------------------------------------------------------------------------------------------- includes


def test_includes_merge_to_the_flat_inventory(tmp_path: Path) -> None:
    inv = load(lab(tmp_path))
    same(inv, load_inventory_text(FLAT))
    assert inv.composed_from == [str(tmp_path / "lab.yaml"), str(tmp_path / "common/hosts.yaml"),
                                 str(tmp_path / "common/vms.yaml")]
    assert inv.is_merged and inv.env is None
    assert planned(inv) == planned(load_inventory_text(FLAT))


def test_a_single_file_is_not_merged_and_its_overlays_are_not_applied(tmp_path: Path) -> None:
    path = write(tmp_path, {"one.yaml": FLAT + "overlays:\n  prod:\n    vms: [{name: nothing-01, cpus: 2}]\n"})
    inv = load(path)
    same(inv, load_inventory_text(FLAT))
    assert not inv.is_merged and inv.composed_from == [str(path)]


def test_relative_includes_are_read_from_the_including_files_folder(tmp_path: Path) -> None:
    path = write(tmp_path, {
        "env/lab.yaml": "apiVersion: vgpuctl/v1\ninclude: [../base/all.yaml]\n",
        "base/all.yaml": "include: [hosts.yaml, vms/train.yaml]\n",
        "base/hosts.yaml": HOSTS,
        "base/vms/train.yaml": VMS,
    })  # fmt: skip
    with pytest.raises(InventoryError, match="outside the inventory's folder"):
        load(path)  # env/ is the tree: ../base leaves it
    same(load(path, allow_include_outside=True), load_inventory_text(FLAT.replace(FLAT[FLAT.index("  - name: infer"):
                                                                                    FLAT.index("guests:")], "")))


def test_a_file_included_twice_is_merged_once(tmp_path: Path) -> None:
    path = lab(tmp_path, "apiVersion: vgpuctl/v1\ninclude: [a.yaml, b.yaml, common/hosts.yaml]\n",
               **{"a.yaml": "include: [common/vms.yaml]\n", "b.yaml": "include: [common/vms.yaml]\n"})
    assert [vm.name for vm in load(path).vms] == ["train-01", "train-02"]


def test_the_including_file_wins_over_its_includes(tmp_path: Path) -> None:
    top = TOP.replace("include:", "vcenter: {datacenter: DC9, url: https://vc.example.com/sdk}\ninclude:")
    inv = load(lab(tmp_path, top))
    assert (inv.vcenter.datacenter, inv.vcenter.url) == ("DC9", "https://vc.example.com/sdk")
    assert inv.where(("vcenter", "datacenter")) == (str(tmp_path / "lab.yaml"), 2)


def test_files_side_by_side_may_not_set_one_setting_two_ways(tmp_path: Path) -> None:
    path = write(tmp_path, {
        "top.yaml": "apiVersion: vgpuctl/v1\ninclude: [a.yaml, b.yaml, c.yaml]\n",
        "a.yaml": "vcenter: {datacenter: DC0}\n",
        "b.yaml": "vcenter: {datacenter: DC0}\n",  # the same value: no conflict
        "c.yaml": "vcenter:\n  datacenter: DC1\n",
    })  # fmt: skip
    assert refusal(path) == (f"{tmp_path}/c.yaml:2:15: vcenter.datacenter: also set at {tmp_path}/a.yaml:1:23 to "
                             "another value: files included side by side may not set one setting two ways (set it "
                             "in the file that includes them, or in an overlay)")


@pytest.mark.parametrize(("section", "entry", "label"), [
    ("vms", "{name: train-01}", "VM 'train-01'"),
    ("hosts", "{cluster: GPU-Cluster}", "cluster 'GPU-Cluster'"),
    ("vm_classes", "{name: gpu-small, cpus: 2, memory_gb: 8}", "VM class 'gpu-small'"),
    ("namespaces", "{name: ml-team}", "namespace 'ml-team'"),
])  # fmt: skip
def test_a_name_defined_in_two_files_is_an_error_naming_both(tmp_path: Path, section: str, entry: str,
                                                              label: str) -> None:
    path = write(tmp_path, {
        "top.yaml": f"apiVersion: vgpuctl/v1\ninclude: [a.yaml]\n{section}:\n  - {entry}\n",
        "a.yaml": f"{section}:\n- {entry}\n",
    })  # fmt: skip
    key = "cluster" if section == "hosts" else "name"
    col = 6 + len(key) + 2
    assert refusal(path) == (f"{tmp_path}/top.yaml:4:{col}: {section}[0].{key}: {label} is defined twice: also at "
                             f"{tmp_path}/a.yaml:2:{col - 2} (an entry is defined in one file; an overlay or values "
                             "file changes it)")


def test_a_guest_group_defined_in_two_files_is_an_error_naming_both(tmp_path: Path) -> None:
    path = lab(tmp_path, "apiVersion: vgpuctl/v1\ninclude: [common/hosts.yaml]\nguests:\n  groups:\n"
               "    trainers: {roles: []}\n")
    assert refusal(path) == (f"{tmp_path}/lab.yaml:5:5: guests.groups.trainers: guest group 'trainers' is defined "
                             f"twice: also at {tmp_path}/common/hosts.yaml:9:5 (an entry is defined in one file; an "
                             "overlay or values file changes it)")


def test_one_files_own_repeats_are_reported_as_for_any_inventory(tmp_path: Path) -> None:
    path = lab(tmp_path, "apiVersion: vgpuctl/v1\ninclude: [common/hosts.yaml]\nvms:\n  - {name: a}\n  - {name: a}\n")
    assert refusal(path) == f"{tmp_path}/lab.yaml:5:12: vms[1].name: duplicate VM name 'a' (first defined at line 4)"


def test_vms_of_one_name_in_two_folders_are_two_entries(tmp_path: Path) -> None:
    path = write(tmp_path, {
        "top.yaml": "apiVersion: vgpuctl/v1\ninclude: [a.yaml]\nvms: [{name: a, folder: /x}]\n",
        "a.yaml": "vms: [{name: a, folder: /y}]\n",
    })  # fmt: skip
    assert [vm.folder for vm in load(path).vms] == ["/y", "/x"]


def test_a_range_overlapping_a_name_of_another_file_names_that_file(tmp_path: Path) -> None:
    path = lab(tmp_path, "apiVersion: vgpuctl/v1\ninclude: [common/vms.yaml, common/hosts.yaml]\n"
               "vms:\n  - {name: train-02}\n")
    # the path is the file's own: the top file's first VM
    assert refusal(path) == (f"{tmp_path}/lab.yaml:4:12: vms[0].name: duplicate VM name 'train-02' (first defined "
                             f"at {tmp_path}/common/vms.yaml:2)")


@pytest.mark.parametrize("bad", ["include: [a.yaml]\n", "include: a.yaml\n", "include: [7]\n",
                                 'include: ["a\\0.yaml"]\n'])
def test_include_shapes_and_apiversion_are_checked(tmp_path: Path, bad: str) -> None:
    files = {"top.yaml": "apiVersion: vgpuctl/v1\n" + bad, "a.yaml": "apiVersion: vgpuctl/v2\n"}
    expected = {
        "include: [a.yaml]\n": f"{tmp_path}/a.yaml:1:13: apiVersion: must be 'vgpuctl/v1' (got 'vgpuctl/v2')",
        "include: a.yaml\n": f"{tmp_path}/top.yaml:2:10: include: must be a list of file paths, e.g. [hosts.yaml] "
                             "(got str)",
        "include: [7]\n": f"{tmp_path}/top.yaml:2:11: include[0]: must be the path of an inventory file (got 7)",
        'include: ["a\\0.yaml"]\n': f"{tmp_path}/top.yaml:2:11: include[0]: must be the path of an inventory file "
                                    "(got 'a\\x00.yaml')",
    }  # fmt: skip
    assert refusal(write(tmp_path, files)) == expected[bad]


# ------------------------------------------------------------------------------------- bad includes


def test_an_include_cycle_names_its_chain(tmp_path: Path) -> None:
    path = write(tmp_path, {
        "top.yaml": "apiVersion: vgpuctl/v1\ninclude: [a.yaml]\n",
        "a.yaml": "include: [b.yaml]\n",
        "b.yaml": "vms: []\ninclude:\n  - ./a.yaml\n",
    })  # fmt: skip
    assert refusal(path) == (f"{tmp_path}/b.yaml:3:5: include[0]: include cycle: {tmp_path}/top.yaml -> "
                             f"{tmp_path}/a.yaml -> {tmp_path}/b.yaml -> {tmp_path}/a.yaml")


def test_a_file_including_itself_is_a_cycle(tmp_path: Path) -> None:
    path = write(tmp_path, {"top.yaml": "apiVersion: vgpuctl/v1\ninclude: [top.yaml]\n"})
    assert refusal(path).endswith(f"include cycle: {tmp_path}/top.yaml -> {tmp_path}/top.yaml")


def test_a_missing_include_is_located_at_its_item(tmp_path: Path) -> None:
    path = write(tmp_path, {"top.yaml": "apiVersion: vgpuctl/v1\ninclude:\n  - sub/missing.yaml\n"})
    assert refusal(path) == f"{tmp_path}/top.yaml:3:5: include[0]: included file {tmp_path}/sub/missing.yaml not found"


def test_an_include_outside_the_tree_is_refused_unless_allowed(tmp_path: Path) -> None:
    path = write(tmp_path, {"inv/top.yaml": "apiVersion: vgpuctl/v1\ninclude: [../shared.yaml]\n",
                            "shared.yaml": VMS + "vcenter: {datacenter: DC0}\n"})
    assert refusal(path) == (f"{tmp_path}/inv/top.yaml:2:11: include[0]: {tmp_path}/shared.yaml is outside the "
                             f"inventory's folder {tmp_path}/inv: an inventory includes files of its own folder tree "
                             "unless --allow-include-outside is given")
    absolute = write(tmp_path, {"inv/abs.yaml": f"apiVersion: vgpuctl/v1\ninclude: [{tmp_path}/shared.yaml]\n"})
    assert "is outside the inventory's folder" in refusal(absolute)
    with pytest.raises(InventoryError, match="unknown guest group 'trainers'"):
        load(path, allow_include_outside=True)  # read: the group it names is in no file


def test_a_link_leaving_the_tree_is_outside_it(tmp_path: Path) -> None:
    path = write(tmp_path, {"inv/top.yaml": "apiVersion: vgpuctl/v1\ninclude: [vms.yaml]\n",
                            "elsewhere/vms.yaml": "vms: [{name: a}]\n"})
    (tmp_path / "inv" / "vms.yaml").symlink_to(tmp_path / "elsewhere" / "vms.yaml")
    assert refusal(path) == (f"{tmp_path}/inv/top.yaml:2:11: include[0]: {tmp_path}/inv/vms.yaml is outside the "
                             f"inventory's folder {tmp_path}/inv (it resolves to {tmp_path}/elsewhere/vms.yaml): an "
                             "inventory includes files of its own folder tree unless --allow-include-outside is given")
    link_inside = write(tmp_path, {"inv/two.yaml": "apiVersion: vgpuctl/v1\ninclude: [sub/a.yaml]\n",
                                   "inv/sub/a.yaml": "include: [../alias.yaml]\n",
                                   "inv/real.yaml": "vms: [{name: b}]\n"})
    (tmp_path / "inv" / "alias.yaml").symlink_to(tmp_path / "inv" / "real.yaml")  # a link that stays inside
    assert [vm.name for vm in load(link_inside).vms] == ["b"]


def test_an_include_that_is_no_regular_file_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.yaml")
    path = write(tmp_path, {"top.yaml": "apiVersion: vgpuctl/v1\ninclude: [pipe.yaml, folder]\n"})
    assert refusal(path) == (f"{tmp_path}/top.yaml:2:11: include[0]: cannot include {tmp_path}/pipe.yaml: a named "
                             "pipe (FIFO), not a regular file (vgpuctl reads this only from a file)")
    (tmp_path / "folder").mkdir()
    path.write_text("apiVersion: vgpuctl/v1\ninclude: [folder]\n")
    assert "folder: a directory, not a regular file" in refusal(path)


def test_includes_nest_at_most_so_deep(tmp_path: Path) -> None:
    depth = compose_mod.MAX_INCLUDE_DEPTH
    files = {"f0.yaml": "apiVersion: vgpuctl/v1\ninclude: [f1.yaml]\n"}
    files |= {f"f{i}.yaml": f"include: [f{i + 1}.yaml]\n" for i in range(1, depth)}
    files[f"f{depth}.yaml"] = "vms: [{name: deep}]\n"
    path = write(tmp_path, files)
    assert refusal(path).startswith(f"{tmp_path}/f{depth - 1}.yaml:1:11: include[0]: includes nest more than {depth} "
                                    f"files deep ({tmp_path}/f0.yaml -> ")
    (tmp_path / f"f{depth - 1}.yaml").write_text("vms: [{name: deep}]\n")
    assert [vm.name for vm in load(path).vms] == ["deep"]


def test_the_files_of_one_inventory_are_bounded_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = lab(tmp_path)
    sizes = [len((tmp_path / n).read_bytes()) for n in ("lab.yaml", "common/hosts.yaml", "common/vms.yaml")]
    monkeypatch.setattr(filelimits, "MAX_FILE_BYTES", sum(sizes) - 1)
    assert refusal(path) == (f"{tmp_path}/lab.yaml:2:30: include[1]: cannot include {tmp_path}/common/vms.yaml: "
                             f"{compose_mod.TOO_LARGE}")
    monkeypatch.setattr(filelimits, "MAX_FILE_BYTES", sum(sizes))
    load(path)
    monkeypatch.setattr(compose_mod, "MAX_INVENTORY_FILES", 2)
    assert refusal(path) == (f"{tmp_path}/lab.yaml:2:30: include[1]: the inventory is read from more than 2 files")


def test_text_includes_no_files() -> None:
    with pytest.raises(InventoryError) as info:
        load_inventory_text("apiVersion: vgpuctl/v1\ninclude: [a.yaml]\n", "saved")
    assert info.value.located() == "saved:2:1: include: an inventory read from text (a saved plan) includes no files"


# ------------------------------------------------------------------------------------------------ positions


def test_schema_errors_point_into_the_included_file(tmp_path: Path) -> None:
    path = lab(tmp_path, **{"common/vms.yaml": VMS.replace("cpus: 8", "cpus: eight").replace("cluster:", "clustr:")})
    with pytest.raises(InventoryError) as info:
        load(path)
    assert info.value.located().splitlines() == [
        f"{tmp_path}/common/vms.yaml:4:5: vms[0]: unknown key 'clustr' (did you mean 'cluster'?)",
        f"{tmp_path}/common/vms.yaml:5:11: vms[0].cpus: must be an integer (got 'eight')",
    ]


def test_semantic_errors_point_into_the_included_file(tmp_path: Path) -> None:
    path = lab(tmp_path, **{"common/vms.yaml": VMS.replace("group: trainers", "group: nobody")
                            .replace("count: 2", "count: 9")})
    with pytest.raises(InventoryError) as info:
        load(path)
    assert info.value.located().splitlines() == [
        f"{tmp_path}/common/vms.yaml:7:44: vms[0].vgpus.count: must be between 1 and 8 (got 9)",
        f"{tmp_path}/common/vms.yaml:8:20: vms[0].guest.group: unknown guest group 'nobody' (guests.groups: trainers) "
        "(all 2 VMs of this entry's name range)",
    ]


def test_host_merges_name_the_files_of_both_entries(tmp_path: Path) -> None:
    path = lab(tmp_path, "apiVersion: vgpuctl/v1\ninclude: [common/hosts.yaml]\nhosts:\n  - name: esx-01.gpu.sim\n"
               "    graphics: {default_type: shared}\n")
    inv = load(path)
    merged, _ = merge_hosts(inv.hosts, {"GPU-Cluster": ["esx-01.gpu.sim"]}, ["esx-01.gpu.sim"])
    origins = merged["esx-01.gpu.sim"].origins
    assert str(origins["graphics.default_type"]) == f"{tmp_path}/lab.yaml:5 (host esx-01.gpu.sim)"
    assert str(origins["graphics.assignment_policy"]) == f"{tmp_path}/common/hosts.yaml:5 (cluster GPU-Cluster)"
    assert possible_conflicts(inv.hosts) == []


def test_a_host_merge_that_breaks_a_rule_names_both_files(tmp_path: Path) -> None:
    path = write(tmp_path, {
        "top.yaml": "apiVersion: vgpuctl/v1\ninclude: [cluster.yaml]\nhosts:\n  - name: esx-01\n"
                    "    scheduler: best-effort\n",
        "cluster.yaml": "hosts:\n  - cluster: C1\n    scheduler: {policy: fixed-share, timeslice_ms: 5}\n",
    })  # fmt: skip
    _, errors = merge_hosts(load(path).hosts, {"C1": ["esx-01"]}, ["esx-01"])
    assert errors == [f"{tmp_path}/cluster.yaml:3 and {tmp_path}/top.yaml:5: host esx-01: scheduler.timeslice_ms: "
                      "a time slice applies to equal-share and fixed-share only (its cluster C1 and host esx-01 "
                      "entries merged)"]


def test_plan_errors_point_into_the_file_that_holds_the_value(tmp_path: Path) -> None:
    path = lab(tmp_path, **{"common/vms.yaml": VMS.replace("cpus: 8", "folder: /nowhere")}, **{
        "v.yaml": "vms:\n  - name: infer-01\n    folder: /elsewhere\n"})
    errors = planned(load(path, values=(tmp_path / "v.yaml",)))["errors"]
    assert [e.split(": ")[0] for e in errors if "folder" in e] == [
        f"{tmp_path}/v.yaml:3:13", f"{tmp_path}/common/vms.yaml:5:13", f"{tmp_path}/common/vms.yaml:5:13"]


# ------------------------------------------------------------------------------------------------ overlays


def test_an_overlay_changes_entries_by_name_and_adds_under_add(tmp_path: Path) -> None:
    inv = load(lab(tmp_path), env="prod")
    train = inv.vm("train-01")
    assert train is not None and train.cpus == 16 and train.memory_gb == 64  # changed; the rest kept
    assert train.vgpu_profiles == ["grid_a100-40c"] * 4  # a list: replaced whole
    assert inv.guests.groups["trainers"].vars == {"nccl_version": "2.21", "extra": "yes"}  # mappings key by key
    assert inv.guests.groups["trainers"].roles == ["nccl"]
    assert [vm.name for vm in inv.vms] == ["train-01", "train-02", "infer-01", "prod-01"]
    assert inv.env == "prod" and inv.is_merged
    assert inv.where(("vms", 0, "cpus")) == (str(tmp_path / "lab.yaml"), 12)
    assert inv.where(("vms", 0, "memory_gb")) == (str(tmp_path / "common/vms.yaml"), 6)
    assert inv.where(("vms", 2, "name")) == (str(tmp_path / "lab.yaml"), 20)  # the data's third entry: added


def test_values_files_apply_after_the_overlay_in_their_order(tmp_path: Path) -> None:
    path = lab(tmp_path, **{"v1.yaml": "vms:\n  - {name: 'train-{01..02}', cpus: 24}\nvcenter: {datacenter: DC7}\n",
                            "v2.yaml": "vms:\n  - name: train-{01..02}\n    cpus: 32\n"})
    inv = load(path, env="prod", values=(tmp_path / "v1.yaml", tmp_path / "v2.yaml"))
    train = inv.vm("train-02")
    assert train is not None and train.cpus == 32 and train.vgpu_count == 4 and inv.vcenter.datacenter == "DC7"
    assert inv.composed_from[-2:] == [str(tmp_path / "v1.yaml"), str(tmp_path / "v2.yaml")]
    assert inv.where(("vms", 0, "cpus")) == (str(tmp_path / "v2.yaml"), 3)
    with pytest.raises(InventoryError) as info:
        load(path, values=(write(tmp_path, {"v3.yaml": "vms:\n  - {name: train-01, cpus: lots}\n"}),))
    assert info.value.located() == (f"{tmp_path}/v3.yaml:2:12: vms[0].name: VM 'train-01' matches no entry of the "
                                    f"inventory ('train-01' is one name of the range 'train-{{01..02}}' at "
                                    f"{tmp_path}/common/vms.yaml:2:11: change the whole entry, name: "
                                    "'train-{01..02}'): an overlay changes the entries it names; to add one, list it "
                                    "under add:")


def test_an_overlays_schema_errors_point_into_the_overlay(tmp_path: Path) -> None:
    path = lab(tmp_path, TOP.replace("cpus: 16", "cpus: 0").replace("{name: prod-01,", "{name: prod-01, cpu: 2,"))
    with pytest.raises(InventoryError) as info:
        load(path, env="prod")
    assert info.value.located().splitlines() == [
        f"{tmp_path}/lab.yaml:12:15: overlays.prod.vms[0].cpus: must be at least 1 (got 0)",
        f"{tmp_path}/lab.yaml:20:27: overlays.prod.add.vms[0]: unknown key 'cpu' (did you mean 'cpus'?)",
    ]


@pytest.mark.parametrize(("change", "expected"), [
    ("    vms:\n      - {name: train-09, cpus: 2}\n",
     "lab.yaml:6:16: overlays.prod.vms[0].name: VM 'train-09' matches no entry of the inventory: an overlay changes "
     "the entries it names; to add one, list it under add:"),
    ("    hosts:\n      - {name: esx-09.gpu.sim, nvlink: enabled}\n",
     "lab.yaml:6:16: overlays.prod.hosts[0].name: host 'esx-09.gpu.sim' matches no entry of the inventory"),
    ("    guests:\n      groups:\n        nobody: {roles: []}\n",
     "lab.yaml:7:9: overlays.prod.guests.groups.nobody: guest group 'nobody' matches no group of the inventory "
     "(groups: 'trainers')"),
    ("    vms:\n      - {cpus: 2}\n",
     "lab.yaml:6:9: overlays.prod.vms[0]: an overlay names the entry it changes by its 'name'"),
    ("    add:\n      vms:\n        - {name: infer-01}\n",
     "lab.yaml:7:18: overlays.prod.add.vms[0].name: VM 'infer-01' is defined twice: also at"),
    ("    add:\n      vcenter: {url: x}\n",
     "lab.yaml:6:7: overlays.prod.add.vcenter: add: takes new entries of hosts, vms, vm_classes, namespaces"),
    ("    include: [common/vms.yaml]\n",
     "lab.yaml:5:5: overlays.prod.include: an overlay or values file cannot set 'include'"),
])  # fmt: skip
def test_an_overlay_that_matches_nothing_is_refused_at_its_place(tmp_path: Path, change: str, expected: str) -> None:
    top = ("apiVersion: vgpuctl/v1\ninclude: [common/hosts.yaml, common/vms.yaml, more.yaml]\noverlays:\n  prod:\n"
           + change)
    path = lab(tmp_path, top, **{"more.yaml": "vms: [{name: infer-01}]\n"})
    assert refusal(path, env="prod").startswith(f"{tmp_path}/{expected}")


def test_env_naming_no_overlay_is_refused(tmp_path: Path) -> None:
    assert refusal(lab(tmp_path), env="staging") == (f"{tmp_path}/lab.yaml:8:1: overlays: no overlay named "
                                                     "'staging' for --env (overlays: 'prod')")
    flat = write(tmp_path, {"flat.yaml": FLAT})
    assert refusal(flat, env="prod") == (f"{flat}:1:1: no overlay named 'prod' for --env (overlays: the inventory "
                                         "has none)")


def test_overlays_come_from_any_file_once(tmp_path: Path) -> None:
    path = lab(tmp_path, TOP.replace("include: [", "include: [envs.yaml, "),
               **{"envs.yaml": "overlays:\n  staging:\n    vms: [{name: infer-01, cpus: 3}]\n"})
    vm = load(path, env="staging").vm("infer-01")
    assert vm is not None and vm.cpus == 3
    twice = lab(tmp_path, TOP.replace("include: [", "include: [twice.yaml, "),
                **{"twice.yaml": "overlays:\n  prod: {}\n"})
    assert refusal(twice) == (f"{tmp_path}/lab.yaml:9:3: overlays.prod: overlay 'prod' is defined twice: also at "
                              f"{tmp_path}/twice.yaml:2:3")


def test_a_vm_name_in_several_folders_is_chosen_by_folder(tmp_path: Path) -> None:
    path = write(tmp_path, {"top.yaml": "apiVersion: vgpuctl/v1\nvms:\n  - {name: a, folder: /x}\n"
                            "  - {name: a, folder: /y}\noverlays:\n  one:\n    vms: [{name: a, folder: y/, cpus: 2}]\n"
                            "  both:\n    vms: [{name: a, cpus: 2}]\n"})
    assert [vm.cpus for vm in load(path, env="one").vms] == [None, 2]
    assert refusal(path, env="both") == (f"{path}:9:18: overlays.both.vms[0].name: VM 'a' names 2 entries (in "
                                         "different folders): give 'folder' to say which")


def test_values_files_are_regular_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--values /dev/null: a device, not a regular file"):
        load(lab(tmp_path), values=(Path("/dev/null"),))
    with pytest.raises(UsageError, match=f"--values {tmp_path}/none.yaml: no such file"):
        load(lab(tmp_path), values=(tmp_path / "none.yaml",))
    bad = write(tmp_path, {"v.yaml": "- a\n"})
    with pytest.raises(InventoryError, match="a values file is a mapping of inventory sections"):
        load(lab(tmp_path), values=(bad,))


# ---------------------------------------------------------------------------------------------- merged


@pytest.mark.parametrize("env", [None, "prod"])
def test_the_merged_yaml_reads_back_and_plans_the_same(tmp_path: Path, env: str | None) -> None:
    inv = load(lab(tmp_path), env=env)
    text = merged_yaml_of(inv)
    assert text.startswith(f"# The inventory {tmp_path}/lab.yaml as vgpuctl merged it\n")
    assert "include" not in YAML(typ="safe").load(text) and "overlays" not in YAML(typ="safe").load(text)
    again = load_inventory_text(text, "merged.yaml")
    validate(again)
    same(inv, again)
    assert planned(again) == planned(inv)


def test_the_examples_overlay_validates_and_plans_on_the_default_farm() -> None:
    example = Path(__file__).resolve().parents[2] / "inventory.example.yaml"
    base, lab_env = load(example), load(example, env="lab")
    assert [vm.name for vm in lab_env.vms] == [vm.name for vm in base.vms] + ["debug-01"]
    train = lab_env.vm("train-01")
    assert train is not None and (train.cpus, train.vgpu_count, train.template) == (8, 2, "ubuntu-22.04-ml")
    assert not base.is_merged and lab_env.is_merged
    plan = planned(lab_env)
    assert plan["errors"] == [] and {c["vm"] for c in plan["vm_changes"]} >= {"debug-01", "train-01"}
    same(load_inventory_text(merged_yaml_of(lab_env)), lab_env)


@pytest.mark.parametrize(("key", "meant"), [("includes", "include"), ("overlay", "overlays")])
def test_a_mistyped_composing_key_says_which_was_meant(tmp_path: Path, key: str, meant: str) -> None:
    top = write(tmp_path, {"top.yaml": f"apiVersion: vgpuctl/v1\n{key}: [a.yaml]\n"})
    assert refusal(top) == f"{top}:2:1: unknown key {key!r} (did you mean {meant!r}?)"
    included = write(tmp_path, {"two.yaml": "apiVersion: vgpuctl/v1\ninclude: [b.yaml]\n", "b.yaml": f"{key}: {{}}\n"})
    assert refusal(included) == f"{tmp_path}/b.yaml:1:1: unknown key {key!r} (did you mean {meant!r}?)"
