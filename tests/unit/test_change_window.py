"""Change windows without a vCenter: deadlines and durations as typed, which hosts of a wave start (the deadline,
Ctrl-C, maintenance.max_failures and --keep-going), which VM changes run beside the host changes, what the apply
summary says a window left, and a plan whose problems stand beside its changes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kinds
import pytest
from typer.testing import CliRunner

from vgpuctl.cli.main import app
from vgpuctl.domain import Outcome, Phase, StopReason
from vgpuctl.durations import Deadline, duration_seconds, parse_deadline
from vgpuctl.hosts.apply import HostApplyOptions, failure_limit, held_back
from vgpuctl.hosts.targets import HostTarget
from vgpuctl.inventory import HostSpec
from vgpuctl.model import (
    HOST_TARGET,
    ApplyResult,
    CloneSpec,
    FieldChange,
    HostApplyResult,
    HostChange,
    HostOutcome,
    Observed,
    ObservedHost,
    ObservedVm,
    Plan,
    Problem,
    VmChange,
    VmOutcome,
)
from vgpuctl.planner import independent_changes
from vgpuctl.reports.apply import apply_report, render_apply_summary
from vgpuctl.reports.plan import plan_report, render_plan_text

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 1, 4, 0, tzinfo=UTC).timestamp()


# ------------------------------------------------------------------------------------------ deadlines


@pytest.mark.parametrize(("text", "at"), [
    ("2026-12-01T06:00+01:00", datetime(2026, 12, 1, 5, 0, tzinfo=UTC)),
    ("2026-12-01 06:00Z", datetime(2026, 12, 1, 6, 0, tzinfo=UTC)),
    ("2026-12-01T04:30:15+00:00", datetime(2026, 12, 1, 4, 30, 15, tzinfo=UTC)),
])  # fmt: skip
def test_a_deadline_is_a_time_with_its_offset(text: str, at: datetime) -> None:
    assert parse_deadline(text, NOW).at == at.timestamp()


@pytest.mark.parametrize(("text", "seconds"), [("2h", 7200), ("90m", 5400), ("1h30m", 5400), ("45", 45)])
def test_a_deadline_is_a_duration_from_now(text: str, seconds: float) -> None:
    assert parse_deadline(text, NOW).at == NOW + seconds


@pytest.mark.parametrize(("text", "why"), [
    ("2026-12-01T03:59+00:00", "not in the future"),  # a minute ago
    ("0", "not in the future"),
    ("2026-12-01T06:00", "no UTC offset"),
    ("06:00+01:00", "expected a time with its date"),
    ("tomorrow", "expected a time with its date"),
    ("", "expected a time"),
    ("200h", "must be at most 7 days"),
    ("2026-12-09T06:00+00:00", "more than 7 days away"),
])  # fmt: skip
def test_a_deadline_that_cannot_be_met_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_deadline(text, NOW)


def test_a_deadline_passes_at_its_time() -> None:
    deadline = Deadline(NOW)
    assert not deadline.passed(NOW - 0.001) and deadline.passed(NOW) and deadline.passed(NOW + 1)
    assert datetime.fromisoformat(deadline.text).timestamp() == NOW  # local time with its offset, read back


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("1.5m", 90), ("1h", 3600), ("0", 0)])
def test_durations(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "-1", "1d", "25h", "m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="must be"):
        duration_seconds(text)


def test_a_deadline_in_the_past_is_a_usage_error_before_anything_is_read(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"  # never read: the option is refused first
    for deadline in ("2020-01-01T00:00Z", "2026-12-01T06:00", "soon"):
        result = CliRunner().invoke(app, ["apply", "-f", str(missing), "--deadline", deadline], env={})
        assert result.exit_code == 1, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --deadline"), result.stderr
        assert "no such file" not in result.stderr


# ------------------------------------------------------------------------------------------ waves


def _target(name: str, **maintenance: Any) -> HostTarget:
    spec = HostSpec.model_validate({"name": name, "maintenance": maintenance})
    return HostTarget(name, f"host-{name}", spec, [HostChange(name, kinds.NVLINK, HOST_TARGET, "a", "b", Phase.REBOOT)])


def _failed(*names: str) -> HostApplyResult:
    return HostApplyResult([HostOutcome(n, Outcome.FAILED) for n in names])


class _Set:
    def is_set(self) -> bool:
        return True


def test_by_default_one_failed_host_keeps_the_others_back_unless_keep_going() -> None:
    wave = [_target("h2"), _target("h3")]
    start, held = held_back(wave, _failed("h1"), HostApplyOptions())
    assert start == [] and [(o.host, o.status, o.stopped_by) for o in held] == [
        ("h2", Outcome.NOT_STARTED, None), ("h3", Outcome.NOT_STARTED, None)]
    assert "h1 failed; --keep-going" in held[0].message
    start, held = held_back(wave, _failed("h1"), HostApplyOptions(keep_going=True))
    assert [t.name for t in start] == ["h2", "h3"] and held == []


def test_max_failures_sets_the_limit_per_host_entry_and_keep_going_does_not_lift_it() -> None:
    wave = [_target("h3", max_failures=2), _target("h4", max_failures=3), _target("h5")]
    for keep_going in (False, True):
        start, held = held_back(wave, _failed("h1", "h2"), HostApplyOptions(keep_going=keep_going))
        assert [t.name for t in start] == (["h4", "h5"] if keep_going else ["h4"])
        stopped = [o for o in held if o.stopped_by == StopReason.MAX_FAILURES]
        assert [o.host for o in stopped] == ["h3"]
        assert stopped[0].message == "2 host(s) failed (h1, h2); its maintenance.max_failures is 2"
    start, _ = held_back(wave, _failed("h1"), HostApplyOptions())
    assert [t.name for t in start] == ["h3", "h4"]  # below their limits; h5 keeps the default of one
    assert failure_limit(wave[2].spec, keep_going=False) == 1 and failure_limit(wave[2].spec, keep_going=True) is None


def test_a_failed_host_of_a_driver_upgrade_window_holds_every_later_wave_whatever_the_limits() -> None:
    wave = [_target("h2", max_failures=3), _target("h3")]
    for keep_going in (False, True):
        opts = HostApplyOptions(keep_going=keep_going, window=frozenset({"h1", "h2", "h3"}))
        start, held = held_back(wave, _failed("h1"), opts)
        assert start == [] and [o.host for o in held] == ["h2", "h3"]
        assert held[0].message == "h1 failed: the driver upgrade window stops before another host leaves"
    start, _ = held_back(wave, _failed("h9"), HostApplyOptions(keep_going=True, window=frozenset({"h2", "h3"})))
    assert [t.name for t in start] == ["h2", "h3"]  # a failed host outside the window: the usual limits


def test_no_wave_starts_after_the_deadline_or_ctrl_c() -> None:
    wave = [_target("h1"), _target("h2")]
    opts = HostApplyOptions(deadline=Deadline(NOW), clock=lambda: NOW - 1)
    assert [t.name for t in held_back(wave, HostApplyResult(), opts)[0]] == ["h1", "h2"]
    opts.clock = lambda: NOW
    start, held = held_back(wave, HostApplyResult(), opts)
    assert start == [] and {o.stopped_by for o in held} == {StopReason.DEADLINE}
    assert all(o.status == Outcome.NOT_STARTED and "deadline" in o.message for o in held)
    start, held = held_back(wave, HostApplyResult(), HostApplyOptions(cancel=_Set()))
    assert start == [] and [o.message for o in held] == ["interrupted", "interrupted"]


# ------------------------------------------------------------------------------------------ VMs beside hosts


def _farm() -> Observed:
    hosts = {
        "a1": ObservedHost("a1", "host-1", cluster="A"), "a2": ObservedHost("a2", "host-2", cluster="A"),
        "b1": ObservedHost("b1", "host-3", cluster="B"), "s1": ObservedHost("s1", "host-4"),
        "s2": ObservedHost("s2", "host-5"),
    }  # fmt: skip
    vms = {name: ObservedVm(name, f"vm-{name}", host=host) for name, host in
           (("on-a2", "a2"), ("on-b1", "b1"), ("on-s1", "s1"), ("on-s2", "s2"), ("on-a1", "a1"))}  # fmt: skip
    return Observed(hosts=hosts, vms=vms, clusters={"A": ["a1", "a2"], "B": ["b1"]})


def _cpus(vm: str, **kw: Any) -> VmChange:
    return VmChange(vm, fields=[FieldChange("numCPUs", 2, 4)], **kw)


def test_vms_outside_clusters_whose_hosts_change_go_beside_the_host_changes() -> None:
    observed = _farm()
    host_changes = [HostChange("a1", kinds.NVLINK, HOST_TARGET, "a", "b", Phase.REBOOT),
                    HostChange("s1", kinds.NVLINK, HOST_TARGET, "a", "b", Phase.REBOOT)]  # fmt: skip
    changes = [
        _cpus("on-a1", depends_on_hosts=["a1"]),  # waits for its host
        _cpus("on-a2"),  # same cluster as a changing host: waits
        _cpus("on-b1"),
        _cpus("on-s1"),  # a changing standalone host
        _cpus("on-s2"),
        VmChange("new-b", clone=CloneSpec("tmpl", cluster="B")),
        VmChange("new-a", clone=CloneSpec("tmpl", cluster="A")),
        VmChange("new-b1", clone=CloneSpec("tmpl", host="b1")),
        VmChange("new-nowhere", clone=CloneSpec("tmpl")),  # where it lands is not known: waits
        VmChange("on-b1"),  # empty
    ]
    early = independent_changes(changes, observed, host_changes)
    assert [c.vm for c in early] == ["on-b1", "on-s2", "new-b", "new-b1"]
    assert independent_changes(changes, observed, []) == [c for c in changes if not c.is_empty and c.vm != "on-a1"
                                                          and c.vm != "new-nowhere"]


# ------------------------------------------------------------------------------------------ the summary


def test_the_summary_says_what_the_window_left_and_why() -> None:
    hosts = HostApplyResult([
        HostOutcome("h1", Outcome.FAILED, message="boom"),
        HostOutcome("h2", Outcome.NOT_STARTED, message="2 host(s) failed", stopped_by=StopReason.MAX_FAILURES),
        HostOutcome("h3", Outcome.NOT_STARTED, message="the deadline passed", stopped_by=StopReason.DEADLINE),
    ])  # fmt: skip

    vms = ApplyResult([VmOutcome("v1", Outcome.CHANGED),
                       VmOutcome("v2", Outcome.NOT_STARTED, stopped_by=StopReason.DEADLINE)])  # fmt: skip
    report = apply_report(Plan(), vms, hosts=hosts, deadline="2026-12-01T06:00:00+01:00")
    doc = report.to_dict()
    assert doc["deadline"] == "2026-12-01T06:00:00+01:00"
    assert [(s["reason"], s["hosts"], s["vms"]) for s in doc["stopped"]] == [
        ("max-failures", ["h2"], []), ("deadline", ["h3"], ["v2"])]
    assert "2026-12-01T06:00:00+01:00 passed" in doc["stopped"][1]["message"]
    assert "1 host(s) failed (h1)" in doc["stopped"][0]["message"]
    text = render_apply_summary(report)
    assert "Stopped: the deadline 2026-12-01T06:00:00+01:00 passed: no host wave and no VM started after it" in text
    assert "  hosts not started: h3" in text and "  VMs not started: v2" in text
    assert "in the next change window" in text
    plain = apply_report(Plan(), ApplyResult([VmOutcome("v1", Outcome.CHANGED)]))
    assert plain.to_dict()["stopped"] == [] and "deadline" not in plain.to_dict()
    assert "Stopped" not in render_apply_summary(plain)


# ------------------------------------------------------------------------------------------ the plan


def _impossible() -> Plan:
    return Plan(
        host_changes=[HostChange("esx-01", kinds.NVLINK, HOST_TARGET, "enabled", "disabled", Phase.REBOOT)],
        vm_changes=[_cpus("web-01"), _cpus("web-02")],
        problems=[Problem("host esx-01: its nvlink change needs maintenance mode", host="esx-01"),
                  Problem("no room", vm="web-02"), Problem("no room either", vm="gone-01"),
                  Problem("vCenter 6.5 is too old")],
    )


def test_a_plan_shows_its_problems_beside_every_change() -> None:
    text = render_plan_text(_impossible())
    assert text.splitlines() == [
        "~ host esx-01 nvlink: enabled -> disabled  (disruptive, reboot)",
        "    x cannot be carried out: host esx-01: its nvlink change needs maintenance mode",
        "~ vm web-01  (reconfigure)",
        "    ~ numCPUs: 2 -> 4",
        "~ vm web-02  (reconfigure)",
        "    ~ numCPUs: 2 -> 4",
        "    x cannot be carried out: no room",
        "Disruptive steps:",
        "  ! host esx-01: enters maintenance mode, exits after the change",
        "  ! host esx-01: reboots in maintenance mode",
        "Error: vm gone-01: no room either",
        "Error: vCenter 6.5 is too old",
        "Plan: 1 host change, 0 to create, 2 to change, 0 power-off, 1 host in maintenance, 1 reboot.",
        "Plan has 4 errors; nothing can be applied.",
    ]


def test_the_plan_document_lists_problems_beside_the_changes() -> None:
    doc = json.loads(json.dumps(plan_report(_impossible()).to_dict()))
    assert [v["vm"] for v in doc["vm_changes"]] == ["web-01", "web-02"] and len(doc["host_changes"]) == 1
    assert doc["problems"] == [
        {"subject": "host", "name": "esx-01", "message": "host esx-01: its nvlink change needs maintenance mode",
         "at": None},
        {"subject": "vm", "name": "web-02", "message": "no room", "at": None},
        {"subject": "vm", "name": "gone-01", "message": "no room either", "at": None},
        {"subject": None, "name": None, "message": "vCenter 6.5 is too old", "at": None},
    ]
    assert doc["summary"]["errors"] == 4 and len(doc["errors"]) == 4
