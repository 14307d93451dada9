"""Global options before or after the command, usage errors, shell completion scripts and the -vv trace's
redaction, without a vCenter."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from vgpuctl import trace
from vgpuctl.cli.main import app, app_for

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
GOOD = "apiVersion: vgpuctl/v1\nvms:\n  - name: a\n    vgpus: {profile: grid_a100-40c, count: 1}\n"
UNREACHABLE = "127.0.0.1:1"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("VGPUCTL_STATE_DIR", str(tmp_path / "state"))


def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def leaf_commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = []
    for name, command in group.commands.items():
        if getattr(command, "commands", None):
            found += leaf_commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


# ---------------------------------------------------------------------------------- global options


@pytest.mark.parametrize("where", ["before", "after"])
def test_output_before_or_after_the_command(tmp_path: Path, where: str) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(GOOD)
    args = (
        ["-o", "json", "validate", "-f", str(path)]
        if where == "before"
        else ["validate", "-f", str(path), "-o", "json"]
    )
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kind"] == "validate"


def test_options_after_a_nested_command_reach_the_connection() -> None:
    # vm vgpu list VM --url ... -u ... -o json: the URL and user typed last are the ones used, the error is JSON
    result = invoke("vm", "vgpu", "list", "x", "--url", UNREACHABLE, "-u", "me", "--output", "json",
                    env={"VGPUCTL_PASSWORD": "pw"})  # fmt: skip
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["error"]["type"] == "ConnectionFailure" and UNREACHABLE in doc["error"]["message"]


def test_datacenter_after_host_show() -> None:
    result = invoke("host", "show", "esx-01", "--datacenter", "DC0", "--url", UNREACHABLE, "-u", "me",
                    env={"VGPUCTL_PASSWORD": "pw"})  # fmt: skip
    assert result.exit_code == 1 and "No such option" not in result.output
    assert "cannot reach vCenter" in result.stderr


def test_verbose_after_the_command_shows_the_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: vgpuctl/v1\nvms:\n  - name: a\n    vgpus: {profile: grid_a100-40c, count: 9}\n")
    quiet = invoke("validate", "-f", str(bad))
    loud = invoke("validate", "-f", str(bad), "-v")
    assert quiet.exit_code == loud.exit_code == 1
    assert "Traceback" not in quiet.stderr and "Traceback" in loud.stderr


def test_every_command_lists_the_global_options_in_its_help() -> None:
    root = typer.main.get_command(app)
    commands = leaf_commands(root)
    assert len(commands) > 20
    for path, _command in commands:
        out = invoke(*path, "--help").output
        assert "Global options" in out, path
        for flag in ("--url", "--username", "--insecure", "--datacenter", "--output", "--verbose"):
            assert flag in out, (path, flag)


@pytest.mark.parametrize("command", [("export",), ("capacity",)])
def test_minus_o_is_only_the_global_output(command: tuple[str, ...]) -> None:
    # commands that write files take --out; -o after them is the global --output
    help_text = invoke(*command, "--help").output
    assert "--out <file>" in help_text and "-o, --out " not in help_text and "-o, --output <text|json>" in help_text
    result = invoke(*command, "-o", "json", "--url", UNREACHABLE, "-u", "me", env={"VGPUCTL_PASSWORD": "pw"})
    assert result.exit_code == 1 and json.loads(result.stdout)["error"]["type"] == "ConnectionFailure"


@pytest.mark.parametrize("name", ["json", "text"])
def test_export_refuses_an_output_format_as_file_name(name: str, tmp_path: Path) -> None:
    result = invoke("export", "--out", name, "--url", UNREACHABLE, "-u", "me", env={"VGPUCTL_PASSWORD": "pw"})
    assert result.exit_code == 1 and f"-o {name}" in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / name).exists() and not Path(name).exists()


def test_environment_is_not_overridden_by_the_copies() -> None:
    # the copies have no default of their own: VGPUCTL_OUTPUT still applies when -o is not typed after the command
    result = invoke("vm", "vgpu", "list", "x", "--url", UNREACHABLE, "-u", "me",
                    env={"VGPUCTL_PASSWORD": "pw", "VGPUCTL_OUTPUT": "json"})  # fmt: skip
    assert json.loads(result.stdout)["error"]["type"] == "ConnectionFailure"


def test_verbose_is_a_count_without_a_value_placeholder() -> None:
    out = invoke("status", "--help").output
    line = next(line for line in out.splitlines() if "--verbose" in line)
    assert "<int>" not in line and "-vv" in out


def test_usage_line_names_arguments_in_capitals() -> None:
    out = invoke("vm", "vgpu", "add", "--help").output
    assert "vgpuctl vm vgpu add [OPTIONS] VM" in out and "{vm}" not in out


# ---------------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    "args",
    [
        ["plan"],  # -f missing
        ["status", "--no-such-flag"],
        ["--no-such-flag", "status"],
        ["vm", "vgpu", "add", "x"],  # --profile missing
        ["no-such-command"],
        ["status", "-o", "yaml"],  # not a choice
    ],
)
def test_usage_errors_exit_1(args: list[str]) -> None:
    result = invoke(*args)
    assert result.exit_code == 1, result.output
    assert "Usage" in result.output or "Error" in result.output


# ---------------------------------------------------------------------------------- completion


@pytest.mark.parametrize(
    ("shell", "marker"),
    [("bash", "complete -o default -F _vgpuctl_completion vgpuctl"), ("zsh", "#compdef vgpuctl"),
     ("fish", "complete --command vgpuctl")],
)  # fmt: skip
def test_completion_script_for_each_shell(shell: str, marker: str) -> None:
    env = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    proc = subprocess.run([sys.executable, "-m", "vgpuctl", "--show-completion", shell], capture_output=True,
                          text=True, cwd=REPO, env=env, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert marker in proc.stdout and "_VGPUCTL_COMPLETE" in proc.stdout


def test_completion_answers_commands_and_global_options_after_them() -> None:
    env = {**os.environ, "_VGPUCTL_COMPLETE": "complete_bash", "COMP_WORDS": "vgpuctl sta", "COMP_CWORD": "1"}
    proc = subprocess.run([sys.executable, "-m", "vgpuctl"], capture_output=True, text=True, cwd=REPO, env=env)
    assert proc.stdout.split() == ["status"]
    env = {**os.environ, "_VGPUCTL_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "vgpuctl status --outp"}
    proc = subprocess.run([sys.executable, "-m", "vgpuctl"], capture_output=True, text=True, cwd=REPO, env=env)
    assert "--output" in proc.stdout


# ---------------------------------------------------------------------------------- the -vv trace


def _info(*names: str) -> Any:
    return SimpleNamespace(wsdlName="Login", params=[SimpleNamespace(name=n) for n in names])


def test_soap_arguments_hide_secret_parameters() -> None:
    text = trace.soap_arguments(_info("userName", "password", "locale"), ("admin", "hunter2-secret", None))
    assert "userName='admin'" in text and "password=***" in text and "hunter2" not in text


def test_registered_secrets_and_cookie_ids_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    trace.add_secret("Pa55-w0rd!")
    trace.add_cookie('vmware_soap_session="52a1b2c3d4e5f60718293a4b5c6d7e8f"; Path=/; HttpOnly')
    assert trace.redact("x Pa55-w0rd! y 52a1b2c3d4e5f60718293a4b5c6d7e8f z") == "x *** y *** z"
    with caplog.at_level(logging.DEBUG, logger="vgpuctl.trace"):
        trace.soap_call(SimpleNamespace(_moId="SessionManager"), _info("cookie"), ("Pa55-w0rd!",))
        trace.shell_command("esx-01", "esxcli foo --password=Pa55-w0rd! --token abcdef123456 -m nvidia")
    text = caplog.text
    assert "SOAP -> SimpleNamespace:SessionManager.Login(cookie=***)" in text
    assert "Pa55-w0rd!" not in text and "abcdef123456" not in text and "-m nvidia" in text


def test_trace_is_silent_below_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="vgpuctl.trace"):
        trace.soap_call(SimpleNamespace(_moId="x"), _info(), ())
        trace.shell_command("h", "nvidia-smi")
    assert caplog.text == ""


# ------------------------------------------------------------------------------------------ short options


def _all_commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, group)]
    for name, command in getattr(group, "commands", {}).items():
        found += _all_commands(command, (*path, name))
    return found


def test_a_short_option_means_one_long_option_everywhere() -> None:
    """`-p` is --parallel wherever a command has it, never another option elsewhere (and so on for every letter)."""
    meanings: dict[str, set[str]] = {}
    for _path, command in _all_commands(typer.main.get_command(app)):
        for param in command.params:
            flags = [*param.opts, *param.secondary_opts]
            longs = sorted(f for f in flags if f.startswith("--"))
            for short in (f for f in flags if not f.startswith("--")):
                meanings.setdefault(short, set()).add(longs[0] if longs else short)
    assert meanings["-p"] == {"--parallel"}
    assert {short: longs for short, longs in meanings.items() if len(longs) > 1} == {}


@pytest.mark.parametrize(
    ("args", "word"),
    [(["plan", "-f", "x.yaml", "-out", "x.plan"], "out"), (["apply", "-yes"], "yes"), (["-file", "y", "plan"], "file"),
     (["vm", "vgpu", "add", "vm-01", "-profile", "grid_a100-40c"], "profile")],
)
def test_a_long_option_after_one_dash_suggests_two(args: list[str], word: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"No such option: -{word} (one dash takes one letter); did you mean --{word}?" in result.stderr
    as_json = invoke("-o", "json", *args)
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["error"]["message"].endswith(f"did you mean --{word}?")


def test_short_options_that_are_letters_are_left_alone() -> None:
    assert "did you mean" not in invoke("status", "-vv", "--help").output
    assert invoke("-ojson", "plan", "--help").exit_code == 0
    assert "did you mean" not in invoke("validate", "-f", "x.yaml", "--", "-out").output


# ------------------------------------------------------------------------------------------ one command built


@pytest.mark.parametrize("args", [
    ["plan", "--no-such-option"], ["-o", "json", "plan", "--no-such-option"], ["plan", "--help"],
    ["--url", "https://vc.example/sdk", "-vv", "status", "--help"], ["-ojson", "vm", "vgpu", "add", "--help"],
    ["--output=json", "host", "show"], ["plan", "-f", "x.yaml", "-out", "x.plan"], ["validate", "-f"],
])
def test_the_command_alone_answers_as_the_whole_tree_does(args: list[str]) -> None:
    """The console script builds only the command the arguments name (vgpuctl.cli.main.app_for): its help, usage
    errors and their JSON are the whole tree's, word for word."""
    alone = app_for(args)
    assert alone is not app and len(alone.registered_commands) + len(alone.registered_groups) == 1
    whole, pruned = CliRunner().invoke(app, args), CliRunner().invoke(alone, args)
    assert (pruned.exit_code, pruned.stdout, pruned.stderr) == (whole.exit_code, whole.stdout, whole.stderr)


@pytest.mark.parametrize("columns", ["80", "40", "200"])
@pytest.mark.parametrize("args", [[], ["--help"], ["-h"], ["-o", "json", "--help"], ["-vv", "-h"],
                                  ["--url", "https://vc.example/sdk", "--help"]])
def test_the_roots_help_lists_what_the_whole_tree_lists(args: list[str], columns: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The root's help is printed from commands built without their options (vgpuctl.cli.main.app_for), word for
    word what the whole tree prints, at any width."""
    monkeypatch.setenv("COLUMNS", columns)
    listing = app_for(args)
    assert listing is not app and all(not c.callback.__code__.co_varnames for c in listing.registered_commands)
    whole, listed = CliRunner().invoke(app, args), CliRunner().invoke(listing, args)
    assert (listed.exit_code, listed.stdout, listed.stderr) == (whole.exit_code, whole.stdout, whole.stderr)
    assert "plan" in whole.stdout + whole.stderr and "Commands" in whole.stdout + whole.stderr


@pytest.mark.parametrize("args", [["plna"], ["--no-such", "plan"], ["--", "plan"], ["-o"],
                                  ["--env", "prod", "plan"], ["--show-completion", "bash"], ["-o", "json"]])
def test_anything_else_gets_the_whole_tree(args: list[str]) -> None:
    assert app_for(args) is app
