"""`vgpuctl provision`: apply the inventory, wait for the guests' IP addresses, then run the guest playbooks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from vgpuctl.cli import common
from vgpuctl.cli import events as cli_events
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.guest import InventoryFile, guest_display, show_result
from vgpuctl.cli.plan import CliHooks, DeadlineOpt, apply_document, raise_for_outcome, run_apply
from vgpuctl.cli.runs import NoHistory, recording
from vgpuctl.errors import GuestError
from vgpuctl.names import listing

if TYPE_CHECKING:
    from pathlib import Path

    from vgpuctl.cli.display import AddressWait
    from vgpuctl.durations import Deadline
    from vgpuctl.guest.runner import DeployResult
    from vgpuctl.history import Recorder

DEFAULT_IP_TIMEOUT_S = 600
NAMES_SHOWN = 20  # VMs named in the error; all of them with -v


def register(app: typer.Typer) -> None:
    app.command("provision")(provision_cmd)


def provision_cmd(
    ctx: typer.Context,
    file: InventoryFile,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    parallel: Annotated[int, typer.Option("--parallel", "-p", min=1, max=64, help="VMs changed at the same time.")] = 8,
    ip_timeout: Annotated[
        int, typer.Option("--ip-timeout", min=0, help="Seconds to wait for the guests' IP addresses.")
    ] = DEFAULT_IP_TIMEOUT_S,
    ip_poll: Annotated[float, typer.Option("--ip-poll", min=0.1, help="Seconds between address reads.")] = 5.0,
    limit: Annotated[str | None, typer.Option("--limit", "-l", help="Guest playbooks only on these guests.")] = None,
    deadline: DeadlineOpt = None,
    no_history: NoHistory = False,
) -> None:
    """Apply (like `apply`), wait for the guests' IP addresses, then run the guest playbooks on them."""
    from vgpuctl.vsphere.workrecord import new_run_id

    opts: GlobalOptions = ctx.obj
    window = common.parse_deadline_option(deadline) if deadline is not None else None
    run_id = new_run_id()
    with recording("provision", opts, no_history, file, run_id) as record:
        _provision(opts, file, yes, parallel, ip_timeout, ip_poll, limit, run_id, record, window)


def _provision(opts: GlobalOptions, file: Path, yes: bool, parallel: int, ip_timeout: int, ip_poll: float,
               limit: str | None, run_id: str, record: Recorder | None, window: Deadline | None) -> None:
    from vgpuctl import pipeline
    from vgpuctl.reports.guests import ProvisionReport, guest_run_report

    inventory = common.load_inventory(opts, file)
    stage = pipeline.GuestStage(wait_s=ip_timeout, poll_s=ip_poll, limit=limit, waiting=address_wait,
                                display=guest_display)
    options = common.run_options(opts, inventory, parallel=parallel, run_id=run_id, deadline=window)
    with cli_events.event_stream(None, opts, run_id, record.event if record else None) as stream:
        if stream is not None:
            stream.run_start("provision", str(file))
        hooks = CliHooks(opts, yes=yes, events=stream, record=record)
        outcome = run_apply(opts, inventory, options, pipeline.RunRequest(guests=stage), hooks=hooks)
    raise_for_outcome(outcome)
    applied = apply_document(outcome, opts)
    if outcome.guests is None:
        common.info("No VM has a guest group: nothing to configure in the guests.")
        if opts.json:
            common.emit(ProvisionReport(applied, None), opts)
        return
    show_result(outcome.guests, opts, document=ProvisionReport(applied, guest_run_report(outcome.guests)))
    missing = sorted(n for n, v in (outcome.addresses or {}).items() if not v)
    raise_for_guests(outcome.guests, missing, ip_timeout, full=opts.verbose > 0)


def address_wait() -> AddressWait:
    """The live display of the wait for the guests' addresses (stderr)."""
    from vgpuctl.cli.display import AddressWait

    return AddressWait(common.stderr_console())


def raise_for_guests(result: DeployResult, missing: list[str], timeout_s: float, *, full: bool = False) -> None:
    """GuestError naming the VMs that had no IP address when the wait ended (they were not configured), and the
    guests whose playbooks failed; nothing when every guest is configured."""
    if not missing:
        result.raise_for_failures()
        return
    limit = len(missing) if full else NAMES_SHOWN
    text = (f"no guest IP address after {timeout_s:g} s for {listing(missing, limit)} (powered off, or VMware "
            "Tools not running in the guest): not configured")
    others = sorted(h.host for h in result.failed if h.host not in set(missing))
    if others:
        text += f"; the guest playbooks failed on {listing(others, len(others) if full else NAMES_SHOWN)}"
    raise GuestError(text)
