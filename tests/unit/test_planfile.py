"""Plan files: the digest of what a plan was based on, and the refusals of a changed farm or a bad file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vgpuctl import planfile
from vgpuctl.domain import ChangeKind, EvacuationKind
from vgpuctl.errors import UsageError
from vgpuctl.model import (
    EvacuationAction,
    HostChange,
    Observed,
    ObservedGpu,
    ObservedHost,
    ObservedVgpu,
    ObservedVm,
    Plan,
    VmChange,
)
from vgpuctl.reports.plan import plan_section, plan_to_json
from vgpuctl.settings import SETTINGS

pytestmark = pytest.mark.unit


def farm(power: str = "poweredOff", ips: list[str] | None = None) -> Observed:
    vm = ObservedVm("a", moid="vm-1", host="esx-01", power_state=power, vgpus=[ObservedVgpu(1, "grid_a100-20c")],
                    guest_ips=ips or [])  # fmt: skip
    return Observed(datacenter="DC0", hosts={"esx-01": ObservedHost("esx-01")}, vms={"a": vm}, round_trips=3)


def test_farm_digest_ignores_churn_and_sees_what_plans_depend_on() -> None:
    base = planfile.farm_digest(farm())
    churned = farm(ips=["10.0.0.9"])
    churned.round_trips = 99
    churned.warnings.append("something")
    assert planfile.farm_digest(churned) == base
    assert planfile.farm_digest(farm(power="poweredOn")) != base
    other = farm()
    other.vms["a"].vgpus.append(ObservedVgpu(2, "grid_a100-20c"))
    assert planfile.farm_digest(other) != base


def test_farm_digest_leaves_out_nvlink_sets_the_shell_gave_but_not_vcenters() -> None:
    def with_gpus(nvlink_set: int | None, from_shell: bool) -> Observed:
        observed = farm()
        host = observed.hosts["esx-01"]
        host.gpus = [ObservedGpu("0000:3b:00.0", "A100", nvlink_set=nvlink_set), ObservedGpu("0000:3c:00.0", "A100")]
        host.nvlink_from_shell = from_shell
        return observed

    unread = planfile.farm_digest(with_gpus(None, False))  # a plan that left the shell to apply
    assert planfile.farm_digest(with_gpus(0, True)) == unread  # the apply that read it
    assert planfile.farm_digest(with_gpus(0, False)) != unread  # vCenter's own device groups count


def test_farm_digest_leaves_out_the_drivers_word_on_mixing_types() -> None:
    def with_mixing(types_may_mix: bool | None) -> Observed:
        observed = farm()
        observed.hosts["esx-01"].gpus = [ObservedGpu("0000:3b:00.0", "A100", types_may_mix=types_may_mix)]
        return observed

    unread = planfile.farm_digest(with_mixing(None))  # plan --out with the host's SSH service stopped
    assert planfile.farm_digest(with_mixing(True)) == unread == planfile.farm_digest(with_mixing(False))


def test_a_plan_section_that_is_not_the_plan_made_again_is_refused(tmp_path: Path) -> None:
    plan = Plan(vm_changes=[VmChange("a", destroy=True)])
    section = plan_section(plan, None, None)
    path, loaded = saved(tmp_path, plan)
    loaded.plan = section
    planfile.check_same_plan(path, loaded, plan_section(plan, None, None))
    loaded.plan = {**section, "vm_changes": []}  # the destroy taken out, the digests made to match
    with pytest.raises(planfile.PlanFileError, match=r": its plan section is not the plan its inventory gives "
                                                     r"\(vm_changes differ\)"):  # fmt: skip
        planfile.check_same_plan(path, loaded, section)


def saved(tmp_path: Path, plan: Plan) -> tuple[Path, planfile.SavedPlan]:
    path = tmp_path / "p.plan"
    s = planfile.SavedPlan(
        "apiVersion: vgpuctl/v1\n", "inv.yaml", "https://vc/sdk", planfile.basis_of(farm(), plan), {}
    )
    planfile.save(path, s)
    return path, planfile.load(path)


def test_round_trip_and_refusals(tmp_path: Path) -> None:
    plan = Plan(vm_changes=[VmChange("a", power_on=True)])
    path, loaded = saved(tmp_path, plan)
    assert loaded.inventory_text == "apiVersion: vgpuctl/v1\n" and loaded.vcenter == "https://vc/sdk"
    planfile.check_still_valid(path, loaded, "https://vc/sdk", farm(), plan)  # unchanged: accepted
    with pytest.raises(planfile.PlanFileError, match="the farm changed since"):
        planfile.check_still_valid(path, loaded, "https://vc/sdk", farm(power="poweredOn"), plan)
    with pytest.raises(planfile.PlanFileError, match="different plan"):
        planfile.check_still_valid(
            path, loaded, "https://vc/sdk", farm(), Plan(vm_changes=[VmChange("a", power_off=True)])
        )
    with pytest.raises(planfile.PlanFileError, match="made against https://vc/sdk, not https://other/sdk"):
        planfile.check_still_valid(path, loaded, "https://other/sdk", farm(), plan)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such plan file"):
        planfile.load(tmp_path / "missing")
    (tmp_path / "x").write_text('{"format": "other"}')
    with pytest.raises(planfile.PlanFileError, match="not a vgpuctl plan file"):
        planfile.load(tmp_path / "x")
    partial = {"format": "vgpuctl-plan/v1", "version": planfile.VERSION}
    (tmp_path / "y").write_text(json.dumps({**partial, "digest": planfile.content_digest(partial)}))
    with pytest.raises(planfile.PlanFileError, match="incomplete"):  # whole by its digest, but keys are missing
        planfile.load(tmp_path / "y")


@pytest.mark.parametrize("name", ["inventory.yaml", "inventory.YML", "inventory.txt"])
def test_an_inventory_given_as_a_plan_file_says_to_use_f(tmp_path: Path, name: str) -> None:
    """`apply FILE.yaml` (no -f): the file is an inventory, by its suffix or its apiVersion."""
    path = tmp_path / name
    path.write_text("apiVersion: vgpuctl/v1\nvms: []\n")
    with pytest.raises(UsageError, match=r"is an inventory, not a plan file: an inventory goes with -f \(vgpuctl "
                                         r"apply -f .*inventory\.\w+;") as caught:
        planfile.load(path)
    assert not isinstance(caught.value, planfile.PlanFileError)
    (tmp_path / "notes.txt").write_text("- not json\n")  # neither JSON nor an inventory
    with pytest.raises(planfile.PlanFileError, match="not a vgpuctl plan file"):
        planfile.load(tmp_path / "notes.txt")


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["plan"].update({"vm_changes": []}),  # the plan section: the original plan would be applied
        lambda d: d.update(inventory=d["inventory"] + "vms: []\n"),  # the inventory: "host facts changed" before
        lambda d: d.update(basis=d["basis"].replace("farm:", "farm:0")),
        lambda d: d.update(vcenter="https://elsewhere/sdk"),
        lambda d: d.update(extra="x"),
        lambda d: d.pop("digest"),
    ],
)
def test_any_edit_of_a_plan_file_is_refused_as_edited(tmp_path: Path, edit: Any) -> None:
    path, _ = saved(tmp_path, Plan(vm_changes=[VmChange("a", power_on=True)]))
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))
    with pytest.raises(planfile.PlanFileError) as refused:
        planfile.load(path)
    assert str(refused.value) == (
        f"{path}: the plan file was edited since `vgpuctl plan --out` wrote it (its digest does not match its "
        "content): nothing was changed; make a new plan with `vgpuctl plan -f FILE --out PLANFILE`"
    )


def test_a_plan_file_laid_out_again_is_the_same_content(tmp_path: Path) -> None:
    path, _ = saved(tmp_path, Plan(vm_changes=[VmChange("a", power_on=True)]))
    path.write_text(json.dumps(json.loads(path.read_text()), sort_keys=True))  # other whitespace and key order
    assert planfile.load(path).vcenter == "https://vc/sdk"


@pytest.mark.parametrize("version", ["", ', "version": 1', ', "version": 99'])
def test_a_plan_file_of_another_version_is_refused_in_one_line(tmp_path: Path, version: str) -> None:
    path = tmp_path / "old.plan"
    path.write_text('{"format": "vgpuctl-plan/v1"' + version + ', "vcenter": "v", "inventory_path": "i", '
                    '"basis": "b", "plan": {}, "inventory": ""}')  # fmt: skip
    with pytest.raises(planfile.PlanFileError) as refused:
        planfile.load(path)
    message = str(refused.value)
    assert "\n" not in message
    assert message == (
        f"{path}: the plan file was written by another version of vgpuctl: make it again with `vgpuctl plan --out`"
    )


def test_a_saved_plan_carries_typed_evacuations(tmp_path: Path) -> None:
    action = EvacuationAction(EvacuationKind.MIGRATE, "esx-02")
    move = HostChange("esx-01", ChangeKind.EVACUATE, "a", "poweredOn", action)
    plan = Plan(host_changes=[move])
    path, loaded = saved(tmp_path, plan)
    planfile.save(path, planfile.SavedPlan(loaded.inventory_text, "inv.yaml", "https://vc/sdk", loaded.basis,
                                           plan_to_json(plan)))  # fmt: skip
    (diff,) = planfile.load(path).plan["host_changes"]
    assert diff["evacuation"] == {"action": "migrate", "destination": "esx-02"}
    assert diff["new"] == "migrate to esx-02" and diff["phase"] == "maintenance"


def test_drift_fields_are_the_settings_and_where_a_host_is() -> None:
    settings = {f for s in SETTINGS for f in s.drift_fields}
    assert set(planfile.HOST_FIELDS) == set(planfile.ORCHESTRATION_FIELDS) | settings
    assert len(planfile.HOST_FIELDS) == len(set(planfile.HOST_FIELDS))
