"""export: the inventory written from an observed farm validates and plans to no change with the pure planner;
one edit plans exactly that change; name ranges, scoping and the comments on what was left out."""

from __future__ import annotations

import pytest
from hostfacts import host_facts

from vgpuctl.capacity.synthetic import RunningVm, SynthHost, make_farm
from vgpuctl.domain import PowerState
from vgpuctl.export import ExportOptions, _Vm, export_inventory, ranges
from vgpuctl.inventory import load_inventory_text, validate
from vgpuctl.model import Observed, ObservedVgpu, ObservedVm
from vgpuctl.planner import make_plan
from vgpuctl.records.classes import ClassState, NamespaceState, SupervisorState
from vgpuctl.settings.base import ModuleOptions
from vgpuctl.settings.facts import HostFacts
from vgpuctl.supervisor.vmclasses import plan_supervisor

pytestmark = pytest.mark.unit

MIG = "multiInstanceGpu"
LARGE_BAR = {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "2048"}


def farm() -> tuple[Observed, dict[str, HostFacts]]:
    observed = make_farm([
        SynthHost("esx-01", running=[RunningVm(f"infer-0{i}", ["grid_a100-10c"], [i - 1]) for i in range(1, 5)]),
        SynthHost("esx-02", modes=["sameSize", "sameSize", "mixedSize", "mixedSize"],
                  running=[RunningVm("train", ["grid_a100-40c", "grid_a100-40c"], [0, 1])]),
        SynthHost("esx-03", board="h100", gpus=2, modes=MIG, cluster="MIG", running=[
            RunningVm("mig-01", ["grid_h100-3-40c"], [0])]),
    ])
    for vm in observed.vms.values():
        vm.extra_config = dict(LARGE_BAR)
        vm.cpus, vm.memory_mb = 8, 32768
    observed.vms["parked"] = ObservedVm("parked", host="esx-02", cluster="GPU-Cluster", cpus=2, memory_mb=8192,
                                        memory_reservation_locked=True, firmware="efi", extra_config=dict(LARGE_BAR),
                                        vgpus=[ObservedVgpu(4000, "grid_a100-20c")])
    observed.vms["plain"] = ObservedVm("plain", host="esx-01", cluster="GPU-Cluster", power_state=PowerState.ON)
    facts = {
        "esx-01": host_facts("esx-01", options_configured="", options_effective=""),
        "esx-02": host_facts("esx-02", options_configured="", options_effective=""),
        "esx-03": host_facts("esx-03", options_configured="NVreg_RegistryDwords=RmPVMRL=0x01",
                             options_effective="NVreg_RegistryDwords=RmPVMRL=0x01"),
    }
    for name, f in facts.items():
        observed.hosts[name].module_options = ModuleOptions.of(observed.hosts[name], f).configured
    return observed, facts


def test_export_plans_to_no_change() -> None:
    observed, facts = farm()
    text = export_inventory(observed, facts)
    inv = load_inventory_text(text)
    validate(inv)
    plan = make_plan(inv, observed, host_facts=facts)
    assert plan.errors == [] and plan.is_empty, (plan.errors, plan.host_changes, plan.changes)
    assert "- name: infer-{01..04}" in text
    assert "# 1 VM without vGPUs left out (--all-vms writes them)" in text
    assert "scheduler: {policy: equal-share}" in text


def test_cluster_entry_holds_what_hosts_share_and_host_entries_the_rest() -> None:
    observed, facts = farm()
    inv = load_inventory_text(export_inventory(observed, facts))
    by_target = {h.target: h for h in inv.hosts}
    cluster = by_target["cluster GPU-Cluster"]
    assert cluster.graphics is not None and cluster.graphics.assignment_policy == "performance"
    assert [(g.select, g.mode, g.vgpu_mode) for g in cluster.gpus] == [("all", "time-sliced", "sameSize")]
    esx02 = by_target["host esx-02"]
    mixed = [("0000:5e:00.0", "mixedSize"), ("0000:5f:00.0", "mixedSize")]
    assert [(g.select, g.vgpu_mode) for g in esx02.gpus] == mixed
    assert esx02.graphics is None  # nothing else differs
    assert "host esx-01" not in by_target


@pytest.mark.parametrize(
    ("old", "new", "kinds", "fields"),
    [
        ("cluster: GPU-Cluster\n    graphics: {default_type: sharedDirect, assignment_policy: performance}",
         "cluster: GPU-Cluster\n    graphics: {default_type: sharedDirect, assignment_policy: consolidation}",
         ["graphics.assignment_policy", "graphics.assignment_policy"], []),
        ("{select: '0000:5e:00.0', vgpu_mode: mixedSize}", "{select: '0000:5e:00.0', vgpu_mode: sameSize}",
         ["graphics.vgpu_mode"], []),
        ("scheduler: {policy: equal-share}", "scheduler: {policy: fixed-share}", ["scheduler"], []),
        ("name: parked\n    cluster: GPU-Cluster\n    cpus: 2", "name: parked\n    cluster: GPU-Cluster\n    cpus: 4",
         [], [("parked", "numCPUs", 2, 4)]),
    ],
)
def test_one_edit_is_exactly_one_change(old: str, new: str, kinds: list[str], fields: list[tuple]) -> None:
    observed, facts = farm()
    text = export_inventory(observed, facts)
    assert text.count(old) == 1, text
    plan = make_plan(load_inventory_text(text.replace(old, new)), observed, host_facts=facts)
    assert sorted(c.kind for c in plan.host_changes) == kinds
    assert [(c.vm, f.field, f.old, f.new) for c in plan.changes for f in c.fields] == fields


def test_without_module_options_nvlink_and_scheduler_are_left_out() -> None:
    observed, _ = farm()
    text = export_inventory(observed, {})
    assert "nvlink:" not in text and "scheduler:" not in text
    assert "nvlink and scheduler left out: the nvidia module options were not read" in text
    validate(load_inventory_text(text))


def test_unknown_scheduler_value_is_left_out_with_a_comment() -> None:
    observed, facts = farm()
    facts["esx-03"] = host_facts("esx-03", options_configured="NVreg_RegistryDwords=RmPVMRL=0x77",
                                 options_effective="NVreg_RegistryDwords=RmPVMRL=0x77")
    text = export_inventory(observed, facts)
    assert "RmPVMRL=0x77 is not a value vgpuctl writes" in text


def test_unknown_vgpu_type_is_written_as_is_with_a_comment() -> None:
    observed, facts = farm()
    odd = ObservedVm("odd", host="esx-01", cluster="GPU-Cluster", vgpus=[ObservedVgpu(1, "grid_b999-40c")])
    observed.vms["odd"] = odd
    text = export_inventory(observed, facts)
    assert "vGPU type grid_b999-40c is not in vgpuctl's catalogue" in text
    assert "vgpus: {profile: grid_b999-40c, count: 1}" in text


def test_other_passthrough_devices_are_named_in_a_comment() -> None:
    observed, facts = farm()
    observed.vms["parked"].other_passthrough = 1
    assert "# 1 PCI passthrough device(s) that are not vGPUs left out" in export_inventory(observed, facts)


def test_scope_and_all_vms() -> None:
    observed, facts = farm()
    text = export_inventory(observed, facts, ExportOptions(cluster="MIG", all_vms=True))
    assert "esx-01" not in text and "mig-01" in text and "infer" not in text
    assert "name: plain" not in text  # plain runs on a host out of scope
    everything = export_inventory(observed, facts, ExportOptions(all_vms=True))
    assert "- name: plain" in everything
    with pytest.raises(ValueError, match="cluster 'nope' not found"):
        export_inventory(observed, facts, ExportOptions(cluster="nope"))


def test_ranges() -> None:
    same = (("cpus", 4),)
    vms = [_Vm(n, same) for n in ("w-01", "w-02", "w-03", "w-05", "vm-8", "vm-9", "vm-10", "solo")]
    vms.append(_Vm("w-04", (("cpus", 8),)))
    names = [name for name, _ in ranges(vms)]
    assert names == ["solo", "vm-{8..9}", "vm-10", "w-{01..03}", "w-04", "w-05"]


def _same_name_farm() -> tuple[Observed, dict[str, HostFacts]]:
    observed, facts = farm()
    for key, folder in (("/parked", None), ("/teamB/parked", "teamB")):
        vm = ObservedVm("parked", host="esx-02", cluster="GPU-Cluster", folder=folder, cpus=2, memory_mb=8192,
                        memory_reservation_locked=True, firmware="efi", extra_config=dict(LARGE_BAR),
                        vgpus=[ObservedVgpu(4000, "grid_a100-20c")])
        observed.vms[key] = vm
    del observed.vms["parked"]
    observed.same_name["parked"] = ["/parked", "/teamB/parked"]
    observed.folders = ["teamB"]
    return observed, facts


def test_a_repeated_name_gets_its_folder() -> None:
    observed, facts = _same_name_farm()
    text = export_inventory(observed, facts)
    assert "folder: /" in text and "folder: teamB" in text
    assert text.count("- name: infer-{01..04}") == 1  # names that do not repeat get no folder
    assert "folder" not in text.split("- name: infer-{01..04}")[1].split("- name:")[0]


def test_a_repeated_name_plans_to_no_change() -> None:
    observed, facts = _same_name_farm()
    inv = load_inventory_text(export_inventory(observed, facts))
    validate(inv)
    plan = make_plan(inv, observed, host_facts=facts)
    assert plan.errors == [] and plan.is_empty, (plan.errors, plan.changes)


def _shell_facts(facts: dict[str, HostFacts], observed: Observed, pending: dict[str, bool]) -> None:
    """ESXi shell facts for esx-02: MIG off on every GPU, and a switch pending on the GPUs in `pending`."""
    gpus = {g.pci_id.lower(): {"mig_current": False, "mig_pending": pending.get(g.pci_id.lower(), False)}
            for g in observed.hosts["esx-02"].gpus}
    facts["esx-02"] = host_facts("esx-02", shell=True, options_configured="", options_effective="", gpus=gpus)


def test_with_shell_facts_and_nothing_pending_it_plans_to_no_change() -> None:
    observed, facts = farm()
    _shell_facts(facts, observed, {})
    text = export_inventory(observed, facts)
    assert "switch to" not in text and "MIG modes of esx-01, esx-03 as vSphere reports them" in text
    plan = make_plan(load_inventory_text(text), observed, host_facts=facts)
    assert plan.errors == [] and plan.is_empty, (plan.errors, plan.host_changes)


def test_a_pending_mig_switch_is_written_as_pending_and_said() -> None:
    observed, facts = farm()
    _shell_facts(facts, observed, {"0000:5e:00.0": True})
    text = export_inventory(observed, facts)
    assert ("# GPU 0000:5e:00.0: MIG is off with a switch to on pending (nvidia-smi): written as on, so plan shows "
            "the reboot that completes it; write 'time-sliced' to cancel the switch instead") in text
    inv = load_inventory_text(text)
    validate(inv)
    esx02 = next(h for h in inv.hosts if h.target == "host esx-02")
    assert [(g.select, g.mode) for g in esx02.gpus if g.mode == "mig"] == [("0000:5e:00.0", "mig")]
    plan = make_plan(inv, observed, host_facts=facts)
    changes = [(c.host, c.kind, c.target, c.old, c.new, c.needs_reboot) for c in plan.host_changes]
    assert changes == [("esx-02", "mig", "0000:5e:00.0", "time-sliced (mig pending)", "mig", True)]


def test_without_shell_facts_the_file_says_where_mig_modes_came_from() -> None:
    observed, facts = farm()
    text = export_inventory(observed, facts)
    assert "# MIG modes of esx-01, esx-02, esx-03 as vSphere reports them (no ESXi SSH settings" in text
    assert "# a MIG switch pending there shows as a change when plan reads the shell." in text


def _supervisor() -> SupervisorState:
    mmio = {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "256"}
    return SupervisorState(
        classes={
            "gpu-a100-40c": ClassState("gpu-a100-40c", 16, 131072, 0, 100, ["grid_a100-40c"] * 2, {}),
            "gpu-mixed": ClassState("gpu-mixed", 8, 65536, 25, 100, ["grid_a100-20c", "grid_a100-10c"],
                                    {**mmio, "pciPassthru.64bitMMIOSizeGB": "512", "guest.tag": "x"}),
            "gpu-unused": ClassState("gpu-unused", 4, 32768, 0, 100, ["grid_a100-10c"], {}),
            "best-effort-small": ClassState("best-effort-small", 2, 4096),
        },
        namespaces={
            "ml-team": NamespaceState("ml-team", "domain-c8", ["best-effort-small", "gpu-a100-40c", "gpu-mixed"]),
            "web": NamespaceState("web", "domain-c8", ["best-effort-small"]),
        },
        supervisor_clusters={"domain-c8": "GPU-Cluster"},
    )


def test_vm_classes_and_namespaces_plan_to_no_change() -> None:
    observed, facts = farm()
    state = _supervisor()
    text = export_inventory(observed, facts, supervisor=state)
    inv = load_inventory_text(text)
    validate(inv)
    assert [c.name for c in inv.vm_classes] == ["gpu-a100-40c", "gpu-mixed", "gpu-unused"]
    assert [(n.name, n.supervisor, n.vm_classes) for n in inv.namespaces] == [
        ("ml-team", "GPU-Cluster", ["gpu-a100-40c", "gpu-mixed"])]
    assert "# also uses best-effort-small (no vGPUs: not written, its association is left alone)" in text
    mixed = next(c for c in inv.vm_classes if c.name == "gpu-mixed")
    # vgpuctl leaves a class's MMIO to vm-operator's default: what vCenter's class sets is written as it is
    assert mixed.extra_config == {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "512",
                                  "guest.tag": "x"}
    assert next(c for c in inv.vm_classes if c.name == "gpu-a100-40c").extra_config == {}
    assert mixed.cpu_reservation == 25 and [(v.profile, v.count) for v in mixed.vgpus] == [
        ("grid_a100-20c", 1), ("grid_a100-10c", 1)]
    plan = plan_supervisor(inv, state, observed)
    assert plan.errors == [] and plan.is_empty, (plan.errors, plan.class_changes, plan.namespace_changes)


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        ("memory_gb: 128\n    vgpus: {profile: grid_a100-40c, count: 2}",
         "memory_gb: 128\n    vgpus: {profile: grid_a100-40c, count: 1}", ("class", "gpu-a100-40c")),
        ("vm_classes: [gpu-a100-40c, gpu-mixed]", "vm_classes: [gpu-a100-40c]", ("namespace", "ml-team")),
    ],
)
def test_one_class_or_namespace_edit_plans_exactly_that_change(old: str, new: str, what: tuple[str, str]) -> None:
    observed, facts = farm()
    state = _supervisor()
    text = export_inventory(observed, facts, supervisor=state)
    assert text.count(old) == 1
    plan = plan_supervisor(load_inventory_text(text.replace(old, new)), state, observed)
    changed = [("class", c.name) for c in plan.class_changes]
    changed += [("namespace", n.namespace) for n in plan.namespace_changes]
    assert plan.errors == [] and changed == [what]


def test_scoped_export_writes_the_classes_of_its_clusters_namespaces_only() -> None:
    observed, facts = farm()
    text = export_inventory(observed, facts, ExportOptions(cluster="MIG"), supervisor=_supervisor())
    assert "vm_classes" not in text
    scoped = load_inventory_text(export_inventory(observed, facts, ExportOptions(cluster="GPU-Cluster"),
                                                  supervisor=_supervisor()))
    assert [c.name for c in scoped.vm_classes] == ["gpu-a100-40c", "gpu-mixed"]


def test_unread_supervisor_side_is_said() -> None:
    observed, facts = farm()
    text = export_inventory(observed, facts, supervisor="REST login failed (404)")
    assert "# VM classes and namespaces not read: REST login failed (404)" in text
    assert "vm_classes" not in text.replace("# VM classes", "")


def test_names_from_vcenter_stay_data() -> None:
    """A name vCenter reports that holds a newline, a colon, a quote or braces never becomes structure: the file
    reads back as exactly the farm's VMs; what no inventory can name is left out with a note, itself one line."""
    observed, facts = farm()
    hostile = {"a\nvms:\n  - name: evil": "grid_a100-20c", "quote'd: x #y": "grid_a100-20c", "r{1..3}": "grid_a100-20c"}
    for name, profile in hostile.items():
        observed.vms[name] = ObservedVm(name, host="esx-02", cluster="GPU-Cluster", cpus=2, memory_mb=8192,
                                        memory_reservation_locked=True, firmware="efi", extra_config=dict(LARGE_BAR),
                                        vgpus=[ObservedVgpu(4001, profile)])  # fmt: skip
    observed.warnings.append("host esx-09: not responding\nvms:\n  - name: injected")
    text = export_inventory(observed, facts)
    inv = load_inventory_text(text)
    names = {vm.name for vm in inv.vms}
    assert "quote'd: x #y" in names and "evil" not in names and "injected" not in names
    assert not any(n.startswith("r") and n[1:].isdigit() for n in names)  # the braces were not read as a range
    assert "# VM 'a\\nvms:\\n  - name: evil' left out: its name must not contain control or invisible" in text
    assert "# VM 'r{1..3}' left out: its name has braces, which an inventory reads as a range of names" in text
    assert "# vCenter: host esx-09: not responding\\nvms:\\n  - name: injected" in text
    assert make_plan(inv, observed).is_empty
