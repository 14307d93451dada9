"""`vgpuctl preflight`: the checklist of what a first run against a real vCenter trips over (vgpuctl.preflight)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vgpuctl.cli import common
from vgpuctl.cli import fleet as cli_fleet
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.errors import PreflightFailed, UsageError, VgpuctlError

if TYPE_CHECKING:
    from vgpuctl.fleet import FleetPart
    from vgpuctl.inventory import Inventory
    from vgpuctl.reports.preflight import PreflightReport
    from vgpuctl.vsphere.session import Session


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight_cmd)


def preflight_cmd(
    ctx: typer.Context,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="Inventory to check against (vCenter settings are taken from it too).",
                     dir_okay=False),
    ] = None,
    vcenter: cli_fleet.VcenterScope = None,
) -> None:
    """Check before a run: vCenter and ESXi versions against what the inventory uses, the privileges its
    operations need (per object), each host's vGPU Manager and its branch against the guest driver's, the
    graphics type, SSH with a known host key, lockdown mode, RDMA devices, the templates and the licence token.

    Each check prints pass, warn, fail or skip with its evidence and fix; exit 1 when one fails (with -o json
    the failing checks are the error document's details). plan and apply run the cheap part themselves. With a
    fleet inventory (vcenters:), each vCenter's checks.
    """
    from vgpuctl.domain import CheckStatus

    opts: GlobalOptions = ctx.obj
    inventory = common.maybe_inventory(opts, file)
    if vcenter and inventory is None:
        raise UsageError("--vcenter names a vCenter of a fleet inventory: give the inventory with -f")
    if inventory is not None and (inventory.is_fleet or vcenter):
        return preflight_fleet(opts, inventory, vcenter)
    with common.connect(opts, inventory) as session:
        report = checks_in_session(session, common.datacenter_for(opts, inventory), inventory)
    failed = [c.line for c in report.checks if c.status == CheckStatus.FAIL]
    if failed and opts.json:
        raise PreflightFailed(failed)
    common.emit(report, opts)
    if failed:
        raise typer.Exit(1)


def checks_in_session(session: Session, datacenter: str | None, inventory: Inventory | None) -> PreflightReport:
    from vgpuctl import pipeline
    from vgpuctl.preflight import run_checks
    from vgpuctl.reports.preflight import preflight_report

    observed = pipeline.observe(session, datacenter, inventory)
    return preflight_report(session.settings.sdk_url, run_checks(session, observed, inventory))


def preflight_fleet(opts: GlobalOptions, inventory: Inventory, patterns: list[str] | None) -> None:
    """Each vCenter's checks, in parallel, one report with a section per vCenter; exit 1 when a vCenter could not
    be read or one of its checks failed (with -o json, the fleet's document, not the error document)."""
    from vgpuctl.reports.fleet import FleetPreflightPart, fleet_preflight_report

    def read(part: FleetPart, session: Session) -> PreflightReport:
        return checks_in_session(session, part.inventory.vcenter.datacenter or opts.datacenter, part.inventory)

    results, left_out = cli_fleet.read_each(opts, inventory, patterns, read)
    report = fleet_preflight_report(
        [FleetPreflightPart(r.name, r.url, r.result, cli_fleet.error_text(r.error)) for r in results], left_out)
    common.emit(report, opts)
    failed = {r.name: r.error for r in results if r.error is not None}
    for p in report.vcenters:
        if p.preflight is not None and not p.preflight.ok:
            failed[p.vcenter] = VgpuctlError("preflight failed")
    cli_fleet.raise_for_parts(list(failed.items()))
