"""The preflight checks that need no files: versions, templates and each host's vGPU Manager, graphics type,
SSH access, lockdown mode and RDMA devices. Pure functions of the inventory, the observed farm and what
preflight read (vgpuctl.preflight.facts); each returns PreflightCheck rows (docs/preflight.md lists them)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from vgpuctl.domain import CheckStatus, Evacuate, Firmware, GraphicsType, NvlinkRequirement
from vgpuctl.inventory import Inventory
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed, ObservedHost, Plan
from vgpuctl.preflight import branches
from vgpuctl.preflight.check import PreflightCheck
from vgpuctl.preflight.facts import About, ManagerFacts, Scope, SshOutcome, SshProbe
from vgpuctl.profiles import try_parse
from vgpuctl.settings import SETTINGS
from vgpuctl.vms.network import usable_on
from vgpuctl.vsphere.hostaccess import HostAccess

PASS, WARN, FAIL, SKIP = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL, CheckStatus.SKIP

# vSphere API levels the inventory's features need (sources: docs/preflight.md, "Versions")
API_8_VGPUS = (8, 0)  # up to 8 vGPUs per VM from vSphere 8.0 (4 from 6.7 U3)
API_DEVICE_GROUPS = (8, 0, 0, 1)  # NVLink vendor device groups (vendorDeviceGroupInfo, ConfigSpec.deviceGroups)
MIN_HW_VERSION = 17  # vm-operator's minimum for NVIDIA PCI devices; vgpuctl's plan refuses older ones
HW_VERSION_MANY_VGPUS = 20  # conservative (no source settles it): more than 4 vGPUs or device groups


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text or ""))


def _label(api: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in api)


@dataclass(frozen=True)
class Requirement:
    api: tuple[int, ...]
    what: str  # "8 vGPUs per VM"
    who: str  # "vm train-01"
    hosts: tuple[str, ...] = ()  # the hosts it applies to (empty: any)


def requirements(inventory: Inventory | None, scope: Scope) -> list[Requirement]:
    """The API levels the inventory's features need, each with what needs it."""
    if inventory is None:
        return []
    out = []
    for vm in inventory.vms:
        if vm.vgpu_count > 4:
            out.append(Requirement(API_8_VGPUS, f"{vm.vgpu_count} vGPUs per VM", f"vm {vm.name}",
                                   tuple(scope.vm_hosts.get(vm.name, []))))
        if vm.nvlink == NvlinkRequirement.REQUIRED:
            out.append(Requirement(API_DEVICE_GROUPS, "NVLink device groups", f"vm {vm.name}",
                                   tuple(scope.vm_hosts.get(vm.name, []))))
    for host, spec in sorted(scope.specs.items()):
        out += [Requirement(api, what, f"host {host}", (host,)) for s in SETTINGS for api, what in s.api_needs(spec)]
    return out


def _unmet(api: str, reqs: Sequence[Requirement]) -> list[Requirement]:
    have = _version(api)
    return [r for r in reqs if have < r.api]


def _needs_text(reqs: Sequence[Requirement], limit: int = 3) -> str:
    shown = [f"{r.what} ({r.who}) needs {_label(r.api)}" for r in reqs[:limit]]
    return "; ".join(shown) + (f"; and {len(reqs) - limit} more" if len(reqs) > limit else "")


def vcenter_version(about: About, reqs: Sequence[Requirement]) -> PreflightCheck:
    """vCenter's API level against what the inventory uses."""
    seen = f"{about.full_name or 'vCenter ' + about.version} (API {about.api_version})"
    if about.api_type == "HostAgent":
        return PreflightCheck("vcenter.version", WARN, f"{seen} is an ESXi host, not vCenter",
                              fix="point vgpuctl at the vCenter that manages the host (clusters, work records and "
                                  "leases need it)")
    unmet = _unmet(about.api_version, reqs)
    if unmet:
        return PreflightCheck("vcenter.version", FAIL, f"{seen}: {_needs_text(unmet)}",
                              fix="upgrade vCenter, or leave the feature out of the inventory")
    needed = f"; the inventory needs {_label(max(r.api for r in reqs))}" if reqs else ""
    return PreflightCheck("vcenter.version", PASS, seen + needed)


def host_versions(observed: Observed, scope: Scope, reqs: Sequence[Requirement]) -> list[PreflightCheck]:
    """Each host's ESXi API level against what the inventory uses on it."""
    out = []
    for name in scope.hosts:
        host = observed.hosts[name]
        mine = [r for r in reqs if not r.hosts or name in r.hosts]
        unmet = _unmet(host.api_version, mine)
        seen = f"ESXi API {host.api_version}"
        if unmet:
            out.append(PreflightCheck("host.version", FAIL, f"{seen}: {_needs_text(unmet)}", name,
                                      "upgrade the host, or place those VMs elsewhere"))
        else:
            out.append(PreflightCheck("host.version", PASS, seen, name))
    return out


# ------------------------------------------------------------------------------------------ templates


def template_checks(plan: Plan, inventory: Inventory | None, observed: Observed) -> list[PreflightCheck]:
    """Each template the plan clones from: present, EFI and a recent hardware version for C-series vGPUs."""
    if inventory is None:
        return []
    wanted: dict[str, list[str]] = {}
    for change in plan.changes:
        if change.clone is not None:
            wanted.setdefault(change.clone.template, []).append(change.vm)
    return [_template(name, vms, inventory, observed) for name, vms in sorted(wanted.items())]


def _template(name: str, vms: list[str], inventory: Inventory, observed: Observed) -> PreflightCheck:
    keys = observed.named(name)
    if not keys:
        return PreflightCheck("template", FAIL, f"not found (clones: {', '.join(vms)})", name,
                              "create the template, or name an existing one in the VM entries")
    tmpl = observed.vms[keys[0]]
    specs = [v for v in inventory.vms if v.name in vms]
    large_bar = any((p := try_parse(profile)) is not None and p.large_bar for s in specs for profile in s.vgpu_profiles)
    many = any(s.vgpu_count > 4 or s.nvlink == NvlinkRequirement.REQUIRED for s in specs)
    hw = _version(tmpl.hardware_version)
    kind = "template" if tmpl.is_template else "VM (not a template)"
    seen = f"{kind}, {tmpl.firmware.upper()}, {tmpl.hardware_version}"
    if large_bar and tmpl.firmware != Firmware.EFI:
        return PreflightCheck("template", FAIL, f"{seen}: C-series vGPUs need EFI firmware", name,
                              "use a template installed with EFI firmware")
    if large_bar and hw and hw[0] < MIN_HW_VERSION:
        return PreflightCheck("template", FAIL, f"{seen}: vGPUs need vmx-{MIN_HW_VERSION} or later", name,
                              "upgrade the template's hardware version")
    if many and hw and hw[0] < HW_VERSION_MANY_VGPUS:
        return PreflightCheck("template", WARN, f"{seen}: more than 4 vGPUs or NVLink device groups are safest with "
                              f"vmx-{HW_VERSION_MANY_VGPUS} (ESXi 8.0 compatibility); no source settles the minimum",
                              name, f"upgrade the template's hardware version to vmx-{HW_VERSION_MANY_VGPUS}")
    return PreflightCheck("template", PASS, seen, name)


# ------------------------------------------------------------------------------------------ hosts


def places_vgpus(host: str, inventory: Inventory | None, scope: Scope) -> bool:
    """Some inventory VM with vGPUs is on, or may be created on, the host (always true without an inventory)."""
    if inventory is None:
        return True
    return any(vm.vgpus and host in scope.vm_hosts.get(vm.name, []) for vm in inventory.vms)


def manager_check(host: ObservedHost, facts: ManagerFacts | None, needed: bool) -> PreflightCheck:
    """The NVIDIA vGPU Manager installed, and which version and branch."""
    facts = facts or ManagerFacts()
    offers = f"the host offers {len(host.offered_profiles)} vGPU types"
    fix = ("install NVIDIA's vGPU Manager (the host driver VIB or vLCM component from the NVIDIA licensing portal) "
           "in maintenance mode, then reboot")
    if facts.installed and facts.version:
        branch = branches.branch_of(facts.version)
        known = branches.known(branch) if branch is not None else None
        release = f", {known.label}" if known else (f", R{branch}" if branch else "")
        return PreflightCheck("host.vgpu-manager", PASS,
                              f"{facts.version}{release} ({facts.package}; from {facts.source}); {offers}", host.name)
    if facts.installed is False:
        return PreflightCheck("host.vgpu-manager", FAIL if needed else WARN,
                              f"no NVIDIA vGPU Manager VIB installed ({facts.source}); {offers}", host.name, fix)
    why = "; ".join(facts.unread) or "not read"
    if host.offered_profiles:
        return PreflightCheck("host.vgpu-manager", WARN, f"version unknown ({why}); {offers}, so one is loaded",
                              host.name, "grant Host.Config.Image, or set up ESXi SSH, so preflight can read it")
    return PreflightCheck("host.vgpu-manager", FAIL if needed else WARN,
                          f"version unknown ({why}) and the host offers no vGPU types: no vGPU Manager?", host.name,
                          fix)


def graphics_check(host: ObservedHost, after: ObservedHost, needed: bool) -> PreflightCheck:
    """vGPUs need the GPUs in Shared Direct; the inventory may set it (`after`: the host once the plan's changes
    are made)."""
    shared = sorted(g.pci_id for g in host.gpus if g.graphics_type != GraphicsType.SHARED_DIRECT)
    if not shared:
        return PreflightCheck("host.graphics", PASS, f"all {len(host.gpus)} GPUs in Shared Direct", host.name)
    wants = all(g.graphics_type == GraphicsType.SHARED_DIRECT for g in after.gpus)
    seen = f"GPUs {', '.join(shared)} are not in Shared Direct (default {host.default_graphics_type})"
    if wants:
        return PreflightCheck("host.graphics", PASS, f"{seen}; the inventory sets sharedDirect (a reboot)", host.name)
    return PreflightCheck("host.graphics", FAIL if needed else WARN, f"{seen}: vGPUs need Shared Direct", host.name,
                          "set graphics: {default_type: sharedDirect} in the host's inventory entry")


LOCKDOWN_OFF = "lockdownDisabled"
EXCEPTION_FIX = ("add {user} to the host's lockdown exception users, with the Administrator role on the host (vSphere "
                 "Client: host > Configure > Security Profile > Lockdown Mode > Exception Users); vgpuctl never turns "
                 "lockdown mode off")
KEY_FIX = ("check the host key on the host's console, then add it to the known_hosts file vgpuctl reads (ssh-keyscan "
           "HOST >> ~/.ssh/known_hosts, or ssh.known_hosts), or run once with --ssh-trust-on-first-use")


def ssh_check(host: str, needed: bool, access: HostAccess | None, probe: SshProbe | None,
              managed: bool = False) -> PreflightCheck:
    """The ESXi shell answers over SSH with a known host key (only where the run needs it)."""
    if not needed:
        return PreflightCheck("host.ssh", SKIP, "not needed: no MIG, NVLink or scheduler setting for the host and no "
                                                "SSH set up", host)
    if probe is None:
        return PreflightCheck("host.ssh", SKIP, "not tried: the host is not connected", host)
    if probe.outcome == SshOutcome.OK:
        return PreflightCheck("host.ssh", PASS, f"logged in as {probe.user}, host key known", host)
    if probe.outcome == SshOutcome.UNKNOWN_KEY:
        return PreflightCheck("host.ssh", FAIL, probe.message, host, KEY_FIX.replace("HOST", host))
    if probe.outcome == SshOutcome.UNREACHABLE and access is not None and access.ssh_running is False and managed:
        return PreflightCheck("host.ssh", WARN, "the SSH service (TSM-SSH) is stopped; ssh.service: manage starts it "
                                                "for the run and stops it again: its host key and login are checked "
                                                "then", host)
    if probe.outcome == SshOutcome.UNREACHABLE and access is not None and access.ssh_running is False:
        return PreflightCheck("host.ssh", FAIL, f"the SSH service (TSM-SSH) is stopped, policy {access.ssh_policy}: "
                                                f"{probe.message}", host,
                              "set ssh: {service: manage} in the host entry (apply starts it for its run and stops "
                              f"it again), or start it: govc host.service -host.dns {host} start TSM-SSH")
    lockdown = access.lockdown if access is not None else None
    if probe.outcome == SshOutcome.AUTH and lockdown not in (None, LOCKDOWN_OFF):
        return PreflightCheck("host.ssh", FAIL, f"login as {probe.user} refused; the host is in {lockdown}", host,
                              EXCEPTION_FIX.format(user=probe.user))
    fixes = {SshOutcome.AUTH: "check the SSH user and its key (ssh.key_file, VGPUCTL_ESXI_KEY_FILE) or password "
                              "(ssh.password_env, VGPUCTL_ESXI_PASSWORD)",
             SshOutcome.UNREACHABLE: "check the address and port (VGPUCTL_ESXI_HOSTS, ssh.port) and the host's "
                                     "firewall rule sshServer"}
    return PreflightCheck("host.ssh", FAIL, probe.message, host, fixes.get(probe.outcome))


def lockdown_check(host: str, needed: bool, access: HostAccess | None, exceptions: list[str] | str | None,
                   user: str) -> PreflightCheck:
    """Lockdown mode: named, and with SSH needed, whether the SSH user is an exception user."""
    mode = access.lockdown if access is not None else None
    if mode is None:
        return PreflightCheck("host.lockdown", SKIP, "the host does not report a lockdown mode", host)
    if mode == LOCKDOWN_OFF or not needed:
        return PreflightCheck("host.lockdown", PASS, mode + ("" if mode == LOCKDOWN_OFF else "; SSH is not needed"),
                              host)
    if isinstance(exceptions, list) and user in exceptions:
        return PreflightCheck("host.lockdown", PASS, f"{mode}; {user} is an exception user", host)
    if isinstance(exceptions, list):
        listed = ", ".join(exceptions) or "none"
        return PreflightCheck("host.lockdown", FAIL, f"{mode} and {user} is not an exception user (exceptions: "
                                                     f"{listed}): SSH logins as {user} are refused", host,
                              EXCEPTION_FIX.format(user=user))
    why = exceptions or "not read"
    seen = f"{mode}; the exception users could not be read ({why}): SSH as {user} works only if it is one"
    return PreflightCheck("host.lockdown", WARN, seen, host, EXCEPTION_FIX.format(user=user))


RDMA_ROLE = "rdma_roce"


def rdma_checks(inventory: Inventory | None, scope: Scope, access: dict[str, HostAccess]) -> list[PreflightCheck]:
    """Hosts of VMs whose guest group sets up RDMA (the rdma_roce role) need an RDMA device."""
    groups = {n for n, g in (inventory.guests.groups.items() if inventory else []) if RDMA_ROLE in g.roles}
    vms = [v for v in (inventory.vms if inventory else []) if v.guest is not None and v.guest.group in groups]
    if not vms:
        return [PreflightCheck("host.rdma", SKIP, f"no inventory VM uses RDMA (no guest group with {RDMA_ROLE})")]
    hosts = sorted({h for v in vms for h in scope.vm_hosts.get(v.name, [])})
    out = []
    for host in hosts:
        count = access[host].rdma_devices if host in access else None
        users = ", ".join(v.name for v in vms if host in scope.vm_hosts.get(v.name, []))
        if count is None:
            out.append(PreflightCheck("host.rdma", WARN, f"the host does not report RDMA devices (for {users})", host))
        elif count == 0:
            out.append(PreflightCheck("host.rdma", FAIL, f"no RDMA device (config.network.rdmaDevice is empty); "
                                                         f"{users} set up RDMA", host,
                                      "add a RoCE-capable NIC with its RDMA driver, or place those VMs elsewhere"))
        else:
            out.append(PreflightCheck("host.rdma", PASS, f"{count} RDMA device(s) for {users}", host))
    return out


def vm_network_checks(inventory: Inventory | None, observed: Observed, scope: Scope) -> list[PreflightCheck]:
    """Each SR-IOV or passthrough adapter an inventory VM asks for: a host the VM is on or may be created on has
    the NIC (with virtual functions, or enabled for passthrough; whether one is still free is the plan's
    placement question)."""
    out = []
    for vm in inventory.vms if inventory is not None else []:
        for j, adapter in enumerate(vm.adapters):
            if not adapter.kind.is_physical or adapter.select is None:
                continue
            subject = f"vm {vm.name} network[{j}] ({adapter.kind})"
            hosts = [h for h in scope.vm_hosts.get(vm.name, []) if h in observed.hosts]
            found = {h: usable_on(observed.hosts[h], adapter) for h in hosts}
            fit = sorted(h for h, (nics, _) in found.items() if nics)
            if not hosts:
                out.append(PreflightCheck("vm.network", SKIP, "no host it is on or may be created on", subject))
            elif fit:
                out.append(PreflightCheck("vm.network", PASS, f"its NIC is on {', '.join(fit)}", subject))
            else:
                why = "; ".join(f"host {h} {reason}" for h, (_, reason) in sorted(found.items()))
                out.append(PreflightCheck("vm.network", FAIL, why, subject,
                                          "set `sriov` for the NIC in the host's entry (or enable it for passthrough), "
                                          "or place the VM where the NIC is"))
    return out


def setting_checks(observed: Observed, scope: Scope) -> list[PreflightCheck]:
    """What each host setting checks of each host its entry configures, beyond planning it (settings.base.Finding)."""
    out = []
    for name, spec in sorted(scope.specs.items()):
        host = observed.hosts.get(name)
        if host is None:
            continue
        findings = [f for s in SETTINGS for f in s.preflight(spec, host)]
        out += [PreflightCheck(f.id, f.status, f.evidence, name, f.fix) for f in findings]
    return out


def vgpu_migration_check(scope: Scope, enabled: bool | None) -> list[PreflightCheck]:
    """Entries that empty hosts by vMotion (`evacuate: migrate`) need vCenter to allow it for running vGPU VMs
    (its advanced setting vgpu.hotmigrate.enabled; VMware, "vSphere vMotion of vGPU VMs"); without it such VMs are
    powered off instead where their entry allows it, else the plan refuses."""
    hosts = sorted(n for n, s in scope.specs.items() if s.maintenance.evacuate == Evacuate.MIGRATE)
    if enabled is None or not hosts:
        return []
    subject = f"hosts {', '.join(hosts)}" if len(hosts) > 1 else f"host {hosts[0]}"
    if enabled:
        return [PreflightCheck("vcenter.vgpu-migration", PASS, f"vgpu.hotmigrate.enabled is true ({subject} "
                               "evacuate by migration)", None)]
    return [PreflightCheck("vcenter.vgpu-migration", WARN, f"vgpu.hotmigrate.enabled is not true: running vGPU VMs "
                           f"of {subject} (evacuate: migrate) cannot move; a plan powers them off where their entry "
                           "allows it, else refuses", None, "set vCenter's advanced setting vgpu.hotmigrate.enabled "
                           "to true")]


def gpu_host_check(observed: Observed, inventory: Inventory | None, scope: Scope) -> list[PreflightCheck]:
    """A run needs a GPU host: without an inventory, or with one that gives VMs vGPUs, a datacenter where no host
    has an NVIDIA GPU (config.graphicsInfo) or offers vGPU types fails, instead of passing with no host checked."""
    if scope.hosts:
        return []
    if inventory is not None and not any(vm.vgpu_count for vm in inventory.vms):
        return []
    offering = sorted(n for n, h in observed.hosts.items() if h.offered_profiles)
    where = f"datacenter {observed.datacenter}" if observed.datacenter else "the datacenter"
    seen = f"{len(observed.hosts)} host(s), none with an NVIDIA GPU" + (
        f" (vGPU types offered on {', '.join(offering)})" if offering else " or a vGPU Manager offering vGPU types")
    return [PreflightCheck("host.gpu", FAIL, f"no GPU host in {where}: {seen}", None,
                           "check --datacenter and the vCenter URL; install the GPUs' NVIDIA vGPU Manager (README, "
                           "\"What a real vCenter needs\") and set their graphics type to Shared Direct")]
