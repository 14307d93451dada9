"""A run as a stream of events (vgpuctl.reports.events): the apply's progress calls and the run's milestones
become typed events, numbered and timestamped, handed one at a time to `write` (the CLI writes JSON lines).

`EventStream` is a `Progress` sink like the live display (the two get the same calls through
`progress.Fanout`); the CLI adds the milestones (run start, plan, warnings, notes, summary). Steps: a VM's or
host's step starts when the pipeline reports it and ends when the next one starts or the subject finishes;
percentages and heartbeats of the same step are not events.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from vgpuctl.domain import Outcome
from vgpuctl.reports.events import (
    Event,
    Finished,
    Noted,
    PlanMade,
    RunStart,
    RunSummary,
    ScopeInfo,
    StepEnd,
    StepResult,
    StepStart,
    Subject,
    Warned,
    counts,
)

if TYPE_CHECKING:
    from vgpuctl.reports.plan import PlanReport
    from vgpuctl.scope import Scope

# The step a VM or host reports when it is done, and the outcome it stands for.
VM_FINAL = {"done": Outcome.CHANGED, "failed": Outcome.FAILED, "skipped": Outcome.SKIPPED,
            "not-started": Outcome.NOT_STARTED, "interrupted": Outcome.CHANGED}  # fmt: skip
# (interrupted: changed when it took a step, else not started)
HOST_FINAL = {str(o): o for o in Outcome}
# Host steps whose detail changes while they last (seconds waited): one step, however often reported.
HEARTBEAT_STEPS = frozenset({"wait-reconnect"})
FIRST_STEP = "check"  # a VM that did nothing past it is unchanged


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class EventStream:
    """Numbered, timestamped events of one run, in the order they happen (one lock: `seq` is the write order)."""

    def __init__(self, write: Callable[[Event], None], run_id: str, clock: Callable[[], str] = utc_now):
        self._write = write
        self.run_id = run_id
        self._clock = clock
        self._lock = threading.RLock()
        self._seq = 0
        self._steps: dict[tuple[Subject, str], tuple[str, str | None]] = {}  # in flight: (step, detail)
        self._worked: set[tuple[Subject, str]] = set()  # subjects that took a step past the first
        self._finished: set[tuple[Subject, str]] = set()

    def emit(self, kind: type[Event], **fields: Any) -> None:
        with self._lock:
            self._seq += 1
            self._write(kind(time=self._clock(), run_id=self.run_id, seq=self._seq, **fields))

    # ------------------------------------------------------------------------------------- Progress

    def vm_step(self, vm: str, step: str, percent: int | float | None = None) -> None:
        final = VM_FINAL.get(step)
        with self._lock:
            if final is None:
                self._step(Subject.VM, vm, step, None)
                return
            worked = (Subject.VM, vm) in self._worked
            if step == "interrupted":
                outcome = Outcome.CHANGED if worked else Outcome.NOT_STARTED
                self._finish(Subject.VM, vm, outcome, "interrupted", StepResult.INTERRUPTED)
            else:
                outcome = final if worked or final != Outcome.CHANGED else Outcome.UNCHANGED
                self._finish(Subject.VM, vm, outcome, None, None)

    def host_step(self, host: str, step: str, detail: str | None) -> None:
        with self._lock:
            final = HOST_FINAL.get(step)
            if final is None:
                self._step(Subject.HOST, host, step, detail)
            else:
                self._finish(Subject.HOST, host, final, detail, None)

    def vms_planned(self, vms: Sequence[str]) -> None:
        pass  # the plan event names them; a VM plan made again after host changes shows in its steps

    # ------------------------------------------------------------------------------------- milestones

    def run_start(self, command: str, inventory: str | None, scope: Scope | None = None) -> None:
        self.emit(RunStart, command=command, inventory=inventory, scope=ScopeInfo.of(scope) if scope else None)

    def plan(self, report: PlanReport) -> None:
        """The plan's counts and what it changes, then its warnings one event each."""
        hosts = list(dict.fromkeys(h.host for h in report.host_changes))
        vms = [v.vm for v in report.vm_changes]
        self.emit(PlanMade, summary=report.summary, hosts=hosts, vms=vms, errors=list(report.errors))
        for message in report.warnings:
            self.warning(message)

    def summary(self, hosts: Sequence[Outcome], vms: Sequence[Outcome], *, interrupted: bool, exit_code: int,
                error: str | None = None) -> None:
        self.emit(RunSummary, hosts=counts(list(hosts)), vms=counts(list(vms)), interrupted=interrupted,
                  exit_code=exit_code, error=error)

    def warning(self, message: str) -> None:
        self.emit(Warned, message=message)

    def note(self, message: str) -> None:
        self.emit(Noted, message=message)

    # ------------------------------------------------------------------------------------- steps

    def _step(self, subject: Subject, name: str, step: str, detail: str | None) -> None:
        key = (subject, name)
        if key in self._finished:
            return  # a late report (a task's last percentage) after the subject finished
        current = self._steps.get(key)
        if current is not None and current[0] == step and (step in HEARTBEAT_STEPS or current[1] == detail):
            return
        if current is not None:
            self.emit(StepEnd, subject=subject, name=name, step=current[0], result=StepResult.OK)
        if step != FIRST_STEP:
            self._worked.add(key)
        self._steps[key] = (step, detail)
        self.emit(StepStart, subject=subject, name=name, step=step, detail=detail)

    def _finish(self, subject: Subject, name: str, outcome: Outcome, message: str | None,
                result: StepResult | None) -> None:
        key = (subject, name)
        if key in self._finished:
            return
        current = self._steps.pop(key, None)
        if current is not None:
            ended = result or (StepResult.FAILED if outcome == Outcome.FAILED else StepResult.OK)
            self.emit(StepEnd, subject=subject, name=name, step=current[0], result=ended)
        self._finished.add(key)
        self.emit(Finished, subject=subject, name=name, outcome=outcome, message=message)
