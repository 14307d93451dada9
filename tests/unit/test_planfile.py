"""Plan files: the digest of what a plan was based on, and the refusals of a changed farm or a bad file."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpuctl import planfile
from vgpuctl.errors import UsageError
from vgpuctl.model import Observed, ObservedHost, ObservedVgpu, ObservedVm, Plan, VmChange

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
    (tmp_path / "y").write_text('{"format": "vgpuctl-plan/v1"}')
    with pytest.raises(planfile.PlanFileError, match="incomplete"):
        planfile.load(tmp_path / "y")
