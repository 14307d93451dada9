"""Write an inventory (apiVersion vgpuctl/v1) that describes a farm as it is. Pure: Observed (+ host facts) -> YAML.

Hosts: one `cluster:` entry per cluster with the settings all its hosts share, and a `name:` entry per host for
what differs (the host-entry merge rules put them together again): graphics default type and assignment
policy, per GPU the mode, time-sliced vGPU mode and graphics type, NVLink and the scheduler from the nvidia
module options. VMs: those with vGPUs (or every VM), with profile x count or the list form, NVLink when all
their vGPUs form one device group, cpus, memory, the network adapters of a VM with an RDMA device (PVRDMA,
SR-IOV or a passthrough NIC), `power: keep`; runs of names (`train-{01..12}`) where the
VMs are otherwise the same. Comments say where values came from and what was left out.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any

from vgpuctl import yamlout
from vgpuctl.domain import AdapterType, Firmware, Keep, NvlinkRequirement, Power
from vgpuctl.inventory.classes import VmClassSpec
from vgpuctl.inventory.schema import API_VERSION, vm_name_problem
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed, ObservedHost, ObservedNic, ObservedVm
from vgpuctl.netrules import network_rules
from vgpuctl.profiles import BOARDS, ProfileError, board_for_device, parse_profile, try_parse
from vgpuctl.records.classes import ClassState, SupervisorState
from vgpuctl.settings import SETTINGS
from vgpuctl.settings.facts import MODULE_OPTIONS, HostFacts
from vgpuctl.settings.pergpu import GPUS_KEY
from vgpuctl.supervisor.vmclasses import desired_class
from vgpuctl.vms.network import is_nic
from vgpuctl.vms.plan import MIN_HW_VERSION_LARGE_BAR, mmio_missing

_NUMBERED = re.compile(r"^(?P<prefix>.*?)(?P<num>\d+)(?P<suffix>[^\d]*)$")


@dataclass
class ExportOptions:
    cluster: str | None = None
    host: str | None = None
    all_vms: bool = False


@dataclass
class _Entry:
    """One `hosts:` entry before rendering: key path -> value, plus per-GPU settings and comments."""

    target: tuple[str, str]  # ("cluster", name) | ("name", host)
    settings: dict[str, Any] = field(default_factory=dict)  # "graphics.default_type", "nvlink", "scheduler", ...
    gpus: dict[str, dict[str, str]] = field(default_factory=dict)  # select -> {mode, vgpu_mode, graphics_type}
    comments: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- hosts


GpuValues = dict[str, dict[str, str]]  # PCI id -> per-GPU setting -> value


def host_settings(host: ObservedHost, facts: HostFacts | None) -> tuple[dict[str, Any], GpuValues, list[str]]:
    """The settings vgpuctl manages, as they are now: each setting's own export, in registry order. Returns
    the host-wide values (display key -> value), per GPU the values of the per-GPU settings, and notes on what
    could not be read (the host's first, then its GPUs'). Settings kept in the nvidia module options are written
    only when the options were read (the configured ones: what the host runs after its next reboot)."""
    values: dict[str, Any] = {}
    gpus: GpuValues = {}
    notes: list[str] = []
    gpu_notes: list[str] = []
    kept = [s.key for s in SETTINGS if s.reads.module_options]
    read = facts.get(MODULE_OPTIONS) if facts is not None else None
    options = read.configured if read is not None else None
    if options is None:
        notes.append(f"{' and '.join(kept)} left out: the nvidia module options were not read")
    elif read is not None and read.effective is not None and read.effective != options:
        notes.append("the nvidia module options change at the next reboot: values below are the configured ones")
    for setting in SETTINGS:
        if options is None and setting.reads.module_options:
            continue
        part = setting.export(host, facts)
        values.update(part.values)
        for pci, own in part.gpus.items():
            gpus.setdefault(pci, {}).update(own)
        (gpu_notes if part.gpus else notes).extend(part.notes)
    return values, gpus, notes + gpu_notes


def _unread_mig(observed: Observed, hosts: list[str], facts: Mapping[str, HostFacts]) -> list[str]:
    """Hosts with MIG-capable GPUs whose shell was not read: their MIG modes are vSphere's."""
    out = []
    for name in hosts:
        f = facts.get(name)
        if f is not None and f.shell:
            continue
        if any((b := board_for_device(g.device_name)) in BOARDS and BOARDS[b or ""].mig_capable
               for g in observed.hosts[name].gpus):
            out.append(name)
    return out


def _common(values: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The values all items have."""
    items = list(values)
    if not items:
        return {}
    first = items[0]
    return {k: v for k, v in first.items() if all(k in other and other[k] == v for other in items[1:])}


def _majority(values: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per key that every item has, the value most items have (ties: the first seen): a cluster entry states
    it once and the hosts or GPUs that differ say so in their own entries."""
    items = list(values)
    if not items:
        return {}
    out: dict[str, Any] = {}
    for key in items[0]:
        if not all(key in item for item in items):
            continue
        seen = [repr(item[key]) for item in items]
        best = max(dict.fromkeys(seen), key=seen.count)
        out[key] = next(item[key] for item in items if repr(item[key]) == best)
    return out


def host_entries(observed: Observed, hosts: list[str], facts: Mapping[str, HostFacts]) -> list[_Entry]:
    by_cluster: dict[str | None, list[str]] = {}
    for name in hosts:
        by_cluster.setdefault(observed.hosts[name].cluster, []).append(name)
    entries: list[_Entry] = []
    for cluster in sorted(by_cluster, key=lambda c: (c is None, c or "")):
        names = sorted(by_cluster[cluster])
        exported = {n: host_settings(observed.hosts[n], facts.get(n)) for n in names}
        per_host = {n: (values, notes) for n, (values, _, notes) in exported.items()}
        per_gpu = {n: gpus for n, (_, gpus, _) in exported.items()}
        whole_cluster = cluster is not None and set(names) == set(observed.clusters.get(cluster, []))
        shared: dict[str, Any] = {}
        shared_gpu: dict[str, str] = {}
        if whole_cluster and len(names) > 1:
            shared = _majority(s for s, _ in per_host.values())
            shared_gpu = _majority(g for n in names for g in per_gpu[n].values())
            entry = _Entry(("cluster", cluster or ""), dict(shared))
            if shared_gpu:
                entry.gpus["all"] = dict(shared_gpu)
            entry.comments.append(f"what its {len(names)} hosts share (config.graphicsConfig, graphicsInfo, nvidia "
                                  "module options)")
            entries.append(entry)
        for n in names:
            settings, notes = per_host[n]
            own = {k: v for k, v in settings.items() if shared.get(k, object()) != v}
            gpus = _gpu_entries(per_gpu[n], shared_gpu)
            if not own and not gpus and not notes and shared:
                continue
            entry = _Entry(("name", n), own, gpus, list(notes))
            entry.comments.insert(0, f"differs from cluster {cluster}" if shared else
                                  "config.graphicsConfig, graphicsInfo, nvidia module options")
            entries.append(entry)
    return entries


def _gpu_entries(gpus: Mapping[str, dict[str, str]], inherited: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Per-GPU differences from what the host inherits: an `all` entry when its GPUs agree, else one per GPU."""
    if not gpus:
        return {}
    diffs = {pci: {k: v for k, v in s.items() if inherited.get(k) != v} for pci, s in gpus.items()}
    if not any(diffs.values()):
        return {}
    agreed = _common(gpus.values())
    agreed = {k: v for k, v in agreed.items() if inherited.get(k) != v}
    out: dict[str, dict[str, str]] = {}
    if agreed:
        out["all"] = agreed
    for pci in sorted(gpus):
        rest = {k: v for k, v in gpus[pci].items() if {**inherited, **agreed}.get(k) != v}
        if rest:
            out[pci] = rest
    return out


# ----------------------------------------------------------------------------------------------- VMs


@dataclass
class _Vm:
    name: str
    fields: tuple[tuple[str, Any], ...]  # everything but the name, rendered in order
    notes: tuple[str, ...] = ()


def vm_fields(vm: ObservedVm, observed: Observed) -> tuple[tuple[tuple[str, Any], ...], tuple[str, ...]]:
    host = observed.hosts.get(vm.host or "")
    cluster = vm.cluster or (host.cluster if host else None)
    fields: list[tuple[str, Any]] = []
    notes: list[str] = []
    if len(observed.same_name.get(vm.name, [])) > 1:  # the name alone does not say which VM: its folder does
        fields.append(("folder", vm.folder or "/"))
    if cluster:
        fields.append(("cluster", cluster))
    elif vm.host:
        fields.append(("host", vm.host))
    fields.append(("cpus", vm.cpus))
    fields.append(("memory_gb", _gb(vm.memory_mb)))
    counts = Counter(d.profile for d in vm.vgpus)
    if counts:
        order = list(dict.fromkeys(d.profile for d in vm.vgpus))
        fields.append(("vgpus", [(p, counts[p]) for p in order]))
        unknown = [p for p in order if not _known(p)]
        if unknown:
            notes.append(f"vGPU type {', '.join(unknown)} is not in vgpuctl's catalogue: written as the host "
                         "reports it")
        groups = {d.device_group_key for d in vm.vgpus}
        if len(vm.vgpus) > 1 and len(groups) == 1 and None not in groups:
            fields.append(("nvlink", NvlinkRequirement.REQUIRED))
    adapters, passthrough_nics, left = network_fields(vm, host)
    if adapters:
        fields.append(("network", adapters))
    notes += left
    others = vm.other_passthrough - passthrough_nics
    if others > 0:
        notes.append(f"{others} PCI passthrough device(s) that are not vGPUs left out (never touched)")
    lacking = lacks(vm)
    if lacking:
        fields.append(("keep", [str(k) for k in lacking]))
        notes.append(f"lacks {', '.join(LACKS[k] for k in lacking)}, which NVIDIA requires for vGPU VMs: `keep` leaves "
                     "them as they are (plan warns); remove an item and plan shows the change")
    fields.append(("power", Power.KEEP))
    return tuple(fields), tuple(notes)


Adapter = tuple[tuple[str, str], ...]  # an adapter's keys and values, hashable: VMs alike share a name range


def network_fields(vm: ObservedVm, host: ObservedHost | None) -> tuple[tuple[Adapter, ...], int, list[str]]:
    """The `network` list of a VM with an RDMA device (a PVRDMA, SR-IOV or passthrough NIC), all its adapters
    that vgpuctl's adapter types describe, as the plan matches them (kind, port group, the physical NIC): an
    inventory that lists them plans no adapter change. Other VMs get none, so their adapters are left as they are.
    Returns the adapters, how many passthrough devices were written as NICs, and notes on what was left out."""
    kinds = {str(k): k for k in AdapterType}
    if not any(kinds[n.kind].is_rdma for n in vm.nics if n.kind in kinds):
        return (), 0, []
    adapters: list[Adapter] = []
    passthrough_nics = 0
    left: list[str] = []
    for nic in vm.nics:
        entry = _adapter_entry(nic, kinds.get(nic.kind), host)
        if entry is None:
            if nic.kind != AdapterType.PASSTHROUGH or is_nic(nic, host):
                left.append(f"an adapter of type {nic.kind}{' on ' + nic.network if nic.network else ''} left out "
                            "(vgpuctl leaves adapters the list does not name as they are)")
            continue
        passthrough_nics += nic.kind == AdapterType.PASSTHROUGH
        adapters.append(entry)
    return tuple(adapters), passthrough_nics, left


def _adapter_entry(nic: ObservedNic, kind: AdapterType | None, host: ObservedHost | None) -> Adapter | None:
    if kind is None:
        return None
    if kind is AdapterType.PASSTHROUGH:
        device = _passthrough_device(nic, host)
        return (("type", str(kind)), ("device", device)) if device else None
    if not nic.network:
        return None
    entry = [("type", str(kind)), ("portgroup", nic.network)]
    if kind is AdapterType.PVRDMA and nic.protocol:
        entry.append(("protocol", nic.protocol))
    if kind is AdapterType.SRIOV:
        if not nic.device:
            return None
        entry.insert(1, ("device", nic.device))
    return tuple(entry)


def _passthrough_device(nic: ObservedNic, host: ObservedHost | None) -> str | None:
    """The NIC a passthrough adapter holds: its PCI id, or for Dynamic DirectPath its model (from the allowed
    device ids); None when it is not a NIC."""
    if not is_nic(nic, host):
        return None
    if nic.allowed:  # Dynamic DirectPath: by model, whichever NIC of it the host handed out
        rules = network_rules()
        models = {m.model for _, d in nic.allowed if (m := rules.nic_model(d)) is not None}
        return models.pop() if len(models) == 1 else None
    return nic.device


LACKS = {Keep.MMIO: "64-bit MMIO", Keep.MEMORY_LOCK: "a locked memory reservation", Keep.EFI: "EFI firmware",
         Keep.HARDWARE_VERSION: "hardware version vmx-17"}


def lacks(vm: ObservedVm) -> list[Keep]:
    """What vgpuctl would set for the VM's vGPUs that the VM (made by hand) does not have, in `keep` order; none
    when a vGPU's type is not one vgpuctl can size."""
    parsed = [try_parse(d.profile) for d in vm.vgpus]
    known = [p for p in parsed if p is not None]
    if not known or len(known) != len(parsed):
        return []
    out = [] if vm.memory_reservation_locked else [Keep.MEMORY_LOCK]
    if any(p.large_bar for p in known):
        hw = re.fullmatch(r"vmx-(\d+)", vm.hardware_version or "")
        out += [Keep.EFI] if vm.firmware != Firmware.EFI else []
        out += [Keep.HARDWARE_VERSION] if hw and int(hw.group(1)) < MIN_HW_VERSION_LARGE_BAR else []
        out += [Keep.MMIO] if mmio_missing(vm, known) is not None else []
    return sorted(out, key=list(Keep).index)


def _known(profile: str) -> bool:
    try:
        return parse_profile(profile).board in BOARDS
    except ProfileError:
        return False


def _gb(mb: int) -> float | int:
    gb = mb / 1024
    return int(gb) if gb == int(gb) else gb


def ranges(vms: list[_Vm]) -> list[tuple[str, _Vm]]:
    """(name or name range, representative) in name order: runs of consecutive numbers with the same width,
    prefix, suffix and fields become `prefix{first..last}suffix`."""
    out: list[tuple[str, _Vm]] = []
    run: list[tuple[int, _Vm]] = []
    key: tuple[Any, ...] | None = None

    def flush() -> None:
        if not run:
            return
        if len(run) == 1:
            out.append((run[0][1].name, run[0][1]))
        else:
            m = _NUMBERED.match(run[0][1].name)
            assert m is not None
            width = len(m["num"])
            first, last = str(run[0][0]).zfill(width), str(run[-1][0]).zfill(width)
            out.append((f"{m['prefix']}{{{first}..{last}}}{m['suffix']}", run[0][1]))
        run.clear()

    for vm in sorted(vms, key=_sort_key):
        m = _NUMBERED.match(vm.name)
        if m is None or "{" in vm.name or "}" in vm.name:
            flush()
            key = None
            out.append((vm.name, vm))
            continue
        k = (m["prefix"], m["suffix"], len(m["num"]), vm.fields, vm.notes)
        number = int(m["num"])
        if k != key or not run or number != run[-1][0] + 1:
            flush()
        key = k
        run.append((number, vm))
    flush()
    return out


def _sort_key(vm: _Vm) -> tuple[Any, ...]:
    m = _NUMBERED.match(vm.name)
    if m is None:
        return (vm.name, "", 0, 0)
    return (m["prefix"], m["suffix"], len(m["num"]), int(m["num"]))


# --------------------------------------------------------------------------------- VM classes, namespaces


def supervisor_sections(state: SupervisorState, clusters: set[str] | None = None) -> str:
    """`vm_classes:` (the classes with vGPUs) and `namespaces:` (those using one of them), so that `vgpuctl k8s
    plan` on the file plans no change. `clusters` limits both to namespaces on these supervisor clusters."""
    classes, namespaces = supervisor_items(state, clusters)
    if not classes:
        return ""
    return SUPERVISOR_COMMENT + yamlout.section("vm_classes", classes) + yamlout.section("namespaces", namespaces)


SUPERVISOR_COMMENT = yamlout.comment("VM classes with vGPUs and the supervisor namespaces that use them (vSphere "
                                     "Automation REST API)")
Item = tuple[list[str], dict[str, Any]]  # a list item: its comment lines, its data


def supervisor_items(state: SupervisorState, clusters: set[str] | None = None) -> tuple[list[Item], list[Item]]:
    """The items of `vm_classes:` and `namespaces:` (no classes: nothing to write)."""
    gpu_classes = {n: c for n, c in state.classes.items() if c.vgpus}
    namespaces = [ns for ns in sorted(state.namespaces.values(), key=lambda n: n.name)
                  if any(c in gpu_classes for c in ns.vm_classes)
                  and (clusters is None or state.supervisor_clusters.get(ns.cluster) in clusters)]
    if clusters is not None:
        used = {c for ns in namespaces for c in ns.vm_classes}
        gpu_classes = {n: c for n, c in gpu_classes.items() if n in used}
    if not gpu_classes:
        return [], []
    items: list[Item] = []
    for ns in namespaces:
        entry: dict[str, Any] = {"name": ns.name}
        cluster = state.supervisor_clusters.get(ns.cluster)
        if cluster is not None:
            entry["supervisor"] = cluster
        entry["vm_classes"] = [c for c in ns.vm_classes if c in gpu_classes]
        others = [c for c in ns.vm_classes if c not in gpu_classes]
        also = f"also uses {', '.join(others)} (no vGPUs: not written, its association is left alone)"
        items.append(([also] if others else [], entry))
    return [_class_item(gpu_classes[name]) for name in sorted(gpu_classes)], items


def _class_item(have: ClassState) -> tuple[list[str], dict[str, Any]]:
    counts = Counter(have.vgpus)
    vgpus = [{"profile": p, "count": counts[p]} for p in dict.fromkeys(have.vgpus)]
    spec: dict[str, Any] = {"name": have.name, "cpus": have.cpus, "memory_gb": _gb(have.memory_mb)}
    if have.cpu_reservation:
        spec["cpu_reservation"] = have.cpu_reservation
    notes: list[str] = []
    if have.memory_reservation != 100:
        notes.append(f"vCenter reserves {have.memory_reservation}% of its memory; vGPUs need 100%, so plan shows "
                     "that change")
    try:
        automatic = desired_class(VmClassSpec.model_validate({**spec, "vgpus": vgpus})).extra_config
    except (ValueError, ProfileError) as err:
        automatic = {}
        notes.append(f"does not validate as it is: {str(err).splitlines()[-1].strip()}")
    extra = {k: v for k, v in have.extra_config.items() if automatic.get(k) != v}
    notes += [f"vCenter's class has no {k}; vgpuctl sets {v}, so plan shows that change"
              for k, v in automatic.items() if k not in have.extra_config]
    entry = {**spec, "vgpus": vgpus[0] if len(vgpus) == 1 else vgpus}
    if extra:
        entry["extra_config"] = extra
    return notes, entry


# --------------------------------------------------------------------------------------------- render


def _entry_data(e: _Entry) -> dict[str, Any]:
    """The entry's settings in registry order: a key with sub keys (graphics.default_type) as a mapping, the
    per-GPU settings as the `gpus` list."""
    data: dict[str, Any] = {e.target[0]: e.target[1]}
    for setting in SETTINGS:
        if setting.key == GPUS_KEY:
            if e.gpus:
                data[GPUS_KEY] = [{"select": select, **s} for select, s in e.gpus.items()]
            continue
        if setting.key in e.settings:
            data[setting.key] = e.settings[setting.key]
        subkeys = {k.split(".", 1)[1]: v for k, v in e.settings.items() if k.startswith(setting.key + ".")}
        if subkeys:
            data[setting.key] = subkeys
    return data


def _vm_data(name: str, vm: _Vm) -> dict[str, Any]:
    data: dict[str, Any] = {"name": name}
    for key, value in vm.fields:
        if key == "keep":
            data["keep"] = [str(k) for k in value]
        elif key == "network":
            data["network"] = [dict(adapter) for adapter in value]
        elif key == "vgpus":
            vgpus = [{"profile": p, "count": n} for p, n in value]
            data["vgpus"] = vgpus[0] if len(vgpus) == 1 else vgpus
        else:
            data[key] = value
    return data


HEADER = ("Written by `vgpuctl export`: the farm as vCenter reported it. `vgpuctl plan` on this file plans",
          "no change; edit a value and plan shows exactly that change.")  # fmt: skip


def export_inventory(observed: Observed, facts: Mapping[str, HostFacts] | None = None,
                     options: ExportOptions | None = None, supervisor: SupervisorState | str | None = None) -> str:
    """The inventory text. `facts` (per host: module options, graphicsConfig.deviceType, MIG from the shell)
    refine the host entries; without them NVLink and the scheduler are left out. `supervisor`: the VM classes
    and namespaces read over REST (cluster names, not ids), or why they could not be read."""
    head: dict[str, Any] = {"apiVersion": API_VERSION}
    if observed.datacenter:
        head["vcenter"] = {"datacenter": observed.datacenter}
    part = export_part(observed, facts, options, supervisor)
    text = "".join(yamlout.comment(line) for line in HEADER) + yamlout.dump(head)
    text += yamlout.section("hosts", part.hosts)
    text += "".join(yamlout.comment(n) for n in part.vm_notes)
    text += yamlout.section("vms", part.vms)
    if part.supervisor_note is not None:
        text += yamlout.comment(part.supervisor_note)
    elif part.classes:
        text += SUPERVISOR_COMMENT + yamlout.section("vm_classes", part.classes)
        text += yamlout.section("namespaces", part.namespaces)
    return text


@dataclass
class ExportPart:
    """One farm's part of an exported inventory: its sections' items and the comments that go with them."""

    hosts: list[Item]
    vm_notes: list[str]
    vms: list[Item]
    classes: list[Item] = field(default_factory=list)
    namespaces: list[Item] = field(default_factory=list)
    supervisor_note: str | None = None  # why the VM classes and namespaces were not read


def export_part(observed: Observed, facts: Mapping[str, HostFacts] | None = None,
                options: ExportOptions | None = None, supervisor: SupervisorState | str | None = None) -> ExportPart:
    options = options or ExportOptions()
    facts = facts or {}
    hosts = [n for n, h in sorted(observed.hosts.items())
             if h.gpus and (options.cluster is None or h.cluster == options.cluster)
             and (options.host is None or n == options.host)]
    if options.cluster is not None and options.cluster not in observed.clusters:
        raise ValueError(f"cluster {options.cluster!r} not found (clusters: {', '.join(sorted(observed.clusters))})")
    if options.host is not None and options.host not in observed.hosts:
        raise ValueError(f"host {options.host!r} not found")
    scope = set(hosts) if (options.cluster or options.host) else None
    vms, left_out, notes = _vms(observed, scope, options.all_vms)
    part = ExportPart([(e.comments, _entry_data(e)) for e in host_entries(observed, hosts, facts)],
                      [*notes, *_vm_section_notes(observed, hosts, facts, left_out)],
                      [(list(vm.notes), _vm_data(name, vm)) for name, vm in ranges(vms)])
    if isinstance(supervisor, str):
        part.supervisor_note = f"VM classes and namespaces not read: {supervisor}"
    elif supervisor is not None:
        clusters = {observed.hosts[h].cluster or "" for h in hosts} if (options.cluster or options.host) else None
        part.classes, part.namespaces = supervisor_items(supervisor, clusters)
    return part


@dataclass
class FleetExport:
    """One vCenter of a fleet's export: its `vcenters` entry (name, url, datacenter, tls: nothing secret) and its
    part, or why it could not be read."""

    entry: dict[str, Any]
    part: ExportPart | None
    error: str | None = None


def export_fleet(vcenters: list[FleetExport]) -> str:
    """A fleet's inventory: `vcenters:` and every vCenter's entries, each naming its vCenter (`vcenter: NAME`), so
    that `plan` on it plans no change; a vCenter not read keeps its `vcenters` entry, with a comment why."""
    text = "".join(yamlout.comment(line) for line in HEADER) + yamlout.dump({"apiVersion": API_VERSION})
    text += "".join(yamlout.comment(f"vCenter {v.entry['name']} not read: {v.error}") for v in vcenters if v.error)
    text += yamlout.section("vcenters", [([], v.entry) for v in vcenters])

    def tagged(section: str) -> list[Item]:
        return [(notes, _with_vcenter(data, str(v.entry["name"]))) for v in vcenters if v.part is not None
                for notes, data in getattr(v.part, section)]

    text += yamlout.section("hosts", tagged("hosts"))
    text += "".join(yamlout.comment(f"vCenter {v.entry['name']}: {n}") for v in vcenters if v.part is not None
                    for n in v.part.vm_notes)
    text += yamlout.section("vms", tagged("vms"))
    text += "".join(yamlout.comment(f"vCenter {v.entry['name']}: {v.part.supervisor_note}") for v in vcenters
                    if v.part is not None and v.part.supervisor_note)
    if tagged("classes"):
        text += SUPERVISOR_COMMENT + yamlout.section("vm_classes", tagged("classes"))
        text += yamlout.section("namespaces", tagged("namespaces"))
    return text


def _with_vcenter(data: dict[str, Any], vcenter: str) -> dict[str, Any]:
    """The entry with `vcenter: NAME` after the key that names it (cluster, name)."""
    first, *rest = data.items()
    return dict([first, ("vcenter", vcenter), *rest])


def _vm_section_notes(observed: Observed, hosts: list[str], facts: Mapping[str, HostFacts], left_out: int) -> list[str]:
    plural = "s" if left_out != 1 else ""
    notes = [f"{left_out} VM{plural} without vGPUs left out (--all-vms writes them)"] if left_out else []
    unread = _unread_mig(observed, hosts, facts)
    if unread:
        shown = ", ".join(unread[:5]) + (f" and {len(unread) - 5} more" if len(unread) > 5 else "")
        notes += [f"MIG modes of {shown} as vSphere reports them (no ESXi SSH settings: the shell was not read);",
                  "a MIG switch pending there shows as a change when plan reads the shell."]
    return notes + [f"vCenter: {warning}" for warning in observed.warnings]


def _name_problem(name: str) -> str | None:
    """Why an inventory cannot name this VM (its name as vCenter reports it), or None."""
    if "{" in name or "}" in name:
        return "has braces, which an inventory reads as a range of names"
    return vm_name_problem(name)


def _vms(observed: Observed, scope: set[str] | None, all_vms: bool) -> tuple[list[_Vm], int, list[str]]:
    """The VMs to write, how many without vGPUs were left out, and notes on VMs no inventory can name."""
    out: list[_Vm] = []
    left_out = 0
    notes: list[str] = []
    for vm in observed.vms.values():
        if vm.is_template or (scope is not None and vm.host not in scope):
            continue
        if not vm.vgpus and not all_vms:
            left_out += 1
            continue
        unusable = _name_problem(vm.name)
        if unusable is not None:
            notes.append(f"VM {vm.name!r} left out: its name {unusable}")
            continue
        fields, vm_notes = vm_fields(vm, observed)
        out.append(_Vm(vm.name, fields, vm_notes))
    return out, left_out, notes
