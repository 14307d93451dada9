"""Leases and claims judged without a vCenter: a holder that was a process of this machine and is gone is dead at
once; one elsewhere (or on a system where the machine cannot be told) only by its time to live; a refusal says
when it expires. vCenter refusing vgpuctl's bookkeeping is one line naming the privilege."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vgpuctl.cli.common import parse_duration
from vgpuctl.errors import UsageError
from vgpuctl.vsphere import workrecord
from vgpuctl.vsphere.bookkeeping import PRIVILEGES, BookkeepingError, guarded
from vgpuctl.vsphere.workrecord import DEFAULT_TTL_S, ENV_TTL, LeaseInfo, lease_ttl, parse_lease, this_machine

pytestmark = pytest.mark.unit


def info(pid: int, machine: str) -> LeaseInfo:
    return LeaseInfo("run1", f"ops@box pid {pid}", since=1000.0, renewed=1030.0, ttl_s=60.0, folder="group-v9",
                     pid=pid, machine=machine)  # fmt: skip


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names no process now
    return child.pid


@pytest.mark.skipif(not this_machine(), reason="the machine cannot be told here (not Linux)")
def test_a_holder_of_this_machine_that_is_gone_is_dead_at_once() -> None:
    assert info(dead_pid(), this_machine()).holder_gone()
    assert not info(os.getpid(), this_machine()).holder_gone()  # alive: only its time to live decides


def test_a_holder_elsewhere_or_unknown_is_judged_by_its_time_to_live_alone() -> None:
    gone = dead_pid()
    assert not info(gone, "another-boot/4026531836").holder_gone()
    assert not info(gone, "").holder_gone()
    assert not info(0, this_machine()).holder_gone()


def test_without_a_machine_id_no_holder_is_ever_dead_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workrecord, "this_machine", lambda: "")
    assert not info(dead_pid(), "").holder_gone()


def test_a_description_round_trips_and_names_its_expiry() -> None:
    lease = info(7, "boot/1")
    assert parse_lease(json.dumps(lease.__dict__)) == lease
    assert lease.expiry() == workrecord._clock(1090.0)
    old = '{"run": "r", "holder": "h", "since": 1.0, "renewed": 2.0, "ttl_s": 60.0, "folder": "f"}'
    assert parse_lease(old) == LeaseInfo("r", "h", 1.0, 2.0, 60.0, "f")  # written before pid and machine


def test_a_refused_bookkeeping_call_is_one_line_naming_the_privilege() -> None:
    from pyVmomi import vim

    def refuse() -> None:
        raise vim.fault.NoPermission(privilegeId="Folder.Create", object=vim.Folder("group-d1"))

    with pytest.raises(BookkeepingError) as err:
        guarded("esx-01: cannot take the lease (its lock folder vgpuctl-lease-host-9)", "CreateFolder", refuse)
    assert str(err.value) == (
        "esx-01: cannot take the lease (its lock folder vgpuctl-lease-host-9): vCenter refused CreateFolder: this "
        "user lacks the privilege Folder.Create on group-d1 (vgpuctl's role needs it: README, \"What a real vCenter "
        "needs\")"
    )
    assert err.value.privilege == "Folder.Create" and "\n" not in str(err.value)


def test_a_refusal_without_a_privilege_id_names_the_one_the_method_needs() -> None:
    from pyVmomi import vim

    def refuse() -> None:
        raise vim.fault.NoPermission()

    with pytest.raises(BookkeepingError, match=r"lacks the privilege Global\.SetCustomField \("):
        guarded("cannot write the custom attribute vgpuctl.work", "SetField", refuse)
    assert set(PRIVILEGES.values()) == {"Folder.Create", "Folder.Delete", "Global.ManageCustomFields",
                                         "Global.SetCustomField"}  # fmt: skip


def test_the_readme_role_grants_every_bookkeeping_privilege() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    role = readme.split("govc role.create vgpuctl", 1)[1].split("govc permissions.set", 1)[0]
    assert set(PRIVILEGES.values()) <= set(role.replace("\\", " ").split())


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "-inf", "9.9", "3601", "soon", "1e400"])
def test_a_time_to_live_vgpuctl_cannot_keep_is_refused(value: str) -> None:
    with pytest.raises(UsageError, match=rf"^{ENV_TTL}=.*: expected seconds from 10 to 3600$"):
        lease_ttl({ENV_TTL: value})


def test_a_time_to_live_within_bounds_is_taken() -> None:
    assert [lease_ttl({ENV_TTL: v}) for v in ("10", "60.5", "3600")] == [10.0, 60.5, 3600.0]
    assert lease_ttl({}) == lease_ttl({ENV_TTL: ""}) == DEFAULT_TTL_S


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("5m", 300), ("1h30m", 5400),
                                               ("2m30s", 150), ("0", 0), ("1.5m", 90)])  # fmt: skip
def test_lock_timeout_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "--lock-timeout") == seconds


@pytest.mark.parametrize("text", ["", "5x", "m", "-1", "1d", "25h"])
def test_a_lock_timeout_that_is_no_duration_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match=r"^--lock-timeout "):
        parse_duration(text, "--lock-timeout")


def test_every_held_lease_is_released_at_once_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second Ctrl-C: the leases and claims this process holds are dropped in parallel; one that hangs is left
    to expire and does not hold up the exit beyond the bound."""
    import threading

    released: list[str] = []
    stuck = threading.Event()

    class FakeLease:
        def __init__(self, host: str, hang: bool = False):
            self.host, self.hang = host, hang

        def release(self) -> None:
            if self.hang:
                stuck.wait(5)
                return
            released.append(self.host)

    monkeypatch.setattr(workrecord, "_HELD", {FakeLease("esx-01"), FakeLease("web-01"), FakeLease("slow", hang=True)})
    assert workrecord.release_held(within_s=0.2) == ["esx-01", "web-01"]
    assert sorted(released) == ["esx-01", "web-01"]
    stuck.set()
