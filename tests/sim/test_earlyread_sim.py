"""The early read against gpusim: its answers are the run's (the same plan, the same faults and errors, one login),
a session it opened is closed when the run does not take it, and the run takes every answer it sent."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect

from vgpuctl.vsphere import earlyread
from vgpuctl.vsphere import session as session_mod
from vgpuctl.vsphere.observe import observe
from vgpuctl.vsphere.session import ConnectionSettings, open_session

pytestmark = pytest.mark.sim

INVENTORY = "apiVersion: vgpuctl/v1\nvms: []\n"


def env_of(gpusim: Any, tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in gpusim.os_environ().items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    return {**base, "VGPUCTL_URL": gpusim.url, "VGPUCTL_USERNAME": gpusim.username,
            "VGPUCTL_PASSWORD": gpusim.password, "VGPUCTL_THUMBPRINT": gpusim.env["VGPUCTL_THUMBPRINT"],
            "VGPUCTL_STATE_DIR": str(tmp_path / "state"), **extra}


def plan(gpusim: Any, tmp_path: Path, inventory: str = INVENTORY, early: bool = True,
         **extra: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "inventory.yaml"
    path.write_text(inventory)
    env = env_of(gpusim, tmp_path, VGPUCTL_EARLY_READ="1" if early else "0", **extra)
    return subprocess.run([sys.executable, "-m", "vgpuctl", "-o", "json", "plan", "-f", str(path)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def session_keys(gpusim: Any) -> set[str]:
    admin = gpusim.connect()
    try:
        own = admin.content.sessionManager.currentSession.key
        return {s.key for s in admin.content.sessionManager.sessionList} - {own}
    finally:
        Disconnect(admin)


def test_the_plan_is_the_same_with_and_without_it(gpusim: Any, tmp_path: Path) -> None:
    before = session_keys(gpusim)
    early, late = plan(gpusim, tmp_path), plan(gpusim, tmp_path, early=False)
    assert early.returncode == late.returncode == 0, early.stderr + late.stderr
    assert json.loads(early.stdout) == json.loads(late.stdout)
    assert early.stderr == late.stderr
    assert session_keys(gpusim) <= before  # both logged out


def test_a_refused_inventory_leaves_no_session_behind(gpusim: Any, tmp_path: Path) -> None:
    """The early read logs in before the inventory is read (a plan without it would never log in for an inventory
    it refuses): its login is held by gpusim until the process, having refused the inventory, waits for it; once
    released, the process logs that session out before it ends."""
    before = session_keys(gpusim)
    hold = gpusim.hold("Login")
    path = tmp_path / "inventory.yaml"
    path.write_text("apiVersion: vgpuctl/v1\nvms: [{name: a, no_such_field: 1}]\n")
    env = env_of(gpusim, tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "vgpuctl", "-o", "json", "plan", "-f", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not next(h for h in gpusim.holds() if h["id"] == hold)["started"]:
            assert time.monotonic() < deadline and proc.poll() is None, "no login before the inventory was read"
            time.sleep(0.05)
    finally:
        gpusim.release(hold)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "no_such_field" in json.loads(out)["error"]["message"] and "Traceback" not in err
    assert session_keys(gpusim) <= before


def test_a_refused_login_is_the_runs_and_not_tried_again(gpusim: Any, tmp_path: Path) -> None:
    """The login fault armed once: had the run logged in again after the early read's refused login, it would
    have got in and planned."""
    lines = []
    for early in (True, False):
        gpusim.arm_fault("SessionManager", "Login", "InvalidLogin", count=1)
        try:
            refused = plan(gpusim, tmp_path, early=early)
        finally:
            gpusim.clear_faults()
        assert refused.returncode == 1, refused.stdout
        lines.append(json.loads(refused.stdout)["error"]["message"])
    assert lines[0] == lines[1] and "wrong user name or password" in lines[0]


def test_a_fault_on_the_read_is_the_runs(gpusim: Any, tmp_path: Path) -> None:
    outcomes = []
    for early in (True, False):
        gpusim.arm_fault("propertyCollector", "RetrievePropertiesEx", "SystemError", count=1, message="disk full")
        try:
            failed = plan(gpusim, tmp_path, early=early)
        finally:
            gpusim.clear_faults()
        outcomes.append((failed.returncode, json.loads(failed.stdout)["error"]))
    assert outcomes[0] == outcomes[1] and outcomes[0][0] == 1
    assert "disk full" in json.dumps(outcomes[0][1])


def test_a_certificate_that_is_not_the_pinned_one_gets_no_password(gpusim: Any, tmp_path: Path) -> None:
    before = session_keys(gpusim)
    wrong = "AB:" * 31 + "AB"
    outcomes = [plan(gpusim, tmp_path, early=early, VGPUCTL_THUMBPRINT=wrong) for early in (True, False)]
    assert [o.returncode for o in outcomes] == [1, 1]
    assert json.loads(outcomes[0].stdout)["error"] == json.loads(outcomes[1].stdout)["error"]
    assert "thumbprint mismatch" in outcomes[0].stdout
    assert session_keys(gpusim) <= before


def test_the_run_takes_every_answer_the_early_read_sent(gpusim: Any) -> None:
    settings = ConnectionSettings(url=gpusim.url, username=gpusim.username, password=gpusim.password,
                                  thumbprint=gpusim.env["VGPUCTL_THUMBPRINT"])
    with open_session(settings) as plain:
        expected = observe(plain)
    early = earlyread.EarlyRead(settings)
    session_mod.offer_early_read(early)
    early.start()
    try:
        with open_session(settings) as taken:
            assert taken.stub.early is early and early.claimed
            observed = observe(taken)
            assert taken.round_trips == expected.round_trips + 2  # and the login's two, as a plain session's
        assert not early.pending
        assert early._taken == set(early._sent)
    finally:
        session_mod.end_early_read()
    assert sorted(observed.vms) == sorted(expected.vms)
    assert {n: (h.gpus, h.connection_state) for n, h in observed.hosts.items()} == {
        n: (h.gpus, h.connection_state) for n, h in expected.hosts.items()}


def test_the_runs_own_requests_go_on_the_early_reads_connections(gpusim: Any) -> None:
    """Once every early answer is taken, the early read's idle connections (open, verified TLS to the same
    vCenter) are the session's: its next requests need no new handshake, and the early read's end leaves them."""
    settings = ConnectionSettings(url=gpusim.url, username=gpusim.username, password=gpusim.password,
                                  thumbprint=gpusim.env["VGPUCTL_THUMBPRINT"])
    early = earlyread.EarlyRead(settings)
    session_mod.offer_early_read(early)
    early.start()
    try:
        with open_session(settings) as taken:
            made: list[object] = []
            scheme = taken.stub.scheme

            def counting(*args: Any, **kwargs: Any) -> Any:
                made.append(args)
                return scheme(*args, **kwargs)

            taken.stub.scheme = counting
            observe(taken)
            assert not early.pending
            assert taken.content.sessionManager.currentSession.key == taken.session_key
            handed = [conn for conn, _ in taken.stub.pool]
            assert handed and not set(map(id, handed)) & set(map(id, early._connections))
            session_mod.end_early_read()  # the process's end: the early read stops, the handed ones stay open
            assert taken.content.sessionManager.currentSession.key == taken.session_key
            assert made == []  # no connection of the session's own was made
    finally:
        session_mod.end_early_read()


def test_a_settings_own_host_property_is_read_beside_and_the_big_reads_are_still_taken(gpusim: Any) -> None:
    """A host setting that reads a HostSystem property readlist.HOST_PROPS lacks needs nothing else: observe reads
    it with the small types (that read is then the run's own) and still takes the early hosts' and VMs' reads."""
    settings = ConnectionSettings(url=gpusim.url, username=gpusim.username, password=gpusim.password,
                                  thumbprint=gpusim.env["VGPUCTL_THUMBPRINT"])
    own = ("config.product.build",)
    with open_session(settings) as plain:
        expected = observe(plain, host_properties=own)
    early = earlyread.EarlyRead(settings)
    session_mod.offer_early_read(early)
    early.start()
    try:
        with open_session(settings) as taken:
            observed = observe(taken, host_properties=own)
            assert taken.round_trips == expected.round_trips + 2
        untaken = set(early._sent) - early._taken
        assert len(untaken) == 1 and b"Datacenter" in next(iter(untaken))[1]  # the small types' read alone
    finally:
        session_mod.end_early_read()
    builds = {n: h.properties.get("config.product.build") for n, h in observed.hosts.items()}
    assert builds == {n: h.properties.get("config.product.build") for n, h in expected.hosts.items()}
    assert builds and all(builds.values())
    assert {n: h.gpus for n, h in observed.hosts.items()} == {n: h.gpus for n, h in expected.hosts.items()}


def test_a_session_with_other_settings_ends_it(gpusim: Any) -> None:
    settings = ConnectionSettings(url=gpusim.url, username=gpusim.username, password=gpusim.password,
                                  thumbprint=gpusim.env["VGPUCTL_THUMBPRINT"])
    before = session_keys(gpusim)
    early = earlyread.EarlyRead(settings)
    session_mod.offer_early_read(early)
    early.start()
    early.take("", b"")  # waits until its first requests are out
    with open_session(ConnectionSettings(url=gpusim.url, username=gpusim.username, password=gpusim.password,
                                         insecure=True)) as other:
        assert other.stub.early is None and not early.claimed
        assert session_keys(gpusim) - before == {other.session_key}  # the early read's session is closed
    session_mod.end_early_read()
