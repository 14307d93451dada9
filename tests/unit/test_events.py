"""The event stream (--events): progress calls and milestones become numbered, timestamped events of one run;
every event validates against the committed schema, and the schema refuses a renamed or missing key."""

from __future__ import annotations

import copy
import json
import re
import sys
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from vgpuctl.cli.main import app
from vgpuctl.domain import Outcome
from vgpuctl.events import EventStream
from vgpuctl.progress import Fanout
from vgpuctl.reports import schemas
from vgpuctl.reports.events import EVENTS
from vgpuctl.scope import Scope

sys.path.insert(0, str(Path(__file__).parent))
from test_schemas import REPORT_CASES

pytestmark = pytest.mark.unit

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schemas" / "event.schema.json").read_text())
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def recorded() -> tuple[EventStream, list[dict[str, Any]]]:
    lines: list[dict[str, Any]] = []
    return EventStream(lambda e: lines.append(json.loads(json.dumps(e.to_dict()))), "run42"), lines


def a_run() -> list[dict[str, Any]]:
    """A run as the CLI reports it: start, plan, one host and three VMs, a warning, a note, the summary."""
    stream, lines = recorded()
    stream.run_start("apply", "inv.yaml", Scope(["esx-01"], [], ["train-*"]))
    stream.plan(REPORT_CASES["plan"](Path("/tmp")))  # type: ignore[arg-type]
    stream.host_step("esx-01", "enter-maintenance", None)
    stream.host_step("esx-01", "wait-reconnect", "10s of 600s, notResponding")
    stream.host_step("esx-01", "wait-reconnect", "20s of 600s, notResponding")  # a heartbeat, not a step
    stream.host_step("esx-01", "power-on", "a")
    stream.host_step("esx-01", "power-on", "b")  # another VM: another step
    stream.host_step("esx-01", "changed", None)
    stream.vm_step("a", "check", None)
    stream.vm_step("a", "reconfigure", 0)
    stream.vm_step("a", "reconfigure", 40)  # a percentage, not a step
    stream.vm_step("a", "done", 100)
    stream.vm_step("a", "power-on", 100)  # late, after it finished
    stream.vm_step("b", "check", None)
    stream.vm_step("b", "failed", None)
    stream.vm_step("c", "not-started", None)
    stream.note("interrupted: no new step starts")
    stream.summary([Outcome.CHANGED], [Outcome.CHANGED, Outcome.FAILED, Outcome.NOT_STARTED], interrupted=True,
                   exit_code=130, error="interrupted")
    return lines


def test_a_run_as_events() -> None:
    lines = a_run()
    assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    assert all(e["run_id"] == "run42" and STAMP.match(e["time"]) for e in lines)
    kinds = [e["event"] for e in lines]
    assert kinds[:2] == ["run-start", "plan"] and kinds[-1] == "summary"
    assert "warning" in kinds and "note" in kinds
    steps = [(e["event"], e["subject"], e["name"], e["step"]) for e in lines if e["event"].startswith("step-")]
    assert steps == [
        ("step-start", "host", "esx-01", "enter-maintenance"), ("step-end", "host", "esx-01", "enter-maintenance"),
        ("step-start", "host", "esx-01", "wait-reconnect"), ("step-end", "host", "esx-01", "wait-reconnect"),
        ("step-start", "host", "esx-01", "power-on"), ("step-end", "host", "esx-01", "power-on"),
        ("step-start", "host", "esx-01", "power-on"), ("step-end", "host", "esx-01", "power-on"),
        ("step-start", "vm", "a", "check"), ("step-end", "vm", "a", "check"),
        ("step-start", "vm", "a", "reconfigure"), ("step-end", "vm", "a", "reconfigure"),
        ("step-start", "vm", "b", "check"), ("step-end", "vm", "b", "check"),
    ]  # fmt: skip
    ends = [e["result"] for e in lines if e["event"] == "step-end"]
    assert ends[-1] == "failed" and set(ends[:-1]) == {"ok"}
    finished = {(e["subject"], e["name"]): e["outcome"] for e in lines if e["event"] == "finished"}
    assert finished == {("host", "esx-01"): "changed", ("vm", "a"): "changed", ("vm", "b"): "failed",
                        ("vm", "c"): "not-started"}
    summary = lines[-1]
    assert summary["vms"] == {"changed": 1, "unchanged": 0, "failed": 1, "skipped": 0, "not_started": 1}
    assert summary["exit_code"] == 130 and summary["interrupted"] is True


def test_a_vm_that_only_checked_is_unchanged_and_an_interrupted_one_says_so() -> None:
    stream, lines = recorded()
    stream.vm_step("a", "check", None)
    stream.vm_step("a", "done", 100)
    stream.vm_step("b", "check", None)
    stream.vm_step("b", "power-off", None)
    stream.vm_step("b", "interrupted", None)
    stream.vm_step("c", "interrupted", None)
    outcomes = {e["name"]: (e["outcome"], e.get("message")) for e in lines if e["event"] == "finished"}
    assert outcomes == {"a": ("unchanged", None), "b": ("changed", "interrupted"), "c": ("not-started", "interrupted")}
    assert [e["result"] for e in lines if e["event"] == "step-end" and e["name"] == "b"] == ["ok", "interrupted"]


def test_numbers_follow_the_write_order_under_threads() -> None:
    stream, lines = recorded()
    workers = [threading.Thread(target=lambda n=n: [stream.vm_step(f"vm-{n}-{i}", step, None)
                                                    for i in range(50) for step in ("check", "reconfigure", "done")])
               for n in range(8)]  # fmt: skip
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    assert sum(1 for e in lines if e["event"] == "finished") == 400


def test_fanout_gives_the_display_and_the_stream_the_same_calls() -> None:
    seen: list[tuple[str, ...]] = []

    class Sink:
        def vm_step(self, vm: str, step: str, percent: int | None) -> None:
            seen.append(("vm", vm, step))

        def host_step(self, host: str, step: str, detail: str | None) -> None:
            seen.append(("host", host, step))

        def vms_planned(self, vms: Any) -> None:
            seen.append(("planned", *vms))

    both = Fanout(Sink(), Sink())
    both.vms_planned(["a"])
    both.host_step("h", "reboot", None)
    both.vm_step("a", "done", 100)
    assert seen == [("planned", "a")] * 2 + [("host", "h", "reboot")] * 2 + [("vm", "a", "done")] * 2


# ------------------------------------------------------------------------------------------ schema


def test_committed_event_schema_is_generated_from_the_types() -> None:
    path = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "event.schema.json"
    assert path.read_text(encoding="utf-8") == schemas.render_events(), "run: python -m vgpuctl.reports.schemas"


def test_every_event_type_appears_and_validates() -> None:
    lines = a_run()
    assert {e["event"] for e in lines} == {e.event for e in EVENTS}
    for line in lines:
        jsonschema.validate(line, SCHEMA)


@pytest.mark.parametrize(("event", "old", "new"), [("run-start", "run_id", "run"), ("step-start", "step", "action"),
                                                   ("finished", "outcome", "status"), ("summary", "exit_code", "rc"),
                                                   ("plan", "summary", "counts")])
def test_a_renamed_key_fails(event: str, old: str, new: str) -> None:
    line = copy.deepcopy(next(e for e in a_run() if e["event"] == event))
    jsonschema.validate(line, SCHEMA)
    line[new] = line.pop(old)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(line, SCHEMA)


def test_an_unknown_event_type_fails() -> None:
    line = next(e for e in a_run() if e["event"] == "note")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**line, "event": "gossip"}, SCHEMA)


# ------------------------------------------------------------------------------------------ the option


def test_events_on_stdout_and_a_json_document_collide(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("apiVersion: vgpuctl/v1\n")
    for args in (["-o", "json", "apply", "-f", str(inv), "--events", "-"],
                 ["plan", "-f", str(inv), "--events", "-", "-o", "json"]):
        result = CliRunner().invoke(app, args, env={"VGPUCTL_URL": "127.0.0.1:1", "VGPUCTL_USERNAME": "u",
                                                    "VGPUCTL_PASSWORD": "p"})
        assert result.exit_code == 1, result.output
        assert "--events - and -o json" in result.stderr
        assert json.loads(result.stdout)["error"]["type"] == "UsageError"  # the one document stdout holds
