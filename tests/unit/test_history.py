"""The run history (vgpuctl.history): records written whole, bounded by count and size with the oldest dropped,
free of secrets, one per run when runs overlap, never failing a run; `vgpuctl runs` and `runs show` from it, and
the refusals of `--html`."""

from __future__ import annotations

import errno
import json
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vgpuctl import history, outpaths, trace
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.main import app
from vgpuctl.cli.runs import recording
from vgpuctl.domain import Outcome, WindowStage
from vgpuctl.errors import UsageError
from vgpuctl.events import EventStream
from vgpuctl.model import CloneSpec, GuestDriverOutcome, HostOutcome, Plan, VmChange, VmOutcome
from vgpuctl.reports.html import run_page
from vgpuctl.reports.plan import plan_report
from vgpuctl.reports.runs import (
    RunPart,
    RunResult,
    RunState,
    listing,
    record_from_json,
    record_lines,
    result_lines,
    state_of_exit,
)

pytestmark = pytest.mark.unit

T0 = datetime(2026, 5, 12, 22, 15, 2, tzinfo=UTC)
UNBOUNDED = history.Bounds()


def recorder(folder: Path, run_id: str, at: datetime = T0, bounds: history.Bounds = UNBOUNDED,
             warned: list[str] | None = None) -> history.Recorder:
    record = history.new_record("apply", run_id, None, now=at)
    return history.Recorder(history.RunHistory(folder, bounds), record, (warned if warned is not None else []).append)


def full_run(folder: Path, run_id: str, at: datetime = T0, bounds: history.Bounds = UNBOUNDED) -> Path:
    """A run's record as apply leaves it: the plan, the events of its stream, each VM's outcome."""
    rec = recorder(folder, run_id, at, bounds)
    stream = EventStream(rec.event, run_id, clock=lambda: "2026-05-12T22:15:03.000Z")
    report = plan_report(Plan(vm_changes=[VmChange("train-01", clone=CloneSpec("ubuntu"), power_on=True)]))
    stream.run_start("apply", "inv.yaml")
    stream.plan(report)
    rec.planned(report, "https://vc.example/sdk")
    stream.vm_step("train-01", "reconfigure")
    stream.vm_step("train-01", "done")
    stream.summary([], [Outcome.CHANGED], interrupted=False, exit_code=0)
    rec.applied(RunResult([HostOutcome("esx-01", Outcome.CHANGED)], [VmOutcome("train-01", Outcome.CHANGED)], [],
                          False))
    rec.finish(0)
    return rec.history.path(rec.record.id)


def test_a_record_holds_the_run_and_reads_back(tmp_path: Path) -> None:
    path = full_run(tmp_path / "runs", "aaa111")
    data = json.loads(path.read_text())
    assert data["kind"] == "run" and data["state"] == "ok" and data["exit_code"] == 0
    assert data["user"] and data["version"] and data["started"] == "2026-05-12T22:15:02.000Z" and data["ended"]
    assert [e["event"] for e in data["events"]] == ["run-start", "plan", "step-start", "step-end", "finished",
                                                    "summary"]
    assert data["plan"]["vm_changes"][0]["vm"] == "train-01" and data["result"]["vms"][0]["status"] == "changed"
    record = record_from_json(data)
    assert record.to_dict() == data
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_fleets_record_holds_each_vcenters_plan_result_and_failure(tmp_path: Path) -> None:
    rec = recorder(tmp_path / "runs", "f1eet1")
    east = plan_report(Plan(vm_changes=[VmChange("train-01", clone=CloneSpec("ubuntu"), power_on=True)]))
    west = plan_report(Plan(vm_changes=[VmChange("a", clone=CloneSpec("u"), power_on=True),
                                        VmChange("b", clone=CloneSpec("u"), power_on=True)]))
    done = RunResult([], [VmOutcome("train-01", Outcome.CHANGED)], [], False)
    rec.fleet([RunPart("east", "https://east/sdk", east, done), RunPart("west", "https://west/sdk", west),
               RunPart("lab", "https://lab/sdk", None, None, "cannot reach vCenter at https://lab/sdk")])
    rec.finish(1, "vCenter lab: cannot reach vCenter at https://lab/sdk")
    data = json.loads(rec.history.path(rec.record.id).read_text())
    assert [p["vcenter"] for p in data["vcenters"]] == ["east", "west", "lab"]
    assert "plan" not in data and "result" not in data  # a fleet's run keeps them per vCenter
    assert data["vcenters"][2] == {"vcenter": "lab", "url": "https://lab/sdk",
                                   "error": "cannot reach vCenter at https://lab/sdk"}
    record = record_from_json(data)
    assert record.to_dict() == data
    summary = listing(record).summary
    assert summary is not None and summary.create == 3  # the sum of the vCenters' plans
    lines = record_lines(record)
    assert "vCenter east (https://east/sdk):" in lines and "  error: cannot reach vCenter at https://lab/sdk" in lines
    assert any(line.startswith("    + vm train-01") for line in lines), lines
    assert lines[lines.index("  Result:") + 1] == "    VMs changed: train-01"
    page = run_page(record)
    assert "vCenter west" in page and "https://lab/sdk error: cannot reach vCenter" in page


def test_a_record_is_written_when_the_run_starts(tmp_path: Path) -> None:
    rec = recorder(tmp_path, "bbb222")
    data = json.loads(rec.history.path(rec.record.id).read_text())
    assert data["state"] == "running" and data["ended"] is None
    os_gone = history.RunHistory(tmp_path).read(rec.history.path(rec.record.id))
    assert os_gone.state == RunState.RUNNING  # its process (this one) is alive


def test_a_running_record_whose_process_is_gone_ended_unrecorded(tmp_path: Path) -> None:
    rec = recorder(tmp_path, "ccc333")
    rec.record.pid = 2**22 + 12345  # beyond any pid this machine hands out
    rec.history.write(rec.record)
    assert history.RunHistory(tmp_path).find("ccc333").state == RunState.ENDED_UNRECORDED


def test_the_oldest_records_go_past_the_count(tmp_path: Path) -> None:
    bounds = history.Bounds(runs=3)
    for i in range(5):
        full_run(tmp_path, f"run{i}", T0 + timedelta(minutes=i), bounds)
    kept, problems = history.RunHistory(tmp_path).records()
    assert [r.run_id for r in kept] == ["run4", "run3", "run2"] and not problems  # newest first


def test_the_oldest_records_go_past_the_size_and_the_runs_own_stays(tmp_path: Path) -> None:
    one = full_run(tmp_path / "probe", "probe").stat().st_size
    bounds = history.Bounds(runs=100, bytes=int(one * 2.5))
    for i in range(4):
        full_run(tmp_path, f"run{i}", T0 + timedelta(minutes=i), bounds)
    assert [p.name.rpartition("-")[2] for p in history.RunHistory(tmp_path).files()] == ["run2.json", "run3.json"]
    tiny = history.Bounds(runs=1, bytes=10)
    full_run(tmp_path, "run9", T0 + timedelta(hours=1), tiny)
    assert [p.name.rpartition("-")[2] for p in history.RunHistory(tmp_path).files()] == ["run9.json"]


def test_a_record_holds_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "_SECRET_VALUES", set())
    trace.add_secret("s3cr3t-Pa55")
    trace.add_secret("c00kie-abcdef12")
    rec = recorder(tmp_path, "ddd444")
    rec.planned(None, "https://admin:s3cr3t-Pa55@vc.example/sdk")
    EventStream(rec.event, "ddd444").warning('login with "s3cr3t-Pa55" refused; cookie c00kie-abcdef12 at https://u:p@vc/sdk')
    rec.finish(1, "vCenter https://admin:s3cr3t-Pa55@vc.example/sdk refused s3cr3t-Pa55")
    text = rec.history.path(rec.record.id).read_text()
    for secret in ("s3cr3t-Pa55", "c00kie-abcdef12", "admin:", "u:p@"):
        assert secret not in text, secret
    data = json.loads(text)
    assert data["vcenter"] == "https://vc.example/sdk"
    assert "***" in data["error"] and "***" in data["events"][0]["message"]


@pytest.mark.parametrize("secret", ['pa"ss\\word', "pässwörd-ü", "tab\tsecret", "plain-secret"])
def test_a_secret_that_json_escapes_is_redacted_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      secret: str) -> None:
    """The record is checked for secrets as JSON text, where quotes, backslashes, tabs and non-ASCII letters are
    escaped: each of those must still be found and redacted."""
    monkeypatch.setattr(trace, "_SECRET_VALUES", set())
    trace.add_secret(secret)
    rec = recorder(tmp_path, "eee555")
    rec.finish(1, f"vCenter refused the password {secret} at login")
    text = rec.history.path(rec.record.id).read_text()
    assert secret not in text and json.dumps(secret)[1:-1] not in text
    assert json.loads(text)["error"] == "vCenter refused the password *** at login"


def test_a_record_without_secrets_is_written_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "_SECRET_VALUES", set())
    trace.add_secret("s3cr3t-Pa55")
    assert not history.needs_redacting(json.dumps({"a": "https://vc.example/sdk", "b": ["s3cr3t"]}))
    assert history.needs_redacting(json.dumps({"a": ["x", {"b": "at https://u:p@vc/sdk"}]}))
    assert history.needs_redacting(json.dumps({"s3cr3t-Pa55": 1}))


def test_the_printed_plan_document_is_the_records_and_not_made_again(tmp_path: Path) -> None:
    """plan -o json makes the plan's document once: the record keeps the printed one (here told apart by a key of
    its own), the same as the one it would make."""
    report = plan_report(Plan(vm_changes=[VmChange("train-01", clone=CloneSpec("ubuntu"), power_on=True)]))
    made = recorder(tmp_path / "made", "fff666")
    made.planned(report, "https://vc.example/sdk")
    made.finish(0)
    printed = {**report.to_dict(), "printed": True}
    given = recorder(tmp_path / "given", "fff666")
    given.planned(report, "https://vc.example/sdk", printed)
    given.finish(0)
    kept = [json.loads(r.history.path(r.record.id).read_text()) for r in (made, given)]
    assert kept[1]["plan"] == printed
    del kept[1]["plan"]["printed"]
    for data in kept:
        data.pop("ended")
    assert kept[0] == kept[1]


@pytest.mark.parametrize("text", ["https://u:p@vc/sdk", "x://@", ":///@", "a://b/c@d", "https://vc/sdk a@b",
                                  'https://vc/sdk"@', "no url @ all", "://\n@", "://<@", "s3cr3t://"])
def test_user_info_is_found_exactly_where_it_is_cut(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quick check for URL user info says yes exactly where the redaction would change the text."""
    monkeypatch.setattr(trace, "_SECRET_VALUES", set())
    assert history.needs_redacting(text) == (history.redacted(text) != text)


def test_runs_at_the_same_time_each_keep_their_record(tmp_path: Path) -> None:
    ids = [f"par{i:02d}" for i in range(16)]
    start = threading.Barrier(len(ids))

    def one(run_id: str) -> None:
        start.wait()
        full_run(tmp_path, run_id, T0)  # the same start time: the run id tells them apart

    threads = [threading.Thread(target=one, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kept, problems = history.RunHistory(tmp_path).records()
    assert sorted(r.run_id for r in kept) == ids and not problems
    assert all(r.state == RunState.OK and len(r.events) == 6 for r in kept)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_a_folder_that_cannot_be_written_is_one_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the folder would be")
    warned: list[str] = []
    rec = recorder(blocker / "vgpuctl" / "runs", "eee555", warned=warned)
    EventStream(rec.event, "eee555").note("still kept in memory")
    rec.finish(0)
    assert len(warned) == 1 and "no record of this run kept" in warned[0] and "the run goes on" in warned[0]


def test_a_read_only_history_folder_is_one_warning_and_the_run_goes_on(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    folder.chmod(0o500)
    if os.geteuid() == 0:  # root writes through the mode: the refusal any other user gets, made by hand
        real_open = os.open

        def refusing(path: str | Path, *args: int, **kwargs: int) -> int:
            if Path(path).parent == folder:
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(outpaths.os, "open", refusing)
    warned: list[str] = []
    rec = recorder(folder, "ro7", warned=warned)
    EventStream(rec.event, "ro7").note("kept in memory only")
    rec.applied(RunResult([], [VmOutcome("train-01", Outcome.CHANGED)], [], False))
    rec.finish(0)
    (line,) = warned
    assert "Permission denied" in line and "no record of this run kept" in line and "the run goes on" in line
    assert list(folder.iterdir()) == []


def test_runs_are_found_by_id_run_id_or_a_prefix(tmp_path: Path) -> None:
    full_run(tmp_path, "abc123", T0)
    full_run(tmp_path, "abd456", T0 + timedelta(seconds=1))
    runs = history.RunHistory(tmp_path)
    assert runs.find("abc123").run_id == "abc123"
    assert runs.find("abd").run_id == "abd456"
    first = runs.files()[0].name.removesuffix(".json")
    assert runs.find(first).run_id == "abc123"
    with pytest.raises(UsageError, match="no run 'zzz'"):
        runs.find("zzz")
    with pytest.raises(UsageError, match="names 2 runs"):
        runs.find("ab")


def test_the_setting_and_the_bounds_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(history.ENV_HISTORY, "off")
    assert not history.enabled()
    monkeypatch.setenv(history.ENV_HISTORY, "on")
    assert history.enabled()
    monkeypatch.setenv(history.ENV_KEEP, "7")
    monkeypatch.setenv(history.ENV_MAX_MB, "lots")
    warned: list[str] = []
    assert history.bounds_from_env(warned.append) == history.Bounds(7, history.DEFAULT_MAX_MB * history.MIB)
    assert len(warned) == 1 and history.ENV_MAX_MB in warned[0]
    monkeypatch.setenv("XDG_STATE_HOME", "/srv/state")
    assert history.history_folder() == Path("/srv/state/vgpuctl/runs")
    monkeypatch.delenv("XDG_STATE_HOME")
    assert history.history_folder() == Path.home() / ".local" / "state" / "vgpuctl" / "runs"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # not absolute: ignored (XDG Base Directory Spec)
    assert history.history_folder() == Path.home() / ".local" / "state" / "vgpuctl" / "runs"


def test_no_home_folder_is_one_line_for_runs_and_one_warning_for_a_run(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setattr(Path, "home", no_home)
    listed = CliRunner().invoke(app, ["runs"])
    assert listed.exit_code == 1 and listed.stderr.strip().splitlines() == [
        "error: the run history has no folder: no home folder and no XDG_STATE_HOME"]
    warned: list[str] = []
    monkeypatch.setattr("vgpuctl.cli.common.warn", warned.append)
    with recording("plan", GlobalOptions(), False, None, "nohome1") as record:
        assert record is None
    assert len(warned) == 1 and "the run goes on" in warned[0]


# ------------------------------------------------------------------------------------------ the commands


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_vgpuctl_env: None) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "vgpuctl" / "runs"


def test_runs_lists_newest_first_in_text_and_json(state: Path) -> None:
    full_run(state, "old111", T0)
    full_run(state, "new222", T0 + timedelta(days=1))
    text = CliRunner().invoke(app, ["runs"])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert "new222" in lines[0] and "old111" in lines[1] and " apply " in lines[0] and " ok (exit 0) " in lines[0]
    doc = json.loads(CliRunner().invoke(app, ["runs", "-o", "json"]).stdout)
    assert doc["kind"] == "runs" and [r["run_id"] for r in doc["runs"]] == ["new222", "old111"]
    assert doc["folder"] == str(state)


def test_runs_show_prints_one_run(state: Path, tmp_path: Path) -> None:
    full_run(state, "show33", T0)
    text = CliRunner().invoke(app, ["runs", "show", "show33"])
    assert text.exit_code == 0, text.output
    assert "run " in text.stdout and "Plan:" in text.stdout and "+ vm train-01" in text.stdout
    assert "Events:" in text.stdout and "summary exit 0" in text.stdout
    doc = json.loads(CliRunner().invoke(app, ["-o", "json", "runs", "show", "show33"]).stdout)
    assert doc["kind"] == "run" and doc["run_id"] == "show33"
    page = tmp_path / "run.html"
    done = CliRunner().invoke(app, ["runs", "show", "show33", "--html", str(page)])
    assert done.exit_code == 0, done.output
    html = page.read_text()
    assert "train-01" in html and "What the apply did" in html and "6 events" in html


def test_a_windows_guest_drivers_are_kept_and_shown(tmp_path: Path) -> None:
    rec = recorder(tmp_path / "runs", "win9")
    moved = [GuestDriverOutcome("infer-01", WindowStage.BEFORE, "535.154.05", Outcome.CHANGED),
             GuestDriverOutcome("infer-02", WindowStage.AFTER, "550.90.07", Outcome.FAILED, "no address")]
    rec.applied(RunResult([HostOutcome("esx-01", Outcome.CHANGED)], [], [], False, moved))
    rec.finish(1, "a guest driver failed")
    (record,), _ = rec.history.records()
    assert record.result is not None and record.result.guest_drivers == moved  # read back with its enums
    lines = result_lines(record.result, full=False)
    assert "  Guest driver infer-01 (before): 535.154.05 changed" in lines
    assert "  Guest driver infer-02 (after): 550.90.07 failed: no address" in lines
    page = run_page(record)
    assert 'data-guest-driver-outcome="failed"' in page and "Guest driver infer-01 (before): 535.154.05" in page


def test_runs_show_of_an_unknown_run_is_one_line(state: Path) -> None:
    full_run(state, "here11", T0)
    result = CliRunner().invoke(app, ["runs", "show", "nope"])
    assert result.exit_code == 1
    expected = f"error: no run 'nope' in {state}: `vgpuctl runs` lists the runs kept"
    assert result.stderr.strip().splitlines() == [expected]


def test_runs_with_no_history_yet(state: Path) -> None:
    result = CliRunner().invoke(app, ["runs"])
    assert result.exit_code == 0 and result.stdout.strip() == f"No runs kept in {state}."


@pytest.mark.parametrize("command", [["status"], ["show", "PLAN"], ["runs", "show", "x"]])
def test_html_to_a_folder_is_one_line(command: list[str], tmp_path: Path, state: Path) -> None:
    args = [str(tmp_path / "p.plan") if a == "PLAN" else a for a in command]
    result = CliRunner().invoke(app, [*args, "--html", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [f"error: --html {tmp_path} is a folder: give the page a file name "
                                                  "in it"]


def test_html_over_an_input_is_refused_before_anything_runs(tmp_path: Path, state: Path) -> None:
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("apiVersion: vgpuctl/v1\n")
    result = CliRunner().invoke(app, ["status", "-f", str(inventory), "--html", str(inventory)])
    assert result.exit_code == 1 and "is the inventory, which this command reads" in result.stderr
    assert inventory.read_text() == "apiVersion: vgpuctl/v1\n"
    plan = tmp_path / "t.plan"
    plan.write_text("{}")
    result = CliRunner().invoke(app, ["show", str(plan), "--html", str(plan)])
    assert result.exit_code == 1 and "is the plan file, which this command reads" in result.stderr
    assert plan.read_text() == "{}"
    assert not (tmp_path / "state").exists()  # refused before the run began: no record


def test_how_a_run_ended_from_its_exit_code() -> None:
    assert [state_of_exit(c) for c in (0, 2, 1, 130)] == [RunState.OK, RunState.OK, RunState.FAILED,
                                                          RunState.INTERRUPTED]
