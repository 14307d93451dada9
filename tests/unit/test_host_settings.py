"""The host settings registry (vgpuctl.hosts.settings) is complete and the settings are self-contained.

- every field observe fills (ObservedHost, ObservedGpu) and every host fact (HostFacts, GpuFacts) is read by a
  setting or listed below with what reads it instead: a new field is never silently left out of planning, or
  out of a saved plan's drift check;
- what the settings declare exists (bulk-read properties, fields), and what a setting plans from is in the
  saved plan's digest;
- every ChangeKind has one owner, and outside the settings package no product module names a setting's change
  kinds: host planning, apply, explain, export, status and the plan file loop over the registry.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from vgpuctl import planfile
from vgpuctl.domain import ChangeKind
from vgpuctl.hosts.facts import GpuFacts, HostFacts
from vgpuctl.hosts.settings import SETTING_KINDS, SETTINGS, apply_steps, setting_for_key, setting_of
from vgpuctl.model import ObservedGpu, ObservedHost
from vgpuctl.vsphere.observe import HOST_PROPS

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "vgpuctl"

# Observed fields no setting reads, and what reads them instead.
NOT_SETTINGS = {
    ObservedHost: {
        "name": "identity",
        "moid": "identity",
        "cluster": "where the host is: host entries by cluster, evacuation targets",
        "connection_state": "whether the host can be read and changed (evacuation, apply, status)",
        "in_maintenance": "evacuation and resuming unfinished work",
        "power_state": "whether VMs can be placed or migrated there",
        "api_version": "the vSphere API version the host speaks (profiles, limits)",
        "offered_profiles": "VM placement; predicted from the GPU modes after host changes",
        "profiles": "VM placement (profile sizes)",
        "max_vgpus_per_vm": "VM checks (vSphere's per-VM limit)",
        "resource_pool_moid": "VM clones",
        "graphics_manager_moid": "vCenter calls",
        "environment_browser_moid": "vCenter calls (QueryConfigTarget, NVLink sets)",
        "custom_values": "work records and leases (vgpuctl.hosts.work, vgpuctl.vsphere.workrecord)",
        "device_groups": "VM apply: the NVLink device group names a grouped add attaches (vgpuctl.vms.apply)",
        "nvlink_from_shell": "saved plans: NVLink sets the shell gave are left out of the farm's digest (planfile)",
    },
    ObservedGpu: {
        "vms": "VM placement and status",
        "nvlink_set": "VM placement (NVLink device groups)",
        "nvlink_groups": "VM placement (NVLink device groups)",
        "nvlink_profiles": "VM placement (NVLink device groups)",
        "numa_node": "GPUDirect RDMA: the GPU's NUMA node against its NIC's (vgpuctl.vms.gpudirect)",
        "pci_root": "GPUDirect RDMA: the GPU's PCI root against its NIC's (vgpuctl.vms.gpudirect)",
    },
    HostFacts: {
        "host": "identity",
        "gpus": "the GPUs' facts (GpuFacts, checked on their own)",
        "shell": "whether the shell facts were read (PlanInput.shell)",
        "boot_time": "reboot detection in apply",
        "warnings": "messages: why facts are missing",
        "unread": "why facts are missing, typed: one warning per cause naming the hosts (unread_warnings)",
        "shell_error": "why the ESXi shell could not be read: plan refuses what needs it, naming that",
        "shell_deferred": "a plan left the shell to the apply that starts the SSH service (hosts.plan.shell_problems)",
    },
    GpuFacts: {
        "pci_id": "identity",
        "index": "identity (nvidia-smi's)",
        "name": "identity (nvidia-smi's)",
        "nvlink_peers": "NVLink sets for VM placement (hosts.facts.adopt_nvlink_sets)",
    },
}


def _read(kind: type) -> set[str]:
    attr = {ObservedHost: "host_fields", ObservedGpu: "gpu_fields", HostFacts: "facts", GpuFacts: "gpu_facts"}[kind]
    return {f for s in SETTINGS for f in getattr(s.observes, attr)}


@pytest.mark.parametrize("kind", list(NOT_SETTINGS), ids=lambda k: k.__name__)
def test_every_observed_field_is_read_by_a_setting_or_listed(kind: type) -> None:
    fields = {f.name for f in dataclasses.fields(kind)}
    read, listed = _read(kind), set(NOT_SETTINGS[kind])
    assert fields - read - listed == set(), "read by a setting (its `observes`) or listed in NOT_SETTINGS"
    assert read - fields == set(), "settings declare fields that do not exist"
    assert listed - fields == set(), "NOT_SETTINGS lists fields that do not exist"
    assert read & listed == set(), "a field read by a setting is not also listed as read elsewhere"


def test_settings_read_what_the_bulk_read_reads() -> None:
    for s in SETTINGS:
        assert set(s.observes.properties) <= set(HOST_PROPS), s.key


def test_what_a_setting_plans_from_is_in_the_saved_plan_digest() -> None:
    for s in SETTINGS:
        assert set(s.observes.host_fields) <= set(s.drift_fields), s.key
        assert set(s.drift_fields) <= set(planfile.HOST_FIELDS), s.key


def test_every_change_kind_has_one_owner() -> None:
    assert len(SETTING_KINDS) == len(set(SETTING_KINDS))
    orchestration = {ChangeKind.EVACUATE, ChangeKind.RESUME}
    assert set(SETTING_KINDS) | orchestration == set(ChangeKind)
    assert all(setting_of(k) is None for k in orchestration)
    for s in SETTINGS:
        assert s.offer_kinds <= set(s.kinds), s.key
        assert all(s.step(k) in apply_steps() for k in s.kinds), s.key


def test_settings_have_distinct_keys_and_own_their_display_keys() -> None:
    keys = [s.key for s in SETTINGS]
    assert len(keys) == len(set(keys))
    for key, owner in (("graphics.default_type", "graphics"), ("gpus[all].mode", "gpus"), ("nvlink", "nvlink"),
                       ("scheduler.policy", "scheduler"), ("ssh.user", None), ("maintenance.evacuate", None)):
        found = setting_for_key(key)
        assert (found.key if found is not None else None) == owner, key


def test_only_the_settings_name_their_change_kinds() -> None:
    """Outside vgpuctl/hosts/settings/ (and domain.py, which defines them) no module names a setting's kind:
    a new setting is one module there, not branches elsewhere."""
    names = "|".join(k.name for k in SETTING_KINDS)
    pattern = re.compile(rf"ChangeKind\.({names})\b")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("hosts/settings/") or rel == "domain.py":
            continue
        found += [f"{rel}: {m.group(0)}" for m in pattern.finditer(path.read_text(encoding="utf-8"))]
    assert found == []


def test_only_the_settings_spell_a_setting_kind_as_text() -> None:
    """No product module compares a change kind with its string (`kind == "mig"`)."""
    values = "|".join(re.escape(k.value) for k in ChangeKind)
    pattern = re.compile(rf"""kind\s*(==|!=|in)\s*\(?\s*["']({values})["']""")
    found = [
        f"{path.relative_to(PACKAGE)}: {m.group(0)}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for m in pattern.finditer(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_a_hosts_entry_is_made_of_the_settings_parts() -> None:
    from vgpuctl.inventory import HostSpec

    keys = [s.key for s in SETTINGS]
    assert list(HostSpec.model_fields) == ["cluster", "name", *keys, "ssh", "maintenance"]


def test_a_new_setting_becomes_an_inventory_key_without_touching_the_inventory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the recipe in docs/architecture.md promises: the registry's parts make the entry's schema."""
    from vgpuctl.hosts import settings
    from vgpuctl.inventory import schema as inventory
    from vgpuctl.strictmodel import StrictModel

    class SriovSpec(StrictModel):
        virtual_functions: int = 0

    class Sriov:
        key, schema, default = "sriov", SriovSpec | None, None

    monkeypatch.setattr(inventory, "SETTINGS", (*settings.SETTINGS, Sriov()))
    spec = inventory._host_spec().model_validate({"name": "esx-01", "sriov": {"virtual_functions": 8}})
    assert spec.sriov.virtual_functions == 8
    with pytest.raises(ValueError, match="virtual_function"):
        inventory._host_spec().model_validate({"name": "esx-01", "sriov": {"virtual_function": 8}})


def test_host_show_lists_every_setting_the_report_has() -> None:
    from vgpuctl.hosts.status import host_status
    from vgpuctl.reports.status import SettingValue

    host = ObservedHost("esx-01", module_options="NVreg_NvLinkDisable=1")
    report = host_status(host, None)
    assert [v.setting for v in report.settings] == [
        "graphics.default_type", "graphics.assignment_policy", "nvlink", "scheduler"
    ]
    assert (report.nvlink, report.scheduler) == ("disabled", "best-effort")
    text = report.render_text()
    assert "  nvlink: disabled" in text and "sriov" not in text
    report.settings.append(SettingValue("sriov.virtual_functions", "0", "8"))  # a setting the text has no line for
    assert "  sriov.virtual_functions: 0 (8 after reboot)\n" in report.render_text()
