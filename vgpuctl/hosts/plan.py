"""Plan host GPU changes: the pure function (desired HostSpec, ObservedHost, HostFacts) -> list[HostChange].

`plan_hosts` plans every host entry, `verify_host` is what apply checks after a host comes back. Which setting
becomes which change, and which changes are disruptive or need a reboot: docs/host-changes.md.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vgpuctl.domain import Power
from vgpuctl.esxi import rmpvmrl
from vgpuctl.esxi.parsers import OutputFormatError, format_module_options, parse_module_options
from vgpuctl.esxi.rmpvmrl import SchedulerState
from vgpuctl.hosts.facts import GpuFacts, HostFacts
from vgpuctl.hosts.work import WORK_FIELD, describe_record, parse_record
from vgpuctl.inventory import GpuSpec, HostSpec, SchedulerSpec, VmSpec
from vgpuctl.model import (
    HostChange,
    Observed,
    ObservedGpu,
    ObservedHost,
    ObservedProfile,
    ObservedVm,
    PowerState,
    VmChange,
)
from vgpuctl.profiles import BOARDS, board_for_device, try_parse

if TYPE_CHECKING:
    from vgpuctl.vms.placement import FarmState

# HostChange.kind values; "category" is the part before the dot (graphics | mig | nvlink | scheduler | maintenance)
DEFAULT_TYPE = "graphics.default_type"
ASSIGNMENT_POLICY = "graphics.assignment_policy"
GPU_TYPE = "graphics.type"
VGPU_MODE = "graphics.vgpu_mode"
MIG = "mig"
NVLINK = "nvlink"
SCHEDULER = "scheduler"
RESUME = "maintenance"
EVACUATE = "evacuate"
KIND_ORDER = (EVACUATE, DEFAULT_TYPE, ASSIGNMENT_POLICY, GPU_TYPE, VGPU_MODE, MIG, NVLINK, SCHEDULER, RESUME)
GRAPHICS_KINDS = (DEFAULT_TYPE, ASSIGNMENT_POLICY, GPU_TYPE, VGPU_MODE)
MODULE_KINDS = (NVLINK, SCHEDULER)
MODE_KINDS = (DEFAULT_TYPE, GPU_TYPE, VGPU_MODE, MIG, NVLINK)  # what a GPU offers may change

# HostChange.new of an EVACUATE change: what happens to the VM
RESTORE_AFTER = "powered off, on again after the host change"
STAYS_OFF = "powered off for good (its entry has power: off)"
HAND_OVER = "powered off, reconfigured and powered on by its VM change"
MIGRATE_TO = "migrate to "  # + the destination host
HOT_MIGRATE_OPTION = "vgpu.hotmigrate.enabled"  # vCenter advanced setting: vMotion of running vGPU VMs

MIG_MODE = "multiInstanceGpu"
TIME_SLICED_MODES = ("sameSize", "mixedSize")
NVLINK_DISABLE = "NVreg_NvLinkDisable"
REGISTRY_DWORDS = "NVreg_RegistryDwords"
REGISTRY_PER_DEVICE = "NVreg_RegistryDwordsPerDevice"
RMPVMRL = "RmPVMRL"
MIXED_SIZE_POLICIES = ("best-effort", "equal-share")


def category(kind: str) -> str:
    return kind.split(".", 1)[0]


# -------------------------------------------------------------------------------------- module options


def scheduler_value(policy: str, timeslice_ms: int | None = None) -> str | None:
    """RmPVMRL for a policy with an optional time slice (see vgpuctl.rmpvmrl.encode for every form)."""
    return rmpvmrl.encode(policy, timeslice_ms)


def decode_scheduler(value: str | None) -> SchedulerState:
    return rmpvmrl.decode(value)


def _registry(value: str) -> list[tuple[str, str]]:
    out = []
    for item in value.split(";"):
        if item.strip():
            key, _, val = item.partition("=")
            out.append((key.strip(), val.strip()))
    return out


def rmpvmrl_of(options: str) -> str | None:
    """The host-wide RmPVMRL value in a module option string, or None."""
    entries = dict(_registry(_options(options).get(REGISTRY_DWORDS, "")))
    return entries.get(RMPVMRL)


def scheduler_of(options: str) -> SchedulerState:
    return decode_scheduler(rmpvmrl_of(options))


def nvlink_of(options: str) -> str:
    """ "enabled" unless NVreg_NvLinkDisable=1 is set."""
    return "disabled" if _options(options).get(NVLINK_DISABLE, "").strip() == "1" else "enabled"


def _options(options: str) -> dict[str, str]:
    try:
        return parse_module_options(options or "")
    except OutputFormatError:
        return {}


_KEEP = object()


def merge_module_options(current: str, *, nvlink: str | None = None, scheduler: object = _KEEP) -> str:
    """The nvidia option string with NVLink and/or the RmPVMRL value changed and everything else kept.

    nvlink: "enabled" (removes NVreg_NvLinkDisable) | "disabled" (sets it to 1) | None (keep).
    scheduler: an RmPVMRL value, None to remove RmPVMRL (best effort), or omitted to keep it.
    """
    opts = parse_module_options(current or "")
    if nvlink == "disabled":
        opts[NVLINK_DISABLE] = "1"
    elif nvlink == "enabled":
        opts.pop(NVLINK_DISABLE, None)
    elif nvlink is not None:
        raise ValueError(f"nvlink must be enabled or disabled (got {nvlink!r})")
    if scheduler is not _KEEP:
        entries = [(k, v) for k, v in _registry(opts.get(REGISTRY_DWORDS, "")) if k != RMPVMRL]
        if scheduler is not None:
            entries.append((RMPVMRL, str(scheduler)))
        if entries:
            opts[REGISTRY_DWORDS] = ";".join(f"{k}={v}" for k, v in entries)
        else:
            opts.pop(REGISTRY_DWORDS, None)
    return format_module_options(opts)


def options_for(current: str, changes: Iterable[HostChange]) -> str:
    """The option string to write for a host's nvlink / scheduler changes (HostChange.new values)."""
    kwargs: dict[str, object] = {}
    for c in changes:
        if c.kind == NVLINK:
            kwargs["nvlink"] = c.new
        elif c.kind == SCHEDULER:
            kwargs["scheduler"] = rmpvmrl.encode(*rmpvmrl.parse_label(str(c.new)))
    return merge_module_options(current, **kwargs)  # type: ignore[arg-type]


def scheduler_label(spec: SchedulerSpec) -> str:
    return rmpvmrl.label(spec.policy, spec.timeslice_ms, spec.frequency_hz, spec.averaging_factor)


# -------------------------------------------------------------------------------------------- results


@dataclass
class HostPlan:
    changes: list[HostChange] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def extend(self, other: HostPlan) -> None:
        self.changes += other.changes
        self.errors += other.errors
        self.warnings += other.warnings

    def for_host(self, host: str) -> list[HostChange]:
        return [c for c in self.changes if c.host == host]

    @property
    def hosts(self) -> list[str]:
        return sorted({c.host for c in self.changes})


def needs_maintenance(changes: Sequence[HostChange]) -> bool:
    return any(c.disruptive for c in changes)


def needs_reboot(changes: Sequence[HostChange]) -> bool:
    return any(c.needs_reboot for c in changes)


# ------------------------------------------------------------------------------------------ resolution


def resolve_hosts(specs: Sequence[HostSpec], observed: Observed) -> tuple[dict[str, HostSpec], list[str]]:
    """Host name -> the settings that apply to it: its cluster's entry with its own `name:` entry merged
    over it (vgpuctl.inventory.merge, which also says where each value came from)."""
    from vgpuctl.inventory.merge import merge_hosts

    merged, errors = merge_hosts(specs, observed.clusters, observed.hosts)
    return {name: m.spec for name, m in merged.items()}, errors


def _names(items: Iterable[str]) -> str:
    names = sorted(items)
    if len(names) > 10:
        return ", ".join(names[:10]) + f", ... ({len(names)} in all)"
    return ", ".join(names) or "none"


@dataclass
class _Want:
    mode: str | None = None  # time-sliced | mig
    vgpu_mode: str | None = None
    graphics_type: str | None = None


def _wanted_gpus(spec: HostSpec, host: ObservedHost) -> tuple[dict[str, _Want], list[str]]:
    pcis = {g.pci_id.lower() for g in host.gpus}
    everything: GpuSpec | None = next((g for g in spec.gpus if g.select == "all"), None)
    errors = [
        f"host {host.name}: GPU {g.select} is not on this host (GPUs: {_names(pcis)})"
        for g in spec.gpus
        if g.select != "all" and g.select.lower() not in pcis
    ]
    by_id = {g.select.lower(): g for g in spec.gpus if g.select != "all"}
    out: dict[str, _Want] = {}
    for pci in sorted(pcis):
        want = _Want()
        for source in (everything, by_id.get(pci)):
            if source is None:
                continue
            want.mode = source.mode or want.mode
            want.vgpu_mode = source.vgpu_mode or want.vgpu_mode
            want.graphics_type = source.graphics_type or want.graphics_type
        if want.mode == "mig":
            want.vgpu_mode = None
        out[pci] = want
    return out, errors


# --------------------------------------------------------------------------------------------- planning


def plan_hosts(
    specs: Sequence[HostSpec],
    observed: Observed,
    facts: dict[str, HostFacts] | None = None,
    resume: Iterable[str] = (),
    vms: Sequence[VmSpec] = (),
    vgpu_migration: bool = False,
) -> HostPlan:
    """Host changes for every host the specs name, in host order; `resume` names hosts a failed apply left
    in maintenance mode (from the state file); `vms` are the inventory's VM entries (what each VM will ask
    for after the change decides whether it can be evacuated and brought back); `vgpu_migration`: vCenter
    allows vMotion of running vGPU VMs (`evacuate: migrate`)."""
    resolved, errors = resolve_hosts(specs, observed)
    result = HostPlan(errors=errors)
    facts = facts or {}
    resume = set(resume)
    listed = {v.name: v for v in vms}
    plans = {name: plan_host(spec, observed.hosts[name], facts.get(name)) for name, spec in resolved.items()}
    changing = {name for name, p in plans.items() if needs_maintenance(p.changes)}
    migration = Migration(observed, changing, vgpu_migration)
    for name in sorted(set(resolved) | (resume & set(observed.hosts))):
        host = observed.hosts[name]
        spec = resolved.get(name)
        if spec is not None:
            one = plans[name]
            one.extend(plan_evacuation(spec, host, observed, one.changes, listed, migration))
            one.changes.sort(key=lambda c: (KIND_ORDER.index(c.kind), c.target))
            result.extend(one)
        if name in resume:
            result.changes.append(_resume_change(host))
    return result


class Migration:
    """Where running VMs of a host entering maintenance can go: another connected host of its cluster that is
    not changed by the same plan and, for vGPU VMs (when vCenter allows their vMotion), offers their profiles
    and has room for them (placement, VM after VM)."""

    def __init__(self, observed: Observed, changing: set[str], vgpu_migration: bool):
        self.observed, self.changing, self.vgpu_migration = observed, changing, vgpu_migration
        self._state: FarmState | None = None

    def target(self, vm: ObservedVm, host: ObservedHost) -> tuple[str | None, str]:
        """(destination, "") or (None, why not)."""
        from vgpuctl.vms.placement import Request, farm_from_observed, place_farm

        cluster = host.cluster or ""
        others = [
            h
            for h in self.observed.clusters.get(cluster, [])
            if h != host.name and h not in self.changing and _usable_host(self.observed.hosts.get(h))
        ]
        if not others:
            return None, f"no other usable host in cluster {cluster or '(none)'} that this plan leaves unchanged"
        profiles = [d.profile for d in vm.vgpus]
        if not profiles:
            return min(others, key=lambda h: (sum(1 for v in vms_on(self.observed, h) if _running(v)), h)), ""
        if not self.vgpu_migration:
            return None, f"vCenter does not allow vMotion of running vGPU VMs ({HOT_MIGRATE_OPTION} is not true)"
        offering = [h for h in others if set(profiles) <= set(self.observed.hosts[h].offered_profiles)]
        if not offering:
            return None, f"no other host of cluster {cluster} offers {', '.join(sorted(set(profiles)))}"
        if self._state is None:
            self._state = farm_from_observed(self.observed)
        grouped = any(d.device_group_key is not None for d in vm.vgpus)
        placed = place_farm(self._state, [Request(vm.name, profiles, offering, grouped)])[vm.name]
        return (placed.host, "") if placed.ok else (None, f"no room on {', '.join(offering)}: {placed.reason}")


def _usable_host(host: ObservedHost | None) -> bool:
    return (
        host is not None
        and host.connection_state == "connected"
        and not host.in_maintenance
        and host.power_state == "poweredOn"
    )


def vms_on(observed: Observed, host: str) -> list[ObservedVm]:
    """The VMs (not templates) registered on the host, by name."""
    return sorted((v for v in observed.vms.values() if v.host == host and not v.is_template), key=lambda v: v.name)


def _running(vm: ObservedVm) -> bool:
    return vm.power_state in (PowerState.ON, PowerState.SUSPENDED)


def plan_evacuation(
    spec: HostSpec,
    host: ObservedHost,
    observed: Observed,
    changes: Sequence[HostChange],
    listed: dict[str, VmSpec],
    migration: Migration | None = None,
) -> HostPlan:
    """What happens to the host's VMs when it enters maintenance mode for `changes`.

    A running VM whose vGPUs (after its own inventory change, if listed) the host offers after the change is
    evacuated: handed to its VM change when that re-profiles it, powered off for good when its entry says
    `power: off`, else powered off and on again with `evacuate: power-off`, moved to another host with
    `evacuate: migrate` (powered off instead only when its entry lets vgpuctl power it); with `evacuate: refuse`
    the running VMs are a plan error naming them (apply could not take the host into maintenance). A running
    VM whose vGPUs the host will not offer is an error naming the profiles it would offer, unless its entry
    says `power: off`; a powered-off one a warning.
    """
    result = HostPlan()
    if not needs_maintenance(changes) or host.in_maintenance:
        return result
    mode_change = any(c.kind in MODE_KINDS for c in changes)
    after = predict_host(host, changes) if mode_change else host
    offered = set(after.offered_profiles)
    nvlink_off = any(c.kind == NVLINK and c.new == "disabled" for c in changes)
    refused: list[ObservedVm] = []
    for vm in vms_on(observed, host.name):
        entry = listed.get(vm.name)
        now = [d.profile for d in vm.vgpus]
        wanted = [str(p) for p in entry.vgpu_profiles] if entry is not None and entry.manages_vgpus else now
        problem = _cannot_run(vm, entry, wanted, offered, nvlink_off and sorted(wanted) == sorted(now))
        stays_off = entry is not None and entry.power == Power.OFF
        if problem and (mode_change or nvlink_off) and not stays_off:
            where = f"host {host.name}: VM {vm.name}"
            if _running(vm):
                result.errors.append(
                    f"{where} {problem} after the change (offered then: {_names(offered)}): "
                    "list it in the inventory with an offered profile, or with power: off, or power it off first"
                )
                continue
            result.warnings.append(f"{where} (powered off) {problem} after the change: it cannot power on there")
        if not _running(vm):
            continue
        if entry is not None and sorted(wanted) != sorted(now) and not stays_off:
            result.changes.append(_evacuate_change(host, vm, HAND_OVER))
        elif stays_off:  # its own entry wants it off: the evacuation's power-off is that change
            result.changes.append(_evacuate_change(host, vm, STAYS_OFF))
        elif spec.maintenance.evacuate == "power-off":
            result.changes.append(_evacuate_change(host, vm, RESTORE_AFTER))
        elif spec.maintenance.evacuate == "migrate":
            result.extend(_plan_migration(host, vm, entry, migration or Migration(observed, {host.name}, False)))
        else:
            refused.append(vm)
    if refused:
        result.errors.append(_refused(host, changes, refused))
    return result


def _refused(host: ObservedHost, changes: Sequence[HostChange], vms: Sequence[ObservedVm]) -> str:
    kinds = ", ".join(sorted({c.kind for c in changes if c.disruptive and c.kind != EVACUATE}))
    listed = ", ".join(f"{v.name} ({', '.join(d.profile for d in v.vgpus)})" if v.vgpus else v.name for v in vms)
    return (f"host {host.name}: its {kinds} change needs maintenance mode, and these VMs run there: {listed}; "
            "maintenance.evacuate is refuse: stop them, set evacuate: power-off or migrate, or list them with "
            "power: off")


def _plan_migration(host: ObservedHost, vm: ObservedVm, entry: VmSpec | None, migration: Migration) -> HostPlan:
    result = HostPlan()
    dest, why = migration.target(vm, host)
    if dest is not None:
        result.changes.append(_evacuate_change(host, vm, MIGRATE_TO + dest))
    elif entry is not None and entry.power != "keep":
        result.changes.append(_evacuate_change(host, vm, RESTORE_AFTER))
        result.warnings.append(
            f"host {host.name}: VM {vm.name} cannot migrate ({why}): powered off and on again "
            f"instead (its inventory entry has power: {entry.power})"
        )
    else:
        result.errors.append(
            f"host {host.name}: VM {vm.name} cannot migrate ({why}); list it in the inventory with power: restart "
            "to allow powering it off instead, or move or stop it first"
        )
    return result


def _cannot_run(
    vm: ObservedVm, entry: VmSpec | None, wanted: list[str], offered: set[str], loses_group: bool
) -> str | None:
    """Why the VM could not power on on the changed host (None when it can)."""
    missing = sorted(set(wanted) - offered)
    if missing:
        asks = "the inventory asks for" if entry is not None and entry.manages_vgpus else "uses"
        return f"{asks} {', '.join(missing)}, which the host will not offer"
    if loses_group and any(d.device_group_key is not None for d in vm.vgpus):
        return "uses an NVLink device group, which the host will not offer with NVLink disabled"
    return None


def _evacuate_change(host: ObservedHost, vm: ObservedVm, what: str) -> HostChange:
    profiles = ", ".join(d.profile for d in vm.vgpus)
    old = f"{vm.power_state} ({profiles})" if profiles else str(vm.power_state)
    return HostChange(host.name, EVACUATE, vm.name, old, what, disruptive=True, needs_reboot=False)


def evacuations(changes: Iterable[HostChange]) -> dict[str, str]:
    """VM name -> what its planned evacuation does (RESTORE_AFTER | HAND_OVER | STAYS_OFF | MIGRATE_TO ...)."""
    return {c.target: str(c.new) for c in changes if c.kind == EVACUATE}


def _resume_change(host: ObservedHost) -> HostChange:
    record = parse_record(host.name, host.custom_values.get(WORK_FIELD, ""))
    if record is not None:
        old = describe_record(record)
    else:
        old = "in maintenance (left by an unfinished apply)" if host.in_maintenance else "VMs to power on again"
    return HostChange(host.name, RESUME, "host", old, "done: out of maintenance, VMs powered on", disruptive=False)


def plan_host(spec: HostSpec, host: ObservedHost, facts: HostFacts | None = None) -> HostPlan:
    """The changes that bring one host to `spec` (errors when the spec cannot be met on this host)."""
    result = HostPlan()
    wanted, errors = _wanted_gpus(spec, host)
    result.errors += errors
    gpus = {g.pci_id.lower(): g for g in host.gpus}
    result.changes += _graphics_host(spec, host)
    for pci, want in wanted.items():
        gf = facts.gpus.get(pci) if facts is not None else None
        result.extend(_plan_gpu(host, gpus[pci], want, gf, facts is not None and facts.shell))
    result.extend(_plan_modules(spec, host, wanted, facts))
    result.changes.sort(key=lambda c: (KIND_ORDER.index(c.kind), c.target))
    result.errors += shell_problems(host.name, result.changes, facts)
    return result


# the nvidia module parameter each module change writes (a change that only removes one writes none)
def _param_written(change: HostChange) -> str | None:
    if change.kind == NVLINK:
        return NVLINK_DISABLE if change.new == "disabled" else None
    if change.kind == SCHEDULER:
        return REGISTRY_DWORDS if rmpvmrl.encode(*rmpvmrl.parse_label(str(change.new))) is not None else None
    return None


def shell_problems(host: str, changes: Sequence[HostChange], facts: HostFacts | None) -> list[str]:
    """Changes that cannot be made as planned: MIG, NVLink and scheduler changes without the ESXi shell
    (nvidia-smi and the module's declared parameters are read there), and module options the host's nvidia
    module does not declare (an undeclared option can keep the module, and every GPU, from loading).
    Without facts (a pure plan) nothing is checked."""
    if facts is None:
        return []
    needs_shell = sorted({c.kind for c in changes if c.kind in (MIG, *MODULE_KINDS)})
    if needs_shell and not facts.shell and facts.shell_error:
        return [f"host {host}: {', '.join(needs_shell)} changes need ESXi SSH, which failed: {facts.shell_error}"]
    if needs_shell and not facts.shell:
        return [
            f"host {host}: {', '.join(needs_shell)} changes need ESXi SSH (nvidia-smi and esxcli on the host): "
            "set VGPUCTL_ESXI_PASSWORD or VGPUCTL_ESXI_KEY_FILE, or ssh.key_file in the host entry"
        ]
    if facts.declared_params is None:
        return []
    out = []
    for c in changes:
        param = _param_written(c)
        if param is not None and param not in facts.declared_params:
            out.append(
                f"host {host}: the nvidia module does not declare {param} (declared: "
                f"{_names(facts.declared_params)}): {c.kind} {c.new} cannot be set on this host"
            )
    return out


def _graphics_host(spec: HostSpec, host: ObservedHost) -> list[HostChange]:
    g = spec.graphics
    out = []
    if g is not None and g.default_type is not None and g.default_type != host.default_graphics_type:
        out.append(
            HostChange(
                host.name,
                DEFAULT_TYPE,
                "host",
                host.default_graphics_type,
                g.default_type,
                disruptive=True,
                needs_reboot=True,
            )
        )
    if g is not None and g.assignment_policy is not None and g.assignment_policy != host.assignment_policy:
        out.append(
            HostChange(
                host.name,
                ASSIGNMENT_POLICY,
                "host",
                host.assignment_policy,
                g.assignment_policy,
                disruptive=False,
                needs_reboot=False,
            )
        )
    return out


def _mig_capable(gpu: ObservedGpu, gf: GpuFacts | None, shell: bool) -> bool:
    if shell and gf is not None:
        return gf.mig_capable
    board = _board(gpu)
    return board is not None and BOARDS[board].mig_capable


def _board(gpu: ObservedGpu, offered: Sequence[str] = ()) -> str | None:
    """The GPU's board by device id, exact device name, or the host's offered profiles (never substrings)."""
    board = board_for_device(gpu.device_name, gpu.memory_kb / (1024 * 1024) or None, gpu.device_id, offered)
    return board if board in BOARDS else None


def _mig_needs_reboot(board: str | None) -> bool:
    """Ampere applies a MIG mode switch at the next reboot, Hopper at once (catalogue `mig.apply`)."""
    return board is None or board not in BOARDS or BOARDS[board].mig_needs_reboot


def _mode_name(mig: bool | None) -> str:
    return "mig" if mig else "time-sliced"


def _plan_gpu(host: ObservedHost, gpu: ObservedGpu, want: _Want, gf: GpuFacts | None, shell: bool) -> HostPlan:
    result = HostPlan()
    pci = gpu.pci_id.lower()
    current_type = gf.graphics_type if gf is not None and gf.graphics_type else gpu.graphics_type
    if want.graphics_type is not None and want.graphics_type != current_type:
        result.changes.append(
            HostChange(host.name, GPU_TYPE, pci, current_type, want.graphics_type, disruptive=True, needs_reboot=True)
        )
    capable = _mig_capable(gpu, gf, shell)
    mig_now = bool(gf.mig_current) if shell and gf is not None and capable else gpu.vgpu_mode == MIG_MODE
    pending = gf.mig_pending if shell and gf is not None and capable else None
    if want.mode == "mig" and not capable:
        result.errors.append(f"host {host.name}: GPU {pci} ({gpu.device_name or 'unknown model'}) is not MIG-capable")
    elif want.mode is not None and capable:
        desired = want.mode == "mig"
        if mig_now != desired or (pending is not None and pending != desired):
            old = _mode_name(mig_now)
            if pending is not None and pending != mig_now:
                old += f" ({_mode_name(pending)} pending)"
            reboot = mig_now != desired and _mig_needs_reboot(_board(gpu))
            result.changes.append(HostChange(host.name, MIG, pci, old, want.mode, disruptive=True, needs_reboot=reboot))
    if want.vgpu_mode is not None:
        current = gf.vgpu_mode if gf is not None and gf.vgpu_mode else None
        if current is None and gpu.vgpu_mode in TIME_SLICED_MODES:
            current = gpu.vgpu_mode
        if current != want.vgpu_mode:
            result.changes.append(
                HostChange(host.name, VGPU_MODE, pci, current, want.vgpu_mode, disruptive=True, needs_reboot=False)
            )
    return result


def _time_sliced_mode(gpu: ObservedGpu, want: _Want, gf: GpuFacts | None) -> str | None:
    """The GPU's time-sliced vGPU mode after the plan, or None when it will run in MIG mode."""
    if want.mode == "mig" or (want.mode is None and gpu.vgpu_mode == MIG_MODE):
        return None
    if want.vgpu_mode:
        return want.vgpu_mode
    if gf is not None and gf.vgpu_mode:
        return gf.vgpu_mode
    return gpu.vgpu_mode if gpu.vgpu_mode in TIME_SLICED_MODES else None


def _plan_modules(spec: HostSpec, host: ObservedHost, wanted: dict[str, _Want], facts: HostFacts | None) -> HostPlan:
    result = HostPlan()
    configured = (
        facts.options_configured if facts is not None and facts.options_configured is not None else host.module_options
    )
    effective = facts.options_effective if facts is not None and facts.options_effective is not None else configured
    if facts is not None and facts.options_configured is None and (spec.nvlink or spec.scheduler):
        why = "; ".join(facts.warnings) or f"host {host.name}: the nvidia module options were not read"
        result.errors.append(f"{why}: nvlink and scheduler cannot be planned")
        return result
    if spec.nvlink is not None:
        now, next_boot = nvlink_of(effective), nvlink_of(configured)
        if spec.nvlink not in (now, next_boot) or now != next_boot:
            old = now if now == next_boot else f"{now} ({next_boot} after reboot)"
            result.changes.append(
                HostChange(host.name, NVLINK, "host", old, spec.nvlink, disruptive=True, needs_reboot=True)
            )
    if spec.scheduler is not None:
        result.extend(_plan_scheduler(spec.scheduler, host, wanted, facts, configured, effective))
    return result


def _plan_scheduler(
    sched: SchedulerSpec,
    host: ObservedHost,
    wanted: dict[str, _Want],
    facts: HostFacts | None,
    configured: str,
    effective: str,
) -> HostPlan:
    result = HostPlan()
    try:
        value = rmpvmrl.encode(sched.policy, sched.timeslice_ms, sched.frequency_hz, sched.averaging_factor)
    except ValueError as err:
        result.errors.append(f"host {host.name}: scheduler: {err}")
        return result
    if sched.policy not in MIXED_SIZE_POLICIES:
        gpus = {g.pci_id.lower(): g for g in host.gpus}
        mixed = [
            pci
            for pci, want in wanted.items()
            if _time_sliced_mode(gpus[pci], want, facts.gpus.get(pci) if facts else None) == "mixedSize"
        ]
        if mixed:
            result.errors.append(
                f"host {host.name}: the {sched.policy} scheduler is not supported on mixed-size "
                f"GPUs ({', '.join(mixed)}): use best-effort or equal-share"
            )
            return result
    if REGISTRY_PER_DEVICE in _options(effective) and RMPVMRL in _options(effective)[REGISTRY_PER_DEVICE]:
        result.warnings.append(
            f"host {host.name}: {REGISTRY_PER_DEVICE} sets RmPVMRL per GPU and overrides the host-wide scheduler there"
        )
    want_n = rmpvmrl.to_int(value)
    now, next_boot = rmpvmrl_of(effective), rmpvmrl_of(configured)
    if rmpvmrl.to_int(now) != want_n or rmpvmrl.to_int(next_boot) != want_n:
        old = str(decode_scheduler(now))
        if rmpvmrl.to_int(now) != rmpvmrl.to_int(next_boot):
            old += f" ({decode_scheduler(next_boot)} after reboot)"
        result.changes.append(
            HostChange(host.name, SCHEDULER, "host", old, scheduler_label(sched), disruptive=True, needs_reboot=True)
        )
    return result


# ------------------------------------------------------------------------------------------ verification


def verify_host(spec: HostSpec, host: ObservedHost, facts: HostFacts) -> list[str]:
    """What still differs after apply (one line each): leftover changes, pending MIG modes, NVLink links."""
    problems = []
    plan = plan_host(spec, host, facts)
    for c in plan.changes:
        target = "" if c.target == "host" else f" {c.target}"
        problems.append(f"{c.kind}{target} is {c.old}, expected {c.new}")
    problems += plan.errors
    if facts.shell and spec.nvlink is not None:
        for pci, g in sorted(facts.gpus.items()):
            if g.nvlink_links == 0:
                continue
            if spec.nvlink == "enabled" and g.nvlink_active < g.nvlink_links:
                problems.append(f"nvlink {pci}: {g.nvlink_active} of {g.nvlink_links} links up, expected all")
            if spec.nvlink == "disabled" and g.nvlink_active > 0:
                problems.append(f"nvlink {pci}: {g.nvlink_active} of {g.nvlink_links} links up, expected none")
    return problems


# ------------------------------------------------------------------------------------------- prediction


def mig_profile_names(board: str, prefix: str = "grid_") -> list[str]:
    """The MIG-backed C-series types of a board from the vGPU type catalogue, smallest first (grid_a100-1-5c
    ...); types with media extensions are left out (a host offers them too, nobody asks for them by default)."""
    info = BOARDS.get(board)
    if info is None:
        return []
    rows = [t for t in info.types.values() if t.mig_gi and t.series == "C" and not t.media]
    return [prefix + t.name.lower() for t in sorted(rows, key=lambda t: (str(t.mig_gi)[0], t.fb_gb))]


def time_sliced_profile_names(board: str, prefix: str = "grid_") -> list[str]:
    """The time-sliced C-series types of a board from the vGPU type catalogue, smallest first."""
    info = BOARDS.get(board)
    if info is None:
        return []
    rows = [t for t in info.types.values() if not t.mig_gi and t.series == "C"]
    return [prefix + t.name.lower() for t in sorted(rows, key=lambda t: t.fb_gb)]


def _profile(name: str) -> ObservedProfile:
    """A profile's facts from its name when the host did not describe it (catalogue first, then the grammar)."""
    p = try_parse(name)
    if p is None:
        return ObservedProfile(name=name, fb_gb=0)
    return ObservedProfile(
        name=name,
        fb_gb=int(p.fb_gb),
        sharing="mig" if p.is_mig else "timeSliced",
        profile_class="quadro" if p.series == "q" else "compute",
    )


def predict_host(host: ObservedHost, changes: Sequence[HostChange]) -> ObservedHost:
    """The host as vSphere will show it once `changes` are applied (graphics types, vGPU modes, offered
    profiles); what the host already offers is kept, profiles of a newly entered mode come from the board."""
    out = copy.deepcopy(host)
    gpus = {g.pci_id.lower(): g for g in out.gpus}
    for c in changes:
        if c.host != host.name:
            continue
        if c.kind == DEFAULT_TYPE:
            out.default_graphics_type = str(c.new)
        elif c.kind == ASSIGNMENT_POLICY:
            out.assignment_policy = str(c.new)
        elif c.kind == GPU_TYPE and c.target in gpus:
            gpus[c.target].graphics_type = str(c.new)
        elif c.kind == VGPU_MODE and c.target in gpus and gpus[c.target].vgpu_mode != MIG_MODE:
            gpus[c.target].vgpu_mode = str(c.new)
        elif c.kind == MIG and c.target in gpus:
            gpus[c.target].vgpu_mode = MIG_MODE if c.new == "mig" else "sameSize"
        elif c.kind == RESUME:  # apply finishes the host's work, maintenance included, before any VM
            out.in_maintenance = False
    if any(c.kind == DEFAULT_TYPE for c in changes if c.host == host.name):
        for g in out.gpus:
            if not any(c.kind == GPU_TYPE and c.target == g.pci_id.lower() for c in changes):
                g.graphics_type = out.default_graphics_type
    out.offered_profiles = _offered_after(host, out)
    out.profiles = {p: host.profiles.get(p) or _profile(p) for p in out.offered_profiles}
    return out


def _offered_after(before: ObservedHost, after: ObservedHost) -> list[str]:
    offered = set()
    prefix = "nvidia_" if any(p.startswith("nvidia_") for p in before.offered_profiles) else "grid_"
    for g in after.gpus:
        board = _board(g, before.offered_profiles)
        if board is None:
            continue
        mig = g.vgpu_mode == MIG_MODE
        own = [
            p
            for p in before.offered_profiles
            if (q := try_parse(p)) is not None and q.board == board and q.is_mig == mig
        ]
        offered.update(own or (mig_profile_names(board, prefix) if mig else time_sliced_profile_names(board, prefix)))
    return sorted(offered)


def predict_observed(observed: Observed, changes: Sequence[HostChange]) -> Observed:
    """A copy of `observed` with every changed host replaced by its prediction (for placing VMs)."""
    out = copy.copy(observed)
    out.hosts = dict(observed.hosts)
    for name in {c.host for c in changes}:
        if name in out.hosts:
            out.hosts[name] = predict_host(observed.hosts[name], changes)
    return out


def changed_hosts(changes: Iterable[HostChange]) -> set[str]:
    """Hosts whose GPU configuration changes (VMs placed there wait for them)."""
    return {c.host for c in changes if c.kind not in (RESUME, ASSIGNMENT_POLICY, EVACUATE)}


def mark_dependencies(vm_changes: Iterable[VmChange], observed: Observed, host_changes: Sequence[HostChange]) -> None:
    """Set VmChange.depends_on_hosts: a VM with a change on (or cloned to) a host whose GPU configuration
    changes waits for that host (apply skips it while the host change is pending)."""
    changed = changed_hosts(host_changes)
    if not changed:
        return
    for change in vm_changes:
        if change.is_empty:
            continue
        vm = observed.vm_for(change)
        host = vm.host if vm is not None else (change.clone.host if change.clone is not None else None)
        hosts = {host} if host else set()
        if host is None and change.clone is not None and change.clone.cluster:
            hosts = set(observed.clusters.get(change.clone.cluster, []))
        change.depends_on_hosts = sorted((hosts & changed) | set(change.depends_on_hosts))
