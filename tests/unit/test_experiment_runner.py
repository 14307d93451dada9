"""The experiment run's order and bookkeeping against a recording farm: plan first, apply, run, record, restore;
resumption, on_failure, a variant that does not plan; and the guest events folded into results."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpuctl.errors import PlanError, UsageError, VgpuctlError
from vgpuctl.experiment.report import build_report, render_markdown
from vgpuctl.experiment.runner import ExperimentStopped, NotApplied, record_of, run_experiment
from vgpuctl.experiment.schema import WorkloadSpec, checked_variants, load_experiment
from vgpuctl.experiment.store import BASE, ResultsDir
from vgpuctl.experiment.workload import RESULT_TASK, GuestRun, collect, extravars
from vgpuctl.guest.runner import HostTracker
from vgpuctl.inventory import load_inventory

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "experiment"
H100 = (FIXTURES / "all_reduce_perf.h100-2vms-16gpus.txt").read_text()

BASE_INVENTORY = """\
apiVersion: vgpuctl/v1
hosts:
  - {cluster: GPU-Cluster, nvlink: enabled}
vms:
  - {name: "train-{01..02}", cluster: GPU-Cluster, memory_gb: 64, vgpus: {profile: grid_a100-40c, count: 2},
     guest: {group: trainers}}
guests:
  groups:
    trainers: {roles: [], vars: {experiment_build: false}}
"""

EXPERIMENT = """\
apiVersion: vgpuctl/v1
kind: Experiment
inventory: inventory.yaml
vms: [train-01, train-02]
repetitions: 2
on_failure: ON_FAILURE
workload: {builtin: nccl-tests, test: all_reduce_perf, scope: across-vms}
variants:
  - name: nvlink-on
  - name: nvlink-off
    hosts: [{cluster: GPU-Cluster, nvlink: disabled}]
"""


class RecordingFarm:
    """Records what the runner asks of the farm; the guests print the recorded all_reduce_perf output."""

    def __init__(self, fail_at: set[tuple[str, int]] = frozenset(), plan_errors: dict[str, list[str]] | None = None,
                 errors_on: dict[tuple[str, str], list[str]] | None = None):
        self.calls: list[str] = []
        self.applied = "base"
        self.fail_at = set(fail_at)
        self.errors_for = plan_errors or {}
        self.errors_on = errors_on or {}  # (what the farm is in, the inventory planned) -> errors
        self.runs: dict[str, int] = {}

    def _name(self, inventory) -> str:
        return inventory.hosts[0].nvlink if inventory.hosts else "?"

    def plan_errors(self, inventory):
        self.calls.append(f"plan {self._name(inventory)}")
        name = self._name(inventory)
        return self.errors_for.get(name, []) + self.errors_on.get((self.applied, name), [])

    def apply(self, inventory):
        self.calls.append(f"apply {self._name(inventory)}")
        self.applied = self._name(inventory)

    def guest_addresses(self, inventory, vms):
        return {vm: f"10.0.0.{i}" for i, vm in enumerate(vms, start=1)}

    def host_facts(self, inventory, vms):
        links = 24 if self.applied == "enabled" else 0
        return {"hosts": {"esx-01": {"gpus": {"0000:3b:00.0": {"pci_id": "0000:3b:00.0", "nvlink_active": links}}}},
                "vm_hosts": dict.fromkeys(vms, "esx-01")}

    def run_workload(self, inventory, addresses, vms, workload):
        n = self.runs[self.applied] = self.runs.get(self.applied, 0) + 1
        self.calls.append(f"run {self.applied}")
        if (self.applied, n) in self.fail_at:
            return GuestRun({vms[0]: "Test NCCL failure common.cu:1005 'unhandled system error'"}, {vms[0]: 3},
                            {vm: {"topo": "", "nvlink": "", "gpus": ""} for vm in vms})
        return GuestRun({vms[0]: H100}, {vms[0]: 0}, {vm: {"topo": "", "nvlink": "", "gpus": ""} for vm in vms})


def setup(tmp_path: Path, on_failure: str = "continue"):
    (tmp_path / "inventory.yaml").write_text(BASE_INVENTORY)
    (tmp_path / "exp.yaml").write_text(EXPERIMENT.replace("ON_FAILURE", on_failure))
    exp = load_experiment(tmp_path / "exp.yaml")
    return exp, checked_variants(exp), load_inventory(tmp_path / "inventory.yaml"), ResultsDir(tmp_path / "results")


def test_plans_everything_first_then_applies_runs_and_restores(tmp_path):
    exp, checked, base, results = setup(tmp_path)
    farm = RecordingFarm()
    events: list[str] = []
    summary = run_experiment(exp, checked, base, results, farm, events=lambda kind, data: events.append(kind))
    assert farm.calls == ["plan enabled", "plan disabled",
                          "apply enabled", "run enabled", "run enabled",
                          "plan disabled", "apply disabled", "run disabled", "run disabled",  # planned again, now
                          "plan enabled", "apply enabled"]
    assert summary.restored and summary.variants == {"nvlink-on": {"ran": 2, "skipped": 0, "failed": 0},
                                                     "nvlink-off": {"ran": 2, "skipped": 0, "failed": 0}}
    assert results.state()["applied"] == BASE
    rec = results.load("nvlink-off", 2)
    assert rec.status == "ok" and rec.parsed["train-01"]["rows"][-1]["size_bytes"] == 8589934592
    assert results.output("nvlink-off", 2, "train-01") == H100
    assert results.facts("nvlink-off", 1)["hosts"]["esx-01"]["gpus"]["0000:3b:00.0"]["nvlink_active"] == 0
    assert results.expectations("nvlink-off")["nvlink"] == "off"
    assert "nvlink: disabled" in results.inventory_path("nvlink-off").read_text()
    assert events[:3] == ["planning", "planning", "applying"]


def test_a_rerun_skips_what_is_done_and_retries_failures(tmp_path):
    exp, checked, base, results = setup(tmp_path)
    first = RecordingFarm(fail_at={("disabled", 1)})
    run_experiment(exp, checked, base, results, first, keep_last=True)
    assert results.load("nvlink-off", 1).status == "failed"
    assert results.load("nvlink-off", 1).errors == [
        "train-01: exit status 3: Test NCCL failure common.cu:1005 'unhandled system error'"]
    assert results.state()["applied"] == "nvlink-off"  # --keep-last
    again = RecordingFarm()
    summary = run_experiment(exp, checked, base, results, again)
    assert again.calls == ["plan disabled", "apply disabled", "run disabled", "plan enabled", "apply enabled"]
    assert summary.variants["nvlink-on"] == {"ran": 0, "skipped": 2, "failed": 0}
    assert results.load("nvlink-off", 1).status == "ok"


def test_on_failure_stop_leaves_the_farm_in_the_variant(tmp_path):
    exp, checked, base, results = setup(tmp_path, "stop")
    farm = RecordingFarm(fail_at={("enabled", 1)})
    with pytest.raises(ExperimentStopped, match=r"repetition 1 failed .*left in variant 'nvlink-on'"):
        run_experiment(exp, checked, base, results, farm)
    assert farm.calls[-1] == "run enabled" and results.state()["applied"] == "nvlink-on"


def test_a_first_variant_that_does_not_plan_stops_before_anything_changes(tmp_path):
    exp, checked, base, results = setup(tmp_path)
    farm = RecordingFarm(plan_errors={"enabled": ["esx-01: NVLink cannot be switched (module parameter missing)"]})
    with pytest.raises(PlanError, match=r"variant 'nvlink-on' does not plan \(nothing was changed\)"):
        run_experiment(exp, checked, base, results, farm)
    assert not any(c.startswith(("apply", "run")) for c in farm.calls)
    assert results.state()["applied"] is None and results.state()["partial"] is None


def test_a_variant_is_checked_on_the_farm_the_variant_before_leaves(tmp_path):
    """nvlink-off plans on today's farm but not on the one nvlink-on leaves: it stops there, before its apply,
    and the farm is (and state.json says it is) in nvlink-on."""
    exp, checked, base, results = setup(tmp_path)
    farm = RecordingFarm(errors_on={("enabled", "disabled"): ["esx-01: VM train-01 runs there (evacuate: refuse)"]})
    events: list[tuple[str, dict]] = []
    with pytest.raises(PlanError, match=r"variant 'nvlink-off' does not plan on the farm as variant 'nvlink-on' "
                                        r"left it .*: esx-01: VM train-01 runs there"):
        run_experiment(exp, checked, base, results, farm, events=lambda kind, data: events.append((kind, data)))
    assert farm.calls == ["plan enabled", "plan disabled", "apply enabled", "run enabled", "run enabled",
                          "plan disabled"]
    state = results.state()
    assert state["applied"] == "nvlink-on" and state["partial"] is None
    assert not [kind for kind, _ in events if kind == "plan-warning"]  # up front it planned: no warning then


def test_a_variant_that_plans_only_after_the_one_before_runs_with_a_warning(tmp_path):
    """nvlink-off does not plan on today's farm but does on the one nvlink-on leaves: a warning up front, not a
    refusal; it runs."""
    exp, checked, base, results = setup(tmp_path)
    farm = RecordingFarm(errors_on={("base", "disabled"): ["esx-01: no room for train-01"]})
    events: list[tuple[str, dict]] = []
    summary = run_experiment(exp, checked, base, results, farm, events=lambda kind, data: events.append((kind, data)))
    assert summary.variants["nvlink-off"] == {"ran": 2, "skipped": 0, "failed": 0}
    warnings = [data for kind, data in events if kind == "plan-warning"]
    assert warnings == [{"variant": "nvlink-off", "errors": ["esx-01: no room for train-01"], "after": "nvlink-on"}]


def test_the_state_never_names_a_variant_applied_before_its_apply_finished(tmp_path):
    exp, checked, base, results = setup(tmp_path)
    seen: list[dict] = []

    class Watching(RecordingFarm):
        def apply(self, inventory):
            seen.append(results.state())  # what state.json says while the apply runs
            super().apply(inventory)

    run_experiment(exp, checked, base, results, Watching())
    assert [(s["applied"], s["partial"]) for s in seen] == [
        (None, "nvlink-on"), ("nvlink-on", "nvlink-off"), ("nvlink-off", BASE)]
    assert (results.state()["applied"], results.state()["partial"]) == (BASE, None)


def test_record_of_across_vms_expects_the_launcher_only():
    w = WorkloadSpec(builtin="nccl-tests", scope="across-vms")
    rec = record_of("v", 1, w, GuestRun({"a": H100}, {"a": 0}), ["a", "b"])
    assert rec.status == "ok" and list(rec.parsed) == ["a"]
    per_vm = WorkloadSpec(builtin="nccl-tests", scope="per-vm")
    rec = record_of("v", 1, per_vm, GuestRun({"a": H100, "b": "bash: all_reduce_perf: not found"}, {"a": 0, "b": 0}),
                    ["a", "b"])
    assert rec.status == "failed" and rec.errors == ["b: nccl-tests: no result rows in the output"]
    rec = record_of("v", 1, per_vm, GuestRun({"a": H100}, {"a": 0}, errors=["b: unreachable: timed out"]), ["a", "b"])
    assert rec.errors == ["b: unreachable: timed out"]
    cmd = record_of("v", 1, WorkloadSpec(command="true"), GuestRun({"a": "", "b": ""}, {"a": 0, "b": 0}), ["a", "b"])
    assert cmd.status == "ok" and cmd.parsed == {}


def test_collect_reads_the_result_events():
    events = [
        {"event": "runner_on_ok", "event_data": {"host": "a", "task": RESULT_TASK, "res": {"experiment_result": {
            "ran": True, "rc": 0, "output": H100, "topo": "T", "nvlink": "", "gpus": "550.90.07, GRID A100-40C"}}}},
        {"event": "runner_on_ok", "event_data": {"host": "b", "task": RESULT_TASK, "res": {"experiment_result": {
            "ran": False, "rc": None, "output": "", "topo": "", "nvlink": "", "gpus": ""}}}},
        {"event": "runner_on_ok", "event_data": {"host": "a", "task": "Read the GPU topology", "res": {}}},
    ]
    tracker = HostTracker()
    tracker.feed({"event": "runner_on_unreachable", "event_data": {"host": "c", "res": {"msg": "ssh: timed out"}}})
    run = collect(events, ["a", "b", "c"], tracker)
    assert run.outputs == {"a": H100} and run.rcs == {"a": 0}
    assert run.facts["a"] == {"topo": "T", "nvlink": "", "gpus": "550.90.07, GRID A100-40C"} and "b" in run.facts
    assert run.errors == ["c: ssh: timed out"]


def test_extravars_carry_the_workload_and_experiment_settings():
    w = WorkloadSpec(builtin="p2pBandwidthLatencyTest")
    out = extravars(w, ["a"], {"experiment_build": False, "nccl_socket_ifname": "eth0"})
    assert out["experiment_build"] is False and "nccl_socket_ifname" not in out
    assert out["experiment_vms"] == ["a"] and out["experiment_workload"]["builtin"] == "p2pBandwidthLatencyTest"


def test_a_failed_apply_is_noted_and_the_report_says_where_the_farm_is(tmp_path):
    exp, checked, base, results = setup(tmp_path)

    class FailingFarm(RecordingFarm):
        def apply(self, inventory):
            super().apply(inventory)
            if inventory.hosts[0].nvlink == "disabled":
                raise VgpuctlError("apply failed on host(s) esx-01: nvlink 0000:3b:00.0: 12 of 12 links up, "
                                   "expected none")

    with pytest.raises(VgpuctlError, match="12 of 12 links up"):
        run_experiment(exp, checked, base, results, FailingFarm())
    state = results.state()
    # not "applied": the farm is part-way from nvlink-on (the last whole one) into nvlink-off
    assert state["applied"] == "nvlink-on" and state["partial"] == "nvlink-off"
    assert state["history"][-1]["note"].startswith("apply failed on host(s)")
    text = render_markdown(build_report(results))
    assert "Farm now: part-way from variant 'nvlink-on' into variant 'nvlink-off': apply failed on host(s) esx-01: " \
           "nvlink 0000:3b:00.0: 12 of 12 links up, expected none (the base inventory is not restored" in text


def test_a_refused_confirmation_leaves_the_state_as_it_was(tmp_path):
    exp, checked, base, results = setup(tmp_path)

    class NoTerminal(RecordingFarm):
        def apply(self, inventory):
            raise NotApplied(UsageError("apply needs confirmation but stdin is not a terminal: rerun with --yes"))

    with pytest.raises(UsageError):  # raised as the apply raised it
        run_experiment(exp, checked, base, results, NoTerminal())
    state = results.state()
    assert state["applied"] is None and state["partial"] is None
    assert state["history"][-1]["note"] == ("nvlink-on not applied: apply needs confirmation but stdin is not a "
                                            "terminal: rerun with --yes")
