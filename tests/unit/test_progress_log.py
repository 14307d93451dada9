"""Progress off a terminal: timestamped lines on step changes only, a heartbeat at most every 30 s per wait;
warnings such as the TLS one once per run."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from vgpuctl.cli import common
from vgpuctl.cli.main import app
from vgpuctl.progress import StepLog

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_piped_lines_carry_the_date_and_the_utc_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    import time

    monkeypatch.setenv("TZ", "Asia/Kolkata")  # +05:30: an offset that is not whole hours
    time.tzset()
    try:
        lines: list[str] = []
        StepLog(lines.append).step("host esx-01", "verify")
    finally:
        monkeypatch.undo()
        time.tzset()
    (line,) = lines
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\+05:30 host esx-01: verify", line), line


def test_one_line_per_step_change_and_a_heartbeat_at_most_every_30_s() -> None:
    lines: list[str] = []
    clock = Clock()
    log = StepLog(lines.append, clock=clock, stamp=lambda: f"T{clock.now:04.0f}")
    for second in range(0, 600):  # a 10-minute reboot wait reporting every second
        clock.now = float(second)
        log.step("host esx-01", "wait-reconnect", f"{second}s of 900s")
    assert len(lines) == 20  # not 600
    assert lines[0] == "T0000 host esx-01: wait-reconnect 0s of 900s"
    assert lines[1] == "T0030 host esx-01: wait-reconnect 30s of 900s"
    clock.now = 600.5
    log.step("host esx-01", "verify")  # a new step: at once
    log.step("vm-1", "reconfigure", "0%")  # another subject: its own line
    log.step("vm-1", "reconfigure", "40%")  # same step, within 30 s: nothing
    assert lines[-2:] == ["T0600 host esx-01: verify", "T0600 vm-1: reconfigure 0%"]


def test_tls_warning_once_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    monkeypatch.setattr(common, "warn", said.append)
    common.start_run()
    for _ in range(3):
        common.warn_once("TLS certificate verification is disabled")
    assert said == ["TLS certificate verification is disabled"]
    common.start_run()  # a new run says it again
    common.warn_once("TLS certificate verification is disabled")
    assert len(said) == 2


def test_tls_warning_on_stderr_only(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VGPUCTL_URL", "VGPUCTL_PASSWORD", "VGPUCTL_USERNAME"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(app, ["--insecure", "--url", "127.0.0.1:1", "-u", "me", "-o", "json", "status"],
                                env={"VGPUCTL_PASSWORD": "pw", "VGPUCTL_STATE_DIR": str(tmp_path)})  # fmt: skip
    assert result.stderr.count("TLS certificate verification is disabled") == 1
    assert "TLS" not in result.stdout
