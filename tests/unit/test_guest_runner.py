"""ansible-runner integration: events -> per-host outcomes, artifacts pruning, secrets, addresses."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from vgpuctl import trace
from vgpuctl.cli.display import DeployProgress
from vgpuctl.errors import GuestError, UsageError
from vgpuctl.guest import runner
from vgpuctl.guest.addresses import load_address_file, pick_address, wait_for_addresses
from vgpuctl.guest.runner import ansible_cfg
from vgpuctl.inventory import load_inventory
from vgpuctl.reports.guests import guest_run_report

pytestmark = pytest.mark.unit


def ev(kind: str, host: str | None = None, **data) -> dict:
    event_data = dict(data)
    if host:
        event_data["host"] = host
    return {"event": kind, "event_data": event_data}


def stats(**per_key) -> dict:
    return ev("playbook_on_stats", **per_key)


def test_tracker_turns_events_into_outcomes():
    t = runner.HostTracker()
    t.feed(ev("runner_on_start", "a", task="Install"))
    t.feed(ev("runner_on_ok", "a", task="Install", res={"changed": True}))
    t.feed(ev("runner_on_ok", "b", task="Install", res={"changed": False}))
    t.feed(ev("runner_on_failed", "b", task="Wait", ignore_errors=True, res={"msg": "retrying"}))
    t.feed(ev("runner_on_failed", "b", task="Check", res={"msg": "vgpu_licensing: not licensed after 5 s"}))
    t.feed(ev("runner_on_unreachable", "c", task="Gathering Facts", res={"msg": "ssh: connect\n refused"}))
    t.feed(ev("runner_on_failed", "d", task="Copy token", res={"censored": "the output has been hidden"}))
    t.feed(ev("runner_on_failed", "e", task="Install the driver", res={"rc": 2, "stderr": "x\nboom: no space"}))
    t.feed(
        stats(ok={"a": 3, "b": 1}, changed={"a": 1}, failures={"b": 1, "d": 1, "e": 1}, dark={"c": 1}, skipped={"a": 2})
    )
    a, b, c, d, e = (t.outcome(h, "g") for h in "abcde")
    assert (a.status, a.ok, a.changed, a.skipped, a.message) == ("changed", 3, 1, 2, "")
    assert (b.status, b.failed, b.message) == ("failed", 1, "vgpu_licensing: not licensed after 5 s")
    assert (c.status, c.unreachable, c.message) == ("unreachable", 1, "ssh: connect refused")
    assert d.message == "Copy token: failed (output hidden: no_log)"
    assert e.message == "Install the driver: boom: no space"
    ok_only = runner.HostTracker()
    ok_only.feed(stats(ok={"x": 4}))
    assert ok_only.outcome("x", "g").status == "ok"


def test_a_host_without_any_event_counts_as_failed():
    t = runner.HostTracker()
    t.feed(stats(ok={"a": 1}))
    out = t.outcome("b", "g")
    assert out.status == "failed" and "did not run" in out.message


def test_result_raises_guest_error_naming_failed_hosts(tmp_path):
    ok = runner.GuestOutcome("a", "g", "ok")
    bad = runner.GuestOutcome("b", "g", "unreachable", message="no route")
    runner.DeployResult([ok], tmp_path, "successful", 0).raise_for_failures()
    with pytest.raises(GuestError, match=r"failed for 1 of 2 host\(s\): b"):
        runner.DeployResult([ok, bad], tmp_path, "failed", 4).raise_for_failures()


def test_summary_text_and_table():
    result = runner.DeployResult(
        [
            runner.GuestOutcome("a", "g", "changed", ok=5, changed=2),
            runner.GuestOutcome("b", "g", "failed", message="[x] no"),
        ],
        Path("/s/runs/run-1"),
        "failed",
        2,
        check=True,
    )
    report = guest_run_report(result)
    text = report.summary_text()
    assert text.splitlines()[0] == "Guest deploy (check): 0 ok, 1 changed, 1 failed, 0 unreachable."
    assert "  failed: b: [x] no" in text and "artifacts: /s/runs/run-1" in text
    table, counts = report.render_text()
    assert table.row_count == 2 and counts == text.splitlines()[0] + "\n  artifacts: /s/runs/run-1"


def test_progress_prints_failures_when_not_a_terminal():
    from rich.console import Console

    console = Console(record=True, force_terminal=False, width=200)
    with DeployProgress(console, ["a"]) as progress:
        progress(ev("playbook_on_task_start", task="Install [driver]"))
        progress(ev("runner_on_failed", "a", task="Install [driver]", res={"msg": "sha256 mismatch"}))
    out = console.export_text()
    assert "TASK Install [driver]" in out and "a: FAILED: Install [driver]: sha256 mismatch" in out


def test_prune_keeps_the_newest_runs(tmp_path):
    for name in ["run-20260101T000000-1", "run-20260102T000000-1", "run-20260103T000000-1", "other"]:
        (tmp_path / name).mkdir()
    deleted = runner.prune_runs(tmp_path, keep=2)
    assert [p.name for p in deleted] == ["run-20260101T000000-1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "run-20260102T000000-1", "run-20260103T000000-1"]
    assert runner.prune_runs(tmp_path / "missing", 1) == []


def test_new_idents_sort_in_creation_order():
    first, second = runner.new_ident(), runner.new_ident()
    assert first.startswith("run-") and first != second


@pytest.mark.parametrize(
    ("limit", "host", "group", "expected"),
    [
        (None, "a", "g", True),
        ("a", "a", "g", True),
        ("b", "a", "g", False),
        ("train-*", "train-03", "g", True),
        ("g", "x", "g", True),
        ("web,train-0[12]", "train-02", "t", True),
        ("!train-01", "train-02", "t", True),
        ("empty_group", "group empty-group", "empty-group", True),
    ],
)
def test_limit_matches(limit, host, group, expected):
    assert runner.limit_matches(limit, host, group) is expected


def test_scrubbed_environ_restores(monkeypatch):
    monkeypatch.setenv("VGPUCTL_PASSWORD", "pw")
    monkeypatch.setenv("GUEST_PW", "gpw")
    names = runner.secret_env_names(("GUEST_PW",))
    assert {"VGPUCTL_PASSWORD", "GUEST_PW"} <= names
    assert "PATH" not in names
    with runner.scrubbed_environ(names):
        assert "VGPUCTL_PASSWORD" not in os.environ and "GUEST_PW" not in os.environ
    assert os.environ["VGPUCTL_PASSWORD"] == "pw" and os.environ["GUEST_PW"] == "gpw"


def test_urls_with_user_info_and_known_secrets_are_scrubbed(monkeypatch):
    monkeypatch.setattr(trace, "_SECRET_VALUES", set())
    monkeypatch.setenv("VGPUCTL_URL", "https://admin:url-pw-5e2b@vc.example.com/sdk")
    monkeypatch.setenv("GOVC_URL", "admin:url-pw-5e2b@vc.example.com")  # govc's form without a scheme
    monkeypatch.setenv("AUTHOR", "bob@example.com")
    monkeypatch.setenv("OTHER_URL", "https://vc.example.com/sdk")
    monkeypatch.setenv("SOME_SETTING", "vmware_soap_session=\"52a1b3c4d5e6\"")
    monkeypatch.setenv("HOME", "/home/52a1b3c4d5e6")
    monkeypatch.setenv("VC_SESSIONID", "x")
    assert {"VGPUCTL_URL", "GOVC_URL"} <= runner.secret_env_names()
    assert not {"OTHER_URL", "SOME_SETTING", "AUTHOR"} & runner.secret_env_names()
    trace.add_cookie('vmware_soap_session="52a1b3c4d5e6"')  # known once the session logged in
    names = runner.secret_env_names()
    assert {"VGPUCTL_URL", "SOME_SETTING", "VC_SESSIONID"} <= names
    assert not {"OTHER_URL", "HOME", "PATH"} & names


@pytest.mark.parametrize("password", ["p/ss-5e2b", "p#ss-5e2b", "p?ss-5e2b", "p@ss-5e2b", "p:ss-5e2b"])
def test_a_url_password_with_any_character_is_scrubbed(monkeypatch, password):
    """The user info runs to the last @ (as vgpuctl reads a URL everywhere): a password holding /, #, ?, @ or :
    does not end it early, in a URL and in govc's form without a scheme."""
    monkeypatch.setattr(trace, "_SECRET_VALUES", set())
    monkeypatch.setenv("VGPUCTL_URL", f"https://admin:{password}@vc.example.com/sdk")
    monkeypatch.setenv("GOVC_URL", f"admin:{password}@vc.example.com")
    monkeypatch.setenv("PROXY_ADDRESS", f"http://proxy:{password}@proxy.example.com:3128/")
    assert {"VGPUCTL_URL", "GOVC_URL", "PROXY_ADDRESS"} <= runner.secret_env_names()


INV = """\
apiVersion: vgpuctl/v1
vms:
  - {name: w1, template: t, vgpus: {profile: grid_a100-40c, count: 1}, guest: {group: workers}}
guests:
  connection: {user: root, port: 1, password_env: VGPUCTL_TEST_GUEST_PW}
  groups:
    workers: {roles: [gpu_validate]}
    idle: {roles: [gpu_validate]}
"""


@pytest.fixture
def inv(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text(INV)
    return load_inventory(path)


def test_password_file_is_private_and_removed(inv, monkeypatch):
    monkeypatch.setenv("VGPUCTL_TEST_GUEST_PW", "s3cret")
    with runner.password_file(inv) as path:
        assert path is not None and path.read_text() == "s3cret"
        assert path.stat().st_mode & 0o777 == 0o600
        assert path.parent.stat().st_mode & 0o777 == 0o700
    assert not path.exists() and not path.parent.exists()


def test_password_env_not_set_is_a_usage_error(inv, monkeypatch):
    monkeypatch.delenv("VGPUCTL_TEST_GUEST_PW", raising=False)
    with pytest.raises(UsageError, match="VGPUCTL_TEST_GUEST_PW is not set"), runner.password_file(inv):
        pass


def test_no_addresses_reports_problems_without_running_ansible(inv, tmp_path, monkeypatch):
    monkeypatch.setenv("VGPUCTL_TEST_GUEST_PW", "x")
    result = runner.deploy(inv, {"w1": None}, state=tmp_path / "state")
    assert [(h.host, h.status) for h in result.hosts] == [("w1", "unreachable"), ("group idle", "failed")]
    assert result.artifacts is None and not (tmp_path / "state" / "runs").exists()


def test_unreachable_guest_run_keeps_secrets_out_of_artifacts(inv, tmp_path, monkeypatch):
    """A real ansible-runner run (port 1 on loopback refuses at once): the artifacts exist, hold the failure,
    and neither the guest password nor a vCenter password in the environment."""
    monkeypatch.setenv("VGPUCTL_TEST_GUEST_PW", "guest-pw-4f1c9e")
    monkeypatch.setenv("VGPUCTL_PASSWORD", "vcenter-pw-77ad10")
    monkeypatch.setenv("GOVC_URL", "https://admin:url-pw-5e2b@vc.example.com/sdk")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    state = tmp_path / "state"
    result = runner.deploy(inv, {"w1": "127.0.0.1"}, state=state)
    hosts = {h.host: h for h in result.hosts}
    assert hosts["w1"].status == "unreachable", hosts["w1"]
    assert hosts["group idle"].status == "failed"
    assert result.artifacts is not None and (result.artifacts / "job_events").is_dir()
    command = json.loads((result.artifacts / "command").read_text())
    assert "VGPUCTL_PASSWORD" not in command["env"] and "GOVC_URL" not in command["env"]
    assert command["env"]["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    for secret in ("guest-pw-4f1c9e", "vcenter-pw-77ad10", "url-pw-5e2b"):
        proc = subprocess.run(["grep", "-rlF", secret, str(state)], capture_output=True, text=True, check=False)
        assert proc.returncode == 1, proc.stdout
    # the private data dir (inventory, ansible.cfg) and the password file are gone
    assert list(scratch.iterdir()) == []


def test_playbook_error_first_error_line(tmp_path):
    out = tmp_path / "stdout"
    out.write_text("PLAY\n[ERROR]: YAML parsing failed: Colons\nOrigin: x.yml:3:4\nmore\n")
    assert runner.playbook_error(out) == "[ERROR]: YAML parsing failed: Colons Origin: x.yml:3:4"
    assert runner.playbook_error(tmp_path / "none") == ""


class FakeNic:
    def __init__(self, *ips):
        self.ipAddress = list(ips)


@pytest.mark.parametrize(
    ("primary", "nics", "expected"),
    [
        ("10.0.0.5", [], "10.0.0.5"),
        ("fe80::1", [FakeNic("fe80::1", "192.168.1.9")], "192.168.1.9"),
        (None, [FakeNic("127.0.0.1", "169.254.3.3"), FakeNic("10.1.1.1")], "10.1.1.1"),
        (None, [FakeNic("2001:db8::5")], "2001:db8::5"),
        (None, None, None),
        ("garbage", [], None),
    ],
)
def test_pick_address(primary, nics, expected):
    assert pick_address(primary, nics) == expected


def test_wait_for_addresses_polls_until_all_have_one():
    readings = iter([{"a": None, "b": None}, {"a": "10.0.0.1", "b": None}, {"a": "10.0.0.1", "b": "10.0.0.2"}])
    now = [0.0]
    seen = []
    result = wait_for_addresses(
        lambda: next(readings),
        timeout_s=60,
        poll_s=5,
        progress=seen.append,
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert result == {"a": "10.0.0.1", "b": "10.0.0.2"}
    assert len(seen) == 3 and now[0] == 10.0


def test_wait_for_addresses_gives_up_at_the_timeout():
    now = [0.0]
    calls = []

    def read():
        calls.append(now[0])
        return {"a": None}

    result = wait_for_addresses(
        read, timeout_s=12, poll_s=5, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)
    )
    assert result == {"a": None}
    assert calls == [0.0, 5.0, 10.0, 12.0]


def test_address_file(tmp_path):
    good = tmp_path / "a.yaml"
    good.write_text("w1: 10.0.0.1\nw2: host.example.com\nw3:\n")
    assert load_address_file(good) == {"w1": "10.0.0.1", "w2": "host.example.com", "w3": None}
    bad = tmp_path / "b.yaml"
    bad.write_text("w1: 'not an address'\n")
    with pytest.raises(UsageError, match="w1: 'not an address' is not an IP address or host name"):
        load_address_file(bad)
    with pytest.raises(UsageError, match="no such file"):
        load_address_file(tmp_path / "none.yaml")
    lst = tmp_path / "c.yaml"
    lst.write_text("- a\n")
    with pytest.raises(UsageError, match="expected a mapping"):
        load_address_file(lst)


def test_live_progress_on_a_terminal_renders_each_host():
    from rich.console import Console

    console = Console(record=True, force_terminal=True, width=120)
    with DeployProgress(console, ["a", "b"]) as progress:
        assert progress.live is not None
        progress(ev("runner_on_start", "a", task="Write [nccl.conf]"))
        progress(ev("runner_on_ok", "a", task="Write [nccl.conf]", res={"changed": True}))
        progress(ev("runner_on_unreachable", "b", task="Gathering Facts", res={"msg": "no route"}))
        console.print(progress)
    out = console.export_text()
    assert "Write [nccl.conf]" in out and "unreachable" in out and "waiting" not in out.split("b")[-1]


def test_ansible_cfg_keeps_a_path_a_value() -> None:
    import configparser

    odd = Path("/p/x\nbecome = True")
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read_string(ansible_cfg(odd, Path("/s/cp"), 5))
    assert cfg["defaults"]["roles_path"] == str(odd / "roles") and "become" not in cfg["defaults"]
    assert cfg["ssh_connection"]["control_path_dir"] == "/s/cp" and cfg["defaults"]["forks"] == "5"
