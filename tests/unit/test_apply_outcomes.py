"""Apply outcomes without a vCenter: a VM whose re-plan after the host changes fails fails alone, the summary
counts every VM (changed, failed, skipped, not started, unchanged) and never says "0 changed" when work was
left undone, and the line a second Ctrl-C prints."""

from __future__ import annotations

from typing import Any

import kinds
import pytest

from vgpuctl import pipeline, progress
from vgpuctl.domain import Outcome, Phase, VmStep
from vgpuctl.inventory import load_inventory_text
from vgpuctl.model import (
    ApplyResult,
    CloneSpec,
    HostApplyResult,
    HostChange,
    HostOutcome,
    Observed,
    ObservedGpu,
    ObservedHost,
    ObservedVm,
    Plan,
    Problem,
    VmChange,
    VmOutcome,
)
from vgpuctl.reports.apply import apply_report, left_lines, render_apply_summary, summarize, summary_line

pytestmark = pytest.mark.unit

INVENTORY = """\
apiVersion: vgpuctl/v1
vms:
  - name: good-{01..02}
    template: tmpl
    cluster: C
    vgpus: {profile: grid_a100-40c, count: 1}
    power: 'off'
  - name: bad-01
    template: no-such-template
    cluster: C
    vgpus: {profile: grid_a100-40c, count: 1}
    power: 'off'
"""


def farm() -> Observed:
    a100 = {"device_name": "NVIDIA A100-PCIE-40GB", "memory_kb": 40 * 1024 * 1024, "graphics_type": "sharedDirect"}
    host = ObservedHost(
        name="esx-01",
        cluster="C",
        default_graphics_type="sharedDirect",
        gpus=[ObservedGpu(pci_id=f"0000:{b}:00.0", vgpu_mode="sameSize", **a100) for b in ("3b", "5e", "86")],
        offered_profiles=["grid_a100-20c", "grid_a100-40c"],
    )
    vms = {"tmpl": ObservedVm("tmpl", is_template=True, firmware="efi", host="esx-01")}
    return Observed(datacenter="DC0", hosts={"esx-01": host}, clusters={"C": ["esx-01"]}, vms=vms)


def test_replan_leaves_out_only_the_vm_that_fails() -> None:
    inventory = load_inventory_text(INVENTORY)
    whole = pipeline.replan_vms(inventory, farm(), [])
    assert [p.vm for p in whole.problems] == ["bad-01"]  # the failure this test is about
    vm_plan, failed = pipeline.replan_vms_alone(inventory, farm(), [])
    assert not vm_plan.errors
    assert [c.vm for c in vm_plan.changes] == ["good-01", "good-02"]
    assert list(failed) == ["bad-01"] and "no-such-template" in failed["bad-01"][0]


def test_problems_are_told_apart_by_the_vm_they_name_never_by_their_text() -> None:
    the_plan = Plan(problems=[Problem("x", vm="a"), Problem("host h: down"), Problem("y: z", vm="b"),
                              Problem("vm c: looks like a VM's")])
    assert pipeline.vm_problems(the_plan) == {"a": ["x"], "b": ["y: z"]}
    assert the_plan.errors == ["vm a: x", "host h: down", "vm b: y: z", "vm c: looks like a VM's"]


def test_apply_after_host_changes_goes_on_past_a_vm_whose_replan_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = load_inventory_text(INVENTORY)
    applied: list[list[str]] = []

    def fake_apply_vms(session: Any, the_plan: Plan, observed: Observed, *args: Any) -> ApplyResult:
        applied.append([c.vm for c in the_plan.changes])
        return ApplyResult(vms=[VmOutcome(c.vm, Outcome.CHANGED, ["clone"]) for c in the_plan.changes])

    monkeypatch.setattr(pipeline, "apply_hosts", lambda *a, **k: object())
    monkeypatch.setattr(pipeline, "pending_changes", lambda *a: [])
    monkeypatch.setattr(pipeline, "observe", lambda *a, **k: farm())
    monkeypatch.setattr(pipeline, "apply_vms", fake_apply_vms)
    first = Plan(host_changes=[HostChange("esx-01", kinds.SCHEDULER, "host", "", "x", Phase.REBOOT)])
    outcome = pipeline.apply(object(), inventory, first, farm(), pipeline.RunOptions())  # type: ignore[arg-type]
    assert applied == [["good-01", "good-02"]]
    status = {o.vm: o.status for o in outcome.vms.vms}
    assert status == {"bad-01": Outcome.FAILED, "good-01": Outcome.CHANGED, "good-02": Outcome.CHANGED}
    bad = next(o for o in outcome.vms.vms if o.vm == "bad-01")
    assert bad.fault_type == "PlanError" and "after the host changes" in bad.message
    assert outcome.vm_errors == []


def test_a_replan_error_naming_no_vm_counts_every_vm_as_not_started(monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = load_inventory_text(INVENTORY)
    monkeypatch.setattr(pipeline, "apply_hosts", lambda *a, **k: object())
    monkeypatch.setattr(pipeline, "pending_changes", lambda *a: [])
    monkeypatch.setattr(pipeline, "observe", lambda *a, **k: farm())
    monkeypatch.setattr(pipeline, "replan_vms", lambda *a: Plan(problems=[Problem("cluster C: no host left")]))
    first = Plan(
        vm_changes=[VmChange("good-01", clone=CloneSpec("tmpl"), power_on=True)],
        host_changes=[HostChange("esx-01", kinds.SCHEDULER, "host", "", "x")],
    )
    outcome = pipeline.apply(object(), inventory, first, farm(), pipeline.RunOptions())  # type: ignore[arg-type]
    assert outcome.vm_errors == ["cluster C: no host left"]
    assert [(o.vm, o.status, o.left) for o in outcome.vms.vms] == [
        ("good-01", Outcome.NOT_STARTED, ["clone", "power-on"])
    ]


# ---------------------------------------------------------------------------------------------- summary


def groups(**names: list[str]) -> dict[str, list[str]]:
    result = ApplyResult(vms=[VmOutcome(vm, Outcome(status.replace("_", "-"))) for status, vms in names.items()
                              for vm in vms])  # fmt: skip
    return summarize(result.vms)


def test_summary_counts_every_kind_of_vm() -> None:
    line = summary_line(groups(changed=["a"], failed=["b"], skipped=["c"], not_started=["d", "e"]), True)
    assert line == "Apply interrupted: 1 changed, 1 failed, 1 skipped, 2 not started, 0 unchanged."


@pytest.mark.parametrize(
    ("names", "plan_failed"),
    [({"not_started": ["a"]}, False), ({"failed": ["a"]}, False), ({"skipped": ["a"]}, False), ({}, True)],
)
def test_no_zero_changed_when_work_was_left_undone(names: dict[str, list[str]], plan_failed: bool) -> None:
    line = summary_line(groups(**names), False, plan_failed)
    assert "0 changed" not in line and line.startswith("Apply incomplete: no VM changed")


def test_a_clean_run_says_finished() -> None:
    assert summary_line(groups(changed=["a"], unchanged=["b"]), False) == (
        "Apply finished: 1 changed, 0 failed, 0 skipped, 0 not started, 1 unchanged."
    )


def test_left_lines_say_how_to_continue() -> None:
    result = ApplyResult(vms=[VmOutcome("a", Outcome.CHANGED, ["clone"], left=["power-on"]),
                              VmOutcome("b", Outcome.NOT_STARTED, left=["clone", "power-on"])])
    assert left_lines(result.vms) == [
        "  left: a (power-on)",  # b never started: the summary's "not started" line names it
        "  to continue: run the same apply again; it plans only what is left",
    ]
    never = [VmOutcome("b", Outcome.NOT_STARTED, left=["clone"])]
    assert left_lines(never) == ["  to continue: run the same apply again; it plans only what is left"]


def test_one_vocabulary_and_long_lists_cut_unless_verbose() -> None:
    vms = [VmOutcome(f"vm-{i:04d}", Outcome.CHANGED, ["reconfigure"]) for i in range(30)]
    vms += [VmOutcome(f"vm-{i:04d}", Outcome.NOT_STARTED, left=["reconfigure"]) for i in range(30, 920)]
    hosts = HostApplyResult([HostOutcome("esx-01", Outcome.CHANGED, ["reboot"]),
                             HostOutcome("esx-02", Outcome.NOT_STARTED, message="interrupted")])
    report = apply_report(Plan(), ApplyResult(vms=vms, interrupted=True), hosts=hosts, interrupted=True)
    text = render_apply_summary(report)
    assert "Hosts: 1 changed, 0 failed, 1 not started." in text and "esx-02: not started (interrupted)" in text
    assert "skipped" not in text.replace("0 skipped", "")  # never "skipped" for what was never started
    assert "Apply interrupted: 30 changed, 0 failed, 0 skipped, 890 not started, 0 unchanged." in text
    assert "  changed: vm-0000, " in text and "vm-0019 and 10 more" in text and "vm-0020" not in text
    assert "  not started: vm-0030, " in text and "vm-0049 and 870 more" in text
    assert max(len(line) for line in text.splitlines()) < 400
    full = render_apply_summary(report, full=True)
    assert "vm-0919" in full and "more" not in full.replace("more VMs", "")


def test_planned_steps_in_order() -> None:
    change = VmChange("a", clone=CloneSpec("t"), power_off=True, devices=[], power_on=True)
    assert change.planned_steps() == [VmStep.CLONE, VmStep.POWER_OFF, VmStep.POWER_ON]
    destroyed = VmChange("b", power_off=True, destroy=True)
    assert destroyed.planned_steps() == [VmStep.POWER_OFF, VmStep.DESTROY]


def test_second_interrupt_names_the_running_tasks() -> None:
    assert progress.second_interrupt_message(["reconfigure a (task-1)"]) == (
        "interrupted again: exiting now; these vCenter tasks may still be running: reconfigure a (task-1)"
    )
    assert "no vCenter task was running" in progress.second_interrupt_message([])
