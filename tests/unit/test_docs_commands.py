"""The commands README.md and docs/*.md give exist: every vgpuctl command they name and every option it names;
every line of a shell block is a command as typed (no placeholder) that the sim docs test runs or that is
marked with why it is not run here (a real vCenter or ESXi host, guests); other tools' commands are marked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import typer.main

from vgpuctl.cli.main import app

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from docs_commands import all_commands, check_vgpuctl, is_synopsis, not_run_reason

pytestmark = pytest.mark.unit

ROOT = typer.main.get_command(app)
COMMANDS = all_commands()


def test_the_docs_give_commands() -> None:
    blocks = [c for c in COMMANDS if c.block]
    assert len(blocks) >= 25 and len(COMMANDS) >= 40
    assert any(c.text == "vgpuctl profiles --host esx-01" for c in blocks)


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.text.startswith("vgpuctl ")], ids=str)
def test_every_vgpuctl_command_and_option_exists(command: object) -> None:
    assert check_vgpuctl(command.text, ROOT) == [], str(command)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.block], ids=str)
def test_a_shell_block_holds_commands_as_typed(command: object) -> None:
    text = command.text  # type: ignore[attr-defined]
    if not_run_reason(text) is None:
        assert not is_synopsis(text), f"{command}: a block holds commands to type; write the form in the text"


@pytest.mark.parametrize("command", [c for c in COMMANDS if not c.text.startswith("vgpuctl ")], ids=str)
def test_other_tools_commands_say_why_they_are_not_run(command: object) -> None:
    text = command.text  # type: ignore[attr-defined]
    runs_here = text.startswith(("cd tests/vcsim && go run", "eval \"$(vgpuctl sim env)\""))
    assert runs_here or not_run_reason(text) is not None, f"{command}: run it in the docs test or say why not"


def test_the_checker_finds_what_does_not_exist() -> None:
    assert check_vgpuctl("vgpuctl export -o farm.yaml --all-vms", ROOT) == []  # -o is --output: it exists
    assert check_vgpuctl("vgpuctl capacity --demand d.yaml --greedy --nope", ROOT) == ["vgpuctl capacity: no option "
                                                                                       "--nope"]
    assert check_vgpuctl("vgpuctl stats", ROOT) == ["no command 'stats' under vgpuctl"]
    assert check_vgpuctl("vgpuctl vm vgpu add/remove/list VM", ROOT) == []
    assert check_vgpuctl("vgpuctl host show/reboot HOST", ROOT) == ["no command 'show/reboot' under host"]
    assert is_synopsis("vgpuctl plan -f FILE [--detailed-exitcode]") and not is_synopsis("vgpuctl status -o json")
