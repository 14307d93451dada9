"""validate, plan and apply: the declarative path from an inventory file to vCenter (vgpuctl.pipeline.run)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vgpuctl.cli import common
from vgpuctl.cli import events as cli_events
from vgpuctl.cli import fleet as cli_fleet
from vgpuctl.cli.common import EXIT_CHANGES_PENDING, GlobalOptions
from vgpuctl.cli.runs import NoHistory, recording
from vgpuctl.domain import DEFAULT_PARALLEL
from vgpuctl.errors import Interrupted, PlanError, PlanRefused, UsageError, VgpuctlError
from vgpuctl.filelimits import read_text
from vgpuctl.lazyclass import dataclass
from vgpuctl.progress import Fanout
from vgpuctl.reports.base import from_json

if TYPE_CHECKING:
    from vgpuctl.cli.display import ApplyDisplay
    from vgpuctl.durations import Deadline
    from vgpuctl.events import EventStream
    from vgpuctl.fleetrun import FleetPlanned, PartRun
    from vgpuctl.history import Recorder
    from vgpuctl.inventory import Inventory
    from vgpuctl.outcome import Planned, RunOutcome
    from vgpuctl.pipeline import RunOptions, RunRequest
    from vgpuctl.planfile import SavedPlan
    from vgpuctl.progress import Progress
    from vgpuctl.reports.apply import ApplyReport
    from vgpuctl.reports.fleet import FleetApplyReport, FleetPlanReport
    from vgpuctl.reports.plan import PlanReport
    from vgpuctl.reports.runs import RunPart
    from vgpuctl.scope import Scope

InventoryFile = Annotated[
    Path, typer.Option("--file", "-f", help="Inventory file (apiVersion vgpuctl/v1).", dir_okay=False)
]


KeepGoing = Annotated[bool, typer.Option("--keep-going", help="When a host change fails, go on with the other hosts.")]
SshTofu = Annotated[
    bool,
    typer.Option("--ssh-trust-on-first-use", help="Accept and record unknown ESXi SSH host keys (reported)."),
]
AllowDestroy = Annotated[
    bool, typer.Option("--allow-destroy", help="Destroy the VMs whose entries say state: absent (- in the plan).")
]


DeadlineOpt = Annotated[
    str | None,
    typer.Option(
        "--deadline",
        metavar="TIME|DURATION",
        help="The end of the change window: a time with its date and UTC offset (2026-12-01T06:00+01:00) or a "
        "duration from now (2h, 90m). No host wave and no VM starts after it; those in flight finish, and the "
        "summary lists what was left.",
    ),
]


HostScope = Annotated[
    list[str] | None,
    typer.Option("--host", metavar="HOST", help="Only this host (name, short name or glob; repeatable): its host "
                 "changes and the inventory's VMs on it."),
]
ClusterScope = Annotated[
    list[str] | None,
    typer.Option("--cluster", metavar="CLUSTER", help="Only this cluster (name or glob; repeatable): its hosts' "
                 "changes and the inventory's VMs in it."),
]
VmScope = Annotated[
    list[str] | None,
    typer.Option("--vm", metavar="VM", help="Only this VM of the inventory (name or glob; repeatable). Host "
                 "changes a VM in scope waits for are pulled in and shown as such; everything else is listed as "
                 "out of scope and left untouched."),
]


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_cmd)
    app.command("plan")(plan_cmd)
    app.command("apply")(apply_cmd)


def scope_of(hosts: list[str] | None, clusters: list[str] | None, vms: list[str] | None,
             vcenters: list[str] | None = None) -> Scope | None:
    """The run's scope from --host/--cluster/--vm (and a fleet's --vcenter); None (the whole inventory) when none
    is given."""
    if not (hosts or clusters or vms or vcenters):
        return None
    from vgpuctl.scope import Scope

    return Scope(hosts=list(hosts or []), clusters=list(clusters or []), vms=list(vms or []),
                 vcenters=list(vcenters or []))


# ---------------------------------------------------------------------------------------- validate


ShowMerged = Annotated[
    bool,
    typer.Option("--show-merged", help="Print the inventory as merged from the files it includes, the --env overlay "
                 "and the --values files: YAML that `validate -f` reads back and that plans the same (paths in it "
                 "are read from the inventory's folder). The summary line goes to stderr."),
]


def validate_cmd(ctx: typer.Context, file: InventoryFile, show_merged: ShowMerged = False) -> None:
    """Check an inventory (schema and rules); needs no vCenter. Errors as FILE:LINE:COL: message.

    An inventory may include other files and have overlays: --env NAME applies one, --values FILE applies a
    values file; each environment is checked with its own --env.
    """
    from vgpuctl.reports.plan import validate_report

    opts: GlobalOptions = ctx.obj
    if show_merged and opts.json:
        raise UsageError("--show-merged prints the inventory as YAML: leave out -o json")
    inventory = common.load_inventory(opts, file)
    report = validate_report(str(file), inventory)
    if not show_merged:
        common.emit(report, opts)
        return
    from vgpuctl.inventory.compose import merged_yaml_of

    common.show(merged_yaml_of(inventory))
    common.show(report.render_text(common.text_layout(opts, err=True)), err=True)


# -------------------------------------------------------------------------------------------- plan


PlanOut = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Save the plan to this file; `vgpuctl show PLANFILE` shows it, `vgpuctl apply PLANFILE` applies "
        "exactly it.",
        dir_okay=False,
        metavar="PLANFILE",
    ),
]
ExplainOpt = Annotated[
    str | None,
    typer.Option(
        "--explain",
        metavar="HOST",
        help="Show the host's settings merged from its cluster and host entries, where each came from, what "
        "vCenter has now and what the plan changes there (instead of the plan).",
    ),
]
DetailedExitcode = Annotated[
    bool, typer.Option("--detailed-exitcode", help="Exit 0 when nothing changes, 2 when changes are pending.")
]


def plan_cmd(
    ctx: typer.Context,
    file: InventoryFile,
    detailed_exitcode: DetailedExitcode = False,
    ssh_trust_on_first_use: SshTofu = False,
    out: PlanOut = None,
    explain: ExplainOpt = None,
    host: HostScope = None,
    cluster: ClusterScope = None,
    vm: VmScope = None,
    events: cli_events.EventsOpt = None,
    no_history: NoHistory = False,
    vcenter: cli_fleet.VcenterScope = None,
) -> None:
    """Show what apply would change: a field-level diff per VM and host, and every disruptive step. A fleet
    (an inventory of several vCenters) shows each vCenter's plan."""
    from vgpuctl.vsphere.workrecord import new_run_id

    opts: GlobalOptions = ctx.obj
    common.check_out_file(out)
    cli_events.check(events, opts)
    outputs = {"--out": out, "--events": cli_events.as_output(events)}
    common.refuse_overlaps(outputs, opts, {"the inventory": file})
    run_id = new_run_id()
    with recording("plan", opts, no_history or explain is not None, file, run_id) as record:
        code = _plan(opts, file, scope_of(host, cluster, vm, vcenter), run_id, ssh_trust_on_first_use, events,
                     record, explain, out, detailed_exitcode, outputs, fleet_scoped=bool(vcenter))
        if code:
            raise typer.Exit(code)  # inside: the record keeps the exit code


def _plan(opts: GlobalOptions, file: Path, scope: Scope | None, run_id: str, tofu: bool, events: str | None,
          record: Recorder | None, explain: str | None, out: Path | None, detailed_exitcode: bool,
          outputs: dict[str, Path | None], fleet_scoped: bool) -> int:
    from vgpuctl import pipeline

    inventory = common.load_inventory(opts, file, outputs)
    if inventory.is_fleet or fleet_scoped:
        return plan_fleet(opts, file, inventory, scope, PlanFlags(out, explain, detailed_exitcode, events, tofu,
                                                                  record))
    options = common.run_options(opts, inventory, trust_on_first_use=tofu, scope=scope, run_id=run_id)
    with cli_events.event_stream(events, opts, options.run_id, record.event if record else None) as stream:
        if stream is not None:
            stream.run_start("plan", str(file), scope)
        planned = pipeline.plan_only(common.connection_settings(opts, inventory), inventory, options)
        if opts.verbose:
            common.info(f"round trips: {planned.round_trips}")
        if explain is not None:
            from vgpuctl.reports.explain import explain_host

            common.emit(explain_host(explain, inventory, planned.observed, planned.plan, planned.facts), opts)
            return 0
        return show_plan_result(planned, opts, stream, out, file, detailed_exitcode, inventory, record)


def show_plan_result(planned: Planned, opts: GlobalOptions, stream: EventStream | None, out: Path | None,
                     file: Path, detailed_exitcode: bool, inventory: Inventory, record: Recorder | None = None) -> int:
    """Print the whole plan, its problems beside its changes, save it, and say the exit code (2: changes pending,
    asked for); a plan with problems is refused after it is shown (one line, exit 1, whatever was asked, and
    not saved)."""
    report = plan_document(planned, opts)
    what = f"{out} was not saved (--out)" if out is not None else "nothing can be applied"
    refused = PlanRefused(list(planned.plan.errors), what) if planned.plan.errors else None
    report.error = common.error_report(refused).error if refused is not None else None
    document = report.to_dict() if opts.json or record is not None else None  # the printed one is the record's
    if record is not None:
        record.planned(report, planned.vcenter, document)
    if stream is not None:
        stream.plan(report)
    if opts.json:
        common.emit(report, opts, document)
    else:
        show_plan(report, opts)
    if refused is not None:
        if stream is not None:
            stream.summary([], [], interrupted=False, exit_code=1, error="the plan has errors")
        raise refused
    if out is not None:
        save_plan(out, file, planned, inventory)
    code = EXIT_CHANGES_PENDING if detailed_exitcode and not planned.is_empty else 0
    if stream is not None:
        stream.summary([], [], interrupted=False, exit_code=code)
    return code


def plan_document(planned: Planned, opts: GlobalOptions) -> PlanReport:
    """`plan`'s document: the VM and host plan with the VM-class diff and the scope; round trips only with -v."""
    from vgpuctl.reports.plan import plan_report, with_class_plan

    round_trips = planned.round_trips if opts.verbose else None
    return with_class_plan(plan_report(planned.plan, round_trips, planned.scope), planned.classes)


def show_plan(report: PlanReport | FleetPlanReport, opts: GlobalOptions, to_stderr: bool = False) -> None:
    """The plan's text on stdout (stderr when stdout holds a document or events, or when asked)."""
    common.show(report.render_text(common.text_layout(opts)), err=to_stderr or opts.json or opts.text_to_stderr)


def save_plan(out: Path, file: Path, planned: Planned, inventory: Inventory) -> None:
    """The plan file: the plan, what it was based on, and the inventory it was made from: the file's text, or for
    an inventory composed of several files (or an overlay) the inventory as merged, with the files it came from."""
    from vgpuctl import planfile
    from vgpuctl.inventory.compose import merged_yaml_of

    composed = inventory.composed_from if inventory.is_merged else []
    # the inventory as planned: merged, or the file (read once already, bounded again)
    text = merged_yaml_of(inventory) if composed else read_text(file)
    basis = planfile.basis_of(planned.observed, planned.plan, planned.classes)
    from vgpuctl.reports.plan import plan_section

    document = plan_section(planned.plan, planned.scope, planned.classes)  # what apply compares
    planfile.save(out, planfile.SavedPlan(text, str(file), planned.vcenter, basis, document,
                                          composed_from=composed, env=inventory.env))
    common.info(f"Saved the plan to {out}; `vgpuctl show {out}` shows it, `vgpuctl apply {out}` applies exactly it.")


# ------------------------------------------------------------------------------------------- apply


PlanFileArg = Annotated[
    Path | None,
    typer.Argument(
        metavar="PLANFILE", help="A plan saved by `plan --out`: shown, then applied exactly as it is (asked "
        "unless --yes; refused when the farm changed since).", dir_okay=False
    ),
]


def apply_cmd(
    ctx: typer.Context,
    saved_plan: PlanFileArg = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Inventory file (apiVersion vgpuctl/v1).", dir_okay=False)
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    parallel: Annotated[
        int, typer.Option("--parallel", "-p", min=1, max=64, help="VMs changed at the same time.")
    ] = DEFAULT_PARALLEL,
    keep_going: KeepGoing = False,
    ssh_trust_on_first_use: SshTofu = False,
    host: HostScope = None,
    cluster: ClusterScope = None,
    vm: VmScope = None,
    events: cli_events.EventsOpt = None,
    allow_destroy: AllowDestroy = False,
    deadline: DeadlineOpt = None,
    no_history: NoHistory = False,
    vcenter: cli_fleet.VcenterScope = None,
) -> None:
    """Plan, confirm (unless --yes), execute with live progress, and summarize. Host changes run first.

    Plans with maintenance mode, reboots, VM power-offs or VMs destroyed ask for the word `yes`; others for y/N.

    With PLANFILE (from `plan --out`): apply exactly that plan, with the scope it was made with; refused when
    the farm changed since it was made. A fleet applies each vCenter's part side by side.
    """
    from vgpuctl import pipeline
    from vgpuctl.reports.plan import plan_section
    from vgpuctl.vsphere.workrecord import new_run_id

    opts: GlobalOptions = ctx.obj
    window = common.parse_deadline_option(deadline) if deadline is not None else None
    cli_events.check(events, opts)
    outputs = {"--events": cli_events.as_output(events)}
    common.refuse_overlaps(outputs, opts, {"the inventory": file, "the plan file": saved_plan})
    scope = scope_of(host, cluster, vm, vcenter)
    run_id = new_run_id()
    with recording("apply", opts, no_history, file, run_id) as record:
        saved, inventory, shown = load_request(opts, saved_plan, file, scope, outputs)
        if inventory.is_fleet or vcenter:
            flags = ApplyFlags(yes, parallel, keep_going, ssh_trust_on_first_use, allow_destroy, events, window,
                               record)
            return apply_fleet(opts, inventory, (saved, saved_plan, shown), scope, flags)
        scope = saved_plan_scope(saved, saved_plan, shown, scope, record)
        options = common.run_options(opts, inventory, parallel=parallel, keep_going=keep_going,
                                     trust_on_first_use=ssh_trust_on_first_use, scope=scope, run_id=run_id,
                                     deadline=window)
        request = pipeline.RunRequest(saved=saved, saved_path=saved_plan, allow_destroy=allow_destroy,
                                      plan_document=plan_section)
        with cli_events.event_stream(events, opts, options.run_id, record.event if record else None) as stream:
            if stream is not None:
                stream.run_start("apply", str(saved_plan) if saved_plan is not None else str(file), scope)
            hooks = CliHooks(opts, yes=yes, events=stream, record=record)  # shows the plan made again
            outcome = run_apply(opts, inventory, options, request, hooks=hooks)
        if opts.json:
            common.emit(apply_document(outcome, opts), opts)
        raise_for_outcome(outcome)


def saved_plan_scope(saved: SavedPlan | None, saved_plan: Path | None, shown: PlanReport | None,
                     scope: Scope | None, record: Recorder | None) -> Scope | None:
    """The scope a saved plan keeps (else the command line's); the run's record names the inventory it holds."""
    if saved is None:
        return scope
    if record is not None and saved_plan is not None:
        record.from_saved_plan(saved_plan, saved.inventory_path, saved.inventory_text)
    return saved_scope(shown)


def load_request(opts: GlobalOptions, saved_plan: Path | None, file: Path | None, scope: Scope | None,
                 outputs: dict[str, Path | None]) -> tuple[SavedPlan | None, Inventory, Any]:
    """The inventory to apply: the -f file (composed as the command line says), or the saved plan's inventory with
    its report (whose scope the run keeps; apply shows the plan it makes again, which must be the saved one): a
    PlanReport, or a fleet's FleetPlanReport."""
    if saved_plan is not None and file is None:
        common.refuse_composing(opts, "a saved plan holds the inventory it was made from, as merged then")
        if scope is not None:
            raise UsageError("a saved plan keeps the scope it was made with: give no --host, --cluster, --vm or "
                             "--vcenter")
        saved, inventory = load_saved_plan(saved_plan)
        return saved, inventory, saved_report(saved_plan, saved)
    if file is not None and saved_plan is None:
        return None, common.load_inventory(opts, file, outputs), None
    raise UsageError("give an inventory with -f FILE, or a saved plan: vgpuctl apply PLANFILE")


def saved_report(path: Path, saved: SavedPlan) -> Any:
    """The plan as it was saved (its report: a PlanReport, or a fleet's FleetPlanReport), for `show` and `apply
    PLANFILE`."""
    from vgpuctl.planfile import PlanFileError
    from vgpuctl.reports.fleet import FleetPlanReport
    from vgpuctl.reports.plan import PlanReport

    try:
        return from_json(FleetPlanReport if saved.parts is not None else PlanReport, saved.plan)
    except ValueError as err:
        raise PlanFileError(f"{path}: the saved plan cannot be read ({err})") from None


def saved_scope(report: PlanReport | None) -> Scope | None:
    from vgpuctl.scope import Scope

    if report is None or report.scope is None:
        return None
    return Scope(hosts=report.scope.hosts, clusters=report.scope.clusters, vms=report.scope.vms)


def run_apply(
    opts: GlobalOptions, inventory: Inventory, options: RunOptions, request: RunRequest, *, yes: bool = False,
    only_if_disruptive: bool = False, hooks: CliHooks | None = None,
) -> RunOutcome:
    """pipeline.run with the CLI's hooks (plan shown, confirmation, live progress), then the summary."""
    from vgpuctl import pipeline

    hooks = hooks or CliHooks(opts, yes=yes, only_if_disruptive=only_if_disruptive)
    try:
        outcome = pipeline.run(common.connection_settings(opts, inventory), inventory, options, request, hooks)
    except PlanError as err:
        refused = PlanRefused(err.problems) if hooks.showed_problems and type(err) is PlanError else err
        hooks.finished(None, refused)
        raise refused from None
    except VgpuctlError as err:
        hooks.finished(None, err)
        raise
    if opts.verbose:
        common.info(f"round trips: {outcome.round_trips}")
    print_summary(outcome, opts)
    hooks.finished(outcome, outcome.failure())
    return outcome


def load_saved_plan(path: Path) -> tuple[SavedPlan, Inventory]:
    """The saved plan and the inventory it was made from (as saved, whatever the inventory file says now)."""
    from vgpuctl import planfile
    from vgpuctl.inventory import load_inventory_text, validate

    saved = planfile.load(path)
    name = f"{saved.inventory_path} (merged)" if saved.composed_from else saved.inventory_path
    inventory = load_inventory_text(saved.inventory_text, name, source_path=saved.inventory_path)
    validate(inventory)
    return saved, inventory


@dataclass
class CliHooks:
    """What `apply`, `provision`, `vm vgpu` and experiments show and ask around pipeline.run; the events of the
    run (--events) go out from here too."""

    opts: GlobalOptions
    yes: bool = False
    only_if_disruptive: bool = False  # `vm vgpu`: ask only before power-offs and removals
    events: EventStream | None = None
    record: Recorder | None = None  # the run history's record of this run
    report: PlanReport | None = field(default=None, init=False)
    display: ApplyDisplay | None = field(default=None, init=False)
    began: bool = field(default=False, init=False)  # the apply itself started: the farm may have changed
    showed_problems: bool = field(default=False, init=False)  # the plan was shown with the problems refusing it

    def planned(self, planned: Planned) -> None:
        """Show the plan, also one with problems (the run refuses it right after, in one line)."""
        self.report = plan_document(planned, self.opts)
        self.showed_problems = bool(planned.plan.errors)
        if self.record is not None:
            self.record.planned(self.report, planned.vcenter)
        if self.events is not None:
            self.events.plan(self.report)
        show_plan(self.report, self.opts)

    def confirm(self, planned: Planned) -> None:
        if self.yes or (self.only_if_disruptive and not planned.disruptive):
            return
        report = self.report or plan_document(planned, self.opts)
        changes = len(planned.plan.changes) + len(planned.plan.host_changes)
        if planned.classes is not None:
            changes += len(planned.classes.class_changes) + len(planned.classes.namespace_changes)
        s = report.summary
        common.confirm(f"Apply {changes} change(s)?", word=bool(s.maintenance or s.reboots or s.power_off or s.remove))

    def apply_progress(self, planned: Planned) -> AbstractContextManager[Progress]:
        from vgpuctl.cli.display import ApplyDisplay

        self.began = True
        hosts = list(dict.fromkeys(c.host for c in planned.plan.host_changes))
        self.display = ApplyDisplay(common.stderr_console(), [c.vm for c in planned.plan.changes], hosts)
        return _progress(self.display, self.events)

    def note(self, message: str) -> None:
        if self.display is not None and self.display.live is not None:
            self.display.note(message)
        else:
            common.info(message)
        if self.events is not None:
            self.events.note(message)

    def finished(self, outcome: RunOutcome | None, failure: BaseException | None) -> None:
        """What the apply did to each host and VM for the run's record; the summary event: counts per outcome,
        and the exit code the command ends with."""
        if self.record is not None and outcome is not None and outcome.applied is not None:
            from vgpuctl.reports.runs import run_result

            self.record.applied(run_result(apply_document(outcome, self.opts)))
        if self.events is None:
            return
        code = int(getattr(failure, "exit_code", 1)) if failure is not None else 0
        applied = outcome.applied if outcome is not None else None
        hosts = [o.status for o in applied.hosts.hosts] if applied is not None and applied.hosts else []
        vms = [o.status for o in outcome.vm_result.vms] if outcome is not None else []
        interrupted = outcome.interrupted if outcome is not None else False
        self.events.summary(hosts, vms, interrupted=interrupted, exit_code=code,
                            error=str(failure) if failure is not None else None)


@contextmanager
def _progress(display: ApplyDisplay, events: EventStream | None) -> Iterator[Progress]:
    """The live display, and the event stream beside it: both see every step."""
    with display:
        yield Fanout(display, events) if events is not None else display


# ----------------------------------------------------------------------------------------- summary


def apply_document(outcome: RunOutcome, opts: GlobalOptions, vm: str | None = None) -> ApplyReport:
    """The apply's document, with the error that fails the run when one does; round trips only with -v."""
    from vgpuctl.reports.apply import apply_report

    applied = outcome.applied
    failure = outcome.failure()
    return apply_report(
        outcome.planned.plan,
        outcome.vm_result,
        classes=outcome.planned.classes,
        hosts=applied.hosts if applied is not None else None,
        vm_errors=applied.vm_errors if applied is not None else (),
        interrupted=outcome.interrupted,
        vm=vm,
        round_trips=outcome.round_trips if opts.verbose else None,
        scope=outcome.planned.scope,
        deadline=applied.deadline.text if applied is not None and applied.deadline is not None else None,
        class_outcomes=outcome.classes.outcomes if outcome.classes is not None else (),
        error=common.error_report(failure).error if failure is not None else None,
        guest_drivers=applied.guest_drivers if applied is not None else (),
    )


def print_summary(outcome: RunOutcome, opts: GlobalOptions) -> None:
    """The closing lines of an apply that ran (nothing when the plan was empty: it said so)."""
    from vgpuctl.reports.apply import render_apply_summary
    from vgpuctl.reports.supervisor import supervisor_outcomes

    if outcome.applied is None:
        return
    text = render_apply_summary(apply_document(outcome, opts), full=opts.verbose > 0)
    if outcome.classes is not None:
        text += "\n" + supervisor_outcomes(outcome.classes).render_text()
    common.show(text, err=opts.json or opts.text_to_stderr, wrap=True)


def raise_for_outcome(outcome: RunOutcome) -> None:
    failure = outcome.failure()
    if failure is not None:
        raise failure


# ------------------------------------------------------------------------------------------- a fleet


@dataclass
class PlanFlags:
    out: Path | None
    explain: str | None
    detailed_exitcode: bool
    events: str | None
    trust_on_first_use: bool
    record: Recorder | None = None  # the run history's record of this run


@dataclass
class ApplyFlags:
    yes: bool
    parallel: int
    keep_going: bool
    trust_on_first_use: bool
    allow_destroy: bool
    events: str | None
    deadline: Deadline | None = None  # --deadline: the end of the change window, the same for every vCenter
    record: Recorder | None = None  # the run history's record of this run


def refuse_fleet_events(events: str | None) -> None:
    if events is not None:
        raise UsageError("--events streams the run of one vCenter: a fleet's runs are not streamed (docs/fleet.md)")


def plan_fleet(opts: GlobalOptions, file: Path, inventory: Inventory, scope: Scope | None, flags: PlanFlags) -> int:
    """`plan` of a fleet: each vCenter in scope planned in parallel, one report with a section per vCenter, then
    the exit code: 1 when a vCenter could not be read or its plan has errors (after the whole plan is shown)."""
    from vgpuctl import fleetrun

    refuse_fleet_events(flags.events)
    patterns = scope.vcenters if scope is not None else []
    if flags.explain is not None:
        return explain_in_fleet(opts, inventory, scope, flags.explain)
    parts, left_out = cli_fleet.parts_in_scope(inventory, patterns)
    options = common.run_options(opts, None, trust_on_first_use=flags.trust_on_first_use, scope=scope)
    runs = fleetrun.plan_fleet(parts, cli_fleet.fleet_settings(opts, parts), options)
    report = fleet_plan_document(runs, left_out, opts)
    if flags.record is not None:
        from vgpuctl.reports.runs import RunPart

        flags.record.fleet([RunPart(p.vcenter, p.url, p.plan, None, p.error) for p in report.vcenters])
    if opts.json:
        common.emit(report, opts)
    else:
        show_plan(report, opts)
    failed = [(r.name, r.failure()) for r in runs if r.failure() is not None]
    if flags.out is not None and failed:
        common.warn(f"the plan was not saved to {flags.out}: a plan with failed vCenters cannot be applied")
    elif flags.out is not None:
        save_fleet_plan(flags.out, file, fleetrun.FleetPlanned(runs, left_out), inventory)
    cli_fleet.raise_for_parts(failed)
    return EXIT_CHANGES_PENDING if flags.detailed_exitcode and not report.is_empty else 0


def explain_in_fleet(opts: GlobalOptions, inventory: Inventory, scope: Scope | None, host: str) -> int:
    """`plan --explain HOST` in a fleet: on the one vCenter --vcenter names."""
    from vgpuctl import fleetrun, pipeline
    from vgpuctl.reports.explain import explain_host

    part = cli_fleet.one_part(inventory, scope.vcenters if scope is not None else None, "--explain")
    options = fleetrun.part_options(common.run_options(opts, None, scope=scope), part)
    settings = cli_fleet.fleet_settings(opts, [part])[part.name]  # --url and --password-file refused
    planned = pipeline.plan_only(settings, part.inventory, options)
    common.emit(explain_host(host, part.inventory, planned.observed, planned.plan, planned.facts), opts)
    return 0


def fleet_plan_document(runs: list[PartRun], out_of_scope: list[str], opts: GlobalOptions) -> FleetPlanReport:
    from vgpuctl.reports.fleet import FleetPlanPart, fleet_plan_report

    parts = [FleetPlanPart(r.name, r.url, plan_document(r.planned, opts) if r.planned is not None else None,
                           cli_fleet.error_text(r.error)) for r in runs]
    return fleet_plan_report(parts, out_of_scope)


def save_fleet_plan(out: Path, file: Path, planned: FleetPlanned, inventory: Inventory) -> None:
    """The fleet's plan file: the inventory (as merged when composed, as save_plan keeps it), the fleet's plan
    section, and each vCenter's URL and basis."""
    from vgpuctl import planfile
    from vgpuctl.inventory.compose import merged_yaml_of
    from vgpuctl.reports.fleet import fleet_plan_section

    composed = inventory.composed_from if inventory.is_merged else []
    text = merged_yaml_of(inventory) if composed else read_text(file)
    parts = {r.name: planfile.SavedPart(r.planned.vcenter, planfile.basis_of(r.planned.observed, r.planned.plan,
                                                                              r.planned.classes))
             for r in planned.parts if r.planned is not None}
    document = fleet_plan_section(planned)  # what apply compares
    planfile.save(out, planfile.SavedPlan(text, str(file), "", "", document, parts, composed, inventory.env))
    common.info(f"Saved the plan to {out}; `vgpuctl show {out}` shows it, `vgpuctl apply {out}` applies exactly it.")


def apply_fleet(opts: GlobalOptions, inventory: Inventory, saved: tuple[SavedPlan | None, Path | None, Any],
                scope: Scope | None, flags: ApplyFlags) -> None:
    """`apply` of a fleet (or of its saved plan): every vCenter planned and shown, one confirmation, the parts
    that planned cleanly applied side by side; each vCenter's summary, then exit 1 when a part failed."""
    from vgpuctl import fleetrun, pipeline

    refuse_fleet_events(flags.events)
    plan, path, shown = saved
    patterns = list(plan.parts or []) if plan is not None else (scope.vcenters if scope is not None else [])
    if plan is not None:
        scope = saved_fleet_scope(shown, patterns)
    parts, left_out = cli_fleet.parts_in_scope(inventory, patterns)
    settings = cli_fleet.fleet_settings(opts, parts)
    options = common.run_options(opts, None, parallel=flags.parallel, keep_going=flags.keep_going,
                                 trust_on_first_use=flags.trust_on_first_use, scope=scope, deadline=flags.deadline)
    from vgpuctl.reports.fleet import fleet_plan_section
    from vgpuctl.reports.plan import plan_section

    request = pipeline.RunRequest(saved=plan, saved_path=path, allow_destroy=flags.allow_destroy,
                                  plan_document=plan_section)
    hooks = FleetCliHooks(opts, yes=flags.yes, record=flags.record)  # shows the plan made again: a saved one too
    planned = fleetrun.run_fleet(parts, settings, options, request, hooks, left_out, fleet_plan_section)
    report = fleet_apply_document(planned, opts)
    if flags.record is not None:
        flags.record.fleet(fleet_run_parts(planned, opts))
    if hooks.began or any(r.failure() is not None for r in planned.parts):
        from vgpuctl.reports.fleet import render_fleet_apply_summary

        common.show(render_fleet_apply_summary(report, opts.verbose > 0), err=opts.json or opts.text_to_stderr,
                    wrap=True)
    if opts.json:
        common.emit(report, opts)
    raise_for_fleet(planned)


def saved_fleet_scope(shown: FleetPlanReport, vcenters: list[str]) -> Scope:
    """The scope a fleet's plan was made with: its vCenters, and the --host/--cluster/--vm each part shows."""
    from vgpuctl.scope import Scope

    scoped = next((p.plan.scope for p in shown.vcenters if p.plan is not None and p.plan.scope is not None), None)
    if scoped is None:
        return Scope(vcenters=vcenters)
    return Scope(hosts=scoped.hosts, clusters=scoped.clusters, vms=scoped.vms, vcenters=vcenters)


def fleet_apply_document(planned: FleetPlanned, opts: GlobalOptions) -> FleetApplyReport:
    from vgpuctl.reports.fleet import FleetApplyPart, fleet_apply_report

    parts = []
    for r in planned.parts:
        applied = r.outcome is not None and r.outcome.applied is not None
        apply = apply_document(r.outcome, opts) if r.outcome is not None and applied else None
        plan = plan_document(r.planned, opts) if r.planned is not None and apply is None else None
        parts.append(FleetApplyPart(r.name, r.url, apply, plan, cli_fleet.error_text(r.error)))
    failed = [r.name for r in planned.parts if r.failure() is not None]
    interrupted = any(r.outcome is not None and r.outcome.interrupted for r in planned.parts)
    return fleet_apply_report(parts, failed, interrupted, planned.out_of_scope)


def fleet_run_parts(planned: FleetPlanned, opts: GlobalOptions) -> list[RunPart]:
    """Each vCenter's part of a fleet's apply for the run's record: its plan, what the apply did, its failure."""
    from vgpuctl.reports.runs import RunPart, run_result

    parts = []
    for r in planned.parts:
        plan = plan_document(r.planned, opts) if r.planned is not None else None
        applied = r.outcome is not None and r.outcome.applied is not None
        result = run_result(apply_document(r.outcome, opts)) if r.outcome is not None and applied else None
        parts.append(RunPart(r.name, r.url, plan, result, cli_fleet.error_text(r.error)))
    return parts


def raise_for_fleet(planned: FleetPlanned) -> None:
    """Exit 130 when Ctrl-C stopped the apply, 1 when a vCenter's part failed."""

    failed = [(r.name, r.failure()) for r in planned.parts if r.failure() is not None]
    if any(isinstance(err, Interrupted) for _, err in failed):
        raise Interrupted("interrupted: " + "; ".join(f"vCenter {n}: {err}" for n, err in failed))
    cli_fleet.raise_for_parts(failed)


@dataclass
class FleetCliHooks:
    """What `apply` of a fleet shows and asks: the fleet's plan, one confirmation, one live display of every
    vCenter's hosts and VMs (named `VCENTER/NAME`)."""

    opts: GlobalOptions
    yes: bool = False
    record: Recorder | None = None  # the run history's record of this run
    report: FleetPlanReport | None = field(default=None, init=False)
    display: ApplyDisplay | None = field(default=None, init=False)
    began: bool = field(default=False, init=False)

    def planned(self, planned: FleetPlanned) -> None:
        self.report = fleet_plan_document(planned.parts, planned.out_of_scope, self.opts)
        if self.record is not None:  # kept also when the apply is declined or refused
            self.record.fleet(fleet_run_parts(planned, self.opts))
        show_plan(self.report, self.opts)

    def confirm(self, planned: FleetPlanned) -> None:
        if self.yes:
            return
        ready = [r.planned for r in planned.ready if r.planned is not None]
        changes = sum(len(p.plan.changes) + len(p.plan.host_changes) for p in ready)
        changes += sum(len(p.classes.class_changes) + len(p.classes.namespace_changes) for p in ready if p.classes)
        where = ", ".join(r.name for r in planned.ready)
        shown = [plan_document(p, self.opts).summary for p in ready]  # the word, as for one vCenter
        word = any(s.maintenance or s.reboots or s.power_off or s.remove for s in shown)
        common.confirm(f"Apply {changes} change(s) on vCenter {where}?", word=word)

    def apply_progress(self, planned: FleetPlanned) -> AbstractContextManager[Any]:
        from vgpuctl.cli.display import ApplyDisplay

        self.began = True
        ready = [(r.name, r.planned) for r in planned.ready if r.planned is not None]
        vms = {name: [f"{name}/{c.vm}" for c in p.plan.changes] for name, p in ready}
        hosts = list(dict.fromkeys(f"{name}/{c.host}" for name, p in ready for c in p.plan.host_changes))
        self.display = ApplyDisplay(common.stderr_console(), [v for names in vms.values() for v in names], hosts)
        return cli_fleet.part_progress(self.display, vms)

    def note(self, message: str) -> None:
        if self.display is not None and self.display.live is not None:
            self.display.note(message)
        else:
            common.info(message)
