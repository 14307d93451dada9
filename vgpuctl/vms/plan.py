"""plan_vms: the pure function Inventory x Observed -> the VMs' part of a Plan. No I/O (the whole plan, hosts
first: vgpuctl.planner).

VMs in vCenter that the inventory does not name are left alone. What is planned per VM and which checks refuse a
plan: docs/architecture.md, "What the VM plan decides".
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import field, replace

from vgpuctl.domain import Firmware, Keep, NvlinkRequirement, Power, PowerState, VmState
from vgpuctl.farm.placement import Placement, power_on_key
from vgpuctl.farm.state import Request, farm_from_observed, place_farm
from vgpuctl.inventory import Inventory, KeyPath, VmSpec
from vgpuctl.inventory.checks import KEEP_ABSENT
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import (
    CloneSpec,
    DeviceChange,
    FieldChange,
    Observed,
    ObservedHost,
    ObservedVgpu,
    ObservedVm,
    Op,
    Plan,
    Problem,
    VmChange,
    folder_label,
    folder_path,
)
from vgpuctl.profiles import (
    BOARDS,
    ProfileError,
    VgpuProfile,
    max_vgpus_per_vm,
    mixing_problem,
    mmio_size_gb,
    offered_alternatives,
    parse_profile,
    spellings,
    try_parse,
)
from vgpuctl.vms import gpudirect
from vgpuctl.vms.identity import address_conflicts, plan_identity
from vgpuctl.vms.network import NetPlan, plan_network, resolve_devices

USE_64BIT_MMIO = "pciPassthru.use64bitMMIO"
MMIO_SIZE = "pciPassthru.64bitMMIOSizeGB"
MIN_HW_VERSION_LARGE_BAR = 17
_UVM_KEY = re.compile(r"^pciPassthru\d+\.cfg\.enable_uvm$", re.IGNORECASE)
_HW_VERSION = re.compile(r"vmx-(\d+)")
RUNNING = (PowerState.ON, PowerState.SUSPENDED)


@dataclass
class _VmPlan:
    spec: VmSpec
    change: VmChange
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    exists: bool = True
    profiles: list[str] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)  # hosts the VM is on or may be created on
    key: str = ""  # its key in observed.vms (its name unless VMs in several folders share the name)
    located: list[tuple[KeyPath, str]] = field(default_factory=list)  # errors about one inventory key
    net: NetPlan = field(default_factory=NetPlan)


def plan_vms(inv: Inventory, observed: Observed, only_vms: Collection[str] | None = None) -> Plan:
    """The inventory's VMs against the farm as it will be (`observed`: the hosts predicted after their planned
    changes), placed in power-on order; `only_vms`: plan only these VM entries (a scoped run)."""
    planned = [v for v in inv.vms if only_vms is None or v.name in only_vms]
    plans = [_plan_vm(spec, observed) for spec in sorted(planned, key=lambda v: v.name)]
    _check_capacity(plans, observed)
    plan = Plan()
    for vp in plans:
        plan.vm_changes.append(vp.change)
        plan.problems.extend(Problem(e, vm=vp.spec.name) for e in vp.errors)
        plan.problems.extend(Problem(m, vm=vp.spec.name, at=_at(inv, path)) for path, m in vp.located)
        plan.warnings.extend(f"vm {vp.spec.name}: {w}" for w in vp.warnings)
    return plan


def _at(inv: Inventory, path: KeyPath) -> str | None:
    """FILE:LINE:COL of an inventory key (None for an inventory built in code, which has no file)."""
    err = inv.locate(path).error("")
    if inv.source_path is None or err.line is None:
        return None
    return f"{err.file}:{err.line}:{err.col}" if err.col is not None else f"{err.file}:{err.line}"


# ---------------------------------------------------------------------------------------------- one VM


def _plan_vm(spec: VmSpec, observed: Observed) -> _VmPlan:
    vp = _VmPlan(spec, VmChange(spec.name))
    if spec.state == VmState.ABSENT:
        return _plan_removal(vp, observed)
    try:
        parsed = [parse_profile(p) for p in spec.vgpu_profiles]
    except ProfileError as exc:
        vp.errors.append(_unexplained(spec, observed, exc))
        return vp
    problem = mixing_problem(parsed)  # validate() says so too; kept here for inventories built in code
    if problem:
        vp.errors.append(problem)
        return vp
    key, obs, problem = find_vm(observed, spec.name, folder_path(spec.folder))
    if problem:
        vp.errors.append(problem)
        return vp
    vp.key = key or spec.name
    vp.change.observed_key = key if key != spec.name else None
    if obs is not None and obs.is_template:
        vp.errors.append("is a template in vCenter, not a VM")
        return vp
    if obs is None:
        base = _plan_clone(vp, observed)
        if base is None:
            return vp
    else:
        base = obs
        _locate_existing(vp, obs, observed)
    if spec.manages_vgpus:
        parsed = _host_spelling(vp, parsed, observed)
        vp.profiles = [p.name for p in parsed]
        _check_offer_and_limit(vp, base, parsed, observed)
        _check_uvm_and_nvlink(vp, base, parsed)
        _diff_devices(vp, base, parsed)
    else:  # no `vgpus` key: the VM keeps the vGPUs it has (a clone, its template's)
        parsed = []
        vp.profiles = _current_profiles(base)
    _diff_fields(vp, base, parsed)
    _plan_network(vp, base, observed)
    _plan_power(vp, base)
    return vp


def _plan_removal(vp: _VmPlan, observed: Observed) -> _VmPlan:
    """`state: absent`: the VM the entry names is powered off and destroyed, its vGPUs listed as removed; nothing
    when it does not exist. Never a VM the inventory does not name, never a template, never one whose entry says
    `power: keep` (validate() says so too; kept here for inventories built in code)."""
    if vp.spec.power == Power.KEEP:
        vp.located.append((("vms", vp.spec._index, "power"), KEEP_ABSENT))
        return vp
    key, obs, problem = find_vm(observed, vp.spec.name, folder_path(vp.spec.folder))
    if problem:
        vp.errors.append(problem)
        return vp
    if obs is None:
        vp.exists = False
        return vp
    if obs.is_template:
        vp.errors.append("is a template in vCenter, not a VM: vgpuctl does not remove templates")
        return vp
    vp.key = key or vp.spec.name
    change = vp.change
    change.observed_key = key if key != vp.spec.name else None
    change.destroy = True
    change.power_off = obs.power_state in RUNNING
    change.devices = [DeviceChange(Op.REMOVE, d.profile, d.key) for d in sorted(obs.vgpus, key=lambda d: d.key)]
    return vp


def _plan_network(vp: _VmPlan, base: ObservedVm, observed: Observed) -> None:
    """Adapters (vgpuctl.vms.network), all memory reserved for RDMA and passthrough adapters, GPUDirect RDMA's
    settings, and a new VM's identity (vgpuctl.vms.identity)."""
    spec, change = vp.spec, vp.change
    vp.net = net = plan_network(spec, base, observed, vp.candidates)
    vp.located += net.errors
    if net.hosts is not None and not vp.exists and not net.errors:
        vp.candidates = net.hosts
    if change.clone is not None:
        change.clone.nics = net.changes
    else:
        change.nics = net.changes
    locked = any(f.field == "memoryReservationLockedToMax" for f in change.fields)
    if net.reserve_memory and not base.memory_reservation_locked and not locked:
        change.fields.append(FieldChange("memoryReservationLockedToMax", False, True))
    if spec.gpudirect_rdma:
        change.extra_config.update(gpudirect.extra_config(base.extra_config))
    vp.located += _mac_conflicts(vp, observed)
    if change.clone is not None and spec.identity is not None:
        change.clone.identity = identity = plan_identity(spec, net.ethernet)
        if identity is not None:
            vp.located += address_conflicts(spec, identity, observed, None)


def _mac_conflicts(vp: _VmPlan, observed: Observed) -> list[tuple[KeyPath, str]]:
    if not any(adapter.mac is not None for adapter in vp.spec.adapters):
        return []  # the farm's MAC addresses are looked at only for entries that fix one
    owners = {n.mac.lower(): vm.name for key, vm in observed.vms.items() if key != vp.key for n in vm.nics if n.mac}
    out: list[tuple[KeyPath, str]] = []
    for j, adapter in enumerate(vp.spec.adapters):
        if adapter.mac is not None and adapter.mac in owners:
            out.append((("vms", vp.spec._index, "network", j, "mac"),
                        f"MAC address {adapter.mac} is in use by VM {owners[adapter.mac]}"))
    return out


def find_vm(observed: Observed, name: str, folder: str | None) -> tuple[str | None, ObservedVm | None, str]:
    """The VM an inventory entry means: (its key in observed.vms, the VM, "") when there is one, (None, None, "")
    when there is none (it may be created), else (None, None, why not) when the name alone cannot tell which VM
    is meant, or names VMs only in other folders than `folder` (a path as model.folder_path gives it)."""
    keys = observed.named(name)
    matching = observed.named(name, folder)
    if len(matching) == 1:
        return matching[0], observed.vms[matching[0]], ""
    folders = ", ".join(sorted(folder_label(observed.vms[k].folder) for k in keys))
    if len(matching) > 1:
        return None, None, (f"the name matches {len(matching)} VMs, in folders {folders}: set 'folder' to the one "
                            "meant (/ for the root)")
    if keys:
        return None, None, (f"no VM of that name in folder {folder_label(folder)}; there is one in {folders}: set "
                            "'folder' to where it is, or give the new VM a name of its own")
    return None, None, ""


def _unexplained(spec: VmSpec, observed: Observed, exc: ProfileError) -> str:
    """A VM asks for a name no table explains: what is wrong with it and the profiles offered where it may run
    that come closest (only ones vgpuctl can place)."""
    names = [spec.host] if spec.host else observed.clusters.get(spec.cluster or "", []) or list(observed.hosts)
    offered = {p for n in names if (h := observed.hosts.get(n)) is not None for p in h.offered_profiles}
    unknown = next((p for p in spec.vgpu_profiles if try_parse(p) is None), "")
    text = str(exc)
    if unknown in offered:
        text = (f"asks for {unknown}, which the host offers but no vGPU type table explains (framebuffer and "
                f"maxima unknown: vgpuctl does not place it)")
    near = offered_alternatives(unknown, [p for p in offered if try_parse(p) is not None])
    return text + (f"; offered there: {', '.join(near)}" if near else "")


def _current_profiles(vm: ObservedVm) -> list[str]:
    """The VM's own vGPUs, for capacity placement; none when one of them is not a known profile name."""
    try:
        return [parse_profile(d.profile).name for d in sorted(vm.vgpus, key=lambda d: d.key)]
    except ProfileError:
        return []


def _plan_clone(vp: _VmPlan, observed: Observed) -> ObservedVm | None:
    spec = vp.spec
    vp.exists = False
    if not spec.template:
        vp.errors.append("does not exist and has no template to clone from (set 'template')")
        return None
    _, template, problem = find_vm(observed, spec.template, None)
    if problem:
        folders = ", ".join(sorted(folder_label(observed.vms[k].folder) for k in observed.same_name[spec.template]))
        vp.located.append((_key(spec, "template"), f"template {spec.template!r} names VMs in folders {folders}: "
                           "give the template a name of its own"))
    elif template is None:
        vp.located.append((_key(spec, "template"), f"template {spec.template!r} not found"))
    if spec.host is None and spec.cluster is None:
        vp.errors.append("does not exist; set 'cluster' or 'host' to create it")
    elif spec.host is not None:
        if spec.host not in observed.hosts:
            vp.located.append((_key(spec, "host"), f"host {spec.host!r} not found"))
        else:
            vp.candidates = [spec.host]
    elif spec.cluster not in observed.clusters:
        vp.located.append((_key(spec, "cluster"), f"cluster {spec.cluster!r} not found"))
    else:
        vp.candidates = sorted(observed.clusters[spec.cluster or ""])
    folder = folder_path(spec.folder) or None  # the root is the default
    if folder and folder not in observed.folders:
        vp.located.append((_key(spec, "folder"), _missing_folder(folder, observed)))
    if template is None or vp.errors or vp.located:
        return None
    vp.change.clone = CloneSpec(spec.template, spec.cluster, spec.host, folder, spec.cpus, spec.memory_mb)
    # The clone starts as a copy of the template, powered off.
    return ObservedVm(
        name=spec.name, firmware=template.firmware, hardware_version=template.hardware_version,
        memory_reservation_locked=template.memory_reservation_locked, extra_config=dict(template.extra_config),
        vgpus=[ObservedVgpu(d.key, d.profile, d.device_group_key) for d in template.vgpus],
        nics=[replace(n) for n in template.nics],
        power_state=PowerState.OFF, cpus=spec.cpus or template.cpus, memory_mb=spec.memory_mb or template.memory_mb,
    )


def _key(spec: VmSpec, key: str) -> KeyPath:
    """The key path of one key of the VM's inventory entry."""
    return ("vms", spec._index, key)


def _missing_folder(folder: str, observed: Observed) -> str:
    """A clone's folder that the datacenter does not have: vCenter would refuse the clone at apply."""
    where = f"datacenter {observed.datacenter}" if observed.datacenter else "the datacenter"
    known = observed.folders[:FOLDERS_SHOWN]
    more = f" and {len(observed.folders) - FOLDERS_SHOWN} more" if len(observed.folders) > FOLDERS_SHOWN else ""
    listed = f"its VM folders: {', '.join(known)}{more}" if known else "it has no VM folders"
    return (f"folder {folder!r} does not exist in {where} ({listed}): create it in vCenter, or set 'folder' to "
            "one that exists (/ for the root); vgpuctl does not create folders")


FOLDERS_SHOWN = 10  # folders a missing folder's error lists


def _locate_existing(vp: _VmPlan, obs: ObservedVm, observed: Observed) -> None:
    spec = vp.spec
    if obs.host:
        vp.candidates = [obs.host]
    host = observed.hosts.get(obs.host or "")
    cluster = obs.cluster or (host.cluster if host else None)
    if spec.host and spec.host not in observed.hosts:  # a name vCenter does not have is a mistake, not a move
        vp.located.append((_key(spec, "host"), f"host {spec.host!r} not found (the VM is on {obs.host or 'no host'})"))
    elif spec.host and obs.host and spec.host != obs.host:
        vp.warnings.append(f"is on host {obs.host}, the inventory says {spec.host} (vgpuctl does not move VMs)")
    if spec.cluster and spec.cluster not in observed.clusters:
        vp.located.append((_key(spec, "cluster"),
                           f"cluster {spec.cluster!r} not found (the VM is in {cluster or 'no cluster'})"))
    elif spec.cluster and cluster and spec.cluster != cluster:
        vp.warnings.append(f"is in cluster {cluster}, the inventory says {spec.cluster} (vgpuctl does not move VMs)")


def _host_spelling(vp: _VmPlan, parsed: list[VgpuProfile], observed: Observed) -> list[VgpuProfile]:
    """The host is the authority on a type's spelling: a profile the VM's candidate hosts offer only under the
    other prefix (`grid_a100-40c` where hosts say `nvidia_a100-40c`) is planned in theirs, when they agree."""
    hosts = [h for n in vp.candidates if (h := observed.hosts.get(n)) is not None]
    chosen: dict[str, VgpuProfile] = {}  # a VM asks for few distinct names, often many times
    for p in parsed:
        if p.name in chosen:
            continue
        if any(p.name in h.offered_profiles for h in hosts):
            chosen[p.name] = p
            continue
        theirs = {s for h in hosts for s in spellings(p.name) if s in h.offered_profiles}
        chosen[p.name] = parse_profile(theirs.pop()) if len(theirs) == 1 else p
    return [chosen[p.name] for p in parsed]


def _check_offer_and_limit(vp: _VmPlan, base: ObservedVm, parsed: list[VgpuProfile], observed: Observed) -> None:
    if not parsed:
        return
    have = _counts(d.profile for d in base.vgpus)
    added = sorted(name for name, n in _counts(p.name for p in parsed).items() if n > have.get(name, 0))
    hosts = [observed.hosts[h] for h in vp.candidates if h in observed.hosts]
    if vp.exists and not hosts:
        vp.errors.append(f"its host {base.host!r} was not observed" if base.host else "has no host")
        return
    offering = [h for h in hosts if not [p for p in added if p not in h.offered_profiles]]
    if not offering:
        vp.errors.append(_offer_error(vp, hosts, added))
        return
    if not vp.exists:
        vp.candidates = [h.name for h in offering]
    limit_host = min(offering, key=lambda h: _limit(h))
    limit = _limit(limit_host)
    if len(parsed) > limit:
        vp.errors.append(f"{len(parsed)} vGPUs exceed vSphere's limit of {limit} per VM on host {limit_host.name} "
                         f"(API {limit_host.api_version})")


def _limit(host: ObservedHost) -> int:
    by_version = max_vgpus_per_vm(host.api_version)
    return min(by_version, host.max_vgpus_per_vm) if host.max_vgpus_per_vm > 0 else by_version


def _offer_error(vp: _VmPlan, hosts: list[ObservedHost], added: list[str]) -> str:
    if len(hosts) == 1:
        h = hosts[0]
        missing = [p for p in added if p not in h.offered_profiles]
        offered = ", ".join(sorted(h.offered_profiles)) or "none"
        return f"host {h.name} does not offer {', '.join(missing)} in its current GPU mode (offered: {offered})"
    where = f"cluster {vp.spec.cluster}" if vp.spec.cluster else "the candidate hosts"
    return f"no host of {where} offers {', '.join(added)} in its current GPU mode"


def uvm_enabled(extra_config: dict[str, str]) -> list[str]:
    """The `pciPassthru<n>.cfg.enable_uvm` keys set to enable Unified Virtual Memory on a vGPU (1 or true)."""
    return sorted(k for k, v in extra_config.items()
                  if _UVM_KEY.match(k) and str(v).strip().lower() in ("1", "true"))


def _check_uvm_and_nvlink(vp: _VmPlan, base: ObservedVm, parsed: list[VgpuProfile]) -> None:
    """NVLink required, UVM enabled (the VM's or its template's extraConfig), on a board where NVIDIA says UVM
    turns P2P over NVLink off for a multi-vGPU VM (catalogue `uvm`: A100): the VM would not get what it asks."""
    if vp.spec.nvlink != NvlinkRequirement.REQUIRED:
        return
    keys = uvm_enabled(base.extra_config)
    boards = sorted({b.model for p in parsed if (b := BOARDS.get(p.board)) is not None and b.uvm_disables_nvlink_p2p})
    if keys and boards:
        source = "the template's" if not vp.exists else "its"
        vp.errors.append(f"nvlink: required, but {source} extraConfig enables Unified Virtual Memory ({', '.join(keys)}"
                         f"), which turns P2P over NVLink off on {', '.join(boards)} GPUs (NVIDIA, Peer-To-Peer CUDA "
                         "Transfers): set it to 0, or drop nvlink: required")


def _diff_devices(vp: _VmPlan, base: ObservedVm, parsed: list[VgpuProfile]) -> None:
    wanted = _counts(p.name for p in parsed)
    existing = sorted(base.vgpus, key=lambda d: d.key)
    have = _counts(d.profile for d in existing)
    groups = {d.device_group_key for d in existing}
    grouped = any(g is not None for g in groups)
    if vp.spec.nvlink == NvlinkRequirement.REQUIRED:
        in_one_group = len(groups) == 1 and None not in groups
        regroup = not (in_one_group and have == wanted)
    else:
        regroup = grouped and have != wanted  # changing part of a device group means re-adding all of it
    changes: list[DeviceChange] = []
    if regroup:
        changes += [DeviceChange(Op.REMOVE, d.profile, d.key) for d in existing]
        group = 0 if vp.spec.nvlink == NvlinkRequirement.REQUIRED else None
        changes += [DeviceChange(Op.ADD, p, group=group) for p in _adds_order(wanted)]
        vp.change.devices = changes
        return
    kept: dict[str, int] = {}
    for d in existing:
        if kept.get(d.profile, 0) < wanted.get(d.profile, 0):
            kept[d.profile] = kept.get(d.profile, 0) + 1
        else:
            changes.append(DeviceChange(Op.REMOVE, d.profile, d.key))
    missing = {p: n - kept.get(p, 0) for p, n in wanted.items() if n > kept.get(p, 0)}
    changes += [DeviceChange(Op.ADD, p) for p in _adds_order(missing)]
    vp.change.devices = changes


def _counts(names: Iterable[str]) -> dict[str, int]:
    """How often each name occurs (a Counter, without its cost: a VM has 1 to 8 vGPUs and a plan 1,000 VMs)."""
    out: dict[str, int] = {}
    for name in names:
        out[name] = out.get(name, 0) + 1
    return out


def _adds_order(counts: Mapping[str, int]) -> list[str]:
    return [p for p in sorted(counts) for _ in range(counts[p])]


def _diff_fields(vp: _VmPlan, base: ObservedVm, parsed: list[VgpuProfile]) -> None:
    spec, change = vp.spec, vp.change
    if vp.exists:
        if spec.cpus is not None and spec.cpus != base.cpus:
            change.fields.append(FieldChange("numCPUs", base.cpus, spec.cpus))
        if spec.memory_mb is not None and spec.memory_mb != base.memory_mb:
            change.fields.append(FieldChange("memoryMB", base.memory_mb, spec.memory_mb))
    if not parsed:
        return
    keep = set(spec.keep) if vp.exists else set()  # a new VM gets everything its vGPUs need
    if not base.memory_reservation_locked:
        if Keep.MEMORY_LOCK in keep:
            vp.warnings.append(KEPT[Keep.MEMORY_LOCK])
        else:
            change.fields.append(FieldChange("memoryReservationLockedToMax", False, True))
    if not any(p.large_bar for p in parsed):
        return
    _check_firmware(vp, base, keep)
    _diff_mmio(vp, base, parsed, keep)


# What NVIDIA requires that an adopted VM lacks (its entry's `keep`): the warning plan gives for each.
KEPT = {
    Keep.MEMORY_LOCK: "keeps its memory reservation unlocked (keep: memory-lock); vGPU VMs need all their memory "
                      "reserved (NVIDIA vGPU User Guide, 2.7.7.2): it powers on only while its reservation equals its "
                      "memory; remove memory-lock from keep to let vgpuctl lock it",
    Keep.EFI: "keeps BIOS firmware (keep: efi); C-series vGPUs need EFI (NVIDIA AI Enterprise, Requirements for "
              "Using NVIDIA vGPU (C-Series)); switching an installed guest's firmware breaks its boot: recreate it",
    Keep.HARDWARE_VERSION: "keeps its hardware version (keep: hardware-version); vGPUs need vmx-17 or later",
    Keep.MMIO: "keeps its 64-bit MMIO settings (keep: mmio); C-series vGPUs need 64-bit MMIO of at least {need} GB "
               "(NVIDIA AI Enterprise, Requirements for Using NVIDIA vGPU (C-Series); VMware KB 2142307); remove mmio "
               "from keep to let vgpuctl set it (a power-off)",
}


def _check_firmware(vp: _VmPlan, base: ObservedVm, keep: set[Keep]) -> None:
    spec = vp.spec
    if base.firmware != Firmware.EFI:
        if Keep.EFI in keep:
            vp.warnings.append(KEPT[Keep.EFI])
        elif vp.exists:
            vp.errors.append(f"firmware is {base.firmware.upper()}; C-series vGPUs (large BAR) need EFI firmware, and "
                             "switching an installed guest's firmware breaks its boot: recreate the VM with EFI (or "
                             "keep: [efi] to leave it as it is)")
        else:
            vp.errors.append(f"template {spec.template} uses {base.firmware.upper()} firmware; C-series vGPUs "
                             "(large BAR) need EFI firmware: use an EFI template")
    hw = _hw_version(base.hardware_version)
    if hw is not None and hw < MIN_HW_VERSION_LARGE_BAR:
        if Keep.HARDWARE_VERSION in keep:
            vp.warnings.append(KEPT[Keep.HARDWARE_VERSION])
        else:
            vp.errors.append(f"hardware version {base.hardware_version} is too old for large-BAR vGPUs "
                             f"(needs vmx-{MIN_HW_VERSION_LARGE_BAR} or later)")


def mmio_missing(vm: ObservedVm, parsed: list[VgpuProfile]) -> int | None:
    """The 64-bit MMIO size (GB) the VM's large-BAR vGPUs need when its settings fall short, else None."""
    need = mmio_size_gb(parsed)
    current = _int_or_none(vm.extra_config.get(MMIO_SIZE))
    on = str(vm.extra_config.get(USE_64BIT_MMIO, "")).upper() == "TRUE"
    return need if not on or current is None or current < need else None


def _diff_mmio(vp: _VmPlan, base: ObservedVm, parsed: list[VgpuProfile], keep: set[Keep]) -> None:
    change = vp.change
    need = mmio_size_gb(parsed)  # by the vGPUs' physical GPUs (NVIDIA's per-GPU table), a larger value is kept
    if Keep.MMIO in keep:
        if mmio_missing(base, parsed) is not None:
            vp.warnings.append(KEPT[Keep.MMIO].format(need=need))
        return
    if str(base.extra_config.get(USE_64BIT_MMIO, "")).upper() != "TRUE":
        change.extra_config[USE_64BIT_MMIO] = "TRUE"
    current = _int_or_none(base.extra_config.get(MMIO_SIZE))
    if current is None or current < need:
        change.extra_config[MMIO_SIZE] = str(need)


def _hw_version(text: str) -> int | None:
    m = _HW_VERSION.fullmatch(text or "")
    return int(m.group(1)) if m else None


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(str(text).strip()) if text is not None else None
    except ValueError:
        return None


def _plan_power(vp: _VmPlan, base: ObservedVm) -> None:
    change, power = vp.change, vp.spec.power
    running = vp.exists and base.power_state in RUNNING
    needs = change.needs_reconfigure
    if power == Power.RESTART:
        change.power_off = running and needs
        change.power_on = not running or change.power_off
    elif power == Power.OFF:
        change.power_off = running
    elif running and needs:
        what = ", ".join(_describe(change))
        vp.errors.append(f"is {base.power_state} and needs a change ({what}) that requires it powered off, but "
                         "power is 'keep': set power to restart or off, or power it off first")


def _describe(change: VmChange) -> list[str]:
    out = [f.field for f in change.fields]
    adds = sum(1 for d in change.devices if d.op == Op.ADD)
    removes = sum(1 for d in change.devices if d.op == Op.REMOVE)
    if adds:
        out.append(f"add {adds} vGPU(s)")
    if removes:
        out.append(f"remove {removes} vGPU(s)")
    verbs = {Op.ADD: "add", Op.CHANGE: "change", Op.REMOVE: "remove"}
    out += [f"{verbs[nic.op]} adapter {nic.label}" for nic in change.nics]
    out += sorted(change.extra_config)
    if change.cloud_init:
        out.append("guestinfo identity")
    return out


# -------------------------------------------------------------------------------------------- capacity


def _check_capacity(plans: list[_VmPlan], observed: Observed) -> None:
    """Place every VM that will be powered on; a VM that would not fit gets a plan error naming the host."""
    release = [vp.key for vp in plans if vp.change.power_off]
    state = farm_from_observed(observed, release)
    todo = [vp for vp in plans if vp.change.power_on and not vp.errors and not vp.located
            and (vp.profiles or vp.net.needs)]
    # existing VMs first, then new ones, each largest first: the order apply powers them on per host
    todo.sort(key=lambda vp: power_on_key(vp.spec.name, vp.profiles, exists=vp.exists))
    requests = []
    for vp in todo:
        usable = [h for h in vp.candidates if observed.host_usable(h)]
        if not usable:
            vp.errors.append(_unusable(vp, observed))
            continue
        requests.append(Request(vp.spec.name, vp.profiles, usable, vp.spec.nvlink == NvlinkRequirement.REQUIRED,
                                None if vp.exists else vp.spec.cluster, tuple(vp.net.needs)))
    results = place_farm(state, requests)
    by_name = {vp.spec.name: vp for vp in todo}
    for rank, req in enumerate(requests):
        by_name[req.vm].change.power_on_rank = rank
    for name, res in results.items():
        vp = by_name[name]
        if not res.ok:
            vp.errors.append(f"cannot power on: {res.reason}")
            continue
        if vp.change.clone is not None and vp.change.clone.host is None:
            vp.change.clone.host = res.host
        _place_adapters(vp, observed, res)
    for vp in plans:  # new VMs that stay off: pin to the first usable host that offers their profiles
        clone = vp.change.clone
        if clone is not None and clone.host is None and (vp.profiles or vp.net.needs) and not vp.change.power_on:
            usable = [h for h in vp.candidates if observed.host_usable(h)]
            clone.host = next(iter(usable or vp.candidates), None)
        if vp.net.adds and not vp.change.power_on and not vp.errors:
            host = observed.hosts.get(clone.host if clone is not None and clone.host else vp.candidates[0]
                                      if vp.candidates else "")
            if host is not None:
                resolve_devices(vp.spec, host, vp.net)


def _place_adapters(vp: _VmPlan, observed: Observed, res: Placement) -> None:
    """The NICs placement chose for the VM's SR-IOV and passthrough adds, and GPUDirect RDMA's topology check."""
    for j, add in vp.net.adds.items():
        if j in res.nics:
            add.device = res.nics[j]
    host = observed.hosts.get(res.host or "")
    if vp.spec.gpudirect_rdma and host is not None:
        vp.warnings += gpudirect.topology_warnings(host, res.assign, res.nics.values())


def _unusable(vp: _VmPlan, observed: Observed) -> str:
    names = ", ".join(vp.candidates) or "none"
    states = []
    for h in vp.candidates:
        host = observed.hosts.get(h)
        if host is None:
            states.append(f"{h}: not observed")
        elif host.in_maintenance:
            states.append(f"{h}: in maintenance mode")
        else:
            states.append(f"{h}: {host.connection_state}, {host.power_state}")
    return f"cannot power on: no usable host ({names}; {'; '.join(states)})"
