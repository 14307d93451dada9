"""`vgpuctl show PLANFILE`: a plan saved by `plan --out`, shown exactly as `plan` showed it (its text, or with
-o json its plan document), from the report the file holds; needs no vCenter."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions


def register(app: typer.Typer) -> None:
    app.command("show")(show_cmd)


def show_cmd(
    ctx: typer.Context,
    plan_file: Annotated[Path, typer.Argument(metavar="PLANFILE", help="A plan saved by `plan --out`.",
                                              dir_okay=False)],
) -> None:
    """Show a saved plan as `plan` showed it; `vgpuctl apply PLANFILE` applies exactly it. Needs no vCenter."""
    from vgpuctl import planfile
    from vgpuctl.cli.plan import saved_report

    opts: GlobalOptions = ctx.obj
    saved = planfile.load(plan_file)
    report = saved_report(plan_file, saved)
    against = saved.vcenter if saved.parts is None else \
        "vCenters " + ", ".join(f"{name} ({part.vcenter})" for name, part in saved.parts.items())
    common.info(f"{plan_file}: the plan of {saved.inventory_label} against {against}; "
                f"`vgpuctl apply {plan_file}` applies it")
    common.emit(report, opts)
