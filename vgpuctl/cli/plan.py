"""validate, plan and apply: the declarative path from an inventory file to vCenter."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.errors import Interrupted, PlanError, UsageError, VgpuctlError
from vgpuctl.progress import LiveOnTerminal

if TYPE_CHECKING:
    from rich.console import Console

    from vgpuctl.apply import ApplyResult
    from vgpuctl.inventory import Inventory
    from vgpuctl.model import Observed, Plan
    from vgpuctl.vsphere.session import Session

EXIT_CHANGES_PENDING = 2
DEFAULT_PARALLEL = 8

InventoryFile = Annotated[
    Path, typer.Option("--file", "-f", help="Inventory file (apiVersion vgpuctl/v1).", dir_okay=False)
]


KeepGoing = Annotated[
    bool, typer.Option("--keep-going", help="When a host change fails, go on with the other hosts (issue 5).")
]
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
    opts: GlobalOptions = ctx.obj
    inventory = common.load_checked_inventory(file)
    data = {"file": str(file), "valid": True, "hosts": len(inventory.hosts), "vms": len(inventory.vms)}
    common.emit(data, lambda d: f"{d['file']}: valid ({d['hosts']} host entries, {d['vms']} VMs)", opts)


# -------------------------------------------------------------------------------------------- plan


def plan_cmd(
    ctx: typer.Context,
    file: InventoryFile,
    detailed_exitcode: Annotated[
        bool, typer.Option("--detailed-exitcode", help="Exit 0 when nothing changes, 2 when changes are pending.")
    ] = False,
    ssh_trust_on_first_use: SshTofu = False,
) -> None:
    """Show what apply would change: a field-level diff per VM and host."""
    opts: GlobalOptions = ctx.obj
    inventory = common.load_checked_inventory(file)
    with common.connect(opts, inventory) as session:
        observed = common.observe_all(session, opts, inventory)
        the_plan = plan_with_hosts(session, observed, inventory, ssh_trust_on_first_use)
        round_trips = session.round_trips
    if the_plan.errors and not (opts.json or opts.verbose):
        raise PlanError(list(the_plan.errors))  # the reasons alone, one line each; -v shows the diff too
    show_plan(the_plan, opts, round_trips=round_trips)
    if the_plan.errors:
        raise PlanError(list(the_plan.errors))
    if detailed_exitcode and not the_plan.is_empty:
        raise typer.Exit(EXIT_CHANGES_PENDING)


def make_plan(inventory: Inventory, observed: Observed) -> Plan:
    from vgpuctl.plan import make_plan as pure_make_plan

    return pure_make_plan(inventory, observed)


def plan_with_hosts(
    session: Session, observed: Observed, inventory: Inventory, trust_on_first_use: bool = False
) -> Plan:
    """make_plan with the inventory's hosts: their GPU facts (vSphere API and ESXi shell) are read first."""
    from vgpuctl.hostops import plan_with_hosts as plan_hosts_first

    return plan_hosts_first(
        session, observed, inventory, trust_on_first_use=trust_on_first_use, on_new_host_key=_new_host_key
    )


def _new_host_key(host: str, fingerprint: str) -> None:
    common.warn(f"trusted the new SSH host key of {host} ({fingerprint}) and recorded it in known_hosts")


def plan_document(the_plan: Plan, round_trips: int | None) -> dict[str, Any]:
    from vgpuctl.render import plan_to_json

    doc = dict(plan_to_json(the_plan))
    if round_trips is not None:
        doc["round_trips"] = round_trips
    return doc


def show_plan(the_plan: Plan, opts: GlobalOptions, *, round_trips: int | None = None) -> None:
    """`plan`'s result: the JSON document on stdout, or the colored diff."""
    common.emit(plan_document(the_plan, round_trips), lambda _d: plan_renderable(the_plan), opts)


def plan_renderable(the_plan: Plan) -> Any:
    """render_plan_text's plain diff with + ~ - lines colored (never parsed as rich markup)."""
    from rich.text import Text

    from vgpuctl.render import render_plan_text

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
    file: InventoryFile,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    parallel: Annotated[
        int, typer.Option("--parallel", "-p", min=1, max=64, help="VMs changed at the same time.")
    ] = DEFAULT_PARALLEL,
    keep_going: KeepGoing = False,
    ssh_trust_on_first_use: SshTofu = False,
) -> None:
    """Plan, confirm (unless --yes), execute with live progress, and summarize. Host changes run first."""
    opts: GlobalOptions = ctx.obj
    inventory = common.load_checked_inventory(file)
    run = execute(
        opts, inventory, yes=yes, parallel=parallel, keep_going=keep_going, trust_on_first_use=ssh_trust_on_first_use
    )
    if opts.json:
        doc = {
            "plan": plan_document(run.plan, None),
            "result": result_document(run.result),
            "summary": summarize(run.result),
            "hosts": run.hosts.to_dict() if run.hosts is not None else None,
            "interrupted": run.interrupted,
            "round_trips": run.round_trips,
        }
        common.emit(doc, lambda _d: None, opts)
    raise_for_outcome(run)


def run_apply(opts: GlobalOptions, inventory_path: Path | str, yes: bool, parallel: int = DEFAULT_PARALLEL) -> Any:
    """`apply` for reuse (provision): returns the ApplyResult when no VM failed.

    Raises VgpuctlError when a VM failed (the summary was printed), Interrupted on Ctrl-C, PlanError when the
    plan cannot be applied.
    """
    inventory = common.load_checked_inventory(Path(inventory_path))
    run = execute(opts, inventory, yes=yes, parallel=parallel)
    raise_for_outcome(run)
    return run.result


@dataclass
class ApplyRun:
    plan: Plan
    result: ApplyResult
    round_trips: int
    interrupted: bool = False
    hosts: Any = None  # vgpuctl.hostops.HostApplyResult when the plan had host changes
    vm_errors: list[str] | None = None  # errors of the VM plan made again after the host changes


def execute(
    opts: GlobalOptions,
    inventory: Inventory,
    *,
    yes: bool,
    parallel: int,
    keep_going: bool = False,
    trust_on_first_use: bool = False,
) -> ApplyRun:
    from vgpuctl.apply import ApplyResult

    with common.connect(opts, inventory) as session:
        observed = common.observe_all(session, opts, inventory)
        the_plan = plan_with_hosts(session, observed, inventory, trust_on_first_use)
        hosts = HostApply(inventory, keep_going, trust_on_first_use, common.datacenter_for(opts, inventory))
        return apply_planned(
            opts, session, the_plan, observed, yes=yes, parallel=parallel, empty=ApplyResult, hosts=hosts
        )


@dataclass
class HostApply:
    """What apply needs to run a plan's host changes first (vgpuctl.hostops.apply_all)."""

    inventory: Inventory
    keep_going: bool = False
    trust_on_first_use: bool = False
    datacenter: str | None = None


def apply_planned(
    opts: GlobalOptions,
    session: Session,
    the_plan: Plan,
    observed: Observed,
    *,
    yes: bool,
    parallel: int,
    empty: Callable[[], ApplyResult],
    confirm_only_if_disruptive: bool = False,
    hosts: HostApply | None = None,
) -> ApplyRun:
    """Show the plan, confirm, apply it with progress, print the summary. Shared by apply and `vm vgpu`."""
    if the_plan.errors:
        if opts.verbose:
            print_plan_to_stderr(the_plan)
        raise PlanError(list(the_plan.errors))
    if opts.json:
        print_plan_to_stderr(the_plan)
    else:
        common.emit(None, lambda _d: plan_renderable(the_plan), opts)
    if the_plan.is_empty:  # the rendered plan says so
        return ApplyRun(the_plan, empty(), session.round_trips)
    if not yes and (not confirm_only_if_disruptive or is_disruptive(the_plan)):
        confirm(the_plan)
    extra: dict[str, Any] = {}
    result, interrupted = apply_with_progress(session, the_plan, observed, parallel, hosts=hosts, extra=extra)
    run = ApplyRun(the_plan, result, session.round_trips, interrupted or bool(getattr(result, "interrupted", False)))
    run.hosts, run.vm_errors = extra.get("hosts"), extra.get("vm_errors")
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
    session: Session,
    the_plan: Plan,
    observed: Observed,
    parallel: int,
    *,
    hosts: HostApply | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[Any, bool]:
    """apply_plan in a worker thread so Ctrl-C here only sets stop_event: running tasks finish, no new ones."""
    from vgpuctl.apply import apply_plan

    stop_event = threading.Event()
    display = ApplyProgress(common.stderr_console(), [c.vm for c in the_plan.changes])
    box: dict[str, Any] = {}
    finished = threading.Event()  # not Thread.join: a KeyboardInterrupt inside join() can corrupt is_alive()

    def work() -> None:
        try:
            if hosts is not None and the_plan.host_changes:
                box["result"] = _apply_hosts_first(session, the_plan, observed, parallel, hosts, display, stop_event,
                                                   extra if extra is not None else {})
                return
            box["result"] = apply_plan(
                session, the_plan, observed, parallel=parallel, progress=display, stop_event=stop_event
            )
        except BaseException as err:  # re-raised in the main thread
            box["error"] = err
        finally:
            finished.set()

    worker = threading.Thread(target=work, name="vgpuctl-apply", daemon=True)
    interrupts: list[int] = []

    def on_sigint(signum: int, frame: Any) -> None:
        # A handler, not `except KeyboardInterrupt`: the exception could land between two statements of the
        # wait loop and escape it. The first Ctrl-C only stops new work; the second stops waiting.
        interrupts.append(signum)
        if len(interrupts) > 1:
            raise Interrupted("interrupted again: stopped waiting; vCenter tasks may still run")
        stop_event.set()
        display.note("interrupted: starting no new work, waiting for running tasks (Ctrl-C again to quit)")

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with display:
            worker.start()
            while not finished.wait(0.2):
                pass
    finally:
        signal.signal(signal.SIGINT, previous)
    interrupted = bool(interrupts)
    if "error" in box:
        raise box["error"]
    return box["result"], interrupted


def _apply_hosts_first(
    session: Session,
    the_plan: Plan,
    observed: Observed,
    parallel: int,
    hosts: HostApply,
    display: Any,
    stop_event: threading.Event,
    extra: dict[str, Any],
) -> Any:
    """Host changes host by host (vgpuctl.hostops), then the VMs planned again; VMs on unfinished hosts wait."""
    from vgpuctl.hostops import apply_all

    full = apply_all(
        session, hosts.inventory, the_plan, observed, datacenter=hosts.datacenter, parallel=parallel,
        progress=display, stop_event=stop_event, keep_going=hosts.keep_going,
        trust_on_first_use=hosts.trust_on_first_use,
    )
    extra["hosts"], extra["vm_errors"] = full.hosts, list(full.vm_plan.errors)
    return full.vms


TERMINAL_STEPS = frozenset({"done", "changed", "unchanged", "failed", "skipped", "error"})


class ApplyProgress(LiveOnTerminal):
    """The `progress` callback of apply_plan: one line per VM with its step and the task's percentage.

    On a terminal, a rich Live display shows the VMs in flight and prints each finished VM above it; elsewhere
    (CI logs) one plain line per step change.
    """

    refresh_per_second = 8

    def __init__(self, console: Console, vms: list[str]):
        self.console = console
        self.total = len(vms)
        self.state: dict[str, tuple[str, int | None]] = {}
        self.finished: dict[str, str] = {}
        self.lock = threading.Lock()

    def note(self, message: str) -> None:
        self.console.print(message, markup=False, highlight=False)

    def vm_step(self, vm: str, step: str, percent: int | float | None = None) -> None:
        pct = None if percent is None else int(percent)
        with self.lock:
            previous = self.state.get(vm)
            self.state[vm] = (step, pct)
            if step in TERMINAL_STEPS:
                self.finished[vm] = step
        if previous is not None and previous[0] == step:
            return  # only the percentage moved: the live table shows it
        if self.live is None or step in TERMINAL_STEPS:  # live: in-flight steps stay in the table
            self.console.print(self._line(vm, step, pct), markup=False, highlight=False)

    def host_step(self, host: str, step: str, percent: int | float | None = None) -> None:
        self.vm_step(f"host {host}", step, percent)

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


def result_document(result: ApplyResult) -> dict[str, Any]:
    return result.to_dict()


def summarize(result: Any) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {"changed": [], "failed": [], "skipped": [], "unchanged": []}
    for outcome in getattr(result, "vms", []):
        groups.setdefault(str(outcome.status), []).append(outcome.vm)
    return groups


def print_summary(run: ApplyRun, opts: GlobalOptions) -> None:
    groups = summarize(run.result)
    lines = [
        "Apply "
        + ("interrupted" if run.interrupted else "finished")
        + f": {len(groups['changed'])} changed, {len(groups['failed'])} failed, "
        f"{len(groups['skipped'])} skipped, {len(groups['unchanged'])} unchanged."
    ]
    lines[:0] = _host_summary(run)
    for label in ("changed", "skipped"):
        if groups[label]:
            lines.append(f"  {label}: {', '.join(groups[label])}")
    for outcome in getattr(run.result, "vms", []):
        if str(outcome.status) == "failed":
            fault = f"{outcome.fault_type}: " if getattr(outcome, "fault_type", None) else ""
            lines.append(f"  failed: {outcome.vm}: {fault}{getattr(outcome, 'message', '') or ''}")
    if opts.verbose:
        lines.append(f"round trips: {run.round_trips}")
    text = "\n".join(lines)
    if opts.json:
        common.info(text)
    else:
        typer.echo(text)


def _host_summary(run: ApplyRun) -> list[str]:
    hosts = getattr(run, "hosts", None)
    if hosts is None:
        return []
    lines = [f"Hosts: {len(hosts.changed)} changed, {len(hosts.failed)} failed, {len(hosts.skipped)} skipped."]
    lines += [f"  {line}" for outcome in hosts.hosts for line in outcome.describe().splitlines()]
    lines += [f"  VM plan after the host changes: {e}" for e in getattr(run, "vm_errors", None) or []]
    return lines


def raise_for_outcome(run: ApplyRun) -> None:
    groups = summarize(run.result)
    hosts = getattr(run, "hosts", None)
    if hosts is not None and hosts.failed and not run.interrupted:
        raise VgpuctlError(
            f"apply failed on host(s) {', '.join(hosts.failed)} (left as the summary says): run apply again to continue"
        )
    if getattr(run, "vm_errors", None):
        raise PlanError(list(run.vm_errors or []))
    if run.interrupted:
        raise Interrupted(f"interrupted: {len(groups['changed'])} VM(s) changed before the stop; plan again")
    if groups["failed"]:
        total = sum(len(v) for v in groups.values())
        raise VgpuctlError(f"apply failed for {len(groups['failed'])} of {total} VM(s): {', '.join(groups['failed'])}")
