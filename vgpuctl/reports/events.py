"""The event stream of a run (`--events FILE|-`): one JSON object per line, in the order things happened.

Every event carries `event` (its type), `time` (UTC, ISO 8601 with milliseconds), `run_id` (the run's id, the
one its host work records and leases carry) and `seq` (1, 2, ... within the run). The types:

- `run-start`: the command, the inventory file, the scope (when the run is scoped);
- `plan`: the plan's counts (the plan document's `summary`) and the hosts and VMs it changes;
- `step-start` / `step-end`: one step of one host or VM (`subject` host|vm, `name`, `step`); a step ends when
  the next one starts or the subject finishes (`result` ok, failed or interrupted);
- `finished`: a host or VM is done, with its outcome (changed, unchanged, failed, skipped, not-started);
- `warning` and `note`: a line for people (plan warnings; Ctrl-C, VM-class steps);
- `summary`: the run's end: counts per outcome, whether it was interrupted, and the exit code.

The schema is generated (docs/schemas/event.schema.json, one of these types per line).
"""

from __future__ import annotations

from dataclasses import field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from vgpuctl.domain import Outcome
from vgpuctl.lazyclass import dataclass
from vgpuctl.reports.base import optional, to_json
from vgpuctl.reports.plan import PlanSummary

if TYPE_CHECKING:
    from vgpuctl.scope import Scope


class Subject(StrEnum):
    HOST = "host"
    VM = "vm"


class StepResult(StrEnum):
    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass
class Event:
    """Fields every event has; `event` (the type) comes first in the JSON object."""

    event: ClassVar[str]
    time: str
    run_id: str
    seq: int

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.event, **to_json(self)}


@dataclass
class ScopeInfo:
    """The patterns a scoped run was given (`--host`, `--cluster`, `--vm`)."""

    hosts: list[str]
    clusters: list[str]
    vms: list[str]

    @classmethod
    def of(cls, scope: Scope) -> ScopeInfo:
        return cls(list(scope.hosts), list(scope.clusters), list(scope.vms))


@dataclass
class RunStart(Event):
    event: ClassVar[str] = "run-start"
    command: str
    inventory: str | None
    scope: ScopeInfo | None = field(default=None, metadata={"omit_none": True})


@dataclass
class PlanMade(Event):
    event: ClassVar[str] = "plan"
    summary: PlanSummary
    hosts: list[str]  # hosts with changes
    vms: list[str]  # VMs with changes
    errors: list[str] = field(default_factory=list)


@dataclass
class StepStart(Event):
    event: ClassVar[str] = "step-start"
    subject: Subject
    name: str
    step: str
    detail: str | None = optional()


@dataclass
class StepEnd(Event):
    event: ClassVar[str] = "step-end"
    subject: Subject
    name: str
    step: str
    result: StepResult


@dataclass
class Finished(Event):
    event: ClassVar[str] = "finished"
    subject: Subject
    name: str
    outcome: Outcome
    message: str | None = optional()


@dataclass
class Warned(Event):
    event: ClassVar[str] = "warning"
    message: str


@dataclass
class Noted(Event):
    event: ClassVar[str] = "note"
    message: str


@dataclass
class OutcomeCounts:
    changed: int = 0
    unchanged: int = 0
    failed: int = 0
    skipped: int = 0
    not_started: int = 0


@dataclass
class RunSummary(Event):
    event: ClassVar[str] = "summary"
    hosts: OutcomeCounts
    vms: OutcomeCounts
    interrupted: bool
    exit_code: int
    error: str | None = optional()


EVENTS: tuple[type[Event], ...] = (RunStart, PlanMade, StepStart, StepEnd, Finished, Warned, Noted, RunSummary)


def counts(outcomes: list[Outcome]) -> OutcomeCounts:
    found = OutcomeCounts()
    for outcome in outcomes:
        name = str(outcome).replace("-", "_")
        setattr(found, name, getattr(found, name) + 1)
    return found
