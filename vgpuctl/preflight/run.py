"""Running the checks: all of them for `vgpuctl preflight`, the cheap part for plan and apply."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vgpuctl.domain import CheckStatus, ConnectionState, Evacuate, SshService
from vgpuctl.farm.predict import predict_host
from vgpuctl.gcpause import paused_gc
from vgpuctl.hosts.evacuation import HOT_MIGRATE_OPTION
from vgpuctl.hosts.facts import gather_facts
from vgpuctl.inventory import Inventory
from vgpuctl.model import Observed, Plan
from vgpuctl.planner import make_plan
from vgpuctl.preflight import checks, guests, privileges
from vgpuctl.preflight.check import PreflightCheck
from vgpuctl.preflight.facts import PreflightFacts, Scope, requirement_scope, scope_of
from vgpuctl.preflight.gather import about, environment_user, gather, granted, places
from vgpuctl.settings import SETTINGS

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session


def _needs(session: Session, observed: Observed, inventory: Inventory | None, plan: Plan,
           scope: Scope | None = None) -> list[privileges.Need]:
    needs = privileges.needs(plan, observed, inventory, places(session, observed, plan))
    needs += privileges.ssh_service_needs(inventory, observed, places(session, observed, Plan()))
    for host in scope.hosts if scope is not None else []:  # preflight reads each host's packages
        needs.append(privileges.Need(privileges.HOST_PACKAGES, ("HostSystem", observed.hosts[host].moid),
                                     f"host {host}", privileges.HOST_PACKAGES.privileges))
    for host in sorted(scope.shell & set(scope.hosts)) if scope is not None else []:  # who may log in in lockdown
        needs.append(privileges.Need(privileges.LOCKDOWN_EXCEPTIONS, ("HostSystem", observed.hosts[host].moid),
                                     f"host {host}", privileges.LOCKDOWN_EXCEPTIONS.privileges))
    return needs


def cheap_checks(session: Session, observed: Observed, inventory: Inventory | None, plan: Plan) -> list[PreflightCheck]:
    """vCenter's version against the inventory, and the privileges the plan's apply needs: what plan and apply
    check on the farm they read (the session's about info, HasPrivilegeOnEntities, once for most plans)."""
    with paused_gc():  # the needs of 1,000 VMs and their 9,000 answers are built in one go: see vgpuctl.gcpause
        reqs = checks.requirements(inventory, requirement_scope(inventory, observed))
        out = [checks.vcenter_version(about(session), reqs)]
        needs = _needs(session, observed, inventory, plan)
        allowed, error = granted(session, needs)
        return out + privileges.privilege_checks(needs, allowed, error)


def host_checks(observed: Observed, inventory: Inventory | None, scope: Scope,
                facts: PreflightFacts, plan: Plan) -> list[PreflightCheck]:
    out = []
    for name in scope.hosts:
        host = observed.hosts[name]
        if host.connection_state != ConnectionState.CONNECTED:
            out.append(PreflightCheck("host.connected", CheckStatus.FAIL, f"the host is {host.connection_state}",
                                      name, "reconnect it in vCenter, or leave it out of the inventory"))
            continue
        spec = scope.specs.get(name)
        needed = checks.places_vgpus(name, inventory, scope)
        access = facts.access.get(name)
        probe = facts.ssh.get(name)
        user = probe.user if probe is not None else environment_user(spec)
        out += [
            checks.manager_check(host, facts.managers.get(name), needed),
            checks.graphics_check(host, predict_host(host, plan.host_changes), needed),
            checks.ssh_check(name, name in scope.shell, access, probe,
                             spec is not None and spec.ssh.service == SshService.MANAGE),
            checks.lockdown_check(name, name in scope.shell, access, facts.exceptions.get(name), user),
        ]
    return out


def run_checks(session: Session, observed: Observed, inventory: Inventory | None) -> list[PreflightCheck]:
    """Every check against the farm as observed (the inventory's plan made without host facts decides which
    operations, and so which privileges, the run needs)."""
    scope = scope_of(inventory, observed)
    plan = make_plan(inventory, observed) if inventory is not None else Plan()
    needs = _needs(session, observed, inventory, plan, scope)
    facts = gather(session, observed, scope, needs)
    reqs = checks.requirements(inventory, scope)
    found = [checks.vcenter_version(facts.about, reqs), *checks.host_versions(observed, scope, reqs)]
    found += privileges.privilege_checks(needs, facts.granted, facts.privileges_error)
    found += checks.gpu_host_check(observed, inventory, scope)
    found += host_checks(observed, inventory, scope, facts, plan)
    found += checks.template_checks(plan, inventory, observed)
    found += checks.rdma_checks(inventory, scope, facts.access)
    found += checks.vm_network_checks(inventory, observed, scope)
    found += checks.setting_checks(observed, scope)
    found += setting_fact_checks(session, observed, scope)
    found += checks.vgpu_migration_check(scope, _hot_migrate(session, scope))
    found += guests.driver_branch_checks(inventory, scope, facts.managers)
    found += guests.file_checks(inventory)
    return found


def setting_fact_checks(session: Session, observed: Observed, scope: Scope) -> list[PreflightCheck]:
    """What the settings an entry sets check from the host's facts (a depot they name, read on the host or through
    vCenter): the facts of those hosts only, their shell where preflight checks it."""
    wanted = {name: spec for name, spec in sorted(scope.specs.items())
              if observed.hosts[name].connection_state == ConnectionState.CONNECTED
              and any(s.preflight_reads and s.is_set(spec) for s in SETTINGS)}
    if not wanted:
        return []
    facts = gather_facts(session, {n: (observed.hosts[n].moid, s) for n, s in wanted.items()},
                         shell=any(n in scope.shell for n in wanted))
    out = []
    for name, spec in wanted.items():
        found = [f for s in SETTINGS if s.preflight_reads and s.is_set(spec)
                 for f in s.preflight_facts(spec, observed.hosts[name], facts[name])]
        out += [PreflightCheck(f.id, f.status, f.evidence, name, f.fix) for f in found]
    return out


def _hot_migrate(session: Session, scope: Scope) -> bool | None:
    """vCenter's vGPU vMotion setting, read only when an entry evacuates by migration (None: not read)."""
    from vgpuctl.vsphere.vcenter import advanced_setting_true

    if not any(s.maintenance.evacuate == Evacuate.MIGRATE for s in scope.specs.values()):
        return None
    return advanced_setting_true(session, HOT_MIGRATE_OPTION)


def refuse_by_preflight(session: Session, observed: Observed, inventory: Inventory, the_plan: Plan) -> None:
    """preflight's cheap part on a plan (vCenter's version, the privileges its apply needs): a failed check refuses
    the plan with the line preflight prints for it, a warning joins the plan's warnings."""
    found = cheap_checks(session, observed, inventory, the_plan)
    the_plan.refuse(c.line for c in found if c.status == CheckStatus.FAIL)
    the_plan.warnings += [c.line for c in found if c.status == CheckStatus.WARN]
