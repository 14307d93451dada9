"""`vgpuctl capacity`: what fits now, or with --demand the best GPU layout for a demand file."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vgpuctl.capacity import DEFAULT_TIME_LIMIT_S
from vgpuctl.cli import common
from vgpuctl.cli import fleet as cli_fleet
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.errors import UsageError
from vgpuctl.extras import require
from vgpuctl.names import host_named
from vgpuctl.outpaths import write_whole

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
        bool, typer.Option("--detailed-exitcode", help="Exit 2 when some demand does not fit, or with --drain when "
                                                       "a running VM has nowhere to go.")
    ] = False,
    time_limit: Annotated[float, typer.Option(
        "--time-limit", min=0.1, max=86400.0, help="Seconds the command may take with --demand, reading the farm "
        "included; the solver searches for what is left.")] = DEFAULT_TIME_LIMIT_S,
    greedy_only: Annotated[bool, typer.Option("--greedy", help="Skip the solver: first-fit decreasing only.")] = False,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Take vCenter settings from this inventory.", dir_okay=False)
    ] = None,
    drain: Annotated[list[str] | None, typer.Option(
        "--drain", help="A host to empty for maintenance (repeat it; taken in the order given): whether its running "
        "VMs fit on the rest of its cluster as it is at that step, with the VMs of earlier steps moved there.",
    )] = None,
    max_unavailable: Annotated[int, typer.Option(
        "--max-unavailable", min=1, help="With --drain: how many of the hosts leave service at once.")] = 1,
    vcenter: cli_fleet.VcenterScope = None,
) -> None:
    """What fits on the farm now; with --demand, the host GPU layout that fits the most demand; with --drain, whether
    hosts can be emptied for maintenance one step after another. With a fleet inventory (-f, vcenters:), what fits
    on each vCenter's farm (--demand and --drain: on the one --vcenter names).

    Examples:
      vgpuctl capacity --cluster GPU-Cluster
      vgpuctl capacity --demand next-quarter.yaml --out layout.yaml
      vgpuctl capacity --demand next-quarter.yaml --detailed-exitcode -o json
      vgpuctl capacity --drain esx-01 --drain esx-02 --drain esx-03
    """
    started = time.monotonic()  # the time limit counts from here
    opts: GlobalOptions = ctx.obj
    if drain:
        alone = not (demand or out or cluster or host)
        _drain(opts, _load(opts, file, vcenter), vcenter, drain, max_unavailable, detailed_exitcode, alone=alone)
        return
    if demand is None and (out is not None or detailed_exitcode):
        raise UsageError("--out and --detailed-exitcode go with --demand or --drain")
    common.check_out_file(out)
    common.refuse_overlaps({"--out": out}, opts, {"the demand file": demand, "the inventory": file})
    wanted = None if demand is None else _load_demand(demand, greedy_only)  # file errors before any connection
    inventory = _load(opts, file, vcenter, out)
    if wanted is None:
        return _fits_now(opts, inventory, vcenter, cluster, host)
    observed = _observe(opts, inventory, vcenter)
    _answer(opts, observed, wanted, out, detailed_exitcode, time_limit, greedy_only, started)


def _fits_now(opts: GlobalOptions, inventory: Inventory | None, vcenter: list[str] | None, cluster: str | None,
              host: str | None) -> None:
    """What fits now on the farm (each vCenter's of a fleet), of --cluster or --host."""
    if inventory is not None and inventory.is_fleet:
        return capacity_fleet(opts, inventory, vcenter, cluster, host)
    from vgpuctl.capacity.fitnow import what_fits
    from vgpuctl.reports.capacity import capacity_report

    observed = _observe(opts, inventory, vcenter)
    named = host_named(host, observed.hosts) if host is not None else None  # a unique short name names it too
    common.emit(capacity_report(what_fits(observed, cluster, named)), opts)


def _load_demand(demand: Path, greedy_only: bool) -> Demand:
    from vgpuctl.capacity.demand import load_demand

    wanted = load_demand(demand)
    if not greedy_only:
        require("ortools", instead="use --greedy (first-fit decreasing only)")  # before reading the farm
    return wanted


def _answer(opts: GlobalOptions, observed: Observed, wanted: Demand, out: Path | None, detailed: bool,
            time_limit: float, greedy_only: bool, started: float) -> None:
    from vgpuctl.capacity.answer import fragment, plan_capacity
    from vgpuctl.reports.capacity import capacity_demand_report

    use_solver = not greedy_only
    answer = plan_capacity(observed, wanted, time_limit_s=time_limit, use_solver=use_solver, started=started)
    if out is not None:
        write_whole(out, fragment(answer, wanted), "--out")
        common.info(f"wrote {out}: {len(answer.changes)} GPU changes, {answer.placed} VMs")
    common.emit(capacity_demand_report(answer), opts)
    if detailed and not answer.all_fit:
        raise typer.Exit(EXIT_SHORT)


def _drain(opts: GlobalOptions, inventory: Inventory | None, vcenter: list[str] | None, hosts: list[str],
           max_unavailable: int, detailed: bool, *, alone: bool) -> None:
    """`--drain`: each step's hosts emptied onto the rest of their clusters (exit 2 with --detailed-exitcode when a
    running VM has nowhere to go)."""
    if not alone:
        raise UsageError("--drain goes alone (with --max-unavailable, --detailed-exitcode, --file)")
    from vgpuctl.capacity.drain import drain
    from vgpuctl.reports.capacity import capacity_drain_report

    migration: list[bool] = []
    observed = _observe(opts, inventory, vcenter, migration)
    named = [host_named(h, observed.hosts) for h in hosts]
    if len(set(named)) != len(named):
        raise UsageError("--drain names a host twice")
    answer = drain(observed, named, max_unavailable, migration[0])
    common.emit(capacity_drain_report(answer, max_unavailable), opts)
    if detailed and not answer.ok:
        raise typer.Exit(EXIT_SHORT)


def _load(opts: GlobalOptions, file: Path | None, vcenter: list[str] | None,
          out: Path | None = None) -> Inventory | None:
    """The -f inventory, composed as the command line says (None without -f); `out`, the command's output file,
    is refused when it names one of the inventory's files."""
    if vcenter and file is None:
        raise UsageError("--vcenter names a vCenter of a fleet inventory: give the inventory with -f")
    inventory = common.maybe_inventory(opts, file, {"--out": out})
    if inventory is not None and vcenter:
        from vgpuctl.fleet import refuse_vcenter_option

        refuse_vcenter_option(inventory, vcenter)
    return inventory


def _observe(opts: GlobalOptions, inventory: Inventory | None, vcenter: list[str] | None,
             vgpu_migration: list[bool] | None = None) -> Observed:
    """One bulk observe (the same as plan's) plus the NVLink sets of every GPU host; of a fleet, of the one
    vCenter --vcenter names (--demand and --drain answer for one farm); with `vgpu_migration`, also whether
    vCenter allows vMotion of running vGPU VMs (appended to it)."""
    from vgpuctl import pipeline

    with ExitStack() as stack:
        if inventory is not None and inventory.is_fleet:
            from vgpuctl.vsphere.session import open_session

            part = cli_fleet.one_part(inventory, vcenter, "--demand or --drain")
            datacenter = part.inventory.vcenter.datacenter or opts.datacenter
            session = stack.enter_context(open_session(cli_fleet.fleet_settings(opts, [part])[part.name]))
            inventory = part.inventory
        else:
            datacenter = common.datacenter_for(opts, inventory)
            session = stack.enter_context(common.connect(opts, inventory))
        observed = pipeline.observe(session, datacenter, inventory, all_nvlink=True)
        if vgpu_migration is not None:
            vgpu_migration.append(pipeline.vgpu_migration_enabled(session))
        return observed


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

        return capacity_report(what_fits(observed, cluster, host_named(host, observed.hosts)))

    results, left_out = cli_fleet.read_each(opts, inventory, patterns, read)
    parts = [FleetCapacityPart(r.name, r.url, r.result, cli_fleet.error_text(r.error)) for r in results]
    common.emit(fleet_capacity_report(parts, left_out), opts)
    cli_fleet.raise_for_parts([(r.name, r.error) for r in results if r.error is not None])
