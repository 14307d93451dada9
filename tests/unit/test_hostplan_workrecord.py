"""Work records and leases, the pure parts: a record read back from its vCenter attribute, the plan line it
becomes, the host counted as usable once its unfinished work is planned, the steps a record lists, and when a
lease is live by vCenter's clock.
"""

from __future__ import annotations

import json

import kinds
import pytest

from vgpuctl.domain import ChangeKind, EvacuationKind, Phase
from vgpuctl.farm.predict import predict_observed
from vgpuctl.hosts import plan as hostplan
from vgpuctl.hosts.apply import planned_steps, remaining_steps
from vgpuctl.hosts.evacuation import gone_from_record, resume_change
from vgpuctl.model import EvacuationAction, HostChange, Observed, ObservedHost, ObservedVm
from vgpuctl.records.work import WORK_FIELD, HostRecord, describe_record, parse_record, read_record, record_problem
from vgpuctl.vsphere.workrecord import LeaseInfo, lease_problems, live_leases, parse_lease, read_lease

pytestmark = pytest.mark.unit

RECORD = {
    "host": "ignored",
    "run": "ab12cd34ef56",
    "phase": "wait-reconnect",
    "entered_maintenance": True,
    "vms": [
        {"name": "train-01", "moid": "vm-1", "after": "power-on"},
        {"name": "mig-01", "moid": "vm-2", "after": "vm-change"},
    ],
    "steps": ["enter-maintenance", "nvlink -> disabled", "reboot", "wait-reconnect", "verify"],
    "a_future_field": 1,
}


def test_a_record_reads_back_and_becomes_one_plan_line() -> None:
    rec = parse_record("esx-01", json.dumps(RECORD))
    assert rec is not None and rec.host == "esx-01" and rec.run == "ab12cd34ef56"
    assert describe_record(rec) == (
        "unfinished work of run ab12cd34ef56 (stopped at wait-reconnect): exit maintenance; power on train-01; "
        "reconfigure and power on mig-01"
    )
    assert parse_record("esx-01", "") is None
    assert parse_record("esx-01", "{not json") is None  # unreadable: ignored with a warning, never a crash


def test_unfinished_work_is_a_pending_change_and_the_host_is_usable_for_vms() -> None:
    host = ObservedHost("esx-01", in_maintenance=True, custom_values={WORK_FIELD: json.dumps(RECORD)})
    observed = Observed(hosts={"esx-01": host})
    plan = hostplan.plan_hosts([], observed, resume={"esx-01"})
    (change,) = plan.changes
    assert (change.kind, change.disruptive) == (ChangeKind.RESUME, False)
    assert str(change.old).startswith("unfinished work of run ab12cd34ef56")
    predicted = predict_observed(observed, plan.changes)
    assert not predicted.hosts["esx-01"].in_maintenance and observed.hosts["esx-01"].in_maintenance


def test_planned_steps_are_in_apply_order() -> None:
    changes = [
        HostChange("h", ChangeKind.EVACUATE, "vm-a", "poweredOn", EvacuationAction(EvacuationKind.RESTORE_AFTER)),
        HostChange("h", kinds.NVLINK, "host", "enabled", "disabled", Phase.REBOOT),
    ]
    assert planned_steps(changes) == [
        "evacuate vm-a",
        "enter-maintenance",
        "nvlink -> disabled",
        "reboot",
        "wait-reconnect",
        "verify",
        "exit-maintenance",
        "power-on",
    ]
    steps = planned_steps(changes)
    assert remaining_steps(steps, "module-options") == steps[2:]
    assert remaining_steps(steps, "wait-reconnect") == ["wait-reconnect", "verify", "exit-maintenance", "power-on"]
    assert remaining_steps(steps, "graphics") == steps  # not a phase of this host: nothing is dropped


def test_a_lease_is_live_until_its_ttl_passes_by_vcenter_time() -> None:
    info = LeaseInfo("run1", "ops@box pid 7", since=1000.0, renewed=1030.0, ttl_s=60.0)
    assert info.live(1089.9) and not info.live(1090.0)
    assert info.describe().startswith("run run1 by ops@box pid 7 since ")
    text = json.dumps(info.__dict__)
    assert parse_lease(text) == info and parse_lease("") is None and parse_lease("garbage") is None


def test_live_leases_reads_the_clock_only_when_a_host_has_a_lease() -> None:
    class Clockless:
        def invoke(self, *_: object) -> object:
            raise AssertionError("no CurrentTime without a lease value")

    assert live_leases(Clockless(), {"esx-01": "", "esx-02": ""}) == {}


def test_host_records_default_to_power_on_after() -> None:
    rec = HostRecord("h", vms=[{"name": "a", "moid": "vm-1"}])
    assert describe_record(rec) == "unfinished work of run ?: power on a"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('{"vms": 7}', "vms: Input should be a valid array"),
        ('{"vms": [{"name": "a"}]}', "vms.0.moid: Field required"),
        ('{"vms": [{"name": "a", "moid": ""}]}', "vms.0.moid: String should have at least 1 character"),
        ('{"vms": [{"name": "a", "moid": "vm-1", "after": "explode"}]}', "vms.0.after: Input should be"),
        ('{"entered_maintenance": "yes"}', "entered_maintenance: Input should be a valid boolean"),
        ('{"updated": true}', "updated: Input should be a valid number"),
        ('{"steps": "reboot"}', "steps: Input should be a valid array"),
        ("[1, 2]", "the value: Input should be an object"),
        ("{not json", "not JSON"),
        ("[" * 5000 + "]" * 5000, "not JSON"),
    ],
)
def test_a_value_that_is_no_work_record_says_what_is_wrong(value: str, why: str) -> None:
    record, problem = read_record("esx-01", value)
    assert record is None and problem is not None and problem.startswith(why), problem
    line = record_problem("esx-01", problem)
    assert line.startswith("host esx-01: its vgpuctl.work attribute is no vgpuctl work record (")
    assert "`vgpuctl host forget-work esx-01`" in line and "\n" not in line


def test_a_store_keeps_records_and_the_hosts_whose_value_is_none() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from workstore import MemoryWorkStore

    store = MemoryWorkStore({"esx-01": json.dumps(RECORD), "esx-02": '{"vms": 7}', "esx-03": ""})
    assert store.hosts() == ["esx-01"]
    assert list(store.problems) == ["esx-02"] and "forget-work esx-02" in store.problems["esx-02"]


def test_vms_a_record_names_that_are_gone_are_left_out_of_its_plan_line_with_a_warning() -> None:
    host = ObservedHost("esx-01", custom_values={WORK_FIELD: json.dumps(RECORD)})
    observed = Observed(hosts={"esx-01": host}, vms={"train-01": ObservedVm("train-01", moid="vm-1")})
    change = resume_change(host, {"vm-1"})
    assert "power on train-01" in change.old and "mig-01" not in change.old
    assert gone_from_record(host, {"vm-1"}) == [
        "host esx-01: VM mig-01 (vm-2) of its unfinished work no longer exists: apply drops it from the work record"
    ]
    plan = hostplan.plan_hosts([], observed, resume={"esx-01"})
    assert plan.warnings == gone_from_record(host, {"vm-1"})


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('{"run": "r", "holder": "h", "since": 1, "renewed": "x", "ttl_s": 60}', "renewed: Input should be"),
        ('{"run": "r", "holder": "h", "since": 1, "renewed": 2, "ttl_s": 0}', "ttl_s: Input should be greater"),
        ('{"run": "r", "holder": "h", "since": 1, "renewed": 2, "ttl_s": "inf"}', "ttl_s: Input should be"),
        ('{"holder": "h", "since": 1, "renewed": 2, "ttl_s": 60}', "run: Field required"),
    ],
)
def test_a_lease_value_that_is_no_description_describes_nothing(value: str, why: str) -> None:
    info, problem = read_lease(value)
    assert info is None and problem is not None and problem.startswith(why), problem
    assert parse_lease(value) is None
    (line,) = lease_problems({"esx-01": value})
    assert line.startswith("host esx-01: its vgpuctl.lease attribute is no lease description (")


def test_a_record_keeps_the_ssh_service_a_run_started() -> None:
    """The SSH service's state before a run started it is part of the record: a record holding only it is no host
    work to resume (the later run just stops the service again); a malformed one is refused as any record is."""
    record, why = read_record("esx-01", '{"run": "r1", "ssh": {"running": false, "policy": "off"}}')
    assert why is None and record is not None
    assert record.ssh == {"running": False, "policy": "off"} and record.only_ssh
    record, why = read_record("esx-01", '{"run": "r1", "phase": "reboot", "ssh": {"running": false, "policy": "off"}}')
    assert record is not None and record.ssh is not None and not record.only_ssh
    record, why = read_record("esx-01", '{"run": "r1", "ssh": {"running": "no"}}')
    assert record is None and why is not None and why.startswith("ssh.")
