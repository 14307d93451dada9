"""validate, plan and apply: the declarative path from an inventory file to vCenter."""

from __future__ import annotations

import sys
import threading
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vgpuctl.cli import common, k8s
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.domain import Outcome
from vgpuctl.errors import Interrupted, PlanError, UsageError, VgpuctlError
from vgpuctl.progress import LiveOnTerminal

if TYPE_CHECKING:
    from rich.console import Console

    from vgpuctl.inventory import Inventory
    from vgpuctl.model import ApplyResult, HostApplyResult, Observed, Plan
    from vgpuctl.pipeline import ApplyOutcome, RunOptions
    from vgpuctl.planfile import SavedPlan
    from vgpuctl.reports.plan import ApplyReport
    from vgpuctl.supervisor.vmclasses import SupervisorPlan
    from vgpuctl.vsphere.session import Session

EXIT_CHANGES_PENDING = 2
DEFAULT_PARALLEL = 8

InventoryFile = Annotated[
    Path, typer.Option("--file", "-f", help="Inventory file (apiVersion vgpuctl/v1).", dir_okay=False)
]


KeepGoing = Annotated[bool, typer.Option("--keep-going", help="When a host change fails, go on with the other hosts.")]
SshTofu = Annotated[
    bool,
    typer.Option("--ssh-trust-on-first-use", help="Accept and record unknown ESXi SSH host keys (reported)."),
]


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_cmd)
    app.command("plan")(plan_cmd)
    app.command("apply")(apply_cmd)


# ---------------------------------------------------------------------------------------- validate


def validate_cmd(ctx: typer.Context, file: InventoryFile) -> None:
    """Check an inventory (schema and rules); needs no vCenter. Errors as FILE:LINE:COL: message."""
    from vgpuctl import pipeline
    from vgpuctl.reports.plan import validate_report

    opts: GlobalOptions = ctx.obj
    common.emit(validate_report(str(file), pipeline.load(file)), opts)


# -------------------------------------------------------------------------------------------- plan


def plan_cmd(
    ctx: typer.Context,
    file: InventoryFile,
    detailed_exitcode: Annotated[
        bool, typer.Option("--detailed-exitcode", help="Exit 0 when nothing changes, 2 when changes are pending.")
    ] = False,
    ssh_trust_on_first_use: SshTofu = False,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Save the plan to this file; `vgpuctl apply PLANFILE` applies exactly it.",
            dir_okay=False,
            metavar="PLANFILE",
        ),
    ] = None,
    explain: Annotated[
        str | None,
        typer.Option(
            "--explain",
            metavar="HOST",
            help="Show the host's settings merged from its cluster and host entries, where each came from, "
            "what vCenter has now and what the plan changes there (instead of the plan).",
        ),
    ] = None,
) -> None:
    """Show what apply would change: a field-level diff per VM and host, and every disruptive step."""
    from vgpuctl import pipeline

    opts: GlobalOptions = ctx.obj
    inventory = pipeline.load(file)
    options = run_options(opts, inventory, trust_on_first_use=ssh_trust_on_first_use)
    with common.connect(opts, inventory) as session:
        observed = pipeline.observe(session, options.datacenter, inventory)
        the_plan = pipeline.plan(session, observed, inventory, options)
        classes = pipeline.plan_vm_classes(session, observed, inventory, the_plan)  # VM classes (k8s)
        round_trips = session.round_trips
        vcenter = session.settings.sdk_url
    with classes or nullcontext():
        k8s.merge_errors(classes, the_plan)
    if explain is not None:
        from vgpuctl.hosts.explain import explain_host

        common.emit(explain_host(explain, inventory, observed, the_plan), opts)
        return
    if the_plan.errors:
        if opts.verbose:
            print_plan_to_stderr(the_plan)  # the reasons come as the error; -v shows the diff too
        raise PlanError(list(the_plan.errors))
    show_plan(the_plan, opts, round_trips=round_trips if opts.verbose else None, classes=k8s.class_plan(classes))
    k8s.show_in_plan(classes, opts)
    if out is not None:
        save_plan(out, file, vcenter, observed, the_plan, k8s.class_plan(classes))
    if detailed_exitcode and not (the_plan.is_empty and not k8s.has_changes(classes)):
        raise typer.Exit(EXIT_CHANGES_PENDING)


def save_plan(
    out: Path, file: Path, vcenter: str, observed: Observed, the_plan: Plan, classes: SupervisorPlan | None = None
) -> None:
    from vgpuctl import planfile
    from vgpuctl.reports.plan import plan_report, with_class_plan

    text = file.read_text(encoding="utf-8")
    basis = planfile.basis_of(observed, the_plan, classes)
    document = with_class_plan(plan_report(the_plan), classes).to_dict()
    planfile.save(out, planfile.SavedPlan(text, str(file), vcenter, basis, document))
    common.info(f"Saved the plan to {out}; `vgpuctl apply {out}` applies exactly it.")


def run_options(
    opts: GlobalOptions, inventory: Inventory | None, *, parallel: int = DEFAULT_PARALLEL, **fields: Any
) -> RunOptions:
    """The pipeline's options from the global options and the command's flags."""
    from vgpuctl.pipeline import RunOptions

    return RunOptions(
        datacenter=common.datacenter_for(opts, inventory), parallel=parallel, on_new_host_key=new_host_key, **fields
    )


def new_host_key(host: str, fingerprint: str) -> None:
    common.warn(f"trusted the new SSH host key of {host} ({fingerprint}) and recorded it in known_hosts")


def show_plan(
    the_plan: Plan, opts: GlobalOptions, *, round_trips: int | None = None, classes: SupervisorPlan | None = None
) -> None:
    """`plan`'s result: the JSON document on stdout (with the VM-class diff), or the colored diff."""
    from vgpuctl.reports.plan import plan_report, with_class_plan

    report = with_class_plan(plan_report(the_plan, round_trips), classes)
    if opts.json:
        common.emit(report, opts)
    else:
        common.show(plan_renderable(the_plan))


def plan_renderable(the_plan: Plan) -> Any:
    """render_plan_text's plain diff with + ~ - lines colored (never parsed as rich markup)."""
    from rich.text import Text

    from vgpuctl.reports.plan import render_plan_text

    styles = {"+": "green", "-": "red", "~": "yellow", "!": "bold red"}
    text = Text()
    for line in render_plan_text(the_plan).rstrip("\n").splitlines():
        mark = line.lstrip()[:1]
        text.append(line + "\n", style=styles.get(mark, ""))
    text.rstrip()
    return text


def print_plan_to_stderr(the_plan: Plan) -> None:
    common.stderr_console().print(plan_renderable(the_plan))


# ------------------------------------------------------------------------------------------- apply


def apply_cmd(
    ctx: typer.Context,
    saved_plan: Annotated[
        Path | None,
        typer.Argument(
            metavar="[PLANFILE]", help="A plan saved by `plan --out`: applied as it is, without asking.", dir_okay=False
        ),
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Inventory file (apiVersion vgpuctl/v1).", dir_okay=False)
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    parallel: Annotated[
        int, typer.Option("--parallel", "-p", min=1, max=64, help="VMs changed at the same time.")
    ] = DEFAULT_PARALLEL,
    keep_going: KeepGoing = False,
    ssh_trust_on_first_use: SshTofu = False,
) -> None:
    """Plan, confirm (unless --yes), execute with live progress, and summarize. Host changes run first.

    With PLANFILE (from `plan --out`): apply exactly that plan, refused when the farm changed since it was made.
    """
    from vgpuctl import pipeline

    opts: GlobalOptions = ctx.obj
    if saved_plan is not None and file is None:
        saved, inventory = load_saved_plan(saved_plan)
    elif file is not None and saved_plan is None:
        saved, inventory = None, pipeline.load(file)
    else:
        raise UsageError("give an inventory with -f FILE, or a saved plan: vgpuctl apply PLANFILE")
    options = run_options(
        opts, inventory, parallel=parallel, keep_going=keep_going, trust_on_first_use=ssh_trust_on_first_use
    )
    run = execute(opts, inventory, options, yes=yes or saved is not None, saved=saved, saved_path=saved_plan)
    if opts.json:
        common.emit(apply_report(run, opts), opts)
    raise_for_outcome(run)


def run_apply(opts: GlobalOptions, inventory: Inventory, yes: bool, parallel: int = DEFAULT_PARALLEL) -> ApplyRun:
    """`apply` for reuse (provision). Raises VgpuctlError when a host or VM failed (the summary was printed),
    Interrupted on Ctrl-C, PlanError when the plan cannot be applied."""
    run = execute(opts, inventory, run_options(opts, inventory, parallel=parallel), yes=yes)
    raise_for_outcome(run)
    return run


@dataclass
class ApplyRun:
    """One apply as the CLI shows it: the plan confirmed, what happened to the VMs and the hosts."""

    plan: Plan
    result: ApplyResult
    round_trips: int
    interrupted: bool = False
    hosts: HostApplyResult | None = None  # when the plan had host changes
    vm_errors: list[str] = field(default_factory=list)  # errors of the VM plan made again after the hosts
    vm_classes: SupervisorPlan | None = None  # the VM-class plan applied after the hosts and VMs


def execute(
    opts: GlobalOptions,
    inventory: Inventory,
    options: RunOptions,
    *,
    yes: bool,
    saved: SavedPlan | None = None,
    saved_path: Path | None = None,
) -> ApplyRun:
    """Observe, plan (checked against the saved plan when there is one), then apply_planned."""
    from vgpuctl import pipeline
    from vgpuctl.planfile import check_still_valid

    with common.connect(opts, inventory) as session:
        observed = pipeline.observe(session, options.datacenter, inventory)
        the_plan = pipeline.plan(session, observed, inventory, options)
        classes = pipeline.plan_vm_classes(session, observed, inventory, the_plan)
        with classes or nullcontext():
            k8s.merge_errors(classes, the_plan)
            if saved is not None and saved_path is not None:  # the same plan, VM classes included, or nothing
                vcenter = session.settings.sdk_url
                check_still_valid(saved_path, saved, vcenter, observed, the_plan, k8s.class_plan(classes))
            run = apply_planned(opts, session, inventory, the_plan, observed, options, yes=yes)
            run.vm_classes = k8s.class_plan(classes)
            if not run.interrupted:
                k8s.apply_in_run(classes, opts, yes=yes)  # VM classes after the hosts they are checked against
        return run


def load_saved_plan(path: Path) -> tuple[SavedPlan, Inventory]:
    """The saved plan and the inventory it was made from (as saved, whatever the inventory file says now)."""
    from vgpuctl import planfile
    from vgpuctl.inventory import load_inventory_text, validate

    saved = planfile.load(path)
    inventory = load_inventory_text(saved.inventory_text, saved.inventory_path)
    validate(inventory)
    return saved, inventory


def apply_planned(
    opts: GlobalOptions,
    session: Session,
    inventory: Inventory,
    the_plan: Plan,
    observed: Observed,
    options: RunOptions,
    *,
    yes: bool,
    confirm_only_if_disruptive: bool = False,
) -> ApplyRun:
    """Show the plan, confirm, apply it with progress, print the summary. Shared by apply and `vm vgpu`."""
    from vgpuctl.model import ApplyResult

    if the_plan.errors:
        if opts.verbose:
            print_plan_to_stderr(the_plan)
        raise PlanError(list(the_plan.errors))
    if opts.json:
        print_plan_to_stderr(the_plan)
    else:
        common.show(plan_renderable(the_plan))
    if the_plan.is_empty:  # the rendered plan says so
        return ApplyRun(the_plan, ApplyResult(), session.round_trips)
    if not yes and (not confirm_only_if_disruptive or is_disruptive(the_plan)):
        confirm(the_plan)
    outcome, interrupted = apply_with_progress(session, inventory, the_plan, observed, options)
    run = ApplyRun(
        the_plan, outcome.vms, session.round_trips, interrupted or outcome.interrupted, outcome.hosts, outcome.vm_errors
    )
    print_summary(run, opts)
    return run


def is_disruptive(the_plan: Plan) -> bool:
    from vgpuctl.model import Op

    return bool(the_plan.host_changes) or any(
        c.power_off or any(d.op == Op.REMOVE for d in c.devices) for c in the_plan.changes
    )


def confirm(the_plan: Plan) -> None:
    if not sys.stdin.isatty():
        raise UsageError("apply needs confirmation but stdin is not a terminal: rerun with --yes")
    changes = len(the_plan.changes) + len(the_plan.host_changes)
    try:
        ok = typer.confirm(f"Apply {changes} change(s)?", default=False, err=True)
    except typer.Abort:
        raise Interrupted("interrupted: nothing was changed") from None
    if not ok:
        raise VgpuctlError("apply cancelled: nothing was changed")


def apply_with_progress(
    session: Session, inventory: Inventory, the_plan: Plan, observed: Observed, options: RunOptions
) -> tuple[ApplyOutcome, bool]:
    """pipeline.apply with a live display; Ctrl-C only stops new work (pipeline.run_interruptible)."""
    from vgpuctl import pipeline

    display = ApplyProgress(common.stderr_console(), [c.vm for c in the_plan.changes])
    with display:
        return pipeline.run_interruptible(
            lambda cancel: pipeline.apply(session, inventory, the_plan, observed, options, display, cancel),
            display.note,
        )


TERMINAL_STEPS = frozenset({"done", "changed", "unchanged", "failed", "skipped", "error"})


class ApplyProgress(LiveOnTerminal):
    """The `progress` callback of apply_plan: one line per VM with its step and the task's percentage.

    On a terminal, a rich Live display shows the VMs in flight and prints each finished VM above it; elsewhere
    (CI logs) one plain line per step change.
    """

    refresh_per_second = 8

    def __init__(self, console: Console, vms: list[str]):
        from vgpuctl.progress import StepLog

        self.console = console
        self.total = len(vms)
        self.state: dict[str, tuple[str, int | None]] = {}
        self.finished: dict[str, str] = {}
        self.lock = threading.Lock()
        self.log = StepLog(self.note)  # off a terminal: timestamped lines, heartbeats at most every 30 s
        self.host_work: dict[str, str] = {}  # host -> its step in flight

    def note(self, message: str) -> None:
        self.console.print(message, markup=False, highlight=False, soft_wrap=True)

    def vm_step(self, vm: str, step: str, percent: int | float | None = None) -> None:
        pct = None if percent is None else int(percent)
        with self.lock:
            previous = self.state.get(vm)
            self.state[vm] = (step, pct)
            if step in TERMINAL_STEPS:
                self.finished[vm] = step
        if self.live is None:  # a percentage only while vCenter reports one between start and end
            self.log.step(vm, step, f"{pct}%" if pct is not None and 0 < pct < 100 else None)
        elif step in TERMINAL_STEPS and (previous is None or previous[0] != step):
            self.console.print(self._line(vm, step, pct), markup=False, highlight=False)  # in-flight: the table

    def host_step(self, host: str, step: str, detail: str | None) -> None:
        self._running(host, step, detail)
        if self.live is None:
            self.log.step(f"host {host}", step, detail)
        else:
            self.vm_step(f"host {host}", step + (f" {detail}" if detail else ""), None)

    def _running(self, host: str, step: str, detail: str | None) -> None:
        """A host's step in flight, for the line of a second Ctrl-C (its vCenter task may go on without us)."""
        from vgpuctl.progress import RUNNING

        with self.lock:
            previous = self.host_work.pop(host, None)
            label = f"{step} host {host}" + (f" ({detail})" if detail and step != "wait-reconnect" else "")
            if step not in TERMINAL_STEPS:
                self.host_work[host] = label
        if previous is not None:
            RUNNING.discard(previous)
        if step not in TERMINAL_STEPS:
            RUNNING.add(label)

    @staticmethod
    def _line(name: str, step: str, pct: int | None) -> str:
        return f"{name}: {step}" + (f" {pct}%" if pct is not None else "")

    def __rich__(self) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        with self.lock:
            active = [(vm, s) for vm, s in self.state.items() if vm not in self.finished]
            done = len(self.finished)
        for vm, (step, pct) in active[:30]:
            bar = ProgressBar(total=100, completed=pct or 0, width=20) if pct is not None else ""
            table.add_row(vm, step, bar, f"{pct}%" if pct is not None else "")
        if len(active) > 30:
            table.add_row(f"... and {len(active) - 30} more in flight", "", "", "")
        table.add_row(f"{done}/{self.total} VMs finished", "", "", "")
        return table


# ----------------------------------------------------------------------------------------- summary


def apply_report(run: ApplyRun, opts: GlobalOptions, vm: str | None = None) -> ApplyReport:
    """The apply's document; round trips only with -v."""
    from vgpuctl.reports.plan import ApplyReport, plan_report, vm_names, with_class_plan

    vms = run.result.vms
    return ApplyReport(
        plan=with_class_plan(plan_report(run.plan), run.vm_classes),
        hosts=list(run.hosts.hosts) if run.hosts is not None else [],
        vms=list(vms),
        changed=vm_names(vms, Outcome.CHANGED),
        failed=vm_names(vms, Outcome.FAILED),
        skipped=vm_names(vms, Outcome.SKIPPED),
        unchanged=vm_names(vms, Outcome.UNCHANGED),
        not_started=vm_names(vms, Outcome.NOT_STARTED),
        hosts_not_ready=list(run.result.hosts_not_ready),
        vm_errors=list(run.vm_errors),
        interrupted=run.interrupted,
        vm=vm,
        round_trips=run.round_trips if opts.verbose else None,
    )


SUMMARY_ORDER = (
    (Outcome.CHANGED, "changed"),
    (Outcome.FAILED, "failed"),
    (Outcome.SKIPPED, "skipped"),
    (Outcome.NOT_STARTED, "not started"),
    (Outcome.UNCHANGED, "unchanged"),
)
UNDONE = (Outcome.FAILED, Outcome.SKIPPED, Outcome.NOT_STARTED)


def summarize(result: ApplyResult) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {str(status): [] for status, _ in SUMMARY_ORDER}
    for outcome in result.vms:
        groups.setdefault(str(outcome.status), []).append(outcome.vm)
    return groups


def summary_line(groups: dict[str, list[str]], interrupted: bool, plan_failed: bool = False) -> str:
    """`Apply finished: 3 changed, 1 unchanged.`; never "0 changed" when work was left undone."""
    undone = plan_failed or any(groups[str(s)] for s in UNDONE)
    head = "Apply interrupted" if interrupted else "Apply incomplete" if undone else "Apply finished"
    parts = [f"{len(groups[str(s)])} {label}" for s, label in SUMMARY_ORDER]
    if not groups[str(Outcome.CHANGED)] and undone:
        parts[0] = "no VM changed"
    return f"{head}: {', '.join(parts)}."


def print_summary(run: ApplyRun, opts: GlobalOptions) -> None:
    groups = summarize(run.result)
    lines = [*_host_summary(run), summary_line(groups, run.interrupted, bool(run.vm_errors))]
    for label in ("changed", "skipped"):
        if groups[label]:
            lines.append(f"  {label}: {', '.join(groups[label])}")
    for outcome in run.result.vms:
        if outcome.status == Outcome.FAILED:
            fault = f"{outcome.fault_type}: " if outcome.fault_type else ""
            lines.append(f"  failed: {outcome.vm}: {fault}{outcome.message}")
    lines += _left_lines(run.result)
    if opts.verbose:
        lines.append(f"round trips: {run.round_trips}")
    text = "\n".join(lines)
    if opts.json:
        common.info(text)
    else:
        typer.echo(text)


def _left_lines(result: ApplyResult) -> list[str]:
    """What an interrupted or stopped apply left, and how to go on."""
    left = [o for o in result.vms if o.left]
    if not left:
        return []
    lines = [f"  left: {o.vm} ({', '.join(o.left)})" for o in left[:20]]
    if len(left) > 20:
        lines.append(f"  left: ... and {len(left) - 20} more VMs")
    lines.append("  to continue: run the same apply again; it plans only what is left")
    return lines


def _host_summary(run: ApplyRun) -> list[str]:
    hosts = run.hosts
    if hosts is None:
        return []
    lines = [f"Hosts: {len(hosts.changed)} changed, {len(hosts.failed)} failed, {len(hosts.skipped)} skipped."]
    lines += [f"  {line}" for outcome in hosts.hosts for line in outcome.describe().splitlines()]
    lines += [f"  VM plan after the host changes: {e}" for e in run.vm_errors]
    return lines


def raise_for_outcome(run: ApplyRun) -> None:
    groups = summarize(run.result)
    hosts = run.hosts
    if hosts is not None and hosts.failed and not run.interrupted:
        raise VgpuctlError(
            f"apply failed on host(s) {', '.join(hosts.failed)} (left as the summary says): run apply again to continue"
        )
    if run.vm_errors:
        raise PlanError(list(run.vm_errors))
    if run.interrupted:
        left = len(groups[str(Outcome.NOT_STARTED)])
        raise Interrupted(
            f"interrupted: {len(groups['changed'])} VM(s) changed, {left} not started; run apply again to continue"
        )
    if groups["failed"]:
        total = sum(len(v) for v in groups.values())
        raise VgpuctlError(f"apply failed for {len(groups['failed'])} of {total} VM(s): {', '.join(groups['failed'])}")
