"""How the CLI reads the vCenter URL and timeout: malformed URLs are one clear error, never a crash report."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.main import app
from vgpuctl.errors import UsageError

pytestmark = pytest.mark.unit

ENV = {"VGPUCTL_USERNAME": "admin", "VGPUCTL_PASSWORD": "Hunter2pw", "VGPUCTL_INSECURE": "1"}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VGPUCTL_URL", "GOVC_URL", "VGPUCTL_TIMEOUT", "GOVC_USERNAME", "GOVC_PASSWORD"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://vc.example.com:99999/sdk", "the port must be 1 to 65535"),
        ("https://admin:Hunter2pw@vc.example.com:99999/sdk", "the port must be 1 to 65535"),
        ("https://[fe80::1/sdk", "the IPv6 address in brackets is broken"),
        ("https:///sdk", "has no host"),
        ("https://admin:Hunter2pw@x@vc.example.com:99999/sdk", "the port must be 1 to 65535"),
        ("https://admin:Hun/ter2pw@vc.example.com/sdk", "the port is not a number"),
    ],
)
@pytest.mark.parametrize("output", ["text", "json"])
def test_a_malformed_url_is_one_line(url: str, why: str, output: str) -> None:
    result = CliRunner().invoke(app, ["-o", output, "status"], env={**ENV, "VGPUCTL_URL": url})
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
    assert len(errors) == 1 and errors[0].startswith("error: vCenter URL") and why in errors[0], result.stderr
    assert "bug" not in result.output and "Traceback" not in result.output
    assert "Hunter2pw" not in result.output and "ter2pw" not in result.output and "admin:" not in result.output
    if output == "json":
        assert '"UsageError"' in result.stdout


def test_timeout_reaches_the_connection_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VGPUCTL_PASSWORD", "pw")
    opts = GlobalOptions(url="https://vc/sdk", username="u", timeout=2.5)
    assert common.connection_settings(opts).timeout_s == 2.5
    assert common.connection_settings(GlobalOptions(url="https://vc/sdk", username="u")).timeout_s == 30.0


def test_timeout_bounds_esxi_commands_and_esxi_timeout_them_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VGPUCTL_PASSWORD", "pw")
    monkeypatch.delenv("VGPUCTL_ESXI_TIMEOUT", raising=False)
    plain = GlobalOptions(url="https://vc/sdk", username="u")
    assert common.connection_settings(plain).esxi_timeout_s is None  # the shell's own default (120 s)
    monkeypatch.setenv("VGPUCTL_ESXI_TIMEOUT", "45")
    assert common.connection_settings(plain).esxi_timeout_s == 45.0
    timed = GlobalOptions(url="https://vc/sdk", username="u", timeout=7)
    assert (common.connection_settings(timed).timeout_s, common.connection_settings(timed).esxi_timeout_s) == (7, 7)
    monkeypatch.setenv("VGPUCTL_ESXI_TIMEOUT", "soon")
    with pytest.raises(UsageError, match=r"^VGPUCTL_ESXI_TIMEOUT: timeout must be a number of seconds"):
        common.connection_settings(plain)


def test_the_timeout_option_and_variable_reach_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float | None] = []
    monkeypatch.setattr(common, "connection_settings", lambda opts, inv=None: seen.append(opts.timeout) or 1 / 0)
    runner = CliRunner()
    runner.invoke(app, ["--timeout", "4", "status"], env=ENV)
    runner.invoke(app, ["status", "--timeout", "5"], env=ENV)
    runner.invoke(app, ["status"], env={**ENV, "VGPUCTL_TIMEOUT": "6"})
    assert seen == [4.0, 5.0, 6.0]


@pytest.mark.parametrize("bad", ["0", "-3"])
def test_a_timeout_that_is_not_positive_is_refused(bad: str) -> None:
    result = CliRunner().invoke(app, ["status"], env={**ENV, "VGPUCTL_URL": "https://vc/sdk", "VGPUCTL_TIMEOUT": bad})
    assert result.exit_code == 1
    assert "timeout must be more than 0 seconds" in result.stderr


@pytest.mark.parametrize("url", ["https://admin:Hunter2pw@vc.example.com/sdk", "admin@corp:Hun/ter2pw@vc.example.com"])
def test_a_password_in_the_inventory_url_is_refused_without_repeating_it(tmp_path: Path, url: str) -> None:
    """Secrets never live in the inventory (a saved plan holds its text): the URL's password goes in
    VGPUCTL_PASSWORD, --password-file or the prompt, and the error repeats no part of the URL."""
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(f'apiVersion: vgpuctl/v1\nvcenter: {{url: "{url}"}}\n')
    result = CliRunner().invoke(app, ["validate", "-f", str(inventory)], env=ENV)
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == (f"{inventory}:2:16: vcenter.url: must not carry a password (secrets never live "
                                     "in the inventory): give it with VGPUCTL_PASSWORD, --password-file or the prompt")
    assert "ter2pw" not in result.output and "admin" not in result.output
