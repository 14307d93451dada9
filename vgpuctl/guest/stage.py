"""The guest stage as a run uses it: the guest VMs' addresses (one read, or polled until they report), the guest
playbooks on them, and a driver upgrade window's guest driver moves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from vgpuctl.domain import Power
from vgpuctl.guest.addresses import read_addresses, wait_for_addresses
from vgpuctl.guest.drivers import deploy_drivers
from vgpuctl.inventory import Inventory
from vgpuctl.model import GuestDriverMove, GuestDriverOutcome
from vgpuctl.progress import Cancel, Progress, cancelled

if TYPE_CHECKING:
    from vgpuctl.guest.runner import DeployResult
    from vgpuctl.vsphere.session import Session


def guest_vms(inventory: Inventory) -> list[str]:
    """The inventory's VMs that have a guest group (the ones the guest playbooks configure)."""
    return [vm.name for vm in inventory.vms if vm.guest is not None and vm.guest.group is not None]


def guest_addresses(
    session: Session,
    inventory: Inventory,
    *,
    wait_s: float = 0.0,
    poll_s: float = 5.0,
    progress: Callable[[dict[str, str | None]], None] | None = None,
) -> dict[str, str | None]:
    """VM name -> guest address of the guest VMs: one bulk read, or with `wait_s` one per `poll_s` until every
    guest VM that should run reports an address (None for those that did not)."""
    if wait_s <= 0:
        return read_addresses(session, guest_vms(inventory))
    running = [name for name in guest_vms(inventory)
               if (vm := inventory.vm(name)) is not None and vm.power != Power.OFF]
    return wait_for_addresses(
        lambda: read_addresses(session, running), timeout_s=wait_s, poll_s=poll_s, progress=progress
    )


def guests(
    inventory: Inventory,
    addresses: dict[str, str | None],
    *,
    check: bool = False,
    limit: str | None = None,
    keep_runs: int = 10,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> DeployResult:
    """The guest playbooks on every guest VM with an address (ansible-runner, vgpuctl.guest)."""
    from vgpuctl.guest.runner import deploy

    return deploy(inventory, addresses, check=check, limit=limit, keep_runs=keep_runs, on_event=on_event)


def move_guest_drivers(session: Session, inventory: Inventory, moves: Sequence[GuestDriverMove],
                       progress: Progress | None = None, cancel: Cancel | None = None) -> list[GuestDriverOutcome]:
    """A window's guest driver moves, through the guest stage (vgpuctl.guest.drivers): the VMs' addresses (one
    read), then the driver role in them. Nothing after Ctrl-C."""
    if not moves or cancelled(cancel):
        return []

    for m in moves:
        if progress is not None:
            progress.vm_step(m.vm, f"guest driver {m.old} -> {m.new}", None)
    addresses = read_addresses(session, [m.vm for m in moves])
    return deploy_drivers(inventory, addresses, moves)
