"""The host settings registry (vgpuctl.settings) is complete and the settings are self-contained.

- every field observe fills (ObservedHost, ObservedGpu) is read by a setting or listed below with what reads it
  instead: a new field is never silently left out of planning, or out of a saved plan's drift check;
- every fact lands under a name of its own, and the registry gathers what each setting declares: the bulk read's
  properties, the one nvidia-smi GPU query, the shell commands and the per-host calls;
- every change kind has one owner, and outside the settings package no product module names a setting: host
  planning, apply, explain, export, status and the plan file loop over the registry;
- every setting is in the places docs/architecture.md's recipe names: its module, its section of its doc page,
  its key in inventory.example.yaml, and a parser case for each shell fact it declares.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from floorsmod import floors

from vgpuctl import planfile, settings
from vgpuctl.domain import ChangeKind
from vgpuctl.esxi.parsers import parse_query_csv
from vgpuctl.inventory import HostSpec
from vgpuctl.inventory import schema as inventory
from vgpuctl.model import ObservedGpu, ObservedHost
from vgpuctl.reports.host import SettingValue, host_status
from vgpuctl.settings import (
    GPU_SETTINGS,
    SETTING_KINDS,
    SETTINGS,
    api_facts,
    apply_steps,
    gpu_queries,
    gpu_query_fields,
    host_properties,
    setting_for_key,
    setting_of,
    shell_facts,
)
from vgpuctl.settings.base import HostSetting, PlanInput
from vgpuctl.settings.facts import MODULE_PARAMETERS, TOPOLOGY, VGPU_CAPABILITIES, GpuQuery
from vgpuctl.settings.pergpu import GpuList
from vgpuctl.strictmodel import StrictModel
from vgpuctl.vsphere import observe, readlist

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "vgpuctl"

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
        "image_config_manager_moid": "vCenter calls (the installed packages: the exporter's vGPU Manager)",
        "environment_browser_moid": "vCenter calls (QueryConfigTarget, NVLink sets)",
        "custom_values": "work records and leases (vgpuctl.records.work, vgpuctl.vsphere.workrecord)",
        "device_groups": "VM apply: the NVLink device group names a grouped add attaches (vgpuctl.vms.apply)",
        "properties": "the values of bulk-read properties a setting declares beyond the farm model's (its own)",
        "nvlink_from_shell": "saved plans: NVLink sets the shell gave are left out of the farm's digest (planfile)",
    },
    ObservedGpu: {
        "vms": "VM placement and status",
        "nvlink_set": "VM placement (NVLink device groups)",
        "nvlink_groups": "VM placement (NVLink device groups)",
        "nvlink_profiles": "VM placement (NVLink device groups)",
        "numa_node": "GPUDirect RDMA: the GPU's NUMA node against its NIC's (vgpuctl.vms.gpudirect)",
        "pci_root": "GPUDirect RDMA: the GPU's PCI root against its NIC's (vgpuctl.vms.gpudirect)",
        "types_may_mix": "VM placement: the driver's word on types of one size sharing a GPU (from the shell)",
    },
}
# Facts every gathering reads that no setting declares, and what reads them.
SHARED_READERS = {
    TOPOLOGY.name: "placement's NVLink sets where vCenter lists no device groups (hosts.facts.adopt_nvlink_sets)",
    MODULE_PARAMETERS.name: "host planning: a setting that writes an undeclared module parameter is refused",
    VGPU_CAPABILITIES.name: "placement: types of one size on one GPU (hosts.facts.adopt_vgpu_capabilities)",
}
# Product modules outside vgpuctl/settings/ that may import one setting's module, and why.
NAMES_A_SETTING = {
    "experiment/facts.py": "an experiment compares NVLink on and off: it reads the inventory's nvlink setting",
}
SETTING_MODULES = {"graphics", "gpumodes", "ecc", "nvlink", "scheduler", "sriov", "pvrdma", "vgpu_manager"}


def _read(kind: type) -> set[str]:
    attr = {ObservedHost: "host_fields", ObservedGpu: "gpu_fields"}[kind]
    return {f for s in SETTINGS for f in getattr(s.reads, attr)}


@pytest.mark.parametrize("kind", list(NOT_SETTINGS), ids=lambda k: k.__name__)
def test_every_observed_field_is_read_by_a_setting_or_listed(kind: type) -> None:
    fields = {f.name for f in dataclasses.fields(kind)}
    read, listed = _read(kind), set(NOT_SETTINGS[kind])
    assert fields - read - listed == set(), "read by a setting (its `reads`) or listed in NOT_SETTINGS"
    assert read - fields == set(), "settings declare fields that do not exist"
    assert listed - fields == set(), "NOT_SETTINGS lists fields that do not exist"
    assert read & listed == set(), "a field read by a setting is not also listed as read elsewhere"


def _all_settings() -> list[Any]:
    return [s for s in SETTINGS if not isinstance(s, GpuList)] + list(GPU_SETTINGS)


def test_every_fact_lands_under_a_name_of_its_own() -> None:
    facts = [*gpu_queries(), *shell_facts(), *(f for s in SETTINGS for f in s.reads.api)]
    by_name: dict[str, Any] = {}
    for f in facts:
        assert by_name.setdefault(f.name, f) is f, f"two facts land under {f.name!r}"
    declared = {f.name for s in _all_settings() for f in s.reads.facts}
    for f in shell_facts():
        assert f.name in declared or f.name in SHARED_READERS, f"{f.name}: read by no setting and listed nowhere"


def test_the_gathering_reads_what_each_setting_declares() -> None:
    for s in _all_settings():
        assert set(s.reads.gpu_queries) <= set(gpu_queries()), type(s).__name__
        assert set(s.reads.shell) <= set(shell_facts()), type(s).__name__
        for q in s.reads.gpu_queries:
            assert set(q.fields) <= set(gpu_query_fields()), type(s).__name__
        for f in s.reads.api:
            assert f in api_facts(None) or f.when_set, type(s).__name__


def test_the_bulk_read_asks_for_every_property_a_setting_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, list[str]]] = []

    def retrieve(session: Any, reads: readlist.Reads) -> dict[str, Any]:
        asked.append(dict(readlist.merged(reads)))
        raise RuntimeError("stop")

    monkeypatch.setattr(observe, "_retrieve_observed", retrieve)
    session = SimpleNamespace(round_trips=0)
    with pytest.raises(RuntimeError, match="stop"):
        observe.observe(session, host_properties=(*host_properties(), "config.product.build"))  # type: ignore[arg-type]
    assert set(host_properties()) <= set(asked[0]["HostSystem"])
    assert "config.product.build" in asked[0]["HostSystem"]


def test_what_a_setting_plans_from_is_in_the_saved_plan_digest() -> None:
    for s in SETTINGS:
        assert set(s.reads.host_fields) <= set(s.drift_fields), s.key
        assert set(s.drift_fields) <= set(planfile.HOST_FIELDS), s.key


def test_every_change_kind_has_one_owner() -> None:
    assert len(SETTING_KINDS) == len(set(SETTING_KINDS))
    orchestration = {ChangeKind.EVACUATE, ChangeKind.RESUME}
    assert not orchestration & set(SETTING_KINDS)
    assert all(isinstance(k, ChangeKind) for k in SETTING_KINDS)
    assert all(setting_of(k) is None for k in orchestration)
    for s in SETTINGS:
        assert s.offer_kinds <= set(s.kinds), s.key
        assert s.shell_kinds <= set(s.kinds), s.key
        assert all(s.step(k) in apply_steps() for k in s.kinds), s.key


def test_settings_have_distinct_keys_and_own_their_display_keys() -> None:
    keys = [s.key for s in SETTINGS]
    assert len(keys) == len(set(keys))
    for key, owner in (("graphics.default_type", "graphics"), ("gpus[all].mode", "gpus"), ("gpus[all].ecc", "gpus"),
                       ("nvlink", "nvlink"), ("scheduler.policy", "scheduler"), ("ssh.user", None),
                       ("maintenance.evacuate", None)):
        found = setting_for_key(key)
        assert (found.key if found is not None else None) == owner, key
    fields = [f.name for s in GPU_SETTINGS for f in s.fields]
    assert len(fields) == len(set(fields)), "two per-GPU settings add the same field"


def test_only_the_settings_name_a_setting() -> None:
    """Outside vgpuctl/settings/ no product module imports one setting's module (the registry, the base classes,
    the facts and the `gpus` list are the settings' shared parts): a new setting is its own module, not branches
    elsewhere."""
    house = floors.read_house()
    found = sorted(
        f"{house.modules[a.source].relative_to(PACKAGE).as_posix()}: {a.target}"
        for a in house.arrows
        if a.target.startswith("settings.") and a.target.split(".")[1] in SETTING_MODULES
        and not a.source.startswith("settings")
        and house.modules[a.source].relative_to(PACKAGE).as_posix() not in NAMES_A_SETTING
    )
    assert found == []


def test_only_the_settings_spell_a_setting_kind_as_text() -> None:
    """No product module compares a change kind with its string (`kind == "mig"`)."""
    values = "|".join(re.escape(str(k)) for k in (*SETTING_KINDS, ChangeKind.EVACUATE, ChangeKind.RESUME))
    pattern = re.compile(rf"""kind\s*(==|!=|in)\s*\(?\s*["']({values})["']""")
    found = [
        f"{path.relative_to(PACKAGE)}: {m.group(0)}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for m in pattern.finditer(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_a_hosts_entry_is_made_of_the_settings_parts() -> None:
    keys = [s.key for s in SETTINGS]
    assert list(HostSpec.model_fields) == ["cluster", "name", "vcenter", *keys, "ssh", "maintenance"]


def test_a_new_setting_becomes_an_inventory_key_without_touching_the_inventory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the recipe in docs/architecture.md promises: the registry's parts make the entry's schema."""
    class BiosSpec(StrictModel):
        sr_iov: bool = False

    class Bios(HostSetting[BiosSpec | None]):
        key, schema = "bios", BiosSpec | None

    bios = Bios()
    monkeypatch.setattr(inventory, "SETTINGS", (*settings.SETTINGS, bios))
    spec = inventory._host_spec().model_validate({"name": "esx-01", "bios": {"sr_iov": True}})
    value = bios.of(spec)
    assert value is not None and value.sr_iov and bios.is_set(spec)
    assert bios.plan(PlanInput(spec, ObservedHost("esx-01"))).changes == []  # what it does not say, it does not do
    with pytest.raises(ValueError, match="sriov"):
        inventory._host_spec().model_validate({"name": "esx-01", "bios": {"sriov": True}})


def test_host_show_lists_every_setting_the_report_has() -> None:
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


# ------------------------------------------------------------------------------------------ the recipe

EXAMPLE = (ROOT / "inventory.example.yaml").read_text(encoding="utf-8")
CASES = json.loads((ROOT / "tests" / "fixtures" / "nvidia-smi" / "cases.json").read_text(encoding="utf-8"))["cases"]


def _keys(s: Any) -> list[str]:
    """The inventory keys a setting adds: a host setting its key, a per-GPU setting its fields of a `gpus:` item."""
    return [s.key] if isinstance(s, HostSetting) else [f.name for f in s.fields]


@pytest.mark.parametrize("setting", _all_settings(), ids=lambda s: type(s).__name__)
def test_a_setting_is_in_every_place_the_recipe_names(setting: Any) -> None:
    module = type(setting).__module__
    assert module.startswith("vgpuctl.settings."), f"{module}: a setting is a module of vgpuctl/settings/"
    page, _, heading = setting.doc.partition("#")
    text = (ROOT / page).read_text(encoding="utf-8")
    assert re.search(rf"^#+ .*`?{re.escape(heading)}`?", text, re.MULTILINE), f"{page}: no section {heading!r}"
    for key in _keys(setting):
        assert re.search(rf"^\s*-?\s*{re.escape(key)}:", EXAMPLE, re.MULTILINE), f"inventory.example.yaml: no {key}:"
    assert not setting.kinds or setting.reads.facts or setting.reads.properties, "a setting that plans reads something"
    commands = {c["command"] for c in CASES}
    for fact in setting.reads.shell:
        assert fact.command in commands, f"no parser case in cases.json for {fact.command!r}"
    for query in setting.reads.gpu_queries:
        assert any(c.get("query") == query.name for c in CASES), f"no parser case in cases.json for {query.name!r}"


def test_a_gpu_query_parses_its_case() -> None:
    """Each GPU query's case: a real or simulated `--query-gpu` output of its fields, and what it parses to."""
    queries: dict[str, GpuQuery[Any]] = {q.name: q for q in gpu_queries()}
    cases = [c for c in CASES if "query" in c]
    assert {c["query"] for c in cases} == set(queries)
    for case in cases:
        query = queries[case["query"]]
        text = (ROOT / "tests" / "fixtures" / "nvidia-smi" / case["fixture"]).read_text(encoding="utf-8")
        rows = parse_query_csv(text, case.get("fields"))
        got = [dataclasses.asdict(v) if dataclasses.is_dataclass(v := query.parse(r)) else v for r in rows]
        assert got == case["expect"], case["fixture"]
