"""`vgpuctl exporter` without vCenter: the collector reads once per interval whatever the number of scrapes, a
failed read is `up 0` with its reason and one logged line, a refused counter query keeps the last figures; the
prometheus_client exposition; bad --listen and a port in use are one line; docs/exporter.md lists every metric
with its labels; the Grafana dashboard is the generated one and names only metrics the exporter serves."""

from __future__ import annotations

import json
import logging
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from vgpuctl.cli.exporter import parse_listen
from vgpuctl.cli.main import app
from vgpuctl.cli.scrape import FarmCollector, Schedule, UsageResult, describe
from vgpuctl.errors import ConnectionFailure, UsageError
from vgpuctl.reports.dashboard import dashboard, dashboard_text
from vgpuctl.reports.metrics import METRICS, FarmRead, Kind, PlanState
from vgpuctl.reports.plan import PlanSummary
from vgpuctl.reports.status import StatusReport

pytestmark = pytest.mark.unit
prometheus_client = pytest.importorskip("prometheus_client", reason="the exporter extra (prometheus_client)")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = Schedule(60.0, 300.0, 600.0)


def farm_read() -> FarmRead:
    return FarmRead(StatusReport("DC0", "8.0.3.0", [], []), {}, 7, 0.5, 1_800_000_000.0)


class Reads:
    """A fake farm read: each call takes the next outcome (an exception raises)."""

    def __init__(self, *outcomes: Any):
        self.outcomes, self.calls = list(outcomes), 0

    def __call__(self) -> tuple[FarmRead, UsageResult]:
        self.calls += 1
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[no-any-return]


def good(refused: str | None = None) -> tuple[FarmRead, UsageResult]:
    return farm_read(), UsageResult(300.0, {}, refused)


def no_plan(path: Path) -> PlanState:
    raise AssertionError(path)


def exposition(collector: FarmCollector) -> dict[str, list[Any]]:
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = prometheus_client.generate_latest(registry).decode()
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_scrapes_are_served_from_the_last_read_without_reading_again() -> None:
    reads = Reads(good())
    collector = FarmCollector(reads, no_plan, SCHEDULE)
    collector.refresh()
    for _ in range(50):
        series = exposition(collector)
    assert reads.calls == 1
    assert series["vgpuctl_up"] == [({}, 1.0)] and series["vgpuctl_read_round_trips"] == [({}, 7.0)]
    assert series["vgpuctl_reads_total"] == [({}, 1.0)]  # a counter, exposed with its _total


def test_before_the_first_read_up_is_0_with_a_reason() -> None:
    series = exposition(FarmCollector(Reads(good()), no_plan, SCHEDULE))
    assert series["vgpuctl_up"] == [({}, 0.0)]
    assert series["vgpuctl_read_error_info"] == [({"reason": "the first read of vCenter has not finished yet"}, 1.0)]


def test_a_failed_read_is_up_0_its_reason_and_one_logged_line(caplog: pytest.LogCaptureFixture) -> None:
    down = ConnectionFailure("cannot connect to vCenter at https://vc/sdk: [Errno 111] Connection refused")
    reads = Reads(good(), down, down, down, good())
    collector = FarmCollector(reads, no_plan, SCHEDULE)
    with caplog.at_level(logging.WARNING, logger="vgpuctl.exporter"):
        for _ in range(4):
            collector.refresh()
        series = exposition(collector)
        assert series["vgpuctl_up"] == [({}, 0.0)]
        assert series["vgpuctl_read_error_info"] == [({"reason": str(down)}, 1.0)]
        assert series["vgpuctl_read_failures_total"] == [({}, 3.0)]
        collector.refresh()
    assert exposition(collector)["vgpuctl_up"] == [({}, 1.0)]
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"reading vCenter failed: {down}", "reading vCenter works again"]


def test_an_unexpected_exception_in_a_read_does_not_end_the_exporter() -> None:
    collector = FarmCollector(Reads(KeyError("moid")), no_plan, SCHEDULE)
    collector.refresh()
    assert collector.state.error == "KeyError: 'moid'"
    assert describe(UsageError("plain")) == "plain" and describe(OSError()) == "OSError"
    from pyVmomi import vim

    assert describe(vim.fault.NoPermission(msg="Permission to perform this operation was denied.")) == (
        "vim.fault.NoPermission: Permission to perform this operation was denied.")


def test_a_refused_counter_query_keeps_the_last_good_figures(caplog: pytest.LogCaptureFixture) -> None:
    collector = FarmCollector(Reads(good(), good("vCenter refused QueryPerf: NoPermission: no"),
                                    good("vCenter refused QueryPerf: NoPermission: no"), good()), no_plan, SCHEDULE)
    with caplog.at_level(logging.WARNING, logger="vgpuctl.exporter"):
        collector.refresh()
        first = collector.state.usage
        collector.refresh()
        collector.refresh()
    assert first is not None and collector.state.usage is not None
    assert collector.state.usage.read_at == first.read_at and collector.state.usage.error is not None
    assert [r.getMessage() for r in caplog.records] == [
        "vCenter refused QueryPerf: NoPermission: no; serving the last good GPU figures"]
    collector.refresh()
    assert collector.state.usage.error is None and collector.state.usage.read_at >= first.read_at  # type: ignore


def test_inventories_are_planned_on_their_own_schedule(tmp_path: Path) -> None:
    planned: list[Path] = []
    summary = PlanSummary(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

    def plan(path: Path) -> PlanState:
        planned.append(path)
        if len(planned) == 1:
            return PlanState(str(path), summary, False, 1.0)
        raise UsageError(f"{path}:1:1: bad")

    inventory = tmp_path / "inv.yaml"
    collector = FarmCollector(Reads(good()), plan, Schedule(60.0, 300.0, 0.0), [inventory])
    assert collector.state.plans[0].error == "not planned yet"
    collector.refresh()
    assert collector.state.plans[0].error is None
    collector.refresh()  # plan interval 0: due again; it fails and keeps the last counts
    assert collector.state.plans[0].error == f"{inventory}:1:1: bad" and collector.state.plans[0].summary == summary
    slow = FarmCollector(Reads(good()), plan, Schedule(60.0, 300.0, 3600.0), [inventory])
    slow.refresh()
    slow.refresh()
    assert len(planned) == 3  # once for `slow`: not due again within the hour


def test_the_thread_reads_until_stopped() -> None:
    collector = FarmCollector(Reads(good()), no_plan, Schedule(0.01, 300.0, 600.0))
    thread = collector.start()
    while collector.state.reads < 3:
        thread.join(0.01)
    collector.stop()
    thread.join()
    assert not thread.is_alive()


# ------------------------------------------------------------------------------------------ the command line


@pytest.mark.parametrize(("text", "parsed"), [("127.0.0.1:9733", ("127.0.0.1", 9733)), (":9733", ("0.0.0.0", 9733)),
                                              ("[::1]:80", ("::1", 80))])
def test_listen_addresses(text: str, parsed: tuple[str, int]) -> None:
    assert parse_listen(text) == parsed


@pytest.mark.parametrize("text", ["9733", "host:", "host:port", ":70000"])
def test_a_bad_listen_address_is_one_line(text: str, no_vgpuctl_env: None) -> None:
    result = CliRunner().invoke(app, ["exporter", "--listen", text], env={"VGPUCTL_URL": "https://vc/sdk"})
    assert result.exit_code == 1
    assert result.output.strip() == f"error: --listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9733 or :9733"


def test_a_port_in_use_is_one_line_and_exit_1(no_vgpuctl_env: None) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        env = {"VGPUCTL_URL": "https://vc.invalid/sdk", "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "p"}
        result = CliRunner().invoke(app, ["exporter", "--listen", f"127.0.0.1:{port}"], env=env)
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == f"error: --listen 127.0.0.1:{port}: the address is in use"
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--interval", "soon"], "error: --interval 'soon': expected a duration such as 30m, 12h or 7d"),
    (["--usage-window", "2h"], "error: --usage-window 2h: at most 1h (the hosts keep their 20 s samples an hour)"),
])
def test_bad_durations_are_one_line(args: list[str], message: str, no_vgpuctl_env: None) -> None:
    result = CliRunner().invoke(app, ["exporter", *args])
    assert result.exit_code == 1 and result.output.strip() == message


def test_a_bad_inventory_is_located_before_anything_is_served(tmp_path: Path, no_vgpuctl_env: None) -> None:
    bad = tmp_path / "inv.yaml"
    bad.write_text("hosts: [\n")
    result = CliRunner().invoke(app, ["exporter", "-f", str(bad)])
    assert result.exit_code == 1 and result.output.startswith(f"{bad}:")


# ------------------------------------------------------------------------------------------ docs and dashboard


def test_docs_list_every_metric_with_its_type_and_labels() -> None:
    text = (ROOT / "docs" / "exporter.md").read_text()
    rows = {m[1]: (m[2], m[3]) for m in re.finditer(r"^\| `(vgpuctl_\w+)` \| (\w+) \| ([^|]*) \|", text, re.M)}
    assert set(rows) == set(METRICS)
    for name, spec in METRICS.items():
        kind, labels = rows[name]
        assert kind == spec.kind.value, name
        assert re.findall(r"`(\w+)`", labels) == list(spec.labels), name


def test_the_committed_dashboard_is_the_generated_one() -> None:
    committed = (ROOT / "dashboards" / "vgpuctl.json").read_text()
    assert committed == dashboard_text(), "run: python -m vgpuctl.reports.dashboard dashboards/vgpuctl.json"


def expressions(model: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in model["panels"] for t in p.get("targets", [])]


def test_every_dashboard_expression_names_metrics_the_exporter_serves() -> None:
    model = dashboard()
    exprs = expressions(model) + [v["query"]["query"] for v in model["templating"]["list"] if v["type"] == "query"]
    assert len(exprs) > 20
    served = set(METRICS)
    for expr in exprs:
        names = re.findall(r"\bvgpuctl_\w+", expr)
        assert names, expr
        for name in names:
            assert name in served, f"{name} in {expr!r} is not a metric the exporter serves"
            for label in re.findall(rf"{name}\{{([^}}]*)\}}", expr):
                for key in re.findall(r"(\w+)\s*=~?", label):
                    assert key in (*METRICS[name].labels, "job", "instance"), (name, key)
        for grouping in re.findall(r"\bby \(([^)]*)\)", expr):
            labels = {lab for n in names for lab in METRICS[n].labels}
            assert {g.strip() for g in grouping.split(",")} <= labels, expr


def test_the_dashboard_is_a_grafana_dashboard_model() -> None:
    model = json.loads((ROOT / "dashboards" / "vgpuctl.json").read_text())
    assert {"uid", "title", "schemaVersion", "panels", "templating", "time"} <= set(model)
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))
    for panel in model["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24 and pos["h"] > 0
        assert panel["type"] in ("row", "stat", "timeseries", "table")
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    counters = [n for n, s in METRICS.items() if s.kind == Kind.COUNTER]
    for expr in expressions(model):  # a counter is only read as a rate or an increase
        for name in counters:
            if name in expr:
                assert re.search(rf"(rate|increase)\({name}\[", expr), expr
