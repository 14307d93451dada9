"""The JSON documents and their schemas: the committed schemas are the ones the report types generate, real
documents produced by the code validate against them, and a renamed or extra key does not."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import kinds
import pytest
from hostfacts import host_facts
from perfseries import observed_for, usage_read, window_of
from typer.testing import CliRunner

from vgpuctl.capacity.answer import plan_capacity
from vgpuctl.capacity.demand import Demand
from vgpuctl.capacity.fitnow import what_fits
from vgpuctl.capacity.synthetic import RunningVm, SynthHost, make_farm
from vgpuctl.cli.common import error_report
from vgpuctl.cli.main import app
from vgpuctl.cli.sim import parse_env_file, with_esxi_env
from vgpuctl.domain import ChangeKind, CheckStatus, EvacuationKind, Outcome, Phase, StopReason, VmStep, WindowStage
from vgpuctl.errors import InventoryError, InventoryErrors, PlanError, PreflightFailed, UsageError
from vgpuctl.events import EventStream
from vgpuctl.experiment.output import write_report
from vgpuctl.experiment.runner import RunSummary, run_experiment
from vgpuctl.experiment.schema import checked_variants, load_experiment
from vgpuctl.experiment.store import ResultsDir
from vgpuctl.export import FleetExport, export_fleet, export_inventory, export_part
from vgpuctl.farm.usage import gpu_usage, judge_vms
from vgpuctl.guest.runner import DeployResult, GuestOutcome
from vgpuctl.history import new_record
from vgpuctl.inventory import load_inventory_text
from vgpuctl.model import (
    ApplyResult,
    ChangeOutcome,
    CloneSpec,
    DeviceChange,
    EvacuationAction,
    FieldChange,
    GuestDriverMove,
    HostApplyResult,
    HostChange,
    HostOutcome,
    Observed,
    ObservedGpu,
    ObservedHost,
    ObservedProfile,
    ObservedVgpu,
    ObservedVm,
    Op,
    Plan,
    Problem,
    SupervisorApplyResult,
    UpgradeWindow,
    VmChange,
    VmOutcome,
)
from vgpuctl.preflight.check import PreflightCheck
from vgpuctl.records.classes import ClassState, NamespaceState, SupervisorState
from vgpuctl.records.work import WORK_FIELD
from vgpuctl.reports import schemas
from vgpuctl.reports.apply import ApplyReport, HostChangeReport, host_change_report
from vgpuctl.reports.apply import apply_report as build_apply_report
from vgpuctl.reports.base import ErrorInfo, Report
from vgpuctl.reports.capacity import (
    CapacityDemandReport,
    CapacityDrainReport,
    CapacityReport,
    capacity_demand_report,
    capacity_drain_report,
    capacity_report,
)
from vgpuctl.reports.experiment import (
    ExperimentReport,
    ExperimentRestoreReport,
    ExperimentValidateReport,
    experiment_run_report,
    experiment_validate_report,
)
from vgpuctl.reports.explain import ExplainReport, explain_host
from vgpuctl.reports.export import ExportReport
from vgpuctl.reports.fleet import (
    FleetApplyPart,
    FleetCapacityPart,
    FleetExportPart,
    FleetPlanPart,
    FleetPreflightPart,
    FleetStatusPart,
    fleet_apply_report,
    fleet_capacity_report,
    fleet_export_report,
    fleet_plan_report,
    fleet_preflight_report,
    fleet_status_report,
)
from vgpuctl.reports.guests import ProvisionReport, guest_run_report
from vgpuctl.reports.host import HostReport, host_status
from vgpuctl.reports.plan import plan_report, validate_report, with_class_plan
from vgpuctl.reports.preflight import preflight_report
from vgpuctl.reports.profiles import profiles_report
from vgpuctl.reports.runs import RunRecord, RunsReport, listing, record_from_json, run_result, state_of_exit
from vgpuctl.reports.schemas import REPORTS
from vgpuctl.reports.sim import SimDownReport, SimEnvReport
from vgpuctl.reports.status import (
    StatusReport,
    host_lease,
    merge_status,
    status_report,
    with_leases,
    with_supervisor,
    with_usage,
)
from vgpuctl.reports.supervisor import (
    ManifestsReport,
    SupervisorApplyReport,
    manifests_report,
    supervisor_outcomes,
    supervisor_plan_report,
    supervisor_status_report,
)
from vgpuctl.reports.usage import IdleReport, idle_report
from vgpuctl.reports.vmvgpus import vm_vgpus_report
from vgpuctl.reports.work import forget_work_report
from vgpuctl.scope import Scope
from vgpuctl.supervisor.render import render_manifests
from vgpuctl.supervisor.vmclasses import ClassChange, NamespaceChange, SupervisorPlan

sys.path.insert(0, str(Path(__file__).parent))
from test_experiment_runner import RecordingFarm
from test_experiment_runner import setup as runner_setup
from test_experiment_schema import write as experiment_file
from test_scope import scoped

from vgpuctl.capacity.drain import drain
from vgpuctl.domain import ClusterKind
from vgpuctl.settings.vgpu_manager import VGPU_MANAGER, ManagerTarget, Route

pytestmark = pytest.mark.unit

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
GPU0, GPU1 = "0000:3b:00.0", "0000:5e:00.0"


def _schema(kind: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{kind}.schema.json").read_text(encoding="utf-8"))


def _valid(kind: str, doc: dict[str, Any]) -> dict[str, Any]:
    jsonschema.validate(json.loads(json.dumps(doc)), _schema(kind))
    return doc


@pytest.mark.parametrize("report", REPORTS, ids=schemas.kind_of)
def test_committed_schema_is_generated_from_the_types(report: type[Any]) -> None:
    path = SCHEMAS / f"{schemas.kind_of(report)}.schema.json"
    regenerate = "run: python -m vgpuctl.reports.schemas docs/schemas"
    assert path.read_text(encoding="utf-8") == schemas.render(report), regenerate


def test_every_object_forbids_unknown_keys() -> None:
    def objects(node: Any) -> Any:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                yield node
            for value in node.values():
                yield from objects(value)
        elif isinstance(node, list):
            for value in node:
                yield from objects(value)

    for report in REPORTS:
        found = list(objects(schemas.schema_for(report)))
        assert found and all(o["additionalProperties"] is False for o in found), schemas.kind_of(report)


# ------------------------------------------------------------------------------------------ documents


def farm() -> Observed:
    a100 = {"device_name": "NVIDIA A100-PCIE-40GB", "memory_kb": 40 * 1024 * 1024, "graphics_type": "sharedDirect"}
    host = ObservedHost(
        name="esx-01",
        cluster="GPU-Cluster",
        module_options="NVreg_NvLinkDisable=1",
        gpus=[
            ObservedGpu(pci_id=GPU0, vgpu_mode="sameSize", vms=["a"], nvlink_set=0, **a100),
            ObservedGpu(pci_id=GPU1, vgpu_mode="multiInstanceGpu", **a100),
        ],
        offered_profiles=["grid_a100-20c", "grid_a100-3-20c", "not-a-profile"],
        profiles={"grid_a100-3-20c": ObservedProfile("grid_a100-3-20c", 20, "mig")},
    )
    vms = {
        "a": ObservedVm(
            "a", host="esx-01", folder="ml", power_state="poweredOn", vgpus=[ObservedVgpu(1, "grid_a100-20c", 7)]
        ),
        "idle": ObservedVm("idle"),
    }
    return Observed(datacenter="DC0", hosts={"esx-01": host}, vms=vms)


def a_plan() -> Plan:
    return Plan(
        vm_changes=[
            VmChange(
                "a",
                fields=[FieldChange("numCPUs", 4, 8), FieldChange("memoryReservationLockedToMax", False, True)],
                devices=[DeviceChange(Op.ADD, "grid_a100-20c", group=0), DeviceChange(Op.REMOVE, "grid_a100-10c", 9)],
                extra_config={"pciPassthru.use64bitMMIO": "TRUE", "old": None},
                power_off=True,
                power_on=True,
                depends_on_hosts=["esx-01"],
            ),
            VmChange("b", clone=CloneSpec("tmpl", cluster="GPU-Cluster", memory_mb=4096), power_on=True),
        ],
        host_changes=[
            HostChange("esx-01", kinds.MIG, GPU0, "time-sliced", "mig", Phase.REBOOT),
            HostChange("esx-01", kinds.NVLINK, "host", "enabled", "disabled", Phase.REBOOT),
            HostChange("esx-01", ChangeKind.EVACUATE, "vm-a", "poweredOn",
                       EvacuationAction(EvacuationKind.MIGRATE, "esx-02")),
        ],
        warnings=["vm b: something to know"],
    )


def a_plan_with_problems() -> Plan:
    """A plan whose host change cannot be carried out, beside its other changes (a plan that exits 1)."""
    the_plan = a_plan()
    the_plan.problems = [Problem("host esx-01: its mig change needs maintenance mode", host="esx-01"),
                         Problem("no room", vm="a", at="inv.yaml:9:5"), Problem("vCenter is too old")]  # fmt: skip
    return the_plan


def stopped_apply_report() -> ApplyReport:
    """An apply a change window cut short: a host kept back by max_failures, a host and a VM by the deadline."""
    hosts = HostApplyResult([
        HostOutcome("esx-01", Outcome.FAILED, phase="reboot", message="timeout"),
        HostOutcome("esx-02", Outcome.NOT_STARTED, message="1 host(s) failed", stopped_by=StopReason.MAX_FAILURES),
        HostOutcome("esx-03", Outcome.NOT_STARTED, message="the deadline passed", stopped_by=StopReason.DEADLINE),
    ])  # fmt: skip
    vms = ApplyResult([VmOutcome("b", Outcome.NOT_STARTED, left=[VmStep.POWER_ON], stopped_by=StopReason.DEADLINE)])
    return build_apply_report(a_plan(), vms, hosts=hosts, deadline="2026-12-01T06:00:00+01:00")


def window_plan() -> Plan:
    """A driver upgrade window: a guest moved first, two hosts one at a time, the guest moved to its release."""
    target = ManagerTarget("580.65.05", Route.SHELL, "/vmfs/volumes/ds1/nvidia/bundle.zip", "NVD-AIE-800",
                           "580.65.05-1OEM.800.1.0.20613240")
    window = UpgradeWindow(
        batches=[["esx-01"], ["esx-02"]], managers={"esx-01": ["550.90.05", "580.65.05"],
                                                    "esx-02": ["550.90.05", "580.65.05"]},
        before=[GuestDriverMove("train-01", "trainers", WindowStage.BEFORE, "550.90.07", "535.161.07",
                                "files/NVIDIA-Linux-x86_64-535.161.07-grid.run", "bbb", "R580 does not accept R550")],
        after=[GuestDriverMove("train-01", "trainers", WindowStage.AFTER, "535.161.07", "580.65.06",
                               "files/NVIDIA-Linux-x86_64-580.65.06-grid.run", "aaa", "the same release (vGPU 19.0)")],
    )
    return Plan(host_changes=[
        HostChange("esx-01", ChangeKind.EVACUATE, "train-01", "poweredOn (grid_a100-40c)",
                   EvacuationAction(EvacuationKind.MIGRATE, "esx-02")),
        HostChange("esx-01", VGPU_MANAGER, "host", "550.90.05", target, Phase.REBOOT),
        HostChange("esx-02", VGPU_MANAGER, "host", "550.90.05", target, Phase.REBOOT),
    ], window=window)


def scoped_plan() -> Report:
    the_plan, scope = scoped(Scope(vms=["train-01"]))
    return plan_report(the_plan, scope=scope)


def host_outcomes() -> HostApplyResult:
    failed = HostOutcome("esx-02", Outcome.FAILED, steps=["enter-maintenance"], phase="reboot", message="timeout")
    failed.in_maintenance, failed.vms_to_restore = True, ["a"]
    return HostApplyResult([HostOutcome("esx-01", Outcome.CHANGED, steps=["reboot"], rebooted=True), failed])


def apply_report(verbose: int = 0, vm: str | None = None) -> ApplyReport:
    vms = ApplyResult(
        [VmOutcome("a", Outcome.CHANGED, ["reconfigure"]), VmOutcome("b", Outcome.FAILED, [], "InvalidState", "no")],
        hosts_not_ready=["esx-02"],
    )
    return build_apply_report(a_plan(), vms, hosts=host_outcomes(), vm_errors=["vm c: cannot power on"], vm=vm,
                        round_trips=12 if verbose else None)


def failed_apply_report() -> ApplyReport:
    """An apply whose VM-class changes ran and whose VM failed: the error the run ends with is in the document."""
    vms = ApplyResult([VmOutcome("b", Outcome.FAILED, [], "InvalidState", "no")])
    outcomes = [ChangeOutcome("vm class gpu", "create", "changed"),
                ChangeOutcome("namespace ml", "associate", "failed", "503 from the API")]
    error = ErrorInfo("VgpuctlError", "apply failed for 1 of 1 VM(s): b")
    return build_apply_report(a_plan(), vms, classes=class_plan(), class_outcomes=outcomes, error=error)


def host_report() -> HostReport:
    gpu = {"mig_current": False, "mig_pending": True, "nvlink_links": 12, "nvlink_active": 12}
    facts = host_facts("esx-01", shell=True, options_configured="NVreg_NvLinkDisable=1", options_effective="",
                       gpus={GPU0: gpu})
    return host_status(farm().hosts["esx-01"], facts, shell_error=None)


def status_with_classes() -> StatusReport:
    observed = farm()
    facts = host_facts("esx-01", shell=True, gpus={GPU0: {"mig_current": True, "mig_pending": True}})
    facts.values["manager"] = {GPU0: "550.163.02"}  # the GPUs' driver: the vGPU Manager it runs
    facts.values["guest_drivers"] = {"a": "550.163.01"}
    rows = {"esx-01": host_status(observed.hosts["esx-01"], facts, shell_error="ssh: refused")}
    supervisor = SupervisorState(
        classes={"gpu": ClassState("gpu", 8, 65536, vgpus=["grid_a100-20c"])},
        namespaces={"ml": NamespaceState("ml", "domain-c1", ["gpu"])},
        supervisor_clusters={"domain-c1": "GPU-Cluster"},
    )
    return with_supervisor(merge_status(status_report(observed, round_trips=5), rows), supervisor)


USAGE_GPUS = [{"host": "esx-01", "gpu": GPU0, "vms": ["a"],
               "series": {"utilization.average": "336 x 1", "utilization.maximum": "336 x 3",
                          "mem.used.average": "336 x 20971520", "temperature.average": "336 x 35"}},
              {"host": "esx-01", "gpu": GPU1, "vms": ["b", "c"], "series": {"utilization.average": "12 x 1"}},
              {"host": "esx-02", "gpu": GPU0, "vms": ["d"], "series": {"utilization.average": "336 x 50"}}]
PAST_WEEK = {"name": "Past Week", "sampling_s": 1800, "length_s": 604800, "level": 4}


def status_with_usage() -> StatusReport:
    observed = farm()
    read = usage_read(window_of(PAST_WEEK), USAGE_GPUS[:2])
    read.warnings.append("vCenter lists no gpu.power.used counter")
    return with_usage(status_report(observed), gpu_usage(observed, read), read)


def idle() -> IdleReport:
    observed = observed_for(USAGE_GPUS)
    read = usage_read(window_of(PAST_WEEK), USAGE_GPUS)
    figures = gpu_usage(observed, read)
    return idle_report(judge_vms(observed, figures, 5), figures, read, 5, round_trips=4)


def class_plan() -> SupervisorPlan:
    want = ClassState("gpu", 8, 65536, memory_reservation=100, vgpus=["grid_a100-20c"])
    return SupervisorPlan(
        class_changes=[
            ClassChange(Op.ADD, "gpu", vgpus_added=["grid_a100-20c"], desired=want),
            ClassChange(Op.CHANGE, "small", [FieldChange("cpus", 2, 4)], ["grid_a100-10c"], ["grid_a100-4c"],
                        {"pciPassthru.64bitMMIOSizeGB": None}, want),
        ],
        namespace_changes=[NamespaceChange("ml", ["gpu"], ["old"])],
    )


def guest_result() -> DeployResult:
    return DeployResult(
        [GuestOutcome("a", "trainers", "changed", ok=5, changed=2), GuestOutcome("b", "trainers", "unreachable")],
        Path("/tmp/artifacts"),
        "failed",
        2,
    )


def provision_report() -> ProvisionReport:
    vms = ApplyResult([VmOutcome("a", Outcome.CHANGED, ["power-on"])])
    applied = build_apply_report(a_plan(), vms)
    return ProvisionReport(applied, guest_run_report(guest_result()))


def cli_validate(tmp_path: Path, text: str) -> dict[str, Any]:
    path = tmp_path / "inv.yaml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["-o", "json", "validate", "-f", str(path)])
    return dict(json.loads(result.stdout))


GOOD = "apiVersion: vgpuctl/v1\nvms:\n  - name: a\n    vgpus: {profile: grid_a100-20c, count: 2}\n"
BAD = GOOD.replace("count: 2", "count: 9") + "  - name: b\n    cpus: x\n"

# ------------------------------------------------------------------------------ the other commands' reports

HOSTS = """\
apiVersion: vgpuctl/v1
hosts:
  - cluster: GPU-Cluster
    graphics: {default_type: sharedDirect}
    gpus: [{select: all, mode: time-sliced, vgpu_mode: mixedSize}]
  - name: esx-01
    nvlink: enabled
vm_classes:
  - {name: gpu-a100-20c, cpus: 8, memory_gb: 64, vgpus: {profile: grid_a100-20c, count: 2}}
namespaces:
  - {name: ml-team, vm_classes: [gpu-a100-20c]}
"""


def host_change() -> HostChangeReport:
    report = host_change_report("esx-01", a_plan().host_changes, [("a", ["grid_a100-20c"])])
    report.result = host_outcomes().hosts[1]
    return report


def explain_report() -> ExplainReport:
    observed = farm()
    observed.clusters = {"GPU-Cluster": ["esx-01"]}
    return explain_host("esx-01", load_inventory_text(HOSTS, "inv.yaml"), observed, a_plan())


def capacity_farm() -> Observed:
    """Two hosts with running VMs (one GPU mixed-size with a gap no profile fits), one in maintenance mode."""
    busy = [RunningVm("busy-vm", ["grid_a100-10c"], [0]), RunningVm("mixed-big", ["grid_a100-20c"], [1]),
            RunningVm("mixed-small", ["grid_a100-8c"], [1])]
    idle = [RunningVm("idle-vm", ["grid_a100-20c"], [1])]
    return make_farm([
        SynthHost("esx-cap-01.lab", gpus=2, modes=["sameSize", "mixedSize"], cluster="Cap-Cluster", running=busy),
        SynthHost("esx-cap-02.lab", gpus=2, cluster="Cap-Cluster", running=idle),
        SynthHost("esx-cap-03.lab", gpus=2, cluster="Spare-Cluster"),
    ])


def capacity_now() -> CapacityReport:
    observed = capacity_farm()
    observed.hosts["esx-cap-03.lab"].in_maintenance = True
    return capacity_report(what_fits(observed))


def capacity_drain() -> CapacityDrainReport:
    observed = capacity_farm()
    observed.hosts["esx-cap-03.lab"].in_maintenance = True
    answer = drain(observed, ["esx-cap-01.lab", "esx-cap-03.lab"], vgpu_migration=True)
    return capacity_drain_report(answer, 1)


def capacity_answer() -> CapacityDemandReport:
    wanted = Demand.model_validate({"apiVersion": "vgpuctl/v1", "kind": "Demand", "allow": ["mig", "vgpu-mode"],
                                    "demand": [{"name": "slices", "count": 5,
                                                "vgpus": {"profile": "grid_a100-3-20c", "count": 1}}]})
    observed = capacity_farm()
    observed.hosts["esx-cap-03.lab"].in_maintenance = True
    return capacity_demand_report(plan_capacity(observed, wanted, use_solver=False))


def supervisor_state() -> SupervisorState:
    return SupervisorState(
        classes={"gpu": ClassState("gpu", 8, 65536, vgpus=["grid_a100-20c", "grid_a100-20c"]),
                 "cpu": ClassState("cpu", 2, 4096)},
        namespaces={"ml": NamespaceState("ml", "domain-c1", ["gpu", "cpu"])},
        supervisor_clusters={"domain-c1": "GPU-Cluster"},
    )


def supervisor_apply() -> SupervisorApplyReport:
    result = SupervisorApplyResult([ChangeOutcome("vm class gpu", "create", "changed"),
                                    ChangeOutcome("namespace ml", "associate", "failed", "503 from the API"),
                                    ChangeOutcome("vm class small", "update", "skipped", "an earlier change failed")])
    return SupervisorApplyReport(supervisor_plan_report(class_plan()), supervisor_outcomes(result))


def manifests(folder: Path | None) -> ManifestsReport:
    inventory = load_inventory_text(HOSTS, "inv.yaml")

    return manifests_report("ml-team", render_manifests(inventory, "ml-team"), folder, ClusterKind.CLUSTER)


def experiment_run(tmp_path: Path) -> tuple[RunSummary, ResultsDir]:
    """A real run against the experiment tests' recording farm: variants applied, run, recorded, restored."""
    exp, checked, base, results = runner_setup(tmp_path)
    return run_experiment(exp, checked, base, results, RecordingFarm(fail_at={("disabled", 2)})), results


def experiment_validate(tmp_path: Path) -> ExperimentValidateReport:
    path = experiment_file(tmp_path)
    return experiment_validate_report(path, checked_variants(load_experiment(path)))


def experiment_results(tmp_path: Path) -> ExperimentReport:
    _summary, results = experiment_run(tmp_path)
    return write_report(results)[1]


SIM_ENV = "export VGPUCTL_URL=https://127.0.0.1:4242/sdk GPUSIM_SSH_HOSTS='esx-01=127.0.0.1:2201' VGPUCTL_PASSWORD=pw\n"

def run_record(command: str = "apply") -> RunRecord:
    """A run's record as vgpuctl.history keeps it: the plan, the apply's outcomes and the events of its stream."""
    record = new_record(command, "r1", None, now=datetime(2026, 5, 12, 22, 15, 2, tzinfo=UTC))
    record.user, record.machine, record.pid, record.version = "ann", "ws-7", 4242, "0.1.0"  # as on any machine
    stream = EventStream(record.events.append, "r1", clock=lambda: "2026-05-12T22:15:03.000Z")
    applied = apply_report()
    stream.run_start(command, "inv.yaml")
    stream.plan(applied.plan)
    stream.host_step("esx-01", "enter-maintenance", None)
    stream.host_step("esx-01", "changed", None)
    stream.summary([Outcome.CHANGED], [Outcome.CHANGED, Outcome.FAILED], interrupted=False, exit_code=1)
    record.plan, record.result = applied.plan, run_result(applied)
    record.ended, record.exit_code, record.error, record.state = "2026-05-12T22:16:00.000Z", 1, "b failed", \
        state_of_exit(1)
    return record


def runs_report() -> RunsReport:
    return RunsReport("/home/ann/.local/state/vgpuctl/runs", [listing(run_record()), listing(run_record("plan"))],
                      ["/x/y.json: not a run record (not JSON)"])


def status_with_work() -> StatusReport:
    observed = farm()
    observed.hosts["esx-01"].custom_values[WORK_FIELD] = '{"run": "r0", "phase": "reboot", "entered_maintenance": true}'
    return status_report(observed)


# Every report a command prints, built by the code that builds it from fixtures; "kind#case" names a second case.
REPORT_CASES: dict[str, Callable[[Path], Report]] = {
    "plan": lambda _t: with_class_plan(plan_report(a_plan()), class_plan()),
    "plan#verbose": lambda _t: with_class_plan(plan_report(a_plan(), 4), class_plan()),
    "plan#window": lambda _t: plan_report(window_plan()),
    "plan#scoped": lambda _t: scoped_plan(),
    "apply": lambda _t: apply_report(),
    "apply#vm-verbose": lambda _t: apply_report(verbose=1, vm="a"),
    "plan#problems": lambda _t: plan_report(a_plan_with_problems()),
    "apply#stopped": lambda _t: stopped_apply_report(),
    "apply#failed": lambda _t: failed_apply_report(),
    "validate": lambda _t: validate_report("inv.yaml", load_inventory_text(HOSTS, "inv.yaml")),
    "explain": lambda _t: explain_report(),
    "host": lambda _t: host_report(),
    "host-change": lambda _t: host_change(),
    "host-change#nothing": lambda _t: host_change_report("esx-01", [], []),
    "status": lambda _t: status_with_classes(),
    "status#held": lambda _t: with_leases(status_report(farm()), {"esx-01": host_lease("run-7", "ann@ws pid 4",
                                                                                       1.7e9, 1.7e9 + 30, 60)}),
    "status#usage": lambda _t: status_with_usage(),
    "idle": lambda _t: idle(),
    "profiles": lambda _t: profiles_report(list(farm().hosts.values()), round_trips=2),
    "vm-vgpus": lambda _t: vm_vgpus_report(farm(), farm().vms["a"]),
    "guests": lambda _t: guest_run_report(guest_result()),
    "provision": lambda _t: provision_report(),
    "capacity": lambda _t: capacity_now(),
    "capacity-demand": lambda _t: capacity_answer(),
    "capacity-drain": lambda _t: capacity_drain(),
    "export": lambda _t: ExportReport(None, export_inventory(farm())),
    "export#file": lambda t: ExportReport(str(t / "farm.yaml"), export_inventory(farm())),
    "supervisor_plan": lambda _t: supervisor_plan_report(class_plan()),
    "supervisor_apply": lambda _t: supervisor_apply(),
    "supervisor_status": lambda _t: supervisor_status_report(supervisor_state()),
    "k8s_manifests": lambda _t: manifests(None),
    "k8s_manifests#written": lambda t: manifests(t / "manifests"),
    "experiment-validate": experiment_validate,
    "experiment-run": lambda t: experiment_run_report(experiment_run(t)[0]),
    "experiment-restore": lambda t: ExperimentRestoreReport(restored=True, results=str(t / "results")),
    "experiment-report": experiment_results,
    "sim-env": lambda t: SimEnvReport(with_esxi_env(parse_env_file(SIM_ENV)), str(t / "env")),
    "sim-down": lambda _t: SimDownReport(4242),
    "preflight": lambda _t: preflight_report("https://vc/sdk", [
        PreflightCheck("host.ssh", CheckStatus.FAIL, "refused", "esx-01", "start it"),
        PreflightCheck("vcenter.version", CheckStatus.PASS, "8.0.3")]),
    "host-forget-work": lambda _t: forget_work_report("esx-01", '{"vms": 7}', cleared=True),
    "host-forget-work#record": lambda _t: forget_work_report(
        "esx-01", '{"run": "r1", "phase": "reboot", "entered_maintenance": true}', cleared=True),
    "host-forget-work#none": lambda _t: forget_work_report("esx-01", "", cleared=False),
    "status#work": lambda _t: status_with_work(),
    "run": lambda _t: run_record(),
    "run#plan": lambda _t: record_from_json(json.loads(json.dumps(run_record("plan").to_dict()))),
    "runs": lambda _t: runs_report(),
    "fleet-plan": lambda _t: fleet_plan(),
    "fleet-apply": lambda _t: fleet_apply_report(
        [FleetApplyPart("east", "https://vc-east/sdk", apply_report(), None),
         FleetApplyPart("west", "https://vc-west/sdk", None, None, "login to https://vc-west/sdk failed")],
        ["west"], interrupted=False, out_of_scope=["lab"]),
    "fleet-status": lambda _t: fleet_status_report(
        [FleetStatusPart("east", "https://vc-east/sdk", status_with_classes()),
         FleetStatusPart("west", "https://vc-west/sdk", None, "vCenter not reachable")]),
    "fleet-export": lambda t: fleet_export(t),
    "fleet-preflight": lambda _t: fleet_preflight_report(
        [FleetPreflightPart("east", "https://vc-east/sdk", preflight_report("https://vc-east/sdk", [
            PreflightCheck("vcenter.version", CheckStatus.PASS, "8.0.3")])),
         FleetPreflightPart("west", "https://vc-west/sdk", None, "vCenter not reachable")]),
    "fleet-capacity": lambda _t: fleet_capacity_report(
        [FleetCapacityPart("east", "https://vc-east/sdk", capacity_now()),
         FleetCapacityPart("west", "https://vc-west/sdk", None, "vCenter not reachable")], ["lab"]),
}


def fleet_plan() -> Report:
    """Two vCenters: one planned (with its VM classes), one that refused the login."""
    return fleet_plan_report([
        FleetPlanPart("east", "https://vc-east/sdk", with_class_plan(plan_report(a_plan()), class_plan())),
        FleetPlanPart("west", "https://vc-west/sdk", None, "login to https://vc-west/sdk as 'u' failed"),
    ], ["lab"])


def fleet_export(tmp_path: Path) -> Report:
    east = FleetExport({"name": "east", "url": "https://vc-east/sdk", "datacenter": "DC0"}, export_part(farm()))
    west = FleetExport({"name": "west"}, None, "vCenter not reachable")
    parts = [FleetExportPart("east", "https://vc-east/sdk"), FleetExportPart("west", "", "vCenter not reachable")]
    return fleet_export_report(str(tmp_path / "fleet.yaml"), export_fleet([east, west]), parts)


def kind_of_case(name: str) -> str:
    return name.split("#")[0]


DOCUMENTS: dict[str, Callable[[Path], dict[str, Any]]] = {
    **{name: (lambda t, build=build: build(t).to_dict()) for name, build in REPORT_CASES.items()},
    "validate#cli": lambda t: cli_validate(t, GOOD),
    "error": lambda t: cli_validate(t, BAD),
    "error#plan": lambda _t: error_report(PlanError(["vm a: no GPU", "vm b: no host"])).to_dict(),
    "error#preflight": lambda _t: error_report(PreflightFailed(["host.ssh esx-01: refused; fix: start it"])).to_dict(),
    "error#usage": lambda _t: error_report(UsageError("--yes needed")).to_dict(),
    "error#located": lambda _t: error_report(InventoryErrors([InventoryError("bad", "f.yaml", 3, 4)])).to_dict(),
}


def test_every_report_has_a_real_document() -> None:
    assert {kind_of_case(name) for name in DOCUMENTS} == {schemas.kind_of(r) for r in REPORTS}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_documents_validate_against_their_schema(name: str, tmp_path: Path) -> None:
    doc = DOCUMENTS[name](tmp_path)
    kind = kind_of_case(name)
    assert kind == doc.get("kind", "error")  # an error document is {"error": ...} alone; a failed apply's has its kind
    _valid(kind, doc)


def _rename_first_key(doc: Any, old: str, new: str) -> bool:
    """Rename `old` to `new` in the first object (depth first) that has it."""
    if isinstance(doc, dict):
        if old in doc:
            doc[new] = doc.pop(old)
            return True
        return any(_rename_first_key(v, old, new) for v in doc.values())
    if isinstance(doc, list):
        return any(_rename_first_key(v, old, new) for v in doc)
    return False


@pytest.mark.parametrize(
    ("name", "old", "new"),
    [
        ("status", "host", "name"),  # a host is `host` in every document
        ("status#held", "until", "expires"),
        ("status", "fb_gb", "memory_gb"),
        ("status", "nvlink_group", "nvlink_set"),
        ("vm-vgpus", "vm", "name"),
        ("plan", "nvlink_group", "group"),
        ("plan#scoped", "pulled_in_by", "needed_by"),
        ("plan#scoped", "out_of_scope_vms", "left_out"),
        ("plan", "vm_class", "name"),  # a VM class is `vm_class` in every document
        ("plan", "vgpus_added", "vgpus"),
        ("plan", "namespace", "name"),
        ("status", "vm_class", "name"),
        ("apply", "failed", "errors_seen"),
        ("plan#problems", "subject", "target"),
        ("apply#stopped", "stopped_by", "reason"),
        ("apply#stopped", "reason", "why"),
        ("error", "details", "problems"),
        ("host", "gpu", "pci_id"),
        ("profiles", "profile", "name"),
        ("explain", "setting", "key"),
        ("guests", "vm", "host"),
        ("host-change", "affected_vms", "vms"),
        ("validate", "vm_classes", "classes"),
        ("capacity", "stranded_gb", "stranded"),
        ("status#usage", "util_max", "peak"),
        ("status#usage", "sampling_s", "period"),
        ("idle", "fb_gb", "framebuffer"),
        ("idle", "shared_with", "others"),
        ("capacity", "vms", "count"),
        ("capacity-demand", "greedy_placed", "first_fit"),
        ("capacity-demand", "needs_reboot", "reboot"),
        ("export", "inventory", "text"),
        ("supervisor_plan", "classes_create", "create"),
        ("supervisor_plan", "memory_reservation", "memory_reserved"),
        ("supervisor_apply", "outcomes", "results"),
        ("supervisor_status", "vm_class", "name"),  # as in status: one builder for both
        ("k8s_manifests", "files", "manifests"),
        ("experiment-validate", "variants", "names"),
        ("experiment-run", "skipped", "done"),
        ("experiment-restore", "restored", "ok"),
        ("experiment-report", "repetitions_ok", "ok"),
        ("experiment-report", "busbw_gbs", "bandwidth"),
        ("sim-env", "env_file", "file"),
        ("preflight", "evidence", "detail"),
        ("sim-down", "stopped", "pid"),
        ("status#work", "left", "unfinished"),
        ("status", "mig_slots", "slices"),
        ("run", "run_id", "id_of_run"),
        ("run", "seq", "number"),  # an event of the record has the event schema's fields
        ("run", "vms", "machines"),
        ("runs", "started", "start"),
        ("fleet-plan", "vcenters", "parts"),
        ("fleet-plan", "out_of_scope", "left_out"),
        ("fleet-plan", "nvlink_group", "group"),  # each vCenter's plan is a plan document
        ("fleet-apply", "failed", "errors_seen"),
        ("fleet-status", "vcenter", "name"),
        ("fleet-export", "inventory", "text"),
        ("fleet-preflight", "evidence", "detail"),
        ("fleet-capacity", "stranded_gb", "stranded"),
    ],
)
def test_a_renamed_key_fails_validation(name: str, old: str, new: str, tmp_path: Path) -> None:
    doc = copy.deepcopy(DOCUMENTS[name](tmp_path))
    kind = kind_of_case(name)
    _valid(kind, doc)
    assert _rename_first_key(doc, old, new), (name, old)
    with pytest.raises(jsonschema.ValidationError):
        _valid(kind, doc)


def test_vgpus_are_always_profile_counts() -> None:
    doc = status_with_classes().to_dict()
    listed = vm_vgpus_report(farm(), farm().vms["a"]).to_dict()["vgpus"]
    assert doc["vms"][0]["vgpus"] == doc["hosts"][0]["gpus"][0]["vgpus"] == listed
    assert listed == [{"profile": "grid_a100-20c", "count": 1}]
    bad = copy.deepcopy(doc)
    bad["vms"][0]["vgpus"] = ["grid_a100-20c"]
    with pytest.raises(jsonschema.ValidationError):
        _valid("status", bad)


def test_round_trips_only_when_asked() -> None:
    assert "round_trips" not in apply_report().to_dict() and apply_report(verbose=1).to_dict()["round_trips"] == 12
    assert "round_trips" not in plan_report(a_plan()).to_dict()
