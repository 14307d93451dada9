"""`--help` as plain text that wraps at the terminal's width (80 columns at most) and never cuts a word.

Every command gets the same layout: usage, its help, Arguments, Options, Global options (the root's options
copied onto it, with their environment variables) and, for a group, its commands with their whole first
sentence. Flags are shown as switches (`--insecure / --no-insecure`), never with a value placeholder. Nothing
heavy is imported here: `vgpuctl --help` stays quick.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from types import MethodType
from typing import Any

import typer

GLOBAL_PANEL = "Global options"
VERBATIM = "\b"  # a paragraph that starts with this line is written as it is


# click's help formatter, as typer (which carries its own copy of click) exposes it: the formatter class of its
# public Context; typer's private modules are not imported
HelpFormatter: Any = typer.Context.formatter_class


class PlainHelpFormatter(HelpFormatter):
    """click's formatter, wrapping only at spaces: a default like `vsan-default-storage-policy` or a metavar
    like `<refuse|power-off|migrate>` is never split."""

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        self.write("\n\n".join(wrap(text, max(self.width - self.current_indent, 11), indent)) + "\n")

    def write_dl(self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        first_col = min(max((len(first) for first, _ in rows), default=0), col_max) + col_spacing
        for first, second in rows:
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - len(first)))
            else:
                self.write("\n" + " " * (first_col + self.current_indent))
            lines = "\n".join(wrap(second, max(self.width - first_col - 2, 10), "")).splitlines()
            pad = " " * (first_col + self.current_indent)
            self.write("\n".join([lines[0], *(pad + line if line else line for line in lines[1:])]) + "\n")


def wrap(text: str, width: int, indent: str) -> list[str]:
    """Paragraphs filled to `width` (words and hyphenated values kept whole); verbatim ones as written."""
    out = []
    for paragraph in textwrap.dedent(text).split("\n\n"):
        lines = paragraph.strip("\n").splitlines()
        if lines and lines[0].strip() == VERBATIM:
            out.append("\n".join(indent + line for line in lines[1:]))
        else:
            out.append(textwrap.fill(" ".join(lines), width, initial_indent=indent, subsequent_indent=indent,
                                     break_on_hyphens=False, break_long_words=False))
    return out


def install(command: Any) -> None:
    """Plain help for one command (or group): our formatter and sections."""
    command.rich_markup_mode = None
    if command.help:
        command.help = keep_examples(command.help)
    command.format_options = MethodType(format_options, command)
    command.context_class = type("HelpContext", (command.context_class,), {"formatter_class": PlainHelpFormatter})


def keep_examples(help_text: str) -> str:
    """Paragraphs that start with `Examples:` or `Environment:` keep their lines (one command a line)."""
    paragraphs = help_text.split("\n\n")
    kept = []
    for paragraph in paragraphs:
        head = paragraph.strip().split("\n", 1)[0]
        verbatim = head.startswith(("Examples:", "Environment:")) and not paragraph.lstrip().startswith(VERBATIM)
        kept.append(f"{VERBATIM}\n{paragraph.strip(chr(10))}" if verbatim else paragraph)
    return "\n\n".join(kept)


def format_options(self: Any, ctx: Any, formatter: Any) -> None:
    """Arguments, the command's own options, the global options, then (groups) the commands."""
    arguments: list[tuple[str, str]] = []
    own: list[tuple[str, str]] = []
    global_: list[tuple[str, str]] = []
    for param in self.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "argument":
            arguments.append(argument_record(param))
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        (global_ if getattr(param, "rich_help_panel", None) == GLOBAL_PANEL else own).append(record)
    for title, rows in (("Arguments", arguments), ("Options", own), (GLOBAL_PANEL, global_)):
        if rows:
            with formatter.section(title):
                formatter.write_dl(rows)
    if hasattr(self, "list_commands"):
        format_commands(self, ctx, formatter)


def argument_record(param: Any) -> tuple[str, str]:
    label = param.metavar or param.name.upper()
    help_text = getattr(param, "help", None) or ""
    return label, help_text + ("  [required]" if param.required else "")


def format_commands(group: Any, ctx: Any, formatter: Any) -> None:
    """Each subcommand with the first paragraph of its help, wrapped, not shortened."""
    rows = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        rows.append((name, first_paragraph(command.help or "")))
    if rows:
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def first_paragraph(help_text: str) -> str:
    import inspect

    text = inspect.cleandoc(help_text).split("\n\n")[0]
    return " ".join(line.strip() for line in text.splitlines() if line.strip() != VERBATIM)
