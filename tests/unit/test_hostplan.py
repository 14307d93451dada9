"""vgpuctl.hosts.plan (pure host planning), the pure parts of vgpuctl.hosts.facts and the host apply / status modules.

Planning cases are data: tests/fixtures/hostplan/cases.yaml. Shell facts are parsed from the nvidia-smi
reference outputs of gpusim in tests/fixtures/nvidia-smi/.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kinds
import pytest
from hostfacts import host_facts
from ruamel.yaml import YAML

from vgpuctl import planner
from vgpuctl.cli.host import describe_changes, one_host_spec
from vgpuctl.domain import Evacuate, Outcome, Phase
from vgpuctl.errors import UsageError
from vgpuctl.esxi import modopts, rmpvmrl
from vgpuctl.esxi.parsers import parse_nvlink_status
from vgpuctl.farm import predict
from vgpuctl.hosts import plan as hostplan
from vgpuctl.hosts.apply import RefusedError
from vgpuctl.hosts.evacuation import needs_maintenance, needs_reboot
from vgpuctl.hosts.status import shell_configured
from vgpuctl.hosts.targets import targets_for
from vgpuctl.inventory import HostSpec, load_inventory_text
from vgpuctl.model import CloneSpec, HostChange, HostOutcome, Observed, ObservedGpu, ObservedHost, ObservedVm, VmChange
from vgpuctl.records.work import WORK_FIELD
from vgpuctl.reports.apply import AffectedVm
from vgpuctl.reports.base import VgpuCount
from vgpuctl.reports.host import host_status, mig_label
from vgpuctl.reports.status import merge_status, status_report
from vgpuctl.settings import SETTINGS, decoders
from vgpuctl.settings.base import MODULE_OPTIONS_STEP, HostWriter
from vgpuctl.settings.ecc import ECC_MODE
from vgpuctl.settings.facts import (
    MIG_MODE,
    HostFacts,
    PendingMode,
    declared_params,
    guest_drivers,
    nvlink_links,
    nvlink_peers,
    nvlink_sets,
    running_manager,
    vgpu_capabilities,
    vsphere_bus_id,
)
from vgpuctl.settings.gather import gather_shell_facts
from vgpuctl.vsphere import workrecord
from vgpuctl.vsphere.workrecord import NotLeased, VcenterWorkStore

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DATA = YAML(typ="safe").load((FIXTURES / "hostplan" / "cases.yaml").read_text(encoding="utf-8"))
CASES = DATA["cases"]


def _host(name: str, over: dict[str, Any] | None = None) -> ObservedHost:
    data = copy.deepcopy(DATA["hosts"][name])
    data.update(over or {})
    gpus = [ObservedGpu(**g) for g in data.pop("gpus", [])]
    return ObservedHost(name=name, gpus=gpus, **data)


def _facts(host: str, data: dict[str, Any] | None) -> HostFacts | None:
    if data is None:
        return None
    return host_facts(host, **data)


def _spec(host: str, data: dict[str, Any]) -> HostSpec:
    return HostSpec.model_validate({"name": host, **data})


def _rows(changes: list[HostChange]) -> list[list[Any]]:
    return [[c.kind, c.target, c.old, c.new, c.disruptive, c.needs_reboot] for c in changes]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_plan_host_cases(case: dict[str, Any]) -> None:
    host = _host(case["host"], case.get("host_over"))
    result = hostplan.plan_host(_spec(host.name, case["spec"]), host, _facts(host.name, case.get("facts")))
    assert _rows(result.changes) == case["expect"]["changes"]
    expected_errors = case["expect"].get("errors", [])
    assert len(result.errors) == len(expected_errors), result.errors
    for got, want in zip(result.errors, expected_errors, strict=True):
        assert want in got


# ------------------------------------------------------------------------------ module options


@pytest.mark.parametrize(
    ("policy", "slice_ms", "value"),
    [
        ("best-effort", None, None),
        ("equal-share", None, "0x01"),
        ("fixed-share", None, "0x11"),
        ("equal-share", 3, "0x00030003"),
        ("fixed-share", 24, "0x00180013"),
    ],
)
def test_scheduler_values_follow_nvidia_rmpvmrl_layout(policy: str, slice_ms: int | None, value: str | None) -> None:
    assert rmpvmrl.encode(policy, slice_ms) == value
    state = rmpvmrl.decode(value)
    assert (state.policy, state.timeslice_ms) == (policy, slice_ms)


@pytest.mark.parametrize(("policy", "slice_ms"), [("best-effort", 3), ("round-robin", None), ("equal-share", 0)])
def test_scheduler_value_rejects_bad_input(policy: str, slice_ms: int | None) -> None:
    with pytest.raises(ValueError):
        rmpvmrl.encode(policy, slice_ms)


@pytest.mark.parametrize(
    ("current", "kwargs", "expected"),
    [
        ("", {"nvlink": "disabled"}, "NVreg_NvLinkDisable=1"),
        ("NVreg_EnableMSI=1", {"nvlink": "disabled"}, "NVreg_EnableMSI=1 NVreg_NvLinkDisable=1"),
        ("NVreg_NvLinkDisable=1 NVreg_EnableMSI=1", {"nvlink": "enabled"}, "NVreg_EnableMSI=1"),
        ("NVreg_EnableMSI=1", {"scheduler": "0x01"}, "NVreg_EnableMSI=1 NVreg_RegistryDwords=RmPVMRL=0x01"),
        (
            'NVreg_RegistryDwords="RmFoo=1;RmPVMRL=0x01" A=2',
            {"scheduler": "0x11"},
            "NVreg_RegistryDwords=RmFoo=1;RmPVMRL=0x11 A=2",
        ),
        ("NVreg_RegistryDwords=RmFoo=1;RmPVMRL=0x01", {"scheduler": None}, "NVreg_RegistryDwords=RmFoo=1"),
        ("NVreg_RegistryDwords=RmPVMRL=0x01 A=2", {"scheduler": None}, "A=2"),
        (
            "A=1 NVreg_RegistryDwords=RmPVMRL=0x01",
            {"nvlink": "disabled"},
            "A=1 NVreg_RegistryDwords=RmPVMRL=0x01 NVreg_NvLinkDisable=1",
        ),
        (
            'A="x y" B=1',
            {"nvlink": "disabled", "scheduler": "0x00030001"},
            'A="x y" B=1 NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x00030001',
        ),
    ],
)
def test_merge_module_options_keeps_other_options(current: str, kwargs: dict[str, Any], expected: str) -> None:
    merged = modopts.merge_module_options(current, **kwargs)
    assert merged == expected
    if "nvlink" in kwargs:
        assert modopts.nvlink_of(merged) == kwargs["nvlink"]
    if "scheduler" in kwargs:
        assert modopts.rmpvmrl_of(merged) == kwargs["scheduler"]


def _module_options_after(current: str, changes: list[HostChange]) -> str:
    """What the module-options apply step writes: each setting's edits of the current option string."""
    writer = HostWriter(None, "h", "host-1", lambda step, detail: None, lambda step: None, lambda: None)  # type: ignore[arg-type,return-value]
    for setting in SETTINGS:
        mine = [c for c in changes if c.kind in setting.kinds]
        if mine:
            setting.apply(MODULE_OPTIONS_STEP, mine, writer)
    options = modopts.parse_module_options(current)
    for edit in writer.option_edits:
        edit(options)
    return modopts.format_module_options(options)


def test_module_options_step_applies_both_changes_of_a_host() -> None:
    changes = [
        HostChange("h", kinds.NVLINK, "host", "enabled", "disabled", Phase.REBOOT),
        HostChange("h", kinds.SCHEDULER, "host", "best-effort", "fixed-share (24 ms)", Phase.REBOOT),
    ]
    merged = _module_options_after("NVreg_EnableMSI=1", changes)
    assert merged == "NVreg_EnableMSI=1 NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x00180013"


def test_merge_rejects_a_bad_nvlink_value() -> None:
    with pytest.raises(ValueError):
        modopts.merge_module_options("", nvlink="off")


# ------------------------------------------------------------------------------ resolving hosts


def _observed() -> Observed:
    hosts = {n: _host(n) for n in ("esx-a100", "esx-h100", "esx-l40s")}
    for h in hosts.values():
        h.cluster = "C1" if h.name != "esx-l40s" else "C2"
    return Observed(hosts=hosts, clusters={"C1": ["esx-a100", "esx-h100"], "C2": ["esx-l40s"]})


def _inv_hosts(text: str) -> list[HostSpec]:
    return load_inventory_text("apiVersion: vgpuctl/v1\n" + text).hosts


def test_unknown_host_and_cluster_are_errors() -> None:
    specs = _inv_hosts("hosts:\n  - name: esx-99\n  - cluster: Nope\n")
    resolved, errors = hostplan.resolve_hosts(specs, _observed())
    assert resolved == {}
    assert errors == [
        "cluster Nope: not found (clusters: C1, C2)",
        "host esx-99: not found (hosts: esx-a100, esx-h100, esx-l40s)",
    ]


def test_a_named_host_overrides_its_cluster_entry() -> None:
    specs = _inv_hosts("hosts:\n  - name: esx-h100\n    nvlink: enabled\n  - cluster: C1\n    nvlink: disabled\n")
    resolved, errors = hostplan.resolve_hosts(specs, _observed())
    assert not errors
    assert resolved["esx-a100"].nvlink == "disabled"
    assert resolved["esx-h100"].nvlink == "enabled"


def test_plan_hosts_over_a_cluster_with_resume() -> None:
    specs = _inv_hosts("hosts:\n  - cluster: C1\n    gpus: [{select: all, mode: mig}]\n")
    result = hostplan.plan_hosts(specs, _observed(), resume={"esx-l40s"})
    assert [(c.host, c.kind, c.target) for c in result.changes] == [
        ("esx-a100", "mig", "0000:3b:00.0"),
        ("esx-a100", "mig", "0000:3c:00.0"),
        ("esx-h100", "mig", "0000:3b:00.0"),
        ("esx-l40s", "maintenance", "host"),
    ]
    assert not result.changes[-1].disruptive
    assert planner.changed_hosts(result.changes) == {"esx-a100", "esx-h100"}
    assert result.hosts == ["esx-a100", "esx-h100", "esx-l40s"]


def test_flags_of_a_change_list() -> None:
    policy = HostChange("h", kinds.ASSIGNMENT_POLICY, "host", "performance", "consolidation", Phase.ONLINE)
    mig = HostChange("h", kinds.MIG, "0000:3b:00.0", "time-sliced", "mig", Phase.MAINTENANCE)
    assert not needs_maintenance([policy])
    assert needs_maintenance([policy, mig])
    assert not needs_reboot([policy, mig])
    assert kinds.VGPU_MODE.category == "graphics"
    assert (policy.disruptive, mig.disruptive, mig.needs_reboot) == (False, True, False)


# ------------------------------------------------------------------------------ verification


def test_verify_reports_leftovers_and_nvlink_links() -> None:
    host = _host("esx-a100")
    spec = _spec(host.name, {"gpus": [{"select": "all", "mode": "mig"}], "nvlink": "enabled"})
    facts = host_facts(
        host.name,
        shell=True,
        options_configured="",
        options_effective="",
        gpus={
            "0000:3b:00.0": {"mig_current": True, "mig_pending": True, "nvlink_links": 12, "nvlink_active": 12},
            "0000:3c:00.0": {"mig_current": False, "mig_pending": True, "nvlink_links": 12, "nvlink_active": 8},
        },
    )
    host.gpus[0].vgpu_mode = "multiInstanceGpu"
    problems = hostplan.verify_host(spec, host, facts)
    assert problems == [
        "mig 0000:3c:00.0 is time-sliced (mig pending), expected mig",
        "nvlink 0000:3c:00.0: 8 links up, expected the 12 its NVLink bridge or baseboard wires (nvidia-smi lists 12)",
    ]


def _h100_pair() -> ObservedHost:
    gpu = {"device_name": "NVIDIA H100 PCIe", "device_id": 0x2331, "memory_kb": 83886080,
           "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}
    return ObservedHost(name="esx-h100", gpus=[ObservedGpu(pci_id=p, **gpu) for p in ("0000:3b:00.0", "0000:3c:00.0")])


def _nvlink_facts(host: ObservedHost, capture: str, options: str = "", active: dict[str, int] | None = None
                  ) -> HostFacts:
    """Shell facts of a host whose `nvidia-smi nvlink -s` printed a real capture (tests/fixtures/nvidia-smi),
    the GPUs in `active` with that many links up instead."""
    links = parse_nvlink_status((FIXTURES / "nvidia-smi" / capture).read_text(encoding="utf-8"))
    gpus: dict[str, dict[str, Any]] = {pci: {} for pci in sorted(gp.pci_id for gp in host.gpus)}
    for g, pci in zip(links, sorted(gpus), strict=False):
        gpus[pci] = {"nvlink_links": len(g.links), "nvlink_active": (active or {}).get(pci, g.active_links)}
    return host_facts(host.name, shell=True, options_configured=options, options_effective=options, gpus=gpus)


def test_nvlink_enabled_verifies_on_a_healthy_bridged_h100_pcie_pair() -> None:
    """18 links listed per GPU, 12 up: what the bridge wires. The real capture passes, fewer up does not."""
    host = _h100_pair()
    facts = _nvlink_facts(host, "h100-pcie.nvlink-s.txt")
    assert [(len(g.links), g.active_links) for g in nvlink_links(facts).values()] == [(18, 12), (18, 12)]
    spec = _spec(host.name, {"nvlink": "enabled"})
    assert hostplan.verify_host(spec, host, facts) == []
    facts = _nvlink_facts(host, "h100-pcie.nvlink-s.txt", active={"0000:3c:00.0": 11})
    assert hostplan.verify_host(spec, host, facts) == [
        "nvlink 0000:3c:00.0: 11 links up, expected the 12 its NVLink bridge or baseboard wires (nvidia-smi lists 18)"
    ]
    off = _nvlink_facts(host, "h100-pcie.nvlink-s.txt", "NVreg_NvLinkDisable=1")
    assert hostplan.verify_host(_spec(host.name, {"nvlink": "disabled"}), host, off) == [
        "nvlink 0000:3b:00.0: 12 of 18 links up, expected none",
        "nvlink 0000:3c:00.0: 12 of 18 links up, expected none",
    ]


def test_nvlink_all_links_inactive_is_no_link_up() -> None:
    """NVML's "all links are inActive" line is a GPU with no link up: right for disabled, and not a failure for
    enabled (a GPU without a bridge prints the same)."""
    host = _h100_pair()
    host.gpus.append(ObservedGpu(pci_id="0000:3d:00.0", device_name="NVIDIA H100 PCIe", device_id=0x2331))
    facts = _nvlink_facts(host, "rtx-a6000.nvlink-s-inactive.txt")
    assert nvlink_links(facts)["0000:3d:00.0"].active_links == 0
    assert hostplan.verify_host(_spec(host.name, {"nvlink": "enabled"}), host, facts) == [
        "nvlink 0000:3b:00.0: 4 links up, expected the 12 its NVLink bridge or baseboard wires (nvidia-smi lists 4)",
        "nvlink 0000:3c:00.0: 4 links up, expected the 12 its NVLink bridge or baseboard wires (nvidia-smi lists 4)",
    ]
    off = _nvlink_facts(host, "rtx-a6000.nvlink-s-inactive.txt", "NVreg_NvLinkDisable=1",
                        active={"0000:3b:00.0": 0, "0000:3c:00.0": 0})
    assert hostplan.verify_host(_spec(host.name, {"nvlink": "disabled"}), host, off) == []


def test_verify_passes_when_everything_matches() -> None:
    host = _host("esx-a100")
    spec = _spec(host.name, {"nvlink": "disabled", "scheduler": {"policy": "equal-share", "timeslice_ms": 3}})
    opts = "NVreg_EnableMSI=1 NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x00030003"
    gpu = {"mig_current": False, "mig_pending": False, "nvlink_links": 4}
    facts = host_facts(host.name, shell=True, options_configured=opts, options_effective=opts,
                       gpus={"0000:3b:00.0": gpu})
    assert hostplan.verify_host(spec, host, facts) == []
    facts = host_facts(host.name, shell=True, options_configured=opts, options_effective=opts,
                       gpus={"0000:3b:00.0": {**gpu, "nvlink_active": 2}})
    assert hostplan.verify_host(spec, host, facts) == ["nvlink 0000:3b:00.0: 2 of 4 links up, expected none"]


# ------------------------------------------------------------------------------ prediction


def test_predicted_host_offers_mig_profiles_after_the_switch() -> None:
    host = _host("esx-a100", {"offered_profiles": ["grid_a100-10c", "grid_a100-40c"]})
    changes = hostplan.plan_host(_spec(host.name, {"gpus": [{"select": "0000:3b:00.0", "mode": "mig"}]}), host).changes
    after = predict.predict_host(host, changes)
    assert after.gpus[0].vgpu_mode == "multiInstanceGpu"
    assert after.gpus[1].vgpu_mode == "sameSize"
    assert "grid_a100-3-20c" in after.offered_profiles and "grid_a100-7-40c" in after.offered_profiles
    assert "grid_a100-40c" in after.offered_profiles  # the other GPU stays time-sliced
    assert after.profiles["grid_a100-3-20c"].sharing == "mig"
    assert host.gpus[0].vgpu_mode == "sameSize"  # the input is not modified


def test_predicted_host_drops_mig_profiles_when_all_gpus_leave_mig() -> None:
    host = _host("esx-mig", {"offered_profiles": ["grid_a100-3-20c", "grid_a100-7-40c"]})
    changes = hostplan.plan_host(_spec(host.name, {"gpus": [{"select": "all", "mode": "time-sliced"}]}), host).changes
    after = predict.predict_observed(Observed(hosts={host.name: host}), changes).hosts[host.name]
    assert not any("-3-20c" in p for p in after.offered_profiles)
    assert "grid_a100-40c" in after.offered_profiles


def test_mig_profile_names_from_board_geometry() -> None:
    assert predict.mig_profile_names("a100") == [
        "grid_a100-1-5c",
        "grid_a100-1-10c",
        "grid_a100-2-10c",
        "grid_a100-3-20c",
        "grid_a100-4-20c",
        "grid_a100-7-40c",
    ]
    assert predict.mig_profile_names("l40s") == []


# ------------------------------------------------------------------------------ shell facts from fixtures


def _fixture_runner(calls: list[str]):
    smi = FIXTURES / "nvidia-smi"
    outputs = {
        "--query-gpu": "gpusim.query-gpu-facts.noheader-nounits.csv",
        "nvlink -s": "gpusim.nvlink-s.txt",
        "topo -m": "gpusim.topo-m.txt",
        "parameters list -m nvidia": "gpusim.module-params.txt",
        "nvidia-smi -q": "gpusim.q.txt",
        "vgpu -q": "gpusim.vgpu-q.txt",
    }

    def run(command: str) -> str:
        calls.append(command)
        for key, name in outputs.items():
            if key in command:
                return (smi / name).read_text(encoding="utf-8")
        raise AssertionError(f"unexpected command {command}")

    return run


def test_shell_facts_from_gpusim_outputs() -> None:
    calls: list[str] = []
    facts = gather_shell_facts(HostFacts("esx-01"), _fixture_runner(calls))
    assert facts.shell
    assert sorted(facts.gpus) == ["0000:3b:00.0", "0000:86:00.0", "0000:af:00.0"]
    a, b, c = sorted(facts.gpus)
    assert facts.gpus[a].index == 0
    assert facts.gpu(MIG_MODE, a) == PendingMode(False, False)
    assert facts.gpu(MIG_MODE, b) == PendingMode(True, True)
    assert facts.gpu(MIG_MODE, c) is None  # not MIG-capable: nvidia-smi says [N/A]
    assert facts.gpu(ECC_MODE, a) == PendingMode(True, True)
    assert facts.gpu(ECC_MODE, b) == PendingMode(True, False) and facts.gpu(ECC_MODE, c) == PendingMode(False, False)
    links = nvlink_links(facts)
    assert (len(links[a].links), links[a].active_links) == (4, 4) and links[c].links == ()
    assert nvlink_peers(facts)[a] == [b] and nvlink_peers(facts)[c] == []
    assert nvlink_sets(facts) == [["0000:3b:00.0", "0000:86:00.0"]]
    assert any("mig.mode.pending" in c and "ecc.mode.pending" in c and "noheader" in c for c in calls)
    assert declared_params(facts) == ["NVreg_EnableMSI", "NVreg_NvLinkDisable", "NVreg_RegistryDwords"]
    assert {pci: cap.types for pci, cap in vgpu_capabilities(facts).items()} == {a: True, b: True, c: True}
    assert guest_drivers(facts) == {"train-01": "550.90.07", "infer-01": None}
    assert running_manager(facts) == "550.90.05"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("00000000:3B:00.0", "0000:3b:00.0"), ("0000:3b:00.0", "0000:3b:00.0"), ("AF:00.0", "0000:af:00.0")],
)
def test_bus_ids_in_vsphere_form(raw: str, expected: str) -> None:
    assert vsphere_bus_id(raw) == expected


def test_facts_round_trip_through_dicts() -> None:
    facts = host_facts(
        "h",
        shell=True,
        options_configured="A=1",
        gpus={"0000:3b:00.0": {"mig_current": True, "ecc_current": False, "nvlink_links": 4, "nvlink_active": 2,
                               "nvlink_peers": ["0000:3c:00.0"], "graphics_type": "sharedDirect"},
              "0000:3c:00.0": {"mig_current": True, "nvlink_peers": ["0000:3b:00.0"]}},
    )
    again = HostFacts.from_dict(json.loads(json.dumps(facts.to_dict())), decoders())
    assert again == facts


# ------------------------------------------------------------------------------ host apply pure parts


class _Fields:
    """The custom attributes VcenterWorkStore writes, kept in a dict (moid, name) -> value."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], str] = {}

    def set(self, host_moid: str, name: str, value: str) -> None:
        self.values[(host_moid, name)] = value

    def get(self, host_moid: str, name: str) -> str:
        return self.values.get((host_moid, name), "")


class _Lease:
    """A host lease without vCenter: counts its lock folders (taken, released)."""

    folders: list[str] = []

    def __init__(self, fields: Any, host: str, moid: str, run_id: str):
        self.host = host

    def acquire(self, wait_s: float = 0.0, on_wait: Any = None) -> _Lease:
        _Lease.folders.append(self.host)
        return self

    def release(self) -> None:
        _Lease.folders.remove(self.host)


@pytest.fixture
def leases(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setattr(workrecord, "Lease", _Lease)
    monkeypatch.setattr(_Lease, "folders", [])
    return _Lease.folders


def _vcenter_store(fields: _Fields, run: str = "run-1") -> Any:
    values = {"esx-01": fields.values.get(("host-1", WORK_FIELD), "")}
    return VcenterWorkStore(None, {"esx-01": "host-1"}, values, run, fields=fields)  # type: ignore[arg-type]


def test_work_store_persists_records_in_the_hosts_attribute(leases: list[str]) -> None:
    fields = _Fields()
    store = _vcenter_store(fields)
    lease = store.lease("esx-01").acquire()
    store.add_vm("esx-01", "vm-a", "vm-1")
    store.add_vm("esx-01", "vm-a", "vm-1")
    store.update("esx-01", entered_maintenance=True, phase="reboot")
    lease.release()
    again = _vcenter_store(fields, "run-2")  # the next run reads what vCenter holds
    rec = again.get("esx-01")
    assert rec is not None and rec.entered_maintenance and rec.run == "run-1"
    assert rec.vms == [{"name": "vm-a", "moid": "vm-1", "after": "power-on"}]
    with again.lease("esx-01").acquire():
        again.drop("esx-01")
    assert _vcenter_store(fields).hosts() == []
    assert list(fields.values.values()) == [""]  # dropping clears the attribute
    assert leases == []


def test_a_work_record_is_written_only_under_the_hosts_lease(leases: list[str]) -> None:
    fields = _Fields()
    store = _vcenter_store(fields)
    with pytest.raises(NotLeased, match=r"^host esx-01: its work record is written only under the host's lease"):
        store.update("esx-01", ssh={"running": False, "policy": "off"})
    assert fields.values == {}
    first, second = store.lease("esx-01").acquire(), store.lease("esx-01").acquire()
    assert leases == ["esx-01"]  # one lock folder for the run's holders of it
    first.release()
    store.update("esx-01", phase="start")  # the second holder still holds it
    second.release()
    assert leases == [] and not store.holds("esx-01")
    with pytest.raises(NotLeased):
        store.drop("esx-01")


def test_a_record_another_run_wrote_since_it_was_read_is_taken_as_it_is_now(leases: list[str]) -> None:
    fields = _Fields()
    store = _vcenter_store(fields)  # read: no record
    fields.values[("host-1", WORK_FIELD)] = '{"run": "other1", "phase": "reboot"}'  # another run meanwhile
    with store.lease("esx-01"):
        rec = store.get("esx-01")
        assert rec is not None and rec.run == "other1" and rec.phase == "reboot"
        store.update("esx-01", message="resumed")  # written over what vCenter holds, not over nothing
    assert '"phase":"reboot"' in fields.values[("host-1", WORK_FIELD)]
    assert '"run":"run-1"' in fields.values[("host-1", WORK_FIELD)]


def test_work_store_ignores_an_unreadable_record() -> None:
    fields = _Fields()
    fields.values[("host-1", WORK_FIELD)] = "{not json"
    store = _vcenter_store(fields)
    assert store.hosts() == []  # nothing resumed from it; the plan names it in one line instead
    assert "its vgpuctl.work attribute is no vgpuctl work record (not JSON)" in store.problems["esx-01"]


def test_memory_work_store_follows_the_same_protocol() -> None:
    from workstore import MemoryWorkStore

    store = MemoryWorkStore()
    store.add_vm("esx-01", "vm-a", "vm-1", after="vm-change")
    assert MemoryWorkStore(store.values).get("esx-01").vms == [  # type: ignore[union-attr]
        {"name": "vm-a", "moid": "vm-1", "after": "vm-change"}
    ]
    assert store.lease("esx-01").acquire() is not None


def test_failed_outcome_says_where_it_stopped() -> None:
    out = HostOutcome(
        "esx-01",
        Outcome.FAILED,
        steps=["enter-maintenance", "mig 0000:3b:00.0 mig"],
        phase="reboot",
        message="boom",
        error_type="SshError",
        in_maintenance=True,
        vms_to_restore=["vm-a"],
    )
    text = out.describe()
    assert "esx-01: failed at reboot: boom" in text
    assert "left in maintenance mode" in text and "VMs to power on again: vm-a" in text
    assert "run apply again to continue" in text
    refused = HostOutcome(
        "esx-01", Outcome.FAILED, phase="evacuate", message="no", error_type=RefusedError.__name__, in_maintenance=False
    )
    assert "run apply again" not in refused.describe() and "not in maintenance mode" in refused.describe()


def test_targets_group_changes_by_host() -> None:
    changes = [
        HostChange("b", kinds.MIG, "0000:3b:00.0", "time-sliced", "mig"),
        HostChange("a", kinds.NVLINK, "host", "enabled", "disabled"),
        HostChange("b", kinds.NVLINK, "host", "enabled", "disabled"),
    ]
    spec_b = HostSpec(name="b", nvlink="disabled")
    targets = targets_for(changes, {"b": spec_b}, {"a": "host-1", "b": "host-2"})
    assert [(t.name, t.moid, len(t.changes)) for t in targets] == [("a", "host-1", 1), ("b", "host-2", 2)]
    assert targets[0].spec.name == "a" and targets[1].spec is spec_b


def test_vm_changes_on_changed_hosts_wait_for_them() -> None:
    observed = _observed()
    observed.vms["a"] = ObservedVm("a", host="esx-a100")
    observed.vms["b"] = ObservedVm("b", host="esx-l40s")
    changes = [
        VmChange("a", power_on=True),
        VmChange("b", power_on=True),
        VmChange("new-1", clone=CloneSpec("tmpl", host="esx-a100")),
        VmChange("new-2", clone=CloneSpec("tmpl", cluster="C1")),
        VmChange("idle"),
    ]
    host_changes = [
        HostChange("esx-a100", kinds.MIG, "0000:3b:00.0", "time-sliced", "mig"),
        HostChange("esx-l40s", kinds.ASSIGNMENT_POLICY, "host", "performance", "consolidation", Phase.ONLINE),
    ]
    planner.mark_dependencies(changes, observed, host_changes)
    assert [c.depends_on_hosts for c in changes] == [["esx-a100"], [], ["esx-a100"], ["esx-a100"], []]


# ------------------------------------------------------------------------------ cli/host.py helpers


def test_one_host_spec_takes_ssh_and_maintenance_from_the_inventory_entry() -> None:
    base = _inv_hosts(
        "hosts:\n  - cluster: C1\n    ssh: {user: admin, port: 2222}\n"
        "    maintenance: {evacuate: power-off, reboot_timeout_s: 60}\n"
    )[0]
    spec = one_host_spec(base, "esx-a100", {"nvlink": "disabled"}, None, 30)
    assert (spec.name, spec.nvlink, spec.ssh.user, spec.ssh.port) == ("esx-a100", "disabled", "admin", 2222)
    assert (spec.maintenance.evacuate, spec.maintenance.reboot_timeout_s) == ("power-off", 30)
    plain = one_host_spec(None, "h", {"gpus": [{"select": "all", "mode": "mig"}]}, Evacuate.POWER_OFF, None)
    assert plain.maintenance.evacuate == "power-off" and plain.gpus[0].mode == "mig"


def test_one_host_spec_rejects_bad_values_as_usage_errors() -> None:
    with pytest.raises(UsageError, match="gpus"):
        one_host_spec(None, "h", {"gpus": [{"select": "3b", "mode": "mig"}]}, None, None)


def test_describe_changes_says_maintenance_reboot_and_vms() -> None:
    spec = HostSpec(name="h")
    changes = [HostChange("h", kinds.MIG, "0000:3b:00.0", "time-sliced", "mig", Phase.REBOOT)]
    text = describe_changes("h", changes, spec, [AffectedVm("vm-a", [VgpuCount("grid_a100-40c", 1)])])
    assert "~ mig 0000:3b:00.0: time-sliced -> mig" in text
    assert "enters maintenance mode" in text and "reboots (waiting up to 900s" in text
    assert "block maintenance mode (--evacuate refuse, nothing will change): vm-a (grid_a100-40c)" in text
    migrate = HostSpec.model_validate({"name": "h", "maintenance": {"evacuate": "migrate"}})
    moved = describe_changes("h", changes, migrate, [AffectedVm("vm-a", [])])
    assert "running VMs move to other hosts of the cluster (--evacuate migrate): vm-a" in moved and "block" not in moved
    policy = [HostChange("h", kinds.ASSIGNMENT_POLICY, "host", "performance", "consolidation", Phase.ONLINE)]
    assert "maintenance" not in describe_changes("h", policy, spec, [])


def test_merge_status_adds_mig_nvlink_and_scheduler() -> None:
    host = _host("esx-a100", {"module_options": "NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x11"})
    facts = host_facts(
        "esx-a100",
        shell=True,
        options_configured=host.module_options,
        options_effective="NVreg_RegistryDwords=RmPVMRL=0x11",
        gpus={"0000:3b:00.0": {"mig_current": False, "mig_pending": True, "nvlink_links": 12, "nvlink_active": 12}},
    )
    row = host_status(host, facts)
    assert (row.nvlink, row.nvlink_after_reboot, row.scheduler) == ("enabled", "disabled", "fixed-share")
    report = status_report(Observed(hosts={"esx-a100": host}))
    for gpu in report.hosts[0].gpus:
        gpu.vgpu_mode = "sameSize"
    h = merge_status(report, {"esx-a100": row}).to_dict()["hosts"][0]
    assert (h["nvlink"], h["scheduler"]) == ("enabled", "fixed-share")
    by_gpu = {g["gpu"]: g for g in h["gpus"]}
    assert by_gpu["0000:3b:00.0"]["mig"] == "off (on pending)" and by_gpu["0000:3b:00.0"]["nvlink_active"] == 12
    others = [g for pci, g in by_gpu.items() if pci != "0000:3b:00.0"]
    assert others and all(g["mig"] == "off?" for g in others)  # no shell facts for these GPUs: vSphere only
    assert mig_label(None, None, "multiInstanceGpu") == "on" and mig_label(True, True) == "on"


def test_shell_configured_from_environment_or_inventory() -> None:
    assert not shell_configured({}, env={})
    assert shell_configured({}, env={"VGPUCTL_ESXI_PASSWORD": "x"})
    assert shell_configured({}, env={"VGPUCTL_ESXI_HOSTS": "/tmp/hosts.json"})
    spec = HostSpec(name="h", ssh={"key_file": "~/.ssh/id_ed25519"})
    assert shell_configured({"h": spec}, env={})
