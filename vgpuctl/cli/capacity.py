"""`vgpuctl capacity`: what fits now, or with --demand the best GPU layout for a demand file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vgpuctl.capacity import DEFAULT_TIME_LIMIT_S
from vgpuctl.cli import common
from vgpuctl.cli import fleet as cli_fleet
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.errors import UsageError

if TYPE_CHECKING:
    from vgpuctl.capacity.demand import Demand
    from vgpuctl.fleet import FleetPart
    from vgpuctl.inventory import Inventory
    from vgpuctl.model import Observed
    from vgpuctl.vsphere.session import Session

EXIT_SHORT = 2

DemandFile = Annotated[
    Path | None, typer.Option("--demand", "-d", help="Demand file (kind: Demand): answer it with a layout.",
                              dir_okay=False)
]


def register(app: typer.Typer) -> None:
    app.command("capacity")(capacity_cmd)


def capacity_cmd(
    ctx: typer.Context,
    demand: DemandFile = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster (what fits now).")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Only this host (what fits now).")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the answer's inventory fragment here.", dir_okay=False)
    ] = None,
    detailed_exitcode: Annotated[
        bool, typer.Option("--detailed-exitcode", help="Exit 2 when some demand does not fit.")
    ] = False,
    time_limit: Annotated[float, typer.Option(
        "--time-limit", min=0.1, help="Seconds the command may take with --demand, reading the farm included; "
        "the solver searches for what is left.")] = DEFAULT_TIME_LIMIT_S,
    greedy_only: Annotated[bool, typer.Option("--greedy", help="Skip the solver: first-fit decreasing only.")] = False,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Take vCenter settings from this inventory.", dir_okay=False)
    ] = None,
    vcenter: cli_fleet.VcenterScope = None,
) -> None:
    """What fits on the farm now; with --demand, the host GPU layout that fits the most demand. With a fleet
    inventory (-f, vcenters:), what fits on each vCenter's farm (--demand: on the one --vcenter names).

    Examples:
      vgpuctl capacity --cluster GPU-Cluster
      vgpuctl capacity --demand next-quarter.yaml --out layout.yaml
      vgpuctl capacity --demand next-quarter.yaml --detailed-exitcode -o json
    """
    started = time.monotonic()  # the time limit counts from here
    opts: GlobalOptions = ctx.obj
    if demand is None and (out is not None or detailed_exitcode):
        raise UsageError("--out and --detailed-exitcode go with --demand")
    common.check_out_file(out)
    common.refuse_overlaps({"--out": out}, opts, {"the demand file": demand, "the inventory": file})
    wanted = None
    if demand is not None:
        from vgpuctl.capacity.demand import load_demand

        wanted = load_demand(demand)  # file errors before any connection
        if not greedy_only:
            from vgpuctl.extras import require

            require("ortools", instead="use --greedy (first-fit decreasing only)")  # before reading the farm
    inventory = _load(file, vcenter)
    if inventory is not None and inventory.is_fleet and wanted is None:
        return capacity_fleet(opts, inventory, vcenter, cluster, host)
    observed = _observe(opts, inventory, vcenter)
    if host is not None:
        from vgpuctl.names import host_named

        host = host_named(host, observed.hosts)  # a unique short name names the host too
    if wanted is None:
        from vgpuctl.capacity.fitnow import what_fits
        from vgpuctl.reports.capacity import capacity_report

        common.emit(capacity_report(what_fits(observed, cluster, host)), opts)
        return
    _answer(opts, observed, wanted, out, detailed_exitcode, time_limit, greedy_only, started)


def _answer(opts: GlobalOptions, observed: Observed, wanted: Demand, out: Path | None, detailed: bool,
            time_limit: float, greedy_only: bool, started: float) -> None:
    from vgpuctl.capacity.answer import fragment, plan_capacity
    from vgpuctl.reports.capacity import capacity_demand_report

    use_solver = not greedy_only
    answer = plan_capacity(observed, wanted, time_limit_s=time_limit, use_solver=use_solver, started=started)
    if out is not None:
        from vgpuctl.outpaths import write_whole

        write_whole(out, fragment(answer, wanted), "--out")
        common.info(f"wrote {out}: {len(answer.changes)} GPU changes, {answer.placed} VMs")
    common.emit(capacity_demand_report(answer), opts)
    if detailed and not answer.all_fit:
        raise typer.Exit(EXIT_SHORT)


def _load(file: Path | None, vcenter: list[str] | None) -> Inventory | None:
    from vgpuctl import pipeline

    if vcenter and file is None:
        raise UsageError("--vcenter names a vCenter of a fleet inventory: give the inventory with -f")
    inventory = pipeline.load(file) if file is not None else None
    if inventory is not None and vcenter:
        from vgpuctl.fleet import refuse_vcenter_option

        refuse_vcenter_option(inventory, vcenter)
    return inventory


def _observe(opts: GlobalOptions, inventory: Inventory | None, vcenter: list[str] | None) -> Observed:
    """One bulk observe (the same as plan's) plus the NVLink sets of every GPU host; of a fleet, of the one
    vCenter --vcenter names (--demand answers for one farm)."""
    from vgpuctl import pipeline

    if inventory is not None and inventory.is_fleet:
        from vgpuctl.vsphere.session import open_session

        part = cli_fleet.one_part(inventory, vcenter, "--demand")
        datacenter = part.inventory.vcenter.datacenter or opts.datacenter
        with open_session(cli_fleet.part_settings(opts, part)) as session:
            return pipeline.observe(session, datacenter, part.inventory, all_nvlink=True)
    with common.connect(opts, inventory) as session:
        return pipeline.observe(session, common.datacenter_for(opts, inventory), inventory, all_nvlink=True)


def capacity_fleet(opts: GlobalOptions, inventory: Inventory, patterns: list[str] | None, cluster: str | None,
                   host: str | None) -> None:
    """What fits now on each vCenter's farm, read in parallel; --cluster and --host within the one vCenter
    --vcenter names."""
    from vgpuctl import pipeline
    from vgpuctl.capacity.fitnow import what_fits
    from vgpuctl.reports.capacity import CapacityReport, capacity_report
    from vgpuctl.reports.fleet import FleetCapacityPart, fleet_capacity_report

    if cluster is not None or host is not None:
        cli_fleet.one_part(inventory, patterns, "--cluster or --host")

    def read(part: FleetPart, session: Session) -> CapacityReport:
        datacenter = part.inventory.vcenter.datacenter or opts.datacenter
        observed = pipeline.observe(session, datacenter, part.inventory, all_nvlink=True)
        if host is None:
            return capacity_report(what_fits(observed, cluster, None))
        from vgpuctl.names import host_named

        return capacity_report(what_fits(observed, cluster, host_named(host, observed.hosts)))

    results, left_out = cli_fleet.read_each(opts, inventory, patterns, read)
    parts = [FleetCapacityPart(r.name, r.url, r.result, cli_fleet.error_text(r.error)) for r in results]
    common.emit(fleet_capacity_report(parts, left_out), opts)
    cli_fleet.raise_for_parts([(r.name, r.error) for r in results if r.error is not None])
