"""Global options wherever users type them: `vgpuctl -o json status` and `vgpuctl status -o json` alike.

The root command's options are copied onto every subcommand, listed under "Global options" in its --help. A
copy given on the command line updates the run's GlobalOptions; environment variables and defaults are read
once, by the root. Where a command has an option of its own with the same flag (`export -o FILE`), the
command's own wins and the global one stays reachable by its other spelling (`--output`).

Values already of their option's type skip typer's coercion (`plain_values_first`), so that help and usage errors
import no pydantic.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from enum import StrEnum
from types import MethodType
from typing import Any

from vgpuctl.cli.helptext import GLOBAL_PANEL, install

PANEL = GLOBAL_PANEL
NOT_COPIED = frozenset({"version", "help", "install_completion", "show_completion"})


def add_global_options(root: Any, on_late_option: Callable[[Any, str, Any], None]) -> None:
    """Copy `root`'s options onto every command below it. `on_late_option(ctx, name, value)` is called for each
    copy the user typed after a command. Every command's --help is plain text that wraps (vgpuctl.cli.helptext)."""
    install(root)
    for command in _descendants(root):
        install(command)
        command.get_params = MethodType(_plain_params, command)
        _name_arguments(command)
        own_flags = {flag for p in command.params for flag in (*p.opts, *p.secondary_opts)}
        own_names = {p.name for p in command.params}
        for param in root.params:
            if param.name in NOT_COPIED or not _is_option(param):
                continue
            late = _late_copy(param, own_flags, own_names, on_late_option)
            if late is not None:
                command.params.append(late)


def with_envvars(help_text: str, envvar: str | list[str] | None) -> str:
    """The option's help with the environment variables it is read from."""
    if not envvar:
        return help_text
    names = [envvar] if isinstance(envvar, str) else list(envvar)
    return f"{help_text}  [env var: {', '.join(names)}]"


def _descendants(group: Any) -> Iterable[Any]:
    for command in getattr(group, "commands", {}).values():
        yield command
        yield from _descendants(command)


def _name_arguments(command: Any) -> None:
    """Usage lines say `VM`, not typer's `{vm}`."""
    for param in command.params:
        if type(param).__name__ == "TyperArgument" and param.metavar is None:
            label = param.name.upper()
            param.metavar = label
            param._usage_display_name = lambda label=label, p=param: label if p.required else f"[{label}]"


def _is_option(param: Any) -> bool:
    return bool(getattr(param, "opts", None)) and all(o.startswith("-") for o in param.opts)


def _late_copy(
    param: Any, own_flags: set[str], own_names: set[str], on_late_option: Callable[[Any, str, Any], None]
) -> Any | None:
    flags = [o for o in param.opts if o not in own_flags]
    if not flags:
        return None
    late = copy.copy(param)
    late.opts = flags
    late.secondary_opts = [o for o in param.secondary_opts if o not in own_flags]
    late.name = param.name if param.name not in own_names else f"global_{param.name}"
    late.envvar = None  # the root already read the environment; the help still names it
    late.show_envvar = False
    late.help = with_envvars(param.help or "", param.envvar)
    late.show_default = False  # the root's default or environment applies when the copy is not given
    late.expose_value = False
    late.rich_help_panel = PANEL
    name = param.name

    def callback(ctx: Any, _param: Any, value: Any) -> Any:
        source = ctx.get_parameter_source(late.name)
        if getattr(source, "name", "") == "COMMANDLINE" and not ctx.resilient_parsing:
            on_late_option(ctx, name, value)
        return value

    late.callback = callback
    return late


_NOT_PLAIN = object()


class _PlainValues:
    """An option's coercion that passes a value already of the option's type (a default, an environment
    variable's string, an enum's own value) as it is, and hands anything else (what the user typed for a number,
    a path, a bounded value) to typer's coercion, built on first use: typer's is built on pydantic, whose import
    would otherwise be part of every usage error (`vgpuctl plan --bad-option`, `vgpuctl -o json no-such-command`,
    a missing option)."""

    def __init__(self) -> None:
        self.typers: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        plain = _NOT_PLAIN if param.multiple or param.nargs != 1 else _plain(param.type_descriptor.annotation, value)
        if plain is not _NOT_PLAIN:
            return plain
        if self.typers is None:
            from typer._coercion import build_runtime_param

            self.typers = build_runtime_param(param.type_descriptor)
        return self.typers.coerce(value, param=param, ctx=ctx)


def _plain(annotation: Any, value: Any) -> Any:
    if value is None or (annotation in (str, int, float, bool) and type(value) is annotation):
        return value
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        if isinstance(value, annotation):
            return value
        if isinstance(value, str) and value in annotation._value2member_map_:
            return annotation(value)
    return _NOT_PLAIN


def _plain_params(self: Any, ctx: Any) -> list[Any]:
    return plain_values_first(type(self).get_params(self, ctx))


def plain_values_first(params: list[Any]) -> list[Any]:
    """Where typer coerces values lazily (its parameters' `_runtime_param`), these options pass plain values
    through first; with another typer, nothing changes."""
    for param in params:
        if getattr(param, "_runtime_param", _NOT_PLAIN) is None and hasattr(param, "type_descriptor"):
            param._runtime_param = _PlainValues()
    return params
