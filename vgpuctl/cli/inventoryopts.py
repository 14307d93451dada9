"""The options that compose an inventory, on every command that reads one with `-f FILE`: `--values FILE`
(repeatable), `--env NAME` and `--allow-include-outside` (vgpuctl.inventory.compose; README, "Composed
inventories").

They are declared once, here, and added to each command that has a `--file` option, so that they are spelled,
explained and checked alike everywhere. What the user gives goes to the run's GlobalOptions; the commands read
their inventory with `common.load_inventory`, which applies it (and refuses it where no `-f FILE` is given).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from vgpuctl.cli.common import GlobalOptions

FILE_OPTION = "--file"

ValuesOpt = Annotated[
    list[Path] | None,
    typer.Option("--values", metavar="FILE", dir_okay=False,
                 help="A values file: an overlay of its own (changes to the inventory's entries by name, new ones "
                 "under add:), applied after --env's overlay; repeatable, applied in the order given."),
]
EnvOpt = Annotated[
    str | None,
    typer.Option("--env", metavar="NAME", help="Apply the overlay NAME of the inventory's overlays: section (one "
                 "environment's changes to the entries it names)."),
]
AllowOutsideOpt = Annotated[
    bool,
    typer.Option("--allow-include-outside", help="Let the inventory include files outside its own folder tree "
                 "(links resolved); without it such an include is refused."),
]


def _declared(values: ValuesOpt = None, env: EnvOpt = None, allow_include_outside: AllowOutsideOpt = False) -> None:
    """Where the options are declared: typer makes their parameters from this signature."""


def add_inventory_options(root: Any) -> None:
    """Add the composing options to every command below `root` that reads an inventory with `--file`."""
    holder = typer.Typer(add_completion=False)
    holder.command()(_declared)
    declared = list(typer.main.get_command(holder).params)
    for command in _commands(root):
        if any(FILE_OPTION in getattr(p, "opts", ()) for p in command.params):
            command.params += [_attached(param) for param in declared]


def _commands(group: Any) -> Iterator[Any]:
    for command in getattr(group, "commands", {}).values():
        yield command
        yield from _commands(command)


def _attached(param: Any) -> Any:
    """A copy of a declared option that stores what the user gave in the run's GlobalOptions."""
    attached = copy.copy(param)
    attached.expose_value = False
    name = param.name

    def callback(ctx: Any, _param: Any, value: Any) -> Any:
        opts = ctx.find_object(GlobalOptions)
        if opts is None or ctx.resilient_parsing:
            return value
        if name == "values":
            opts.values = [Path(v) for v in value or ()]
        elif name == "env":
            opts.env = value
        elif name == "allow_include_outside":
            opts.allow_include_outside = bool(value)
        return value

    attached.callback = callback
    return attached
