"""`provision`'s wait for the guests' IP addresses: which VMs it still waits for and how long it has waited (one
line that updates on a terminal, dated lines when piped), the line that ends it, the error naming the VMs that
had no address; and `sim up --guests`, which is refused in one line without root."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from vgpuctl.cli import provision, sim, simguests
from vgpuctl.cli.display import AddressWait, seconds
from vgpuctl.cli.main import app
from vgpuctl.errors import GuestError
from vgpuctl.guest.runner import DeployResult, GuestOutcome

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def piped() -> tuple[AddressWait, io.StringIO, Clock]:
    out = io.StringIO()
    clock = Clock()
    wait = AddressWait(Console(file=out, width=300), clock=clock, stamp=lambda: f"T{clock.now - 100:03.0f}")
    return wait, out, clock


def test_piped_a_dated_line_when_the_vms_waited_for_change_and_a_heartbeat_at_most_every_30_s() -> None:
    wait, out, clock = piped()
    names = [f"train-{i:02d}" for i in range(1, 8)]
    with wait:
        for second in range(0, 95):  # a read each second
            clock.now = 100.0 + second
            have = 2 if second < 40 else 6 if second < 90 else 7
            wait({n: (f"10.0.0.{i}" if i <= have else None) for i, n in enumerate(names, 1)})
    assert out.getvalue().splitlines() == [
        "T000 guest IP addresses: 2/7, waiting for train-03, train-04, train-05, train-06, train-07 (waited 0 s)",
        "T030 guest IP addresses: 2/7, waiting for train-03, train-04, train-05, train-06, train-07 (waited 30 s)",
        "T040 guest IP addresses: 6/7, waiting for train-07 (waited 40 s)",
        "T070 guest IP addresses: 6/7, waiting for train-07 (waited 1 min 10 s)",
        "T090 guest IP addresses: 7/7 (waited 1 min 30 s)",
        "guest IP addresses: 7/7 after 1 min 34 s: all there",
    ]


def test_many_vms_waited_for_are_counted_after_the_first_five() -> None:
    wait, out, _ = piped()
    with wait:
        wait({f"vm-{i:03d}": None for i in range(40)})
    first, last = out.getvalue().splitlines()
    assert first.endswith("0/40, waiting for vm-000, vm-001, vm-002, vm-003, vm-004 and 35 more (waited 0 s)")
    assert last == ("guest IP addresses: 0/40 after 0 s: no address for vm-000, vm-001, vm-002, vm-003, vm-004 "
                    "and 35 more")


def test_on_a_terminal_one_line_that_updates_then_the_outcome() -> None:
    out = io.StringIO()
    clock = Clock()
    wait = AddressWait(Console(file=out, force_terminal=True, width=120), clock=clock)
    with wait:
        assert wait.live is not None
        wait({"infer-01": "10.0.0.5", "infer-02": None})
        clock.now += 42
        line = wait.__rich__()
        assert line.plain == "guest IP addresses: 1/2, waiting for infer-02 (waited 42 s)"
        assert line.no_wrap  # one line, cut to the terminal's width rather than wrapped
        clock.now += 3
        wait({"infer-01": "10.0.0.5", "infer-02": None})
    assert wait.live is None
    assert out.getvalue().rstrip().endswith("guest IP addresses: 1/2 after 45 s: no address for infer-02")
    assert "T0" not in out.getvalue()  # no dated lines on a terminal


def test_no_wait_no_line() -> None:
    wait, out, _ = piped()
    with wait:
        pass
    assert out.getvalue() == ""


@pytest.mark.parametrize(("value", "text"), [(0.4, "0 s"), (59.9, "59 s"), (60, "1 min 00 s"), (605, "10 min 05 s")])
def test_seconds(value: float, text: str) -> None:
    assert seconds(value) == text


def result(*hosts: tuple[str, str]) -> DeployResult:
    return DeployResult(hosts=[GuestOutcome(host=h, group="g", status=s) for h, s in hosts], artifacts=None,
                        runner_status="successful", rc=0)


def test_the_timeout_error_names_the_vms_without_an_address() -> None:
    deployed = result(("a", "ok"), ("b", "unreachable"), ("c", "unreachable"))
    with pytest.raises(GuestError) as err:
        provision.raise_for_guests(deployed, ["b", "c"], 600)
    assert str(err.value) == ("no guest IP address after 600 s for b, c (powered off, or VMware Tools not running in "
                              "the guest): not configured")


def test_the_timeout_error_also_names_the_guests_whose_playbooks_failed() -> None:
    deployed = result(("a", "failed"), ("b", "unreachable"))
    with pytest.raises(GuestError, match=r"for b \(.*\): not configured; the guest playbooks failed on a$"):
        provision.raise_for_guests(deployed, ["b"], 30)


def test_the_timeout_error_cuts_long_lists_unless_verbose() -> None:
    missing = [f"vm-{i:03d}" for i in range(30)]
    deployed = result(*((n, "unreachable") for n in missing))
    with pytest.raises(GuestError, match=r"vm-019, \.\.\. \(10 more\) \("):
        provision.raise_for_guests(deployed, missing, 5)
    with pytest.raises(GuestError, match=r"vm-028, vm-029 \("):
        provision.raise_for_guests(deployed, missing, 5, full=True)


def test_every_guest_with_an_address_fails_as_before() -> None:
    with pytest.raises(GuestError, match="guest deploy failed for 1 of 2 host"):
        provision.raise_for_guests(result(("a", "ok"), ("b", "failed")), [], 600)
    provision.raise_for_guests(result(("a", "ok"), ("b", "changed")), [], 600)  # all configured: no error


# ---------------------------------------------------------------------------------------------- sim up --guests


def test_sim_up_guests_without_root_is_one_line_and_starts_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    started: list[str] = []
    monkeypatch.setattr(sim, "build", lambda src: started.append("build") or Path("/bin/false"))
    monkeypatch.setattr(sim, "_start", lambda *a: started.append("start") or (1, {}))
    result = CliRunner().invoke(app, ["sim", "up", "--guests"], env={"VGPUCTL_STATE_DIR": str(tmp_path)})
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"error: {simguests.NEEDS_ROOT}"]
    assert "needs root" in simguests.NEEDS_ROOT and "network namespace" in simguests.NEEDS_ROOT
    assert started == [] and not (tmp_path / "guests").exists()


def test_sim_up_guests_names_the_missing_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(simguests.shutil, "which", lambda tool: None if tool in ("unshare", "chroot") else "/bin/x")
    result = CliRunner().invoke(app, ["sim", "up", "--guests"], env={"VGPUCTL_STATE_DIR": str(tmp_path)})
    assert result.exit_code == 1
    assert result.stderr.splitlines() == ["error: sim up --guests needs these tools: unshare, chroot (Debian: the "
                                          "packages in scripts/guest-test-packages.txt)"]


def test_guests_network_is_the_users_else_the_simulators(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("VGPUCTL_GUEST_PREFIX", raising=False)
    monkeypatch.delenv("VGPUCTL_GUEST_NET", raising=False)
    assert simguests.hook_env(tmp_path) == {"VGPUCTL_GUEST_PREFIX": "vgs", "VGPUCTL_GUEST_NET": "10.213.1",
                                            "VGPUCTL_GUEST_HOST_KEYS": str(tmp_path / "guest-host-keys")}
    monkeypatch.setenv("VGPUCTL_GUEST_PREFIX", "mine")
    monkeypatch.setenv("VGPUCTL_GUEST_NET", "10.99.0")
    env = simguests.hook_env(tmp_path)
    assert (env["VGPUCTL_GUEST_PREFIX"], env["VGPUCTL_GUEST_NET"]) == ("mine", "10.99.0")


def test_sim_down_without_guests_touches_no_guest(tmp_path: Path) -> None:
    assert simguests.tear_down(None, tmp_path) is False
    result = CliRunner().invoke(app, ["sim", "down"], env={"VGPUCTL_STATE_DIR": str(tmp_path)})
    assert result.exit_code == 0 and "guests" not in result.stderr


def test_leftovers_name_a_process_in_a_guests_folder(tmp_path: Path) -> None:
    import subprocess
    import sys

    folder = tmp_path / "guests"
    folder.mkdir()
    # a process naming a guest's folder on its command line, as the one holding a guest's namespaces does
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", str(folder / "guest1" / "root")])
    try:
        assert simguests.leftovers(folder, None) == [f"processes {proc.pid}"]
    finally:
        proc.kill()
        proc.wait()
    assert simguests.leftovers(folder, None) == []
