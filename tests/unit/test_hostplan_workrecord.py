"""Work records and leases, the pure parts: a record read back from its vCenter attribute, the plan line it
becomes, the host counted as usable once its unfinished work is planned, the steps a record lists, and when a
lease is live by vCenter's clock.
"""

from __future__ import annotations

import json

import pytest

from vgpuctl.domain import ChangeKind, EvacuationKind, Phase
from vgpuctl.hosts import plan as hostplan
from vgpuctl.hosts.apply import planned_steps, remaining_steps
from vgpuctl.hosts.predict import predict_observed
from vgpuctl.hosts.work import WORK_FIELD, HostRecord, describe_record, parse_record
from vgpuctl.model import EvacuationAction, HostChange, Observed, ObservedHost
from vgpuctl.vsphere.workrecord import LeaseInfo, live_leases, parse_lease

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
        HostChange("h", ChangeKind.NVLINK, "host", "enabled", "disabled", Phase.REBOOT),
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
