"""A fleet's run: one single-vCenter run per vCenter (vgpuctl.fleet splits the inventory), composed at the top.

Each vCenter is read and planned in its own session, `MAX_PARALLEL_VCENTERS` at a time, by the pipeline's own
stages (`pipeline.plan_only`, `pipeline.prepare`); the caller sees every part's plan at once (`FleetHooks`) and
confirms once; then the parts that planned cleanly are applied side by side, each by `pipeline.apply` on its own
session, within one Ctrl-C handler. Nothing crosses between vCenters: each part has its own session, run options,
work records, leases and claims. A vCenter that cannot be read or refuses fails its own part with its one line
(`PartRun.error`) and the others go on; a saved plan is applied whole or not at all (every part must still match).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack
from dataclasses import field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from vgpuctl import fleet, pipeline
from vgpuctl.errors import PlanError, UsageError, VgpuctlError
from vgpuctl.hosts.sshservice import ssh_service_for_run
from vgpuctl.lazyclass import dataclass
from vgpuctl.outcome import ApplyOutcome, Planned, RunOutcome
from vgpuctl.planfile import check_same_plan

if TYPE_CHECKING:
    from vgpuctl.fleet import FleetPart
    from vgpuctl.pipeline import Prepared, RunOptions, RunRequest
    from vgpuctl.planfile import SavedPlan
    from vgpuctl.progress import Cancel, Progress
    from vgpuctl.vsphere.session import ConnectionSettings, Session

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class PartRun:
    """One vCenter's part of a fleet run: its plan (None when it could not be read), what the run did there,
    and why the part failed before its plan (one line: down, refused, a saved plan it no longer matches)."""

    name: str
    url: str  # the SDK URL it was read from
    planned: Planned | None = None
    outcome: RunOutcome | None = None
    error: VgpuctlError | None = None

    @property
    def plan_failed(self) -> bool:
        """Unread, or planned with errors: nothing of it is applied."""
        return self.planned is None or bool(self.planned.plan.errors)

    def failure(self) -> VgpuctlError | None:
        """Why this part makes the run a failure, or None."""
        if self.error is not None:
            return self.error
        if self.planned is not None and self.planned.plan.errors:
            return PlanError(list(self.planned.plan.errors))
        return self.outcome.failure() if self.outcome is not None else None


@dataclass
class FleetPlanned:
    """Every part's plan, in the inventory's order, and the vCenters `--vcenter` left out."""

    parts: list[PartRun]
    out_of_scope: list[str] = field(default_factory=list)

    @property
    def ready(self) -> list[PartRun]:
        """The parts that planned cleanly and change something."""
        return [p for p in self.parts if p.planned is not None and not p.plan_failed and not p.planned.is_empty]

    @property
    def is_empty(self) -> bool:
        return all(p.planned is None or p.planned.is_empty for p in self.parts)

    def failure(self) -> VgpuctlError | None:
        """The first failed part's failure, naming its vCenter, or None."""
        failed = next((p for p in self.parts if p.failure() is not None), None)
        return None if failed is None else part_error(failed.name, failed.failure())


def part_error(name: str, err: VgpuctlError | None) -> VgpuctlError:
    """A part's failure as one error naming its vCenter, of the same kind (a PlanError keeps its problems)."""
    if isinstance(err, PlanError):
        return PlanError([f"vCenter {name}: {p}" for p in err.problems])
    error = VgpuctlError(f"vCenter {name}: {err}")
    error.exit_code = getattr(err, "exit_code", 1)
    return error


class FleetHooks(Protocol):
    """What a fleet run shows and asks (the CLI renders one report with a section per vCenter)."""

    def planned(self, planned: FleetPlanned) -> None:
        """Every part is planned or failed."""

    def confirm(self, planned: FleetPlanned) -> None:
        """Before the first change of any part; raise to stop with nothing changed."""

    def apply_progress(self, planned: FleetPlanned) -> AbstractContextManager[Callable[[str], Progress]]:
        """The live display of the apply: the Progress of each part, by its vCenter's name."""

    def note(self, message: str) -> None:
        """A line for people (Ctrl-C, VM-class steps)."""


# ------------------------------------------------------------------------------------------ in parallel


def each(items: Sequence[T], work: Callable[[T], R]) -> list[R]:
    """`work` on every item, `MAX_PARALLEL_VCENTERS` at a time, the results in the items' order."""
    if len(items) <= 1:
        return [work(i) for i in items]
    with ThreadPoolExecutor(min(len(items), fleet.MAX_PARALLEL_VCENTERS), thread_name_prefix="vgpuctl-vc") as pool:
        return list(pool.map(work, items))


def part_options(options: RunOptions, part: FleetPart) -> RunOptions:
    """A part's own run options: its datacenter (its entry's, else the shared --datacenter), the scope within it,
    its own work records and SSH services."""
    return dataclasses.replace(options, datacenter=part.inventory.vcenter.datacenter or options.datacenter,
                               scope=fleet.part_scope(options.scope), state=None, ssh_service=None)


def refuse_unmatched(options: RunOptions, parts: Sequence[PartRun]) -> None:
    """A --host, --cluster or --vm pattern that matched in none of the vCenters read is one usage error."""
    results = [p.planned.scope for p in parts if p.planned is not None]
    unmatched = fleet.unmatched_anywhere(options.scope, results)
    if unmatched:
        read = ", ".join(p.name for p in parts if p.planned is not None)
        unread = [p.name for p in parts if p.planned is None]
        also = f"; not read: {', '.join(unread)}" if unread else ""
        raise UsageError(f"{unmatched[0]}: matches nothing in the vCenters read ({read}{also})")


# ------------------------------------------------------------------------------------------ read-only


@dataclass
class PartRead(Generic[T]):
    """What a read-only command read from one vCenter, or why it could not."""

    name: str
    url: str
    result: T | None = None
    error: VgpuctlError | None = None
    round_trips: int = 0


def read_fleet(parts: Sequence[FleetPart], settings: Mapping[str, ConnectionSettings],
               read: Callable[[FleetPart, Session], T]) -> list[PartRead[T]]:
    """`read(part, session)` in a session of each vCenter, in parallel; a vCenter that fails fails its part."""
    from vgpuctl.vsphere.session import open_session

    def one(part: FleetPart) -> PartRead[T]:
        url = settings[part.name].sdk_url
        try:
            with open_session(settings[part.name]) as session:
                return PartRead(part.name, url, read(part, session), round_trips=session.round_trips)
        except VgpuctlError as err:
            return PartRead(part.name, url, error=err)

    return each(parts, one)


def plan_fleet(parts: Sequence[FleetPart], settings: Mapping[str, ConnectionSettings],
               options: RunOptions) -> list[PartRun]:
    """Each part's plan (`pipeline.plan_only`), in parallel; nothing applied, plan errors kept in each plan."""

    def one(part: FleetPart) -> PartRun:
        url = settings[part.name].sdk_url
        try:
            planned = pipeline.plan_only(settings[part.name], part.inventory, part_options(options, part))
        except VgpuctlError as err:
            return PartRun(part.name, url, error=err)
        return PartRun(part.name, url, planned=planned)

    runs = each(parts, one)
    refuse_unmatched(options, runs)
    return runs


# ------------------------------------------------------------------------------------------ the run


@dataclass
class _Live:
    """A prepared part's open session and what its apply needs."""

    run: PartRun
    session: Session
    prepared: Prepared
    options: RunOptions


def _prepare(part: FleetPart, settings: ConnectionSettings, options: RunOptions,
             request: RunRequest) -> tuple[PartRun, _Live | None, ExitStack]:
    from vgpuctl.vsphere.session import open_session

    stack = ExitStack()
    run = PartRun(part.name, settings.sdk_url)
    if not request.apply:
        options = dataclasses.replace(options, read_only=True)
    try:
        session = stack.enter_context(open_session(settings))
        if request.apply:
            stack.enter_context(ssh_service_for_run(session, options))
        observed = pipeline.observe(session, options.datacenter, part.inventory)
        prepared = pipeline.prepare(session, observed, part.inventory, options, request, stack)
    except VgpuctlError as err:
        stack.close()
        run.error = err
        return run, None, ExitStack()
    except BaseException:
        stack.close()
        raise
    run.planned = prepared.planned
    return run, _Live(run, session, prepared, options), stack


def part_request(request: RunRequest, name: str) -> RunRequest:
    """The request of one part: a fleet's saved plan as that vCenter's saved plan (its URL, basis and plan)."""
    saved: SavedPlan | None = request.saved.part(name) if request.saved is not None else None
    return dataclasses.replace(request, saved=saved, guests=None)


FleetDocument = Callable[[FleetPlanned], dict[str, Any]]


def run_fleet(parts: Sequence[FleetPart], settings: Mapping[str, ConnectionSettings], options: RunOptions,
              request: RunRequest, hooks: FleetHooks, out_of_scope: Sequence[str] = (),
              fleet_document: FleetDocument | None = None) -> FleetPlanned:
    """Plan every part, show them (hooks), confirm once, apply the parts that planned cleanly side by side; each
    part's `outcome` says what its run did. A saved plan is refused whole, before any change, when one part
    failed or moved, or when the fleet's plan made again (`fleet_document`) is not the file's plan section."""
    with ExitStack() as stack:
        prepared = each(parts, lambda p: _prepare(p, settings[p.name], part_options(options, p),
                                                  part_request(request, p.name)))
        for _, _, part_stack in prepared:
            stack.enter_context(part_stack)
        planned = FleetPlanned([run for run, _, _ in prepared], list(out_of_scope))
        refuse_unmatched(options, planned.parts)
        if request.saved is not None:
            _check_saved(request, planned, fleet_document)
        hooks.planned(planned)
        live = [lv for _, lv, _ in prepared if lv is not None and lv.run in planned.ready]
        for lv in live:
            lv.run.outcome = RunOutcome(lv.prepared.planned)
        if not request.apply or not live:
            return planned
        for lv in live:
            pipeline.check_before_apply(lv.prepared.planned, request)
        hooks.confirm(planned)
        with hooks.apply_progress(planned) as progress_of:
            applied, interrupted = pipeline.run_interruptible(lambda cancel: _apply_all(live, progress_of, cancel),
                                                              hooks.note)
        for lv, result in zip(live, applied, strict=True):
            _finish(lv, result, interrupted, hooks.note)
    return planned


def _check_saved(request: RunRequest, planned: FleetPlanned, fleet_document: FleetDocument | None) -> None:
    failure = planned.failure()
    if failure is not None:
        raise failure
    if fleet_document is None or request.saved is None or request.saved_path is None:
        raise ValueError("a saved fleet plan's run needs the fleet's document to compare it with")
    check_same_plan(request.saved_path, request.saved, fleet_document(planned))


def _apply_all(live: Sequence[_Live], progress_of: Callable[[str], Progress],
               cancel: Cancel) -> list[ApplyOutcome | VgpuctlError]:
    def one(lv: _Live) -> ApplyOutcome | VgpuctlError:
        planned = lv.prepared.planned
        try:
            return pipeline.apply(lv.session, planned.inventory, planned.plan, planned.observed, lv.options,
                                  progress_of(lv.run.name), cancel)
        except VgpuctlError as err:  # this vCenter's part fails; the others go on
            return err

    return each(live, one)


def _finish(lv: _Live, result: ApplyOutcome | VgpuctlError, interrupted: bool, note: Callable[[str], None]) -> None:
    outcome = lv.run.outcome
    assert outcome is not None
    if isinstance(result, VgpuctlError):
        lv.run.error = result
        outcome.interrupted = interrupted
        return
    pipeline.finish(outcome, lv.prepared, result, interrupted, lambda m: note(f"vCenter {lv.run.name}: {m}"),
                    lv.options)
    outcome.round_trips = lv.session.round_trips
