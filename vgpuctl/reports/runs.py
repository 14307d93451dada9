"""The run history's documents: one run's record (`vgpuctl runs show RUN`; what vgpuctl.history keeps for every
plan, apply and provision) and the list of them (`vgpuctl runs`), with their text.

A record holds who ran what with which vgpuctl and inventory, when, how it ended, the plan it showed, what the
apply did to each host and VM, and the run's events (the `--events` stream, reports.events). It holds no secret:
vgpuctl.history writes it redacted, the vCenter URL without user info.
"""

from __future__ import annotations

from dataclasses import field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from vgpuctl.lazyclass import dataclass
from vgpuctl.model import GuestDriverOutcome, HostOutcome, VmOutcome
from vgpuctl.reports.apply import guest_driver_line
from vgpuctl.reports.base import TERMINAL, Report, TextLayout, from_json, to_json_given
from vgpuctl.reports.events import (
    EVENTS,
    Event,
    Finished,
    Noted,
    PlanMade,
    RunStart,
    RunSummary,
    StepEnd,
    StepStart,
    Warned,
)
from vgpuctl.reports.plan import PlanReport, PlanSummary, names_text, plan_lines
from vgpuctl.visible import lines_text

if TYPE_CHECKING:
    from vgpuctl.reports.apply import ApplyReport

# One event of a record: the types of the event stream (docs/schemas/event.schema.json).
RunEvent = RunStart | PlanMade | StepStart | StepEnd | Finished | Warned | Noted | RunSummary


class RunState(StrEnum):
    """How a run ended: `running` while it runs (a record left so by a run that was killed: `ended-unrecorded`
    when its process is gone), `ok` (exit code 0, or 2 for `plan --detailed-exitcode` with changes), `failed`,
    `interrupted` (Ctrl-C)."""

    RUNNING = "running"
    ENDED_UNRECORDED = "ended-unrecorded"
    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


EXIT_INTERRUPTED = 130
EXIT_CHANGES_PENDING = 2


def state_of_exit(code: int) -> RunState:
    if code in (0, EXIT_CHANGES_PENDING):
        return RunState.OK
    return RunState.INTERRUPTED if code == EXIT_INTERRUPTED else RunState.FAILED


@dataclass
class RunResult:
    """What an apply did to each host and VM (the apply document's outcomes)."""

    hosts: list[HostOutcome]
    vms: list[VmOutcome]
    vm_errors: list[str]
    interrupted: bool
    guest_drivers: list[GuestDriverOutcome] = field(default_factory=list)  # a driver upgrade window's guest moves


def run_result(report: ApplyReport) -> RunResult:
    return RunResult(list(report.hosts), list(report.vms), list(report.vm_errors), report.interrupted,
                     list(report.guest_drivers))


@dataclass
class RunPart:
    """A fleet run's part in one of its vCenters: its plan, what the apply did there, or why the part failed
    (one line: the vCenter could not be read, refused, or its plan has errors)."""

    vcenter: str  # its name in the inventory
    url: str
    plan: PlanReport | None = field(default=None, metadata={"omit_none": True})
    result: RunResult | None = field(default=None, metadata={"omit_none": True})
    error: str | None = field(default=None, metadata={"omit_none": True})


@dataclass
class RunRecord(Report):
    """One run of `plan`, `apply` or `provision` as the history keeps it. `id` names the record (its start time
    and the run's id), `run_id` the run as its events, host work records and leases name it; times are UTC."""

    kind: ClassVar[str] = "run"
    id: str
    run_id: str
    command: str
    state: RunState
    user: str
    machine: str
    pid: int
    version: str
    started: str
    ended: str | None
    exit_code: int | None
    error: str | None
    inventory: str | None
    inventory_sha256: str | None
    vcenter: str | None
    plan_file: str | None = field(default=None, metadata={"omit_none": True})  # `apply PLANFILE`: the plan applied
    plan: PlanReport | None = field(default=None, metadata={"omit_none": True})
    result: RunResult | None = field(default=None, metadata={"omit_none": True})
    vcenters: list[RunPart] | None = field(default=None, metadata={"omit_none": True})  # a fleet's run: its parts
    events: list[RunEvent] = field(default_factory=list)

    def to_dict(self, plan: dict[str, Any] | None = None) -> dict[str, Any]:
        """The record's document; `plan`: its plan's document when the run has made it already (printed it)."""
        document = to_json_given(self, {"plan": plan}) if plan is not None else super().to_dict()
        document["events"] = [e.to_dict() for e in self.events]  # each with its `event` type first
        return document

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        return lines_text(record_lines(self, layout.full))


@dataclass
class RunListing:
    """One line of `vgpuctl runs`: a record without its plan, result and events."""

    id: str
    run_id: str
    command: str
    state: RunState
    user: str
    started: str
    ended: str | None
    exit_code: int | None
    inventory: str | None
    vcenter: str | None
    summary: PlanSummary | None = field(default=None, metadata={"omit_none": True})


@dataclass
class RunsReport(Report):
    """`vgpuctl runs`: the kept runs, newest first, and where they are kept."""

    kind: ClassVar[str] = "runs"
    folder: str
    runs: list[RunListing]
    warnings: list[str] = field(default_factory=list)  # records that could not be read

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        lines = [listing_line(r) for r in self.runs] or [f"No runs kept in {self.folder}."]
        return lines_text(lines + [f"warning: {w}" for w in self.warnings])


# ------------------------------------------------------------------------------------------ building them


def listing(record: RunRecord) -> RunListing:
    summary = record.plan.summary if record.plan is not None else fleet_summary(record.vcenters)
    return RunListing(record.id, record.run_id, record.command, record.state, record.user, record.started,
                      record.ended, record.exit_code, record.inventory, record.vcenter, summary)


def fleet_summary(parts: list[RunPart] | None) -> PlanSummary | None:
    """A fleet run's counts: the sum of its vCenters' plans (None when none was planned)."""
    plans = [p.plan for p in parts or [] if p.plan is not None]
    if not plans:
        return None
    return PlanSummary.total(p.summary for p in plans)


def record_from_json(data: Any) -> RunRecord:
    """A record back from its document (the events by their `event` type); ValueError when it is none."""
    if not isinstance(data, dict) or data.get("kind") != RunRecord.kind:
        raise ValueError("not a run record")
    rest = {k: v for k, v in data.items() if k != "events"}
    record: RunRecord = from_json(RunRecord, rest)
    record.events = [event_from_json(e) for e in data.get("events") or []]
    return record


_EVENT_TYPES = {e.event: e for e in EVENTS}


def event_from_json(data: Any) -> Any:
    if not isinstance(data, dict) or data.get("event") not in _EVENT_TYPES:
        raise ValueError(f"not an event: {str(data)[:80]}")
    return from_json(_EVENT_TYPES[data["event"]], {k: v for k, v in data.items() if k != "event"})


# ------------------------------------------------------------------------------------------ the text


def when(record: RunRecord | RunListing) -> str:
    return f"{record.started} to {record.ended}" if record.ended else f"since {record.started}"


def listing_line(r: RunListing) -> str:
    """`20260512T221502Z-3f2a9c1b7d20  apply  ok (exit 0)  alice  2026-05-12T22:15:02Z  inventory.yaml  ...`."""
    code = f" (exit {r.exit_code})" if r.exit_code is not None else ""
    counts = f"  {summary_text(r.summary)}" if r.summary is not None else ""
    return (f"{r.id}  {r.command}  {r.state}{code}  {r.user}  {r.started}  {r.inventory or '-'}"
            f"  {r.vcenter or '-'}{counts}")


def summary_text(s: PlanSummary) -> str:
    parts = [f"{s.host_changes} host changes", f"{s.create} create", f"{s.change} change", f"{s.remove} remove",
             f"{s.power_off} power-off"]
    return ", ".join(parts) + (f", {s.errors} errors" if s.errors else "")


def record_lines(r: RunRecord, full: bool = False) -> list[str]:
    """The record's facts, its plan as plan printed it, what the apply did, then its events."""
    code = f", exit {r.exit_code}" if r.exit_code is not None else ""
    lines = [
        f"run {r.id}: {r.command}, {r.state}{code}",
        f"  run id {r.run_id}, by {r.user} on {r.machine} (pid {r.pid}), vgpuctl {r.version}, {when(r)}",
        f"  inventory {r.inventory or '-'} (sha256 {r.inventory_sha256 or '-'}), vCenter {r.vcenter or '-'}",
    ]
    if r.plan_file:
        lines.append(f"  the saved plan {r.plan_file}")
    if r.error:
        lines.append(f"  error: {r.error}")
    if r.plan is not None:
        lines += ["Plan:", *(f"  {line}" for line in plan_lines(r.plan, full))]
    if r.result is not None:
        lines += ["Result:", *result_lines(r.result, full)]
    for part in r.vcenters or []:
        lines += [f"vCenter {part.vcenter} ({part.url}):", *part_lines(part, full)]
    if r.events:
        lines += ["Events:", *(f"  {event_line(e)}" for e in r.events)]
    return lines


def part_lines(part: RunPart, full: bool) -> list[str]:
    """A fleet run's part as `record_lines` shows a run of one vCenter, indented under its vCenter."""
    lines = [f"  error: {part.error}"] if part.error else []
    if part.plan is not None:
        lines += ["  Plan:", *(f"    {line}" for line in plan_lines(part.plan, full))]
    if part.result is not None:
        lines += ["  Result:", *(f"  {line}" for line in result_lines(part.result, full))]
    return lines


def result_lines(result: RunResult, full: bool) -> list[str]:
    lines = [f"  host {h.host}: {h.status}" + (f" ({h.message})" if h.message else "") for h in result.hosts]
    by_status: dict[str, list[str]] = {}
    for v in result.vms:
        by_status.setdefault(str(v.status), []).append(v.vm)
    lines += [f"  VMs {status}: {names_text(names, full)}" for status, names in by_status.items()]
    lines += [f"  vm {v.vm}: {v.message}" for v in result.vms if v.message]
    lines += [f"  VM plan error: {e}" for e in result.vm_errors]
    lines += [f"  {guest_driver_line(o)}" for o in result.guest_drivers]
    return lines + (["  interrupted (Ctrl-C)"] if result.interrupted else [])


def event_line(e: Event) -> str:
    """`2026-05-12T22:15:03.120Z  #4 step-start host esx-01 enter-maintenance`."""
    head = f"{e.time}  #{e.seq} {e.event}"
    if isinstance(e, StepStart | StepEnd):
        tail = f"{e.subject} {e.name} {e.step}" + (f" {e.result}" if isinstance(e, StepEnd) else "")
        return f"{head} {tail}" + (f" ({e.detail})" if isinstance(e, StepStart) and e.detail else "")
    if isinstance(e, Finished):
        return f"{head} {e.subject} {e.name} {e.outcome}" + (f": {e.message}" if e.message else "")
    if isinstance(e, Warned | Noted):
        return f"{head} {e.message}"
    if isinstance(e, RunStart):
        return f"{head} {e.command} {e.inventory or '-'}"
    if isinstance(e, PlanMade):
        return f"{head} {summary_text(e.summary)}"
    if isinstance(e, RunSummary):
        return f"{head} exit {e.exit_code}" + (" (interrupted)" if e.interrupted else "") + (
            f": {e.error}" if e.error else "")
    return head
