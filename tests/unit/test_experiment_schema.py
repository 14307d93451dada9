"""The experiment file: schema, located errors, and variants merged onto the base inventory."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpuctl.errors import InventoryError, InventoryErrors
from vgpuctl.experiment.schema import checked_variants, load_experiment, merge_entry
from vgpuctl.inventory import HostSpec
from vgpuctl.inventory.merge import merge_host

pytestmark = pytest.mark.unit

BASE = """\
apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
hosts:
  - cluster: GPU-Cluster
    graphics: {default_type: sharedDirect}
    gpus: [{select: all, mode: time-sliced, vgpu_mode: sameSize}]
    nvlink: enabled
    scheduler: {policy: equal-share, timeslice_ms: 3}
vms:
  - name: train-{01..02}
    cluster: GPU-Cluster
    memory_gb: 64
    vgpus: {profile: grid_a100-40c, count: 2}
    nvlink: required
    guest: {group: trainers}
guests:
  groups:
    trainers: {roles: [gpu_validate], vars: {vgpu_driver_src: files/driver.run}}
"""

EXPERIMENT = """\
apiVersion: vgpuctl/v1
kind: Experiment
inventory: inventory.yaml
vms: [train-01, train-02]
repetitions: 2
workload: {builtin: nccl-tests, test: all_reduce_perf, scope: across-vms}
variants:
  - name: nvlink-on
  - name: nvlink-off
    hosts: [{cluster: GPU-Cluster, nvlink: disabled}]
    vms: [{name: "train-{01..02}", nvlink: none}]
  - name: mig
    hosts: [{cluster: GPU-Cluster, gpus: [{select: all, mode: mig, vgpu_mode: null}]}]
    vms: [{name: "train-{01..02}", nvlink: none, vgpus: {profile: grid_a100-3-20c, count: 1}}]
    workload: {builtin: p2pBandwidthLatencyTest}
"""


def write(tmp_path: Path, experiment: str = EXPERIMENT, base: str = BASE) -> Path:
    (tmp_path / "inventory.yaml").write_text(base)
    path = tmp_path / "experiment.yaml"
    path.write_text(experiment)
    return path


def errors_of(path: Path) -> list[str]:
    with pytest.raises(InventoryErrors) as info:
        checked_variants(load_experiment(path))
    return [e.located() for e in info.value.errors]


def test_variants_merge_onto_the_base(tmp_path):
    exp = load_experiment(write(tmp_path))
    assert exp.title == "experiment" and exp.repetitions == 2 and exp.on_failure == "continue"
    merged = {m.name: (m, inv) for m, inv in checked_variants(exp)}
    assert list(merged) == ["nvlink-on", "nvlink-off", "mig"]

    on = merged["nvlink-on"][1]
    assert on.hosts[0].nvlink == "enabled" and on.vm("train-01").nvlink == "required"

    off_variant, off = merged["nvlink-off"]
    assert off.hosts[0].nvlink == "disabled"
    assert off.hosts[0].scheduler.timeslice_ms == 3  # untouched keys stay
    assert off.vm("train-02").vgpu_profiles == ["grid_a100-40c", "grid_a100-40c"]
    assert off_variant.changed_hosts == ["cluster GPU-Cluster"] and off_variant.changed_vms == ["train-{01..02}"]

    mig = merged["mig"][1]
    assert [g.mode for g in mig.hosts[0].gpus] == ["mig"] and mig.hosts[0].gpus[0].vgpu_mode is None
    assert mig.vm("train-01").vgpu_profiles == ["grid_a100-3-20c"]
    assert exp.workload_of(exp.variant("mig")).builtin == "p2pBandwidthLatencyTest"
    assert exp.workload_of(exp.variant("nvlink-off")).key == "nccl-tests.all_reduce_perf.across-vms"
    # relative controller paths of the base keep pointing next to the base inventory
    assert mig.guests.groups["trainers"].vars["vgpu_driver_src"] == str(tmp_path / "files" / "driver.run")


def test_merge_rules():
    base = {"cluster": "C", "graphics": {"default_type": "shared", "assignment_policy": "performance"},
            "gpus": [{"select": "all", "mode": "time-sliced"}, {"select": "0000:3b:00.0", "mode": "mig"}],
            "scheduler": {"policy": "equal-share"}}
    overlay = {"cluster": "C", "graphics": {"default_type": "sharedDirect"},
               "gpus": [{"select": "0000:3b:00.0", "mode": "time-sliced"}, {"select": "0000:af:00.0", "mode": "mig"}],
               "scheduler": "best-effort"}
    out = merge_entry(base, overlay)
    assert out["graphics"] == {"default_type": "sharedDirect", "assignment_policy": "performance"}
    assert out["gpus"] == [{"select": "all", "mode": "time-sliced"}, {"select": "0000:3b:00.0", "mode": "time-sliced"},
                           {"select": "0000:af:00.0", "mode": "mig"}]
    assert out["scheduler"] == {"policy": "best-effort"}  # the shorthand is {policy: ...}
    assert base["graphics"]["default_type"] == "shared"  # the base is not modified
    assert merge_entry({"vgpus": [{"profile": "a", "count": 2}]}, {"vgpus": {"profile": "b"}}) == {
        "vgpus": {"profile": "b"}}  # lists are replaced, not merged


def test_schema_errors_are_located(tmp_path):
    text = EXPERIMENT.replace("repetitions: 2", "repetition: 2").replace("name: mig", "name: mig x")
    errors = errors_of(write(tmp_path, text))
    assert errors == [
        f"{tmp_path}/experiment.yaml:5:1: unknown key 'repetition' (did you mean 'repetitions'?)",
        f"{tmp_path}/experiment.yaml:12:11: variants[2].name: must be letters, digits, '.', '_' or '-' "
        "(it names a folder), got 'mig x'",
    ]


def test_workload_needs_one_kind_and_every_variant_a_workload(tmp_path):
    text = EXPERIMENT.replace("workload: {builtin: nccl-tests, test: all_reduce_perf, scope: across-vms}\n", "")
    errors = errors_of(write(tmp_path, text))
    assert errors == [
        f"{tmp_path}/experiment.yaml:7:5: variants[0]: variant 'nvlink-on' has no workload (and the file sets none)",
        f"{tmp_path}/experiment.yaml:8:5: variants[1]: variant 'nvlink-off' has no workload (and the file sets none)",
    ]
    text = EXPERIMENT.replace("{builtin: p2pBandwidthLatencyTest}", "{builtin: p2pBandwidthLatencyTest, command: x}")
    assert errors_of(write(tmp_path, text)) == [
        f"{tmp_path}/experiment.yaml:15:5: variants[2].workload: set exactly one of 'builtin' or 'command'"]


def test_merged_inventory_errors_point_at_the_variant_entry(tmp_path):
    text = EXPERIMENT.replace("nvlink: disabled}", "nvlink: of}").replace(
        "grid_a100-3-20c, count: 1", "grid_a100-3-20c, count: 9")
    errors = errors_of(write(tmp_path, text))
    assert errors[0] == (f"{tmp_path}/experiment.yaml:10:13: variants[1].hosts[0]: variant 'nvlink-off' merged onto "
                         "inventory.yaml: hosts[0].nvlink: must be 'enabled' or 'disabled' (got 'of')")
    assert errors[1].startswith(f"{tmp_path}/experiment.yaml:14:11: variants[2].vms[0]: variant 'mig' merged onto "
                                "inventory.yaml: vms[0].vgpus.count: must be between 1 and 8")


def test_vm_overlay_must_name_a_base_entry(tmp_path):
    text = EXPERIMENT.replace('vms: [{name: "train-{01..02}", nvlink: none}]', "vms: [{name: train-02, nvlink: none}]")
    text = text.replace('vms: [{name: "train-{01..02}", nvlink: none, vgpus', "vms: [{name: infer-01, vgpus")
    assert errors_of(write(tmp_path, text)) == [
        f"{tmp_path}/experiment.yaml:11:18: variants[1].vms[0].name: VM 'train-02' is one name of the range "
        "'train-{01..02}' in the inventory: change the whole entry (name: 'train-{01..02}') or split the range there",
        f"{tmp_path}/experiment.yaml:14:18: variants[2].vms[0].name: no VM entry named 'infer-01' in the inventory "
        "(a variant changes the base inventory's VMs)",
    ]


def test_participating_vms_must_exist(tmp_path):
    text = EXPERIMENT.replace("vms: [train-01, train-02]", "vms: [train-01, train-09]")
    errors = errors_of(write(tmp_path, text))
    assert len(errors) == 3
    assert errors[0] == (f"{tmp_path}/experiment.yaml:4:1: vms: variant 'nvlink-on': "
                         "no VM named train-09 in the inventory")


def test_kind_and_missing_base(tmp_path):
    path = write(tmp_path, EXPERIMENT.replace("kind: Experiment", "kind: Inventory"))
    with pytest.raises(InventoryErrors, match=r"experiment.yaml:2:7: kind: must be 'Experiment'"):
        load_experiment(path)
    path = write(tmp_path, EXPERIMENT.replace("inventory: inventory.yaml", "inventory: nope.yaml"))
    with pytest.raises(InventoryError, match=r"nope\.yaml: inventory file not found"):
        checked_variants(load_experiment(path))


def test_a_variant_may_only_change_what_the_base_sets(tmp_path):
    text = EXPERIMENT.replace("hosts: [{cluster: GPU-Cluster, nvlink: disabled}]",
                              "hosts: [{cluster: GPU-Cluster, nvlink: disabled, graphics: {assignment_policy: "
                              "consolidation}}, {cluster: Other, nvlink: disabled}]")
    text = text.replace("gpus: [{select: all, mode: mig, vgpu_mode: null}]",
                        "gpus: [{select: all, mode: mig}, {select: 0000:3b:00.0, mode: mig}]")
    text = text.replace('vms: [{name: "train-{01..02}", nvlink: none}]',
                        'vms: [{name: "train-{01..02}", nvlink: none, host: esx-01}]')
    errors = errors_of(write(tmp_path, text))
    restore = "so restoring the base would not undo this variant: set it in the base inventory"
    assert errors == [
        f"{tmp_path}/experiment.yaml:10:84: variants[1].hosts[0].graphics.assignment_policy: the base inventory "
        f"leaves graphics.assignment_policy unset, {restore}",
        f"{tmp_path}/experiment.yaml:10:101: variants[1].hosts[1]: no host entry with cluster: Other in the "
        "inventory: restoring the base could not undo this entry (add it to the base)",
        f"{tmp_path}/experiment.yaml:11:56: variants[1].vms[0].host: the base inventory leaves host unset, {restore}",
        f"{tmp_path}/experiment.yaml:13:69: variants[2].hosts[0].gpus[1]: the base inventory leaves gpus[1] unset, "
        f"{restore}",
    ]


@pytest.mark.parametrize(
    "base, overlay",
    [
        ({"graphics": {"default_type": "shared", "assignment_policy": "performance"}, "nvlink": "enabled"},
         {"graphics": {"default_type": "sharedDirect"}, "nvlink": "disabled"}),
        ({"scheduler": {"policy": "equal-share", "timeslice_ms": 3}}, {"scheduler": "fixed-share"}),
        ({"scheduler": "equal-share"}, {"scheduler": {"timeslice_ms": 5}}),
        ({"gpus": [{"select": "all", "mode": "time-sliced", "vgpu_mode": "sameSize"},
                   {"select": "0000:3B:00.0", "mode": "mig"}]},
         {"gpus": [{"mode": "mig", "vgpu_mode": None}, {"select": "0000:3b:00.0", "mode": "time-sliced"},
                   {"select": "0000:af:00.0", "mode": "mig"}]}),
        ({"gpus": [{"select": "all", "mode": "time-sliced", "vgpu_mode": "sameSize"}]},
         {"gpus": [{"mode": "mig"}]}),  # no vgpu_mode: null needed to switch to MIG
        ({"ssh": {"user": "root", "port": 2222}, "maintenance": {"evacuate": "refuse", "max_unavailable": 2}},
         {"ssh": {"port": 22}, "maintenance": {"evacuate": "power-off"}}),
    ],
)
def test_merge_agrees_with_the_inventorys_host_merge(base, overlay):
    ours = HostSpec.model_validate({**merge_entry({"cluster": "C", **base}, {"cluster": "C", **overlay})})
    theirs = merge_host("h", [HostSpec.model_validate({"cluster": "C", **base}),
                              HostSpec.model_validate({"name": "h", **overlay})]).spec
    fields = ("graphics", "gpus", "nvlink", "scheduler", "ssh", "maintenance")
    assert {f: getattr(ours, f) for f in fields} == {f: getattr(theirs, f) for f in fields}


def test_a_base_inventory_may_include_files(tmp_path):
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "vms.yaml").write_text(BASE[BASE.index("vms:"):BASE.index("guests:")])
    base = BASE[:BASE.index("vms:")] + "include: [common/vms.yaml]\n" + BASE[BASE.index("guests:"):]
    path = write(tmp_path, base=base)
    merged = checked_variants(load_experiment(path))
    assert [inv.vm("train-01").nvlink for _, inv in merged] == ["required", "none", "none"]
