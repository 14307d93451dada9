"""Is a VM as this run saw it? The pure checks of an apply: the VM against the plan before the first step
(check_drift), and the VM read right after a step against what that step left (unmet_since), whose changeVersion
the next step is conditional on."""

from __future__ import annotations

from typing import Any

from vgpuctl.errors import DriftError
from vgpuctl.model import CloneSpec, ObservedNic, ObservedVm, Op, VmChange
from vgpuctl.vsphere.vm import config_field
from vgpuctl.vsphere.vmops import SPEC_READ_BACK, VmState


def vgpu_keys(vgpus: list[Any]) -> list[tuple[int, str]]:
    return sorted((v.key, v.profile) for v in vgpus)


def check_drift(change: VmChange, observed: ObservedVm, state: VmState) -> None:
    """Raise DriftError when the VM is not in the state the plan was made from."""
    problems = []
    if state.name != observed.name:
        problems.append(f"renamed to {state.name!r}")
    if state.power != str(observed.power_state):
        problems.append(f"power state is {state.power}, the plan saw {observed.power_state}")
    now = sorted((v.key, v.profile) for v in state.vgpus)
    then = sorted((v.key, v.profile) for v in observed.vgpus)
    if now != then:
        problems.append(f"vGPUs are {fmt_devices(now)}, the plan saw {fmt_devices(then)}")
    elif observed.change_version and state.change_version != observed.change_version:
        problems.append("its configuration changed (vCenter's changeVersion moved)")
    if change.nics:  # the adapters the plan changes or keeps must be the ones it saw
        adapters, seen = _adapters(state.nics), _adapters(observed.nics)
        if adapters != seen:
            problems.append(f"network adapters are {fmt_devices(adapters)}, the plan saw {fmt_devices(seen)}")
    if problems:
        raise DriftError(f"{change.vm} changed since the plan: " + "; ".join(problems) + "; not touched, plan again")


def unmet_since(before: VmState, after: VmState, change: VmChange | None = None) -> list[str]:
    """What the VM, read right after this run's step on it (a reconfigure: `change`; a power-off: none), shows
    otherwise than `before` (the VM as that step was conditional on it) with the step's changes: the settings it
    set or had (a value the server does not report is not judged) and its vGPUs (those it had, less the removed,
    plus the added). That read gives the changeVersion the next step is conditional on; a change by something
    else landing between the step's end and the read moves the version with it, and is seen here when it touches
    these."""
    unmet = []
    fields = change.fields if change is not None else []
    devices = change.devices if change is not None else []
    set_here = dict(config_field(f) for f in fields)
    for prop in SPEC_READ_BACK:
        wanted = _wanted_setting(prop, set_here, before)
        now = after.settings.get(prop)
        if wanted is None or now is None or now == wanted:
            continue
        done = f"this run set {wanted}" if prop in set_here else f"it was {wanted} before this run's last step"
        unmet.append(f"{prop} is {now}, {done}")
    removed = {d.key for d in devices if d.op == Op.REMOVE}
    added = [d.profile for d in devices if d.op == Op.ADD]
    wanted_vgpus = sorted([v.profile for v in before.vgpus if v.key not in removed] + added)
    now_vgpus = sorted(v.profile for v in after.vgpus)
    if now_vgpus != wanted_vgpus:
        done = "this run set" if devices else "they were"
        unmet.append(f"vGPUs are {_profiles(now_vgpus)}, {done} {_profiles(wanted_vgpus)}")
    return unmet


def clone_unmet(clone: CloneSpec, after: VmState) -> list[str]:
    """What the new VM, read right after its clone, shows otherwise than the clone spec set (its vCPUs and memory,
    where the spec sets them): a change by something else between the clone's end and that read."""
    wanted = {"numCPUs": clone.cpus, "memoryMB": clone.memory_mb}
    return [f"{prop} is {after.settings[prop]}, this run set {value}" for prop, value in wanted.items()
            if value is not None and after.settings.get(prop) not in (None, value)]


def _wanted_setting(prop: str, set_here: dict[str, Any], before: VmState) -> Any:
    """The value a setting should read after the step: the one it set, else the one it had; None: not judged."""
    return set_here[prop] if prop in set_here else before.settings.get(prop)


def _profiles(profiles: list[str]) -> str:
    return "[" + ", ".join(profiles) + "]" if profiles else "none"


def _adapters(nics: list[ObservedNic]) -> list[tuple[int, str]]:
    return sorted((n.key, str(n.kind)) for n in nics)


def fmt_devices(devices: list[tuple[int, str]]) -> str:
    return "[" + ", ".join(f"{p}#{k}" for k, p in devices) + "]" if devices else "none"
