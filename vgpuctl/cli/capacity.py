"""`vgpuctl capacity`: what fits now, or with --demand the best GPU layout for a demand file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vgpuctl.capacity import DEFAULT_TIME_LIMIT_S
from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.errors import UsageError

if TYPE_CHECKING:
    from vgpuctl.capacity.demand import Demand
    from vgpuctl.model import Observed

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
) -> None:
    """What fits on the farm now; with --demand, the host GPU layout that fits the most demand; with --drain, whether
    hosts can be emptied for maintenance one step after another.

    Examples:
      vgpuctl capacity --cluster GPU-Cluster
      vgpuctl capacity --demand next-quarter.yaml --out layout.yaml
      vgpuctl capacity --demand next-quarter.yaml --detailed-exitcode -o json
      vgpuctl capacity --drain esx-01 --drain esx-02 --drain esx-03
    """
    started = time.monotonic()  # the time limit counts from here
    opts: GlobalOptions = ctx.obj
    if drain:
        _drain(opts, file, drain, max_unavailable, detailed_exitcode, alone=not (demand or out or cluster or host))
        return
    if demand is None and (out is not None or detailed_exitcode):
        raise UsageError("--out and --detailed-exitcode go with --demand or --drain")
    common.check_out_file(out)
    common.refuse_overlaps({"--out": out}, opts, {"the demand file": demand, "the inventory": file})
    wanted = None if demand is None else _load_demand(demand, greedy_only)  # file errors before any connection
    observed = _observe(opts, file)
    if host is not None:
        from vgpuctl.names import host_named

        host = host_named(host, observed.hosts)  # a unique short name names the host too
    if wanted is None:
        from vgpuctl.capacity.fitnow import what_fits
        from vgpuctl.reports.capacity import capacity_report

        common.emit(capacity_report(what_fits(observed, cluster, host)), opts)
        return
    _answer(opts, observed, wanted, out, detailed_exitcode, time_limit, greedy_only, started)


def _load_demand(demand: Path, greedy_only: bool) -> Demand:
    from vgpuctl.capacity.demand import load_demand

    wanted = load_demand(demand)
    if not greedy_only:
        from vgpuctl.extras import require

        require("ortools", instead="use --greedy (first-fit decreasing only)")  # before reading the farm
    return wanted


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


def _drain(opts: GlobalOptions, file: Path | None, hosts: list[str], max_unavailable: int, detailed: bool, *,
           alone: bool) -> None:
    """`--drain`: each step's hosts emptied onto the rest of their clusters (exit 2 with --detailed-exitcode when a
    running VM has nowhere to go)."""
    if not alone:
        raise UsageError("--drain goes alone (with --max-unavailable, --detailed-exitcode, --file)")
    from vgpuctl.capacity.drain import drain
    from vgpuctl.names import host_named
    from vgpuctl.reports.capacity import capacity_drain_report

    migration: list[bool] = []
    observed = _observe(opts, file, migration)
    named = [host_named(h, observed.hosts) for h in hosts]
    if len(set(named)) != len(named):
        raise UsageError("--drain names a host twice")
    answer = drain(observed, named, max_unavailable, migration[0])
    common.emit(capacity_drain_report(answer, max_unavailable), opts)
    if detailed and not answer.ok:
        raise typer.Exit(EXIT_SHORT)


def _observe(opts: GlobalOptions, file: Path | None, vgpu_migration: list[bool] | None = None) -> Observed:
    """One bulk observe (the same as plan's) plus the NVLink sets of every GPU host; with `vgpu_migration`, also
    whether vCenter allows vMotion of running vGPU VMs (appended to it)."""
    from vgpuctl import pipeline

    inventory = pipeline.load(file) if file is not None else None
    with common.connect(opts, inventory) as session:
        observed = pipeline.observe(session, common.datacenter_for(opts, inventory), inventory, all_nvlink=True)
        if vgpu_migration is not None:
            vgpu_migration.append(pipeline.vgpu_migration_enabled(session))
        return observed
