"""`vgpuctl show PLANFILE`: a plan saved by `plan --out`, shown exactly as `plan` showed it (its text, or with
-o json its plan document), from the report the file holds; needs no vCenter."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated

import typer

from vgpuctl.cli import common, pages
from vgpuctl.cli.common import GlobalOptions


def register(app: typer.Typer) -> None:
    app.command("show")(show_cmd)


def show_cmd(
    ctx: typer.Context,
    plan_file: Annotated[Path, typer.Argument(metavar="PLANFILE", help="A plan saved by `plan --out`.",
                                              dir_okay=False)],
    html: Annotated[
        Path | None,
        typer.Option("--html", metavar="FILE",
                     help="Write the plan for a change review as one self-contained HTML page to FILE (the window's "
                     "order: host waves, then the VMs; every disruptive step; each VM before and after) instead of "
                     "its text."),
    ] = None,
) -> None:
    """Show a saved plan as `plan` showed it; `vgpuctl apply PLANFILE` applies exactly it. Needs no vCenter."""
    from vgpuctl import planfile
    from vgpuctl.cli.plan import saved_report

    opts: GlobalOptions = ctx.obj
    pages.check_html_file(html, opts, {"the plan file": plan_file})
    saved = planfile.load(plan_file)
    report = saved_report(plan_file, saved)
    against = saved.vcenter if saved.parts is None else \
        "vCenters " + ", ".join(f"{name} ({part.vcenter})" for name, part in saved.parts.items())
    common.info(f"{plan_file}: the plan of {saved.inventory_label} against {against}; "
                f"`vgpuctl apply {plan_file}` applies it")
    if html is not None:
        from vgpuctl.reports.html import plan_page

        digest = hashlib.sha256(saved.inventory_text.encode("utf-8")).hexdigest()
        facts = [("plan file", str(plan_file)), ("inventory", saved.inventory_path), ("inventory sha256", digest),
                 ("vCenter", saved.vcenter), ("applied by", f"vgpuctl apply {plan_file}")]
        pages.write_page(html, plan_page(report, facts, title=f"Plan for review: {plan_file.name}"), opts, report)
        return
    common.emit(report, opts)
