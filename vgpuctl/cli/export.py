"""`vgpuctl export`: write an inventory that describes the farm as it is (it plans to no change); of a fleet
(-f with vcenters:), one inventory of every vCenter."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vgpuctl.cli import common
from vgpuctl.cli import fleet as cli_fleet
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.domain import ConnectionState
from vgpuctl.errors import NotFound, RestError, UsageError
from vgpuctl.lazyclass import dataclass
from vgpuctl.names import host_named
from vgpuctl.outpaths import write_whole

if TYPE_CHECKING:
    from vgpuctl.export import ExportOptions
    from vgpuctl.fleet import FleetPart
    from vgpuctl.inventory import HostSpec, Inventory
    from vgpuctl.inventory.schema import VcenterEntry
    from vgpuctl.model import Observed
    from vgpuctl.pipeline import RunOptions
    from vgpuctl.records.classes import SupervisorState
    from vgpuctl.settings.facts import HostFacts
    from vgpuctl.vsphere.session import ConnectionSettings, Session


def register(app: typer.Typer) -> None:
    app.command("export")(export_cmd)


def export_cmd(
    ctx: typer.Context,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster's hosts and VMs.")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Only this host and its VMs.")] = None,
    all_vms: Annotated[bool, typer.Option("--all-vms", help="Also the VMs without vGPUs.")] = False,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the inventory to this file instead of stdout.", dir_okay=False)
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Take vCenter settings from this inventory.", dir_okay=False)
    ] = None,
    vcenter: cli_fleet.VcenterScope = None,
) -> None:
    """Write an inventory (apiVersion vgpuctl/v1) of the farm as it is: host GPU settings and VMs with vGPUs. With
    a fleet inventory (-f, vcenters:), one inventory of every vCenter, each entry naming its vCenter.

    Examples:
      vgpuctl export --out farm.yaml
      vgpuctl plan -f farm.yaml --detailed-exitcode
      vgpuctl export --cluster GPU-Cluster --all-vms
    """
    from vgpuctl.export import ExportOptions, export_inventory
    from vgpuctl.reports.export import ExportReport

    opts: GlobalOptions = ctx.obj
    common.check_out_file(out)
    common.refuse_overlaps({"--out": out}, opts, {"the inventory": file})
    inventory = common.maybe_inventory(opts, file, {"--out": out})
    what = ExportOptions(cluster, host, all_vms)
    if vcenter and inventory is None:
        raise UsageError("--vcenter names a vCenter of a fleet inventory: give the inventory with -f")
    if inventory is not None and (inventory.is_fleet or vcenter):
        return export_fleet_cmd(opts, inventory, vcenter, what, out)
    options = common.run_options(opts, inventory)
    with common.connect(opts, inventory) as session:
        farm = read_farm(session, inventory, options, what)
    try:
        text = export_inventory(farm.observed, farm.facts, farm.what, farm.supervisor)
    except ValueError as err:
        raise NotFound(str(err)) from None
    for warning in farm.observed.warnings:  # also comments in the file: what could not be read, per cause
        common.warn(warning)
    write(out, text)
    common.emit(ExportReport(str(out) if out is not None else None, text), opts)


@dataclass
class Farm:
    """What an export of one vCenter reads."""

    observed: Observed
    facts: dict[str, HostFacts]
    what: ExportOptions  # --host as vCenter names it
    supervisor: SupervisorState | str


def read_farm(session: Session, inventory: Inventory | None, options: RunOptions, what: ExportOptions) -> Farm:
    from vgpuctl import pipeline

    observed = pipeline.observe(session, options.datacenter, inventory, all_nvlink=True)
    if what.host is not None:
        what = dataclasses.replace(what, host=host_named(what.host, observed.hosts))  # a unique short name too
    specs = _host_specs(inventory, observed)
    hosts = {n: specs.get(n) for n, h in observed.hosts.items()
             if h.gpus and h.connection_state == ConnectionState.CONNECTED}
    facts, _ = pipeline.host_facts(session, observed, hosts, options)
    return Farm(observed, facts, what, _supervisor(session.settings, observed))


def write(out: Path | None, text: str) -> None:
    if out is not None:
        write_whole(out, text, "--out")
        common.info(f"wrote {out}")


def export_fleet_cmd(opts: GlobalOptions, inventory: Inventory, patterns: list[str] | None, what: ExportOptions,
                     out: Path | None) -> None:
    """A fleet's export: every vCenter in scope read in parallel into one inventory (--cluster and --host within
    the one vCenter --vcenter names); a vCenter not read is named in the file and fails the command."""
    from vgpuctl.export import FleetExport, export_fleet, export_part
    from vgpuctl.fleetrun import part_options
    from vgpuctl.reports.fleet import FleetExportPart, fleet_export_report

    if what.cluster is not None or what.host is not None:
        cli_fleet.one_part(inventory, patterns, "--cluster or --host")
    options = common.run_options(opts, None)

    def read(part: FleetPart, session: Session) -> Farm:
        return read_farm(session, part.inventory, part_options(options, part), what)

    results, left_out = cli_fleet.read_each(opts, inventory, patterns, read)
    entries = {v.name: v for v in inventory.vcenters}
    exported = []
    for r in results:
        entry = fleet_entry(entries[r.name], r.result.observed.datacenter if r.result is not None else None)
        part = None
        if r.result is not None:
            try:
                part = export_part(r.result.observed, r.result.facts, r.result.what, r.result.supervisor)
            except ValueError as err:
                r.result, r.error = None, NotFound(str(err))
        for warning in r.result.observed.warnings if r.result is not None else []:
            common.warn(f"vCenter {r.name}: {warning}")
        exported.append(FleetExport(entry, part, cli_fleet.error_text(r.error)))
    text = export_fleet(exported)
    write(out, text)
    parts = [FleetExportPart(r.name, r.url, cli_fleet.error_text(r.error)) for r in results]
    common.emit(fleet_export_report(str(out) if out is not None else None, text, parts, left_out), opts)
    cli_fleet.raise_for_parts([(r.name, r.error) for r in results if r.error is not None])


def fleet_entry(entry: VcenterEntry, datacenter: str | None) -> dict[str, object]:
    """A vCenter's `vcenters` entry as the inventory had it (name, url, tls: no secret lives there), with the
    datacenter it was read from."""
    data: dict[str, object] = {"name": entry.name}
    if entry.url:
        data["url"] = entry.url
    if datacenter or entry.datacenter:
        data["datacenter"] = datacenter or entry.datacenter
    tls = entry.tls.model_dump(exclude_defaults=True)
    if tls:
        data["tls"] = tls
    return data


def _host_specs(inventory: Inventory | None, observed: Observed) -> dict[str, HostSpec]:
    """The SSH settings of each host from the inventory given with -f (its hosts entries merged per host)."""
    if inventory is None:
        return {}
    from vgpuctl.hosts.plan import resolve_hosts

    return resolve_hosts(inventory.hosts, observed)[0]


def _supervisor(settings: ConnectionSettings, observed: Observed) -> SupervisorState | str:
    """VM classes and namespaces over REST (one login), or why they could not be read (a vCenter without
    a supervisor answers the namespace calls with errors: the file then says so in a comment)."""
    from vgpuctl.supervisor.stage import observe_supervisor
    from vgpuctl.vsphere.rest import RestClient

    try:
        with RestClient(settings) as rest:
            return observe_supervisor(rest, observed)
    except RestError as err:
        return str(err)
