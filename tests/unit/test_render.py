"""render_plan_text and plan_to_json on hand-built plans (plan fixtures cover rendering of real plans)."""

from __future__ import annotations

import json

import kinds
import pytest

from vgpuctl.domain import ChangeKind, EvacuationKind, Phase
from vgpuctl.inventory import load_inventory_text
from vgpuctl.model import (
    CloneSpec,
    DeviceChange,
    EvacuationAction,
    FieldChange,
    HostChange,
    Observed,
    Op,
    Plan,
    Problem,
    VmChange,
)
from vgpuctl.planner import make_plan
from vgpuctl.reports.plan import disruptions, plan_to_json, render_plan_text, summary

pytestmark = pytest.mark.unit

HAND_OVER = EvacuationAction(EvacuationKind.HAND_OVER)
RESTORE_AFTER = EvacuationAction(EvacuationKind.RESTORE_AFTER)


def _plan() -> Plan:
    return Plan(
        vm_changes=[
            VmChange(
                "train-01",
                fields=[FieldChange("memoryReservationLockedToMax", False, True)],
                devices=[DeviceChange(Op.ADD, "grid_a100-40c"), DeviceChange(Op.REMOVE, "grid_a100-20c", 13000)],
                extra_config={"pciPassthru.use64bitMMIO": "TRUE", "old.key": None},
                power_off=True,
                power_on=True,
            ),
            VmChange(
                "train-02", clone=CloneSpec("ubuntu-22.04-ml", cluster="GPU-Cluster", host="esx-02"), power_on=True
            ),
            VmChange("untouched"),
        ],
        host_changes=[
            HostChange("esx-01", kinds.MIG, "0000:3b:00.0", "disabled", "enabled", Phase.REBOOT),
            HostChange("esx-02", kinds.SCHEDULER, "host", "best-effort", "equal-share", Phase.ONLINE),
        ],
    )


def test_text() -> None:
    assert render_plan_text(_plan()) == (
        "~ host esx-01 mig 0000:3b:00.0: disabled -> enabled  (disruptive, reboot)\n"
        "~ host esx-02 scheduler: best-effort -> equal-share\n"
        "~ vm train-01  (power off -> reconfigure -> power on)\n"
        "    ~ memoryReservationLockedToMax: false -> true\n"
        "    + vgpu grid_a100-40c\n"
        "    - vgpu grid_a100-20c (key 13000)\n"
        "    - extraConfig old.key\n"
        "    + extraConfig pciPassthru.use64bitMMIO = TRUE\n"
        "+ vm train-02  (clone from ubuntu-22.04-ml -> power on)\n"
        "    + clone ubuntu-22.04-ml to cluster GPU-Cluster, host esx-02\n"
        "Disruptive steps:\n"
        "  ! host esx-01: enters maintenance mode, exits after the change\n"
        "  ! host esx-01: reboots in maintenance mode\n"
        "  ! vm train-01: powered off for its own change; powered on again after it\n"
        "Plan: 2 host changes, 1 to create, 1 to change, 1 power-off, 1 host in maintenance, 1 reboot.\n"
    )


def test_text_errors_and_warnings() -> None:
    plan = Plan(
        vm_changes=[VmChange("a", power_on=True)],
        problems=[Problem("broken", vm="a"), Problem("also", vm="b")],
        warnings=["vm c: odd"],
    )
    text = render_plan_text(plan)
    assert text.endswith(
        "Warning: vm c: odd\nError: vm b: also\nPlan: 0 to create, 1 to change, 0 power-off.\n"
        "Plan has 2 errors; nothing can be applied.\n"
    )
    assert text.startswith("~ vm a  (power on)\n    x cannot be carried out: broken\n")  # under its change


def test_text_empty() -> None:
    assert render_plan_text(Plan(vm_changes=[VmChange("a")])) == "No changes: the farm matches the inventory.\n"


def test_json() -> None:
    data = plan_to_json(_plan())
    assert json.loads(json.dumps(data)) == data
    assert data["kind"] == "plan" and "round_trips" not in data
    assert [c["vm"] for c in data["vm_changes"]] == ["train-01", "train-02"]  # empty changes left out
    first = data["vm_changes"][0]
    assert first["steps"] == ["power-off", "reconfigure", "power-on"]
    assert first["devices"][1] == {"op": "-", "profile": "grid_a100-20c", "key": 13000, "nvlink_group": None}
    assert first["fields"][0] == {"field": "memoryReservationLockedToMax", "old": False, "new": True, "op": "~"}
    assert data["vm_changes"][1]["steps"] == ["clone", "power-on"]
    assert data["host_changes"][0]["needs_reboot"] is True
    assert [(h["setting"], h["gpu"]) for h in data["host_changes"]] == [("mig", "0000:3b:00.0"), ("scheduler", None)]
    assert data["summary"] == {
        "create": 1,
        "change": 1,
        "power_off": 1,
        "power_on": 2,
        "host_changes": 2,
        "maintenance": 1,
        "reboots": 1,
        "errors": 0,
        "warnings": 0,
        "vm_classes": 0,
        "namespaces": 0,
        "remove": 0,
    }
    assert summary(Plan()) == {
        "create": 0,
        "change": 0,
        "power_off": 0,
        "power_on": 0,
        "host_changes": 0,
        "maintenance": 0,
        "reboots": 0,
        "errors": 0,
        "warnings": 0,
        "vm_classes": 0,
        "namespaces": 0,
        "remove": 0,
    }
    assert [(d["action"], d["host"], d["vm"], d["comes_back"]) for d in data["disruptions"]] == [
        ("maintenance", "esx-01", None, True),
        ("reboot", "esx-01", None, True),
        ("power-off", None, "train-01", True),
    ]


def test_no_secrets_from_inventory() -> None:
    """A plan is made of VM, host and profile data: nothing of vcenter/ssh/guest connection settings."""
    inv = load_inventory_text(
        "apiVersion: vgpuctl/v1\n"
        "vcenter: {url: 'https://admin@vc.example.com/sdk', tls: {ca_file: /secret/ca.pem}}\n"
        "hosts: [{cluster: C, ssh: {password_env: SSH_SECRET_ENV, key_file: /secret/key}}]\n"
        "vms: [{name: a, template: t, cluster: C}]\n"
        "guests: {connection: {password_env: GUEST_SECRET_ENV}}\n"
    )
    plan = make_plan(inv, Observed())
    out = render_plan_text(plan) + json.dumps(plan_to_json(plan))
    for secret in ("admin", "/secret", "SECRET_ENV"):
        assert secret not in out


def _evacuating_plan(policy_new: EvacuationAction) -> Plan:
    return Plan(
        vm_changes=[VmChange("train-01", devices=[DeviceChange(Op.ADD, "grid_a100-3-20c")], power_on=True),
                    VmChange("web-01")],
        host_changes=[HostChange("esx-01", ChangeKind.EVACUATE, "train-01", "poweredOn", policy_new),
                      HostChange("esx-01", ChangeKind.EVACUATE, "web-01", "poweredOn", RESTORE_AFTER),
                      HostChange("esx-01", ChangeKind.EVACUATE, "web-02", "poweredOn", RESTORE_AFTER),
                      HostChange("esx-01", kinds.MIG, "0000:3b:00.0", "disabled", "enabled", Phase.REBOOT)],
    )  # fmt: skip


def test_evacuated_vms_are_disruptions_counted_in_the_summary() -> None:
    plan = _evacuating_plan(HAND_OVER)
    found = [(d.vm, d.cause, d.comes_back) for d in disruptions(plan) if d.action == "power-off"]
    assert found == [("train-01", "evacuation", True), ("web-01", "evacuation", True), ("web-02", "evacuation", True)]
    text = render_plan_text(plan)
    assert "  ! vm web-01: powered off to evacuate host esx-01; powered on again after the host change\n" in text
    assert (
        "  ! vm train-01: powered off to evacuate host esx-01; reconfigured by its VM change, then powered on" in text
    )
    assert text.endswith(
        "Plan: 4 host changes, 0 to create, 1 to change, 3 power-off, 1 host in maintenance, 1 reboot.\n"
    )
    assert plan_to_json(plan)["summary"]["power_off"] == 3


def test_a_vm_its_own_change_leaves_off_does_not_come_back() -> None:
    plan = Plan(vm_changes=[VmChange("a", devices=[DeviceChange(Op.ADD, "grid_a100-40c")], power_off=True)])
    (d,) = disruptions(plan)
    assert (d.action, d.vm, d.host, d.comes_back) == ("power-off", "a", None, False)
    assert "! vm a: powered off for its own change; stays off" in render_plan_text(plan)


def test_no_disruption_section_without_disruptions_and_one_beside_problems() -> None:
    assert "Disruptive" not in render_plan_text(Plan(vm_changes=[VmChange("a", power_on=True)]))
    broken = _evacuating_plan(HAND_OVER)
    broken.problems.append(Problem("broken", vm="x"))
    text = render_plan_text(broken)  # a plan with problems shows everything it would do, its disruptions too
    assert "Disruptive steps:" in text and "Error: vm x: broken" in text
