"""`vgpuctl preflight`: the checklist of what a first run against a real vCenter trips over (vgpuctl.preflight)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight_cmd)


def preflight_cmd(
    ctx: typer.Context,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="Inventory to check against (vCenter settings are taken from it too).",
                     dir_okay=False),
    ] = None,
) -> None:
    """Check before a run: vCenter and ESXi versions against what the inventory uses, the privileges its
    operations need (per object), each host's vGPU Manager and its branch against the guest driver's, the
    graphics type, SSH with a known host key, lockdown mode, RDMA devices, the templates and the licence token.

    Each check prints pass, warn, fail or skip with its evidence and fix; exit 1 when one fails (with -o json
    the failing checks are the error document's details). plan and apply run the cheap part themselves.
    """
    from vgpuctl import pipeline
    from vgpuctl.domain import CheckStatus
    from vgpuctl.errors import PreflightFailed
    from vgpuctl.preflight import run_checks
    from vgpuctl.reports.preflight import preflight_report

    opts: GlobalOptions = ctx.obj
    inventory = common.maybe_inventory(opts, file)
    with common.connect(opts, inventory) as session:
        observed = pipeline.observe(session, common.datacenter_for(opts, inventory), inventory)
        report = preflight_report(session.settings.sdk_url, run_checks(session, observed, inventory))
    failed = [c.line for c in report.checks if c.status == CheckStatus.FAIL]
    if failed and opts.json:
        raise PreflightFailed(failed)
    common.emit(report, opts)
    if failed:
        raise typer.Exit(1)
