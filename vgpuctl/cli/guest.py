"""`vgpuctl guest deploy`: the guest playbooks (driver, licence, CUDA, NCCL, ML stack, Horovod) over SSH."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.guest.addresses import load_address_file

if TYPE_CHECKING:
    from vgpuctl.cli.display import DeployProgress
    from vgpuctl.guest.runner import DeployResult
    from vgpuctl.inventory import Inventory
    from vgpuctl.reports.base import Report

app = typer.Typer(help="Configure the guests of the inventory's VMs over SSH (Ansible).", no_args_is_help=True)

InventoryFile = Annotated[
    Path, typer.Option("--file", "-f", help="Inventory file (apiVersion vgpuctl/v1).", dir_okay=False)
]


@app.command("deploy")
def deploy_cmd(
    ctx: typer.Context,
    file: InventoryFile,
    check: Annotated[bool, typer.Option("--check", help="Ansible check mode: report what would change.")] = False,
    limit: Annotated[
        str | None, typer.Option("--limit", "-l", help="Only these guests (an Ansible host pattern).")
    ] = None,
    addresses: Annotated[
        Path | None,
        typer.Option(
            "--addresses",
            help="YAML mapping of VM name to guest IP/DNS name; skips reading the addresses from vCenter.",
            dir_okay=False,
        ),
    ] = None,
    keep_runs: Annotated[int, typer.Option(min=1, help="Ansible artifact runs kept in the state folder.")] = 10,
) -> None:
    """Run the guest playbooks on every VM that has a guest group; exit 1 when any guest failed."""

    opts: GlobalOptions = ctx.obj
    inventory = common.load_inventory(opts, file)
    found = load_address_file(addresses) if addresses is not None else addresses_from_vcenter(opts, inventory)
    result = run_deploy(opts, inventory, found, check=check, limit=limit, keep_runs=keep_runs)
    finish(result, opts)


def addresses_from_vcenter(opts: GlobalOptions, inventory: Inventory) -> dict[str, str | None]:
    from vgpuctl import pipeline

    with common.connect(opts, inventory) as session:
        return pipeline.guest_addresses(session, inventory)


def run_deploy(
    opts: GlobalOptions,
    inventory: Inventory,
    addresses: dict[str, str | None],
    *,
    check: bool = False,
    limit: str | None = None,
    keep_runs: int = 10,
) -> DeployResult:
    """pipeline.guests with a live display of each guest's task."""
    from vgpuctl import pipeline

    names = [n for n in pipeline.guest_vms(inventory) if addresses.get(n)]
    with guest_display(names) as progress:
        return pipeline.guests(inventory, addresses, check=check, limit=limit, keep_runs=keep_runs, on_event=progress)


def guest_display(names: list[str]) -> DeployProgress:
    """The live display of the guest playbooks (each guest's task), fed with ansible-runner's events."""
    from vgpuctl.cli.display import DeployProgress

    return DeployProgress(common.stderr_console(), names)


def finish(result: DeployResult, opts: GlobalOptions, document: Report | None = None) -> None:
    """Print the per-guest summary (table, or one JSON document) and raise GuestError when a guest failed."""
    show_result(result, opts, document)
    result.raise_for_failures()


def show_result(result: DeployResult, opts: GlobalOptions, document: Report | None = None) -> None:
    """The per-guest summary: a table, or one JSON document (`document`, else the guests report)."""
    from vgpuctl.reports.guests import guest_run_report

    report = guest_run_report(result)
    if opts.json:
        common.emit(document if document is not None else report, opts)
        common.info(report.summary_text())
    else:
        common.emit(report, opts)
