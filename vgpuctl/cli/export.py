"""`vgpuctl export`: write an inventory that describes the farm as it is (it plans to no change)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.domain import ConnectionState
from vgpuctl.errors import NotFound

if TYPE_CHECKING:
    from vgpuctl.inventory import HostSpec, Inventory
    from vgpuctl.model import Observed
    from vgpuctl.records.classes import SupervisorState


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
) -> None:
    """Write an inventory (apiVersion vgpuctl/v1) of the farm as it is: host GPU settings and VMs with vGPUs.

    Examples:
      vgpuctl export --out farm.yaml
      vgpuctl plan -f farm.yaml --detailed-exitcode
      vgpuctl export --cluster GPU-Cluster --all-vms
    """
    from vgpuctl import pipeline
    from vgpuctl.export import ExportOptions, export_inventory
    from vgpuctl.reports.export import ExportReport

    opts: GlobalOptions = ctx.obj
    common.check_out_file(out)
    common.refuse_overlaps({"--out": out}, opts, {"the inventory": file})
    inventory = common.maybe_inventory(opts, file, {"--out": out})
    options = common.run_options(opts, inventory)
    with common.connect(opts, inventory) as session:
        observed = pipeline.observe(session, options.datacenter, inventory, all_nvlink=True)
        if host is not None:
            from vgpuctl.names import host_named

            host = host_named(host, observed.hosts)  # a unique short name names the host too
        specs = _host_specs(inventory, observed)
        hosts = {n: specs.get(n) for n, h in observed.hosts.items()
                 if h.gpus and h.connection_state == ConnectionState.CONNECTED}
        facts, _ = pipeline.host_facts(session, observed, hosts, options)
        supervisor = _supervisor(opts, inventory, observed)
    try:
        text = export_inventory(observed, facts, ExportOptions(cluster, host, all_vms), supervisor)
    except ValueError as err:
        raise NotFound(str(err)) from None
    for warning in observed.warnings:  # also comments in the file: what could not be read, per cause
        common.warn(warning)
    if out is not None:
        from vgpuctl.outpaths import write_whole

        write_whole(out, text, "--out")
        common.info(f"wrote {out}")
    common.emit(ExportReport(str(out) if out is not None else None, text), opts)


def _host_specs(inventory: Inventory | None, observed: Observed) -> dict[str, HostSpec]:
    """The SSH settings of each host from the inventory given with -f (its hosts entries merged per host)."""
    if inventory is None:
        return {}
    from vgpuctl.hosts.plan import resolve_hosts

    return resolve_hosts(inventory.hosts, observed)[0]


def _supervisor(opts: GlobalOptions, inventory: Inventory | None, observed: Observed) -> SupervisorState | str:
    """VM classes and namespaces over REST (one login), or why they could not be read (a vCenter without
    a supervisor answers the namespace calls with errors: the file then says so in a comment)."""
    from vgpuctl.errors import RestError
    from vgpuctl.supervisor.stage import observe_supervisor
    from vgpuctl.vsphere.rest import RestClient

    try:
        with RestClient(common.connection_settings(opts, inventory)) as rest:
            return observe_supervisor(rest, observed)
    except RestError as err:
        return str(err)
