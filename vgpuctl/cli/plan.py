"""validate, plan and apply: the declarative path from an inventory file to vCenter (vgpuctl.pipeline.run)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import EXIT_CHANGES_PENDING, GlobalOptions
from vgpuctl.domain import DEFAULT_PARALLEL
from vgpuctl.errors import PlanError, UsageError
from vgpuctl.progress import LiveOnTerminal

if TYPE_CHECKING:
    from rich.console import Console

    from vgpuctl.inventory import Inventory
    from vgpuctl.pipeline import Planned, RunOptions, RunOutcome, RunRequest
    from vgpuctl.planfile import SavedPlan
    from vgpuctl.reports.plan import ApplyReport, PlanReport

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
    options = common.run_options(opts, inventory, trust_on_first_use=ssh_trust_on_first_use)
    settings = common.connection_settings(opts, inventory)
    planned = pipeline.plan_only(settings, inventory, options)
    if opts.verbose:
        common.info(f"round trips: {planned.round_trips}")
    if explain is not None:
        from vgpuctl.hosts.explain import explain_host

        common.emit(explain_host(explain, inventory, planned.observed, planned.plan), opts)
        return
    if planned.plan.errors:
        if opts.verbose:
            print_plan_to_stderr(planned)  # the reasons come as the error; -v shows the diff too
        raise PlanError(list(planned.plan.errors))
    report = plan_document(planned, opts)
    if opts.json:
        common.emit(report, opts)
    else:
        common.show(plan_renderable(planned))
    if out is not None:
        save_plan(out, file, planned, report)
    if detailed_exitcode and not planned.is_empty:
        raise typer.Exit(EXIT_CHANGES_PENDING)


def plan_document(planned: Planned, opts: GlobalOptions) -> PlanReport:
    """`plan`'s JSON document: the VM and host plan with the VM-class diff; round trips only with -v."""
    from vgpuctl.reports.plan import plan_report, with_class_plan

    round_trips = planned.round_trips if opts.verbose else None
    return with_class_plan(plan_report(planned.plan, round_trips), planned.classes)


def save_plan(out: Path, file: Path, planned: Planned, report: PlanReport) -> None:
    from vgpuctl import planfile
    from vgpuctl.filelimits import read_text

    text = read_text(file)  # the inventory as planned: the file was read once already, bounded again
    basis = planfile.basis_of(planned.observed, planned.plan, planned.classes)
    document = report.to_dict()
    document.pop("round_trips", None)
    planfile.save(out, planfile.SavedPlan(text, str(file), planned.vcenter, basis, document))
    common.info(f"Saved the plan to {out}; `vgpuctl apply {out}` applies exactly it.")


def plan_renderable(planned: Planned) -> Any:
    """The plan's diff with + ~ - lines colored (never parsed as rich markup), the VM-class diff after it."""
    from rich.text import Text

    from vgpuctl.reports.plan import render_plan_text
    from vgpuctl.reports.supervisor import supervisor_plan_report

    styles = {"+": "green", "-": "red", "~": "yellow", "!": "bold red"}
    lines = render_plan_text(planned.plan).rstrip("\n").splitlines()
    if planned.classes is not None:
        lines += supervisor_plan_report(planned.classes).diff_text().rstrip("\n").splitlines()
    text = Text()
    for line in lines:
        text.append(line + "\n", style=styles.get(line.lstrip()[:1], ""))
    text.rstrip()
    return text


def print_plan_to_stderr(planned: Planned) -> None:
    common.stderr_console().print(plan_renderable(planned))


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
    options = common.run_options(
        opts, inventory, parallel=parallel, keep_going=keep_going, trust_on_first_use=ssh_trust_on_first_use
    )
    request = pipeline.RunRequest(saved=saved, saved_path=saved_plan)
    outcome = run_apply(opts, inventory, options, request, yes=yes or saved is not None)
    if opts.json:
        common.emit(apply_document(outcome, opts), opts)
    raise_for_outcome(outcome)


def run_apply(
    opts: GlobalOptions, inventory: Inventory, options: RunOptions, request: RunRequest, *, yes: bool,
    only_if_disruptive: bool = False,
) -> RunOutcome:
    """pipeline.run with the CLI's hooks (plan shown, confirmation, live progress), then the summary."""
    from vgpuctl import pipeline

    hooks = CliHooks(opts, yes=yes, only_if_disruptive=only_if_disruptive)
    outcome = pipeline.run(common.connection_settings(opts, inventory), inventory, options, request, hooks)
    if opts.verbose:
        common.info(f"round trips: {outcome.round_trips}")
    print_summary(outcome, opts)
    return outcome


def load_saved_plan(path: Path) -> tuple[SavedPlan, Inventory]:
    """The saved plan and the inventory it was made from (as saved, whatever the inventory file says now)."""
    from vgpuctl import planfile
    from vgpuctl.inventory import load_inventory_text, validate

    saved = planfile.load(path)
    inventory = load_inventory_text(saved.inventory_text, saved.inventory_path)
    validate(inventory)
    return saved, inventory


@dataclass
class CliHooks:
    """What `apply`, `provision`, `vm vgpu` and experiments show and ask around pipeline.run."""

    opts: GlobalOptions
    yes: bool = False
    only_if_disruptive: bool = False  # `vm vgpu`: ask only before power-offs and removals

    def planned(self, planned: Planned) -> None:
        if planned.plan.errors:
            if self.opts.verbose:
                print_plan_to_stderr(planned)
            return
        if self.opts.json:  # stdout holds only the apply's document
            print_plan_to_stderr(planned)
        else:
            common.show(plan_renderable(planned))

    def confirm(self, planned: Planned) -> None:
        if self.yes or (self.only_if_disruptive and not planned.disruptive):
            return
        changes = len(planned.plan.changes) + len(planned.plan.host_changes)
        if planned.classes is not None:
            changes += len(planned.classes.class_changes) + len(planned.classes.namespace_changes)
        common.confirm(f"Apply {changes} change(s)?")

    def apply_progress(self, planned: Planned) -> ApplyProgress:
        return ApplyProgress(common.stderr_console(), [c.vm for c in planned.plan.changes])

    def note(self, message: str) -> None:
        common.info(message)


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


def apply_document(outcome: RunOutcome, opts: GlobalOptions, vm: str | None = None) -> ApplyReport:
    """The apply's document; round trips only with -v."""
    from vgpuctl.reports.plan import apply_report

    applied = outcome.applied
    return apply_report(
        outcome.planned.plan,
        outcome.vm_result,
        classes=outcome.planned.classes,
        hosts=applied.hosts if applied is not None else None,
        vm_errors=applied.vm_errors if applied is not None else (),
        interrupted=outcome.interrupted,
        vm=vm,
        round_trips=outcome.round_trips if opts.verbose else None,
    )


def print_summary(outcome: RunOutcome, opts: GlobalOptions) -> None:
    """The closing lines of an apply that ran (nothing when the plan was empty: it said so)."""
    from vgpuctl.reports.plan import render_apply_summary
    from vgpuctl.reports.supervisor import supervisor_outcomes

    if outcome.applied is None:
        return
    text = render_apply_summary(apply_document(outcome, opts))
    if outcome.classes is not None:
        text += "\n" + supervisor_outcomes(outcome.classes).render_text()
    if opts.json:
        common.info(text)
    else:
        typer.echo(text)


def raise_for_outcome(outcome: RunOutcome) -> None:
    failure = outcome.failure()
    if failure is not None:
        raise failure
