"""--help of every command: fits the terminal (80 columns and wider) by wrapping, never by cutting; flags are
switches without a value placeholder; the global options name their environment variables."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from vgpuctl.cli import common
from vgpuctl.cli.main import app

pytestmark = pytest.mark.unit

ROOT = typer.main.get_command(app)
GLOBAL_ENV = ("VGPUCTL_URL", "GOVC_URL", "VGPUCTL_USERNAME", "VGPUCTL_INSECURE", "VGPUCTL_CA_FILE",
              "VGPUCTL_THUMBPRINT", "VGPUCTL_DATACENTER", "VGPUCTL_TIMEOUT", "VGPUCTL_OUTPUT")  # fmt: skip


def commands(group: Any = ROOT, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, group)]
    for name, command in getattr(group, "commands", {}).items():
        found += commands(command, (*path, name)) if getattr(command, "commands", None) else [((*path, name), command)]
    return found


ALL = commands()


def help_of(path: tuple[str, ...], columns: int) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return str(result.output)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("VGPUCTL_", "GOVC_")):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("columns", [80, 140, 200])
@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=lambda p: " ".join(p) or "vgpuctl")
def test_help_fits_and_cuts_nothing(path: tuple[str, ...], columns: int) -> None:
    out = help_of(path, columns)
    assert max(len(line) for line in out.splitlines()) <= min(columns, 80), out
    assert "…" not in out
    assert "<bool>" not in out  # flags are switches
    command = dict(ALL)[path]
    for param in command.params:
        if getattr(param, "hidden", False) or param.param_type_name != "option":
            continue
        for flag in (*param.opts, *param.secondary_opts):
            assert flag in out, (path, flag)
        for shown in _shown_values(command, param):
            assert shown in out, (path, param.name, shown)  # whole, on one line


def _shown_values(command: Any, param: Any) -> list[str]:
    """The option's flags with their value placeholder, and its default, as help must show them uncut."""
    ctx = command.context_class(command)
    first, _help = param.get_help_record(ctx)
    values = [part.strip() for part in first.split(" / ")]
    default = param.default
    shown = param.show_default and not (param.is_flag or param.count or isinstance(default, bool))
    if shown and isinstance(default, str | int | float | Path | Enum):
        values.append(str(getattr(default, "value", default)))
    return values


@pytest.mark.parametrize("path", [p for p, _ in ALL if p], ids=lambda p: " ".join(p))
def test_every_commands_help_lists_the_environment_variables(path: tuple[str, ...]) -> None:
    out = " ".join(help_of(path, 80).split())  # wrapped lines joined
    assert "Global options:" in out
    for name in GLOBAL_ENV:
        assert name in out, (path, name)


def test_examples_keep_their_lines() -> None:
    out = help_of(("capacity",), 80)
    assert "\n    vgpuctl capacity --demand next-quarter.yaml --out layout.yaml\n" in out


def test_group_help_shows_each_command_whole() -> None:
    out = " ".join(help_of((), 80).split())
    assert ("Hosts, GPUs (model, mode, NVLink, used/free), a GPU map per host, free and stranded framebuffer per "
            "host and cluster, the VMs' vGPUs") in out
    assert "..." not in out.replace("[ARGS]...", "")


def test_evacuate_explains_each_value() -> None:
    out = " ".join(help_of(("host", "mig"), 80).split())
    assert "--evacuate <refuse|power-off|migrate>" in out
    for value in ("refuse (", "power-off (", "migrate (vMotion"):
        assert value in out


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["validate", "--no-insecure"], {"VGPUCTL_INSECURE": "1"}, False),
        (["validate", "--insecure"], {}, True),
        (["--no-insecure", "validate"], {"VGPUCTL_INSECURE": "1"}, False),
        (["validate"], {}, None),  # neither said: the inventory may
    ],
)
def test_insecure_is_a_switch_both_ways(args: list[str], env: dict[str, str], expected: bool | None,
                                        tmp_path: Path) -> None:
    from unittest import mock

    inv = tmp_path / "inv.yaml"
    inv.write_text("apiVersion: vgpuctl/v1\n")
    seen: list[Any] = []
    with mock.patch.object(common, "emit", lambda report, opts: seen.append(opts)):
        result = CliRunner().invoke(app, [*args, "-f", str(inv)], env=env)
    assert result.exit_code == 0, result.output
    assert seen[0].insecure is expected
