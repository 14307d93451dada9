"""Plan host GPU changes: the pure function (desired HostSpec, ObservedHost, HostFacts) -> list[HostChange].

`plan_host` asks each host setting (vgpuctl.settings, in registry order) for its changes and checks what
they need from the host (the ESXi shell, module parameters the nvidia module declares); `plan_hosts` plans every
host entry and adds the orchestration around the settings (vgpuctl.hosts.evacuation: VMs to evacuate, unfinished
work to resume); `verify_host` is what apply checks after a host comes back. Which setting becomes which
change, and which changes are disruptive or need a reboot: docs/host-changes.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from vgpuctl.domain import ChangeKind
from vgpuctl.hosts.evacuation import Migration, gone_from_record, needs_maintenance, plan_evacuation, resume_change
from vgpuctl.hosts.window import WindowInput, apply_batches, plan_window
from vgpuctl.inventory import HostSpec, VmSpec
from vgpuctl.inventory.merge import merge_hosts
from vgpuctl.inventory.schema import GuestsSpec
from vgpuctl.model import HostChange, Observed, ObservedHost, Problem
from vgpuctl.settings import SETTING_KINDS, SETTINGS, setting_of
from vgpuctl.settings.base import HostPlan, PlanInput, names
from vgpuctl.settings.facts import HostFacts, declared_params

# the order plans list a host's changes: the VMs moved out first, the settings, then finishing earlier work
KIND_ORDER = (ChangeKind.EVACUATE, *SETTING_KINDS, ChangeKind.RESUME)


def _order(change: HostChange) -> tuple[int, str]:
    return KIND_ORDER.index(change.kind), change.target


# ------------------------------------------------------------------------------------------ resolution


def resolve_hosts(specs: Sequence[HostSpec], observed: Observed) -> tuple[dict[str, HostSpec], list[str]]:
    """Host name -> the settings that apply to it: its cluster's entry with its own `name:` entry merged
    over it (vgpuctl.inventory.merge, which also says where each value came from)."""
    merged, errors = merge_hosts(specs, observed.clusters, observed.hosts)
    return {name: m.spec for name, m in merged.items()}, errors


# --------------------------------------------------------------------------------------------- planning


def plan_hosts(
    specs: Sequence[HostSpec],
    observed: Observed,
    facts: dict[str, HostFacts] | None = None,
    resume: Iterable[str] = (),
    vms: Sequence[VmSpec] = (),
    vgpu_migration: bool = False,
    evacuate_by_flag: bool = False,
    guests: GuestsSpec | None = None,
) -> HostPlan:
    """Host changes for every host the specs name, in host order; `resume` names hosts a failed apply left
    in maintenance mode (from their work records); `vms` are the inventory's VM entries (what each VM will ask
    for after the change decides whether it can be evacuated and brought back); `vgpu_migration`: vCenter
    allows vMotion of running vGPU VMs (`evacuate: migrate`); `evacuate_by_flag`: the command line's --evacuate
    sets the evacuation (messages name the flag); `guests`: the inventory's guest groups (the guest drivers of a
    driver upgrade window, vgpuctl.hosts.window)."""
    resolved, errors = resolve_hosts(specs, observed)
    result = HostPlan(errors=errors, problems=[Problem(e) for e in errors])
    facts = facts or {}
    resume = set(resume)
    listed = {v.name: v for v in vms}
    plans = {name: plan_host(spec, observed.hosts[name], facts.get(name)) for name, spec in resolved.items()}
    changing = {name for name, p in plans.items() if needs_maintenance(p.changes)}
    migration = Migration(observed, changing, vgpu_migration)
    existing = {vm.moid for vm in observed.vms.values()}
    window = plan_window(WindowInput(observed, resolved, facts, plans, listed, guests, vgpu_migration,
                                     apply_batches({h: p.changes for h, p in plans.items()}, resolved)))
    in_window = set(window.window.managers) if window is not None and window.window is not None else set()
    for name in sorted(set(resolved) | (resume & set(observed.hosts))):
        host = observed.hosts[name]
        spec = resolved.get(name)
        if spec is not None:
            one = plans[name]
            if name in in_window and window is not None:  # emptied by the window, batch by batch
                one.changes += [c for c in window.changes if c.host == name]
            else:
                one.extend(plan_evacuation(spec, host, observed, one.changes, listed, migration, evacuate_by_flag))
            one.changes.sort(key=_order)
            result.extend(one)
            result.problems += [Problem(e, host=name) for e in one.errors]  # the changes stay in the plan
        if name in resume:
            result.changes.append(resume_change(host, existing))
            result.warnings += gone_from_record(host, existing)
    if window is not None:
        result.errors += window.errors
        result.problems += [Problem(e) for e in window.errors]
        result.warnings += window.warnings
        result.window = window.window
    return result


def plan_host(spec: HostSpec, host: ObservedHost, facts: HostFacts | None = None) -> HostPlan:
    """The changes that bring one host to `spec` (errors when the spec cannot be met on this host)."""
    inp = PlanInput(spec, host, facts)
    result = HostPlan()
    unread = _options_unread(inp)
    for setting in SETTINGS:
        if unread and setting.reads.module_options:
            if unread not in result.errors:  # one error for all the settings kept in the module options
                result.errors.append(unread)
            continue
        result.extend(setting.plan(inp))
    result.changes.sort(key=_order)
    result.errors += shell_problems(host.name, result.changes, facts)
    return result


def _options_unread(inp: PlanInput) -> str:
    """The error when the module options could not be read and the entry sets a setting kept in them ("")."""
    readers = [s for s in SETTINGS if s.reads.module_options]
    if not inp.options.unread or not any(s.is_set(inp.spec) for s in readers):
        return ""
    facts = inp.facts
    why = "; ".join(facts.warnings if facts is not None else []) or (
        f"host {inp.host.name}: the nvidia module options were not read"
    )
    return f"{why}: {' and '.join(s.key for s in readers)} cannot be planned"


def shell_problems(host: str, changes: Sequence[HostChange], facts: HostFacts | None) -> list[str]:
    """Changes that cannot be made as planned: changes that need the ESXi shell without it (nvidia-smi and the
    module's declared parameters are read there), and module options the host's nvidia module does not
    declare (an undeclared option can keep the module, and every GPU, from loading). Without facts (a pure
    plan) nothing is checked."""
    if facts is None:
        return []
    owned = [(c, s) for c in changes if (s := setting_of(c.kind)) is not None]
    needs_shell = sorted({str(c.kind) for c, s in owned if s.needs_shell(c.kind)})
    if needs_shell and not facts.shell and facts.shell_deferred:
        return []  # a plan that starts no SSH service: apply reads the shell and checks these (its note says so)
    if needs_shell and not facts.shell and facts.shell_error:
        return [f"host {host}: {', '.join(needs_shell)} changes need ESXi SSH, which failed: {facts.shell_error}"]
    if needs_shell and not facts.shell:
        return [
            f"host {host}: {', '.join(needs_shell)} changes need ESXi SSH (nvidia-smi and esxcli on the host): "
            "set VGPUCTL_ESXI_PASSWORD or VGPUCTL_ESXI_KEY_FILE, or ssh.key_file in the host entry"
        ]
    declared = declared_params(facts)
    if declared is None:
        return []
    out = []
    for c, s in owned:
        param = s.param_written(c)
        if param is not None and param not in declared:
            out.append(
                f"host {host}: the nvidia module does not declare {param} (declared: "
                f"{names(declared)}): {c.kind} {c.new} cannot be set on this host"
            )
    return out


# ------------------------------------------------------------------------------------------ verification


def verify_host(spec: HostSpec, host: ObservedHost, facts: HostFacts) -> list[str]:
    """What still differs after apply (one line each): leftover changes and plan errors, then what each setting
    checks beyond that (NVLink links up or down)."""
    plan = plan_host(spec, host, facts)
    problems = [f"{c.label} is {c.old}, expected {c.new}" for c in plan.changes]
    problems += plan.errors
    inp = PlanInput(spec, host, facts)
    for setting in SETTINGS:
        problems += setting.verify(inp)
    return problems
