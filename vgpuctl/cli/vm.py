"""vm vgpu add/remove/list: imperative one-offs on one VM through the same plan/apply path as `apply`.

add/remove build a one-VM desired state from what the VM holds now, then make_plan and apply_plan do the work,
so the checks (profile offered, capacity, per-VM limit, power handling) and the single ReconfigVM are shared.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vgpuctl.cli import common
from vgpuctl.cli import plan as plan_cli
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.status import OptionalInventory
from vgpuctl.domain import MAX_VGPUS_PER_VM, Power, PowerState
from vgpuctl.errors import NotFound, UsageError

if TYPE_CHECKING:
    from vgpuctl.inventory import Inventory
    from vgpuctl.model import Observed, ObservedVm

app = typer.Typer(help="One VM at a time.", no_args_is_help=True)
vgpu_app = typer.Typer(help="Add, remove or list the vGPUs of one VM.", no_args_is_help=True)
app.add_typer(vgpu_app, name="vgpu")

VmName = Annotated[str, typer.Argument(help="VM name.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before powering off or removing.")]
PowerOpt = Annotated[
    Power | None,
    typer.Option(
        help="Default: as the VM is now (a running VM is powered off for the change and "
        "on again; a powered-off VM stays off)."
    ),
]


def find_vm(observed: Observed, name: str) -> ObservedVm:
    keys = observed.named(name)
    if len(keys) > 1:
        folders = ", ".join(sorted(observed.vms[k].folder or "/" for k in keys))
        raise UsageError(f"VM {name!r} names {len(keys)} VMs, in folders {folders}: change it through an inventory "
                         "entry with 'folder'")
    vm = observed.vms.get(keys[0]) if keys else None
    if vm is None or vm.is_template:
        kind = "a template, not a VM" if vm is not None else "not found"
        raise NotFound(f"VM {name!r} {kind}")
    return vm


def counts_of(vm: ObservedVm) -> Counter[str]:
    """The VM's vGPUs as profile -> count, in the order they appear."""
    return Counter(d.profile for d in vm.vgpus)


def added(current: Counter[str], profile: str, count: int) -> Counter[str]:
    from vgpuctl.profiles import ProfileError, mixing_problem, parse_profile

    try:
        parse_profile(profile)
    except ProfileError as err:
        raise UsageError(str(err)) from None
    desired = current.copy()
    desired[profile] += count
    total = sum(desired.values())
    if total > MAX_VGPUS_PER_VM:
        raise UsageError(f"the VM would hold {total} vGPUs; a VM holds at most {MAX_VGPUS_PER_VM}")
    problem = mixing_problem(list(desired))
    if problem:
        raise UsageError(problem)
    return desired


def removed(current: Counter[str], profile: str | None, count: int | None, remove_all: bool) -> Counter[str]:
    if not current:
        raise UsageError("the VM holds no vGPU")
    if profile is None:
        if remove_all:
            return Counter()
        if len(current) > 1:
            raise UsageError(f"the VM holds several profiles ({', '.join(current)}): name one with --profile, or --all")
        profile = next(iter(current))
    if current[profile] == 0:
        raise UsageError(f"the VM holds no {profile} vGPU (it holds {', '.join(current)})")
    desired = current.copy()
    take = current[profile] if remove_all else (count or 1)
    if take > current[profile]:
        raise UsageError(f"the VM holds {current[profile]} x {profile}, cannot remove {take}")
    desired[profile] -= take
    return +desired  # drops zero counts


def one_vm_inventory(
    opts: GlobalOptions, vm: ObservedVm, desired: Counter[str], power: Power | None, datacenter: str | None = None
) -> Inventory:
    """The desired state of just this VM; every field the command does not set stays as it is."""
    from vgpuctl.inventory import Inventory

    if power is None:
        power = Power.RESTART if vm.power_state == PowerState.ON else Power.OFF
    data: dict[str, Any] = {
        "apiVersion": "vgpuctl/v1",
        "vms": [
            {
                "name": vm.name,
                "vgpus": [{"profile": p, "count": n} for p, n in desired.items()],
                "power": power,
            }
        ],
    }
    if datacenter or opts.datacenter:
        data["vcenter"] = {"datacenter": datacenter or opts.datacenter}
    return Inventory.model_validate(data)


def change(opts: GlobalOptions, name: str, edit: Any, power: Power | None, yes: bool, file: Path | None) -> None:
    from vgpuctl import pipeline

    settings = common.maybe_inventory(opts, file)
    options = common.run_options(opts, settings, parallel=1, resume=False)
    hooks = plan_cli.CliHooks(opts, yes=yes, only_if_disruptive=True)
    with common.connect(opts, settings) as session:
        observed = pipeline.observe(session, options.datacenter, settings)
        vm = find_vm(observed, name)
        inventory = one_vm_inventory(opts, vm, edit(counts_of(vm)), power, options.datacenter)
        outcome = pipeline.carry_out(session, observed, inventory, options, pipeline.RunRequest(), hooks)
        outcome.round_trips = session.round_trips
    plan_cli.print_summary(outcome, opts)
    if opts.json:
        common.emit(plan_cli.apply_document(outcome, opts, vm=name), opts)
    plan_cli.raise_for_outcome(outcome)


@vgpu_app.command("add")
def add_cmd(
    ctx: typer.Context,
    vm: VmName,
    profile: Annotated[str, typer.Option("--profile", help="vGPU profile, e.g. grid_a100-20c.")],
    count: Annotated[int, typer.Option("--count", min=1, help="How many (a VM holds at most 8).")] = 1,
    power: PowerOpt = None,
    yes: Yes = False,
    file: OptionalInventory = None,
) -> None:
    """Add COUNT vGPUs of PROFILE to VM (one ReconfigVM; the VM is powered off for it if it runs)."""
    change(ctx.obj, vm, lambda current: added(current, profile, count), power, yes, file)


@vgpu_app.command("remove")
def remove_cmd(
    ctx: typer.Context,
    vm: VmName,
    profile: Annotated[str | None, typer.Option("--profile", help="Only vGPUs of this profile.")] = None,
    count: Annotated[int | None, typer.Option("--count", min=1, help="How many (default 1).")] = None,
    remove_all: Annotated[bool, typer.Option("--all", help="All vGPUs (of --profile, if given).")] = False,
    power: PowerOpt = None,
    yes: Yes = False,
    file: OptionalInventory = None,
) -> None:
    """Remove vGPUs from VM: COUNT of PROFILE, or --all."""
    if remove_all and count is not None:
        raise UsageError("--count and --all exclude each other")
    change(ctx.obj, vm, lambda current: removed(current, profile, count, remove_all), power, yes, file)


@vgpu_app.command("list")
def list_cmd(ctx: typer.Context, vm: VmName, file: OptionalInventory = None) -> None:
    """The vGPUs of VM: device key, profile, framebuffer, NVLink group, and the GPUs they sit on."""
    from vgpuctl import pipeline
    from vgpuctl.reports.vmvgpus import vm_vgpus_report

    opts: GlobalOptions = ctx.obj
    settings = common.maybe_inventory(opts, file)
    with common.connect(opts, settings) as session:
        observed = pipeline.observe(session, common.datacenter_for(opts, settings), settings)
        round_trips = session.round_trips
    common.emit(vm_vgpus_report(observed, find_vm(observed, vm), round_trips if opts.verbose else None), opts)
