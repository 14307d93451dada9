"""`vgpuctl provision`: apply the inventory, wait for the guests' IP addresses, then run the guest playbooks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.guest import InventoryFile, finish, run_deploy

if TYPE_CHECKING:
    from vgpuctl.inventory import Inventory

DEFAULT_IP_TIMEOUT_S = 600


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
) -> None:
    """Apply (like `apply`), wait for the guests' IP addresses, then run the guest playbooks on them."""
    from vgpuctl import pipeline
    from vgpuctl.cli.plan import apply_report, run_apply
    from vgpuctl.reports.guests import ProvisionReport, guest_run_report

    opts: GlobalOptions = ctx.obj
    inventory = pipeline.load(file)
    applied = apply_report(run_apply(opts, inventory, yes, parallel), opts)
    if not pipeline.guest_vms(inventory):
        common.info("No VM has a guest group: nothing to configure in the guests.")
        if opts.json:
            common.emit(ProvisionReport(applied, None), opts)
        return
    addresses = wait_for_guest_addresses(opts, inventory, timeout_s=ip_timeout, poll_s=ip_poll)
    result = run_deploy(opts, inventory, addresses, limit=limit)
    finish(result, opts, document=ProvisionReport(applied, guest_run_report(result)))


def wait_for_guest_addresses(
    opts: GlobalOptions, inventory: Inventory, *, timeout_s: float, poll_s: float
) -> dict[str, str | None]:
    """pipeline.guest_addresses, polling until every powered-on guest VM reports an address (or the timeout)."""
    from vgpuctl import pipeline

    seen = {"have": -1}

    def progress(current: dict[str, str | None]) -> None:
        have = sum(1 for v in current.values() if v)
        if have != seen["have"]:
            seen["have"] = have
            missing = [n for n, v in current.items() if not v]
            tail = f" (waiting for {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''})" if missing else ""
            common.info(f"guest IP addresses: {have}/{len(current)}{tail}")

    with common.connect(opts, inventory) as session:
        found = pipeline.guest_addresses(session, inventory, wait_s=timeout_s, poll_s=poll_s, progress=progress)
    missing = [n for n, v in found.items() if not v]
    if missing:
        common.warn(f"no IP address after {timeout_s:g} s for: {', '.join(missing)}")
    return found
