"""Which vCenter privileges a run needs, on which objects, and the check of what the session has.

OPERATIONS is the README's role table as data (tests/unit/test_preflight_privileges.py keeps the two equal):
each thing vgpuctl does, the methods it calls and the privilege ids their "Required Privileges" name in the
vSphere Web Services API reference (docs/preflight.md, "Privileges"). `needs` turns a plan into (operation,
object, privileges) per object the apply would touch; `privilege_checks` compares them with what
AuthorizationManager.HasPrivilegeOnEntities granted the session. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from vgpuctl.domain import ChangeKind, CheckStatus, EvacuationKind, IdentityMethod, SshService
from vgpuctl.hosts import plan as hostplan
from vgpuctl.hosts.evacuation import needs_maintenance
from vgpuctl.inventory import Inventory
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import EvacuationAction, HostChange, Observed, Plan, VmChange, folder_path
from vgpuctl.preflight.check import PreflightCheck
from vgpuctl.settings import SETTINGS, setting_of, step_of
from vgpuctl.settings.base import PrivilegePlace

Entity = tuple[str, str]  # (vim type name, moid)


@dataclass(frozen=True)
class Operation:
    key: str  # check id suffix: privileges.<key>
    what: str  # the README table's "what vgpuctl does"
    methods: tuple[str, ...]
    privileges: tuple[str, ...]
    optional: bool = False  # preflight reads it has a fallback for: missing is a warning


READ = Operation("read", "read the farm", ("PropertyCollector", "QueryConfigTarget", "RetrieveVgpuProfileInfo"),
                 ("System.View", "System.Read"))
VM_RECONFIGURE = Operation(
    "vm-reconfigure", "change a VM's vGPUs, CPUs, memory, firmware, extraConfig", ("ReconfigVM_Task",),
    ("VirtualMachine.Config.AddRemoveDevice", "VirtualMachine.Config.CPUCount", "VirtualMachine.Config.Memory",
     "VirtualMachine.Config.AdvancedConfig", "VirtualMachine.Config.Resource", "VirtualMachine.Config.Settings"))
VM_CLONE = Operation(
    "vm-clone", "create a VM from a template", ("CloneVM_Task",),
    ("VirtualMachine.Provisioning.Clone", "VirtualMachine.Provisioning.DeployTemplate",
     "VirtualMachine.Inventory.CreateFromExisting", "Resource.AssignVMToPool", "Datastore.AllocateSpace",
     "Network.Assign"))
VM_POWER = Operation("vm-power", "power VMs on and off, shut guests down",
                     ("PowerOnVM_Task", "PowerOffVM_Task", "ShutdownGuest"),
                     ("VirtualMachine.Interact.PowerOn", "VirtualMachine.Interact.PowerOff"))
VM_REMOVE = Operation("vm-remove", "remove VMs (`state: absent`, with `apply --allow-destroy`)",
                      ("PowerOffVM_Task", "Destroy_Task"),
                      ("VirtualMachine.Interact.PowerOff", "VirtualMachine.Inventory.Delete"))
HOST_MAINTENANCE = Operation(
    "host-maintenance", "maintenance mode and reboot for host changes",
    ("EnterMaintenanceMode_Task", "ExitMaintenanceMode_Task", "RebootHost_Task"), ("Host.Config.Maintenance",))
HOST_SETTINGS = Operation(
    "host-settings", "graphics type and policy, nvidia module options (NVLink, scheduler)",
    ("UpdateGraphicsConfig", "UpdateModuleOptionString", "QueryConfiguredModuleOptionString", "QueryModules"),
    ("Host.Config.Settings",))
WORK_RECORDS = Operation("work-records",
                         "host work records (resume an interrupted host change), who holds a lease or claim",
                         ("AddCustomFieldDef", "SetField"), ("Global.ManageCustomFields", "Global.SetCustomField"))
LEASES = Operation("leases", "the lease that keeps two applies off one host, the claim that keeps them off one VM",
                   ("CreateFolder", "Destroy_Task"), ("Folder.Create", "Folder.Delete"))
VM_CUSTOMIZE = Operation(
    "vm-customize", "guest customization of a clone (`guest.identity`, method customization) and its events",
    ("CloneVM_Task with a customization spec", "QueryEvents"), ("VirtualMachine.Provisioning.Customize",))
MIGRATE = Operation("migrate", "move running or stopped VMs off a host", ("RelocateVM_Task",),
                    ("Resource.HotMigrate", "Resource.ColdMigrate"))
VM_CLASSES = Operation("vm-classes", "GPU VM classes and supervisor namespaces (`vgpuctl k8s`)",
                       ("namespace-management REST",), ("VirtualMachineClasses.Manage", "Namespaces.Manage"))
SSH_SERVICE = Operation("ssh-service", "start the ESXi SSH service for a run and stop it again (`ssh.service: manage`)",
                        ("StartService", "StopService"), ("Host.Config.NetService",))
LOCKDOWN_EXCEPTIONS = Operation(
    "lockdown-exceptions", "read a host's lockdown exception users (`preflight`'s lockdown check, where SSH is needed)",
    ("QueryLockdownExceptions",), ("Global.Settings",), optional=True)
HOST_PACKAGES = Operation("host-packages", "read each host's vGPU Manager version (`preflight`; else over SSH)",
                          ("FetchSoftwarePackages",), ("Host.Config.Image",), optional=True)

BEYOND_HOST = "beyond-host"  # the key suffix of a setting's operation on other objects than its host


def setting_operations() -> tuple[Operation, ...]:
    """The operations of the host settings that need vCenter privileges of their own (the registry says which):
    on the host, and for some on other objects (`host-KEY-beyond-host`)."""
    out = []
    for s in SETTINGS:
        if s.privileges is None:
            continue
        out.append(Operation(f"host-{s.key}", s.privileges.what, s.privileges.methods, s.privileges.privileges))
        beyond = s.privileges.beyond_host
        if beyond is not None:
            out.append(Operation(f"host-{s.key}-{BEYOND_HOST}", beyond.what, beyond.methods, beyond.privileges))
    return tuple(out)


def _own_privileges() -> dict[ChangeKind, Operation]:
    ops = {op.key: op for op in setting_operations()}
    return {kind: ops[f"host-{s.key}"] for s in SETTINGS if s.privileges is not None for kind in s.kinds}


def _beyond_host_operations() -> dict[ChangeKind, Operation]:
    ops = {op.key: op for op in setting_operations()}
    return {kind: ops[f"host-{s.key}-{BEYOND_HOST}"] for s in SETTINGS
            if s.privileges is not None and s.privileges.beyond_host is not None for kind in s.kinds}


OPERATIONS: tuple[Operation, ...] = (
    READ, VM_RECONFIGURE, VM_CLONE, VM_POWER, VM_REMOVE, HOST_MAINTENANCE, HOST_SETTINGS, WORK_RECORDS, LEASES,
    MIGRATE, VM_CLASSES, SSH_SERVICE, HOST_PACKAGES, LOCKDOWN_EXCEPTIONS, VM_CUSTOMIZE, *setting_operations(),
)

# ReconfigVM_Task's privilege follows the field it changes (API reference: "dynamic"; vSphere Security,
# "Virtual Machine Configuration Privileges")
_FIELD_PRIVILEGE = {
    "numCPUs": "VirtualMachine.Config.CPUCount",
    "memoryMB": "VirtualMachine.Config.Memory",
    "memoryReservationLockedToMax": "VirtualMachine.Config.Resource",
    "firmware": "VirtualMachine.Config.Settings",
}


@dataclass(frozen=True)
class Need:
    """Privileges one operation needs on one object; `label` names the object for people (`vm train-01`)."""

    operation: Operation
    entity: Entity
    label: str
    privileges: tuple[str, ...]


@dataclass(frozen=True)
class Places:
    """Where vCenter-wide and clone privileges are checked: the root folder (Global.* privileges, the lease
    folders), the datacenter, and the datastores and networks of each template (moid -> entities)."""

    root: Entity
    datacenter: Entity
    template_storage: Mapping[str, tuple[Sequence[Entity], Sequence[Entity]]]


def reconfigure_privileges(change: VmChange) -> tuple[str, ...]:
    """The Config privileges one VM change's ReconfigVM_Task needs, in the role table's order."""
    wanted = {_FIELD_PRIVILEGE.get(f.field, "VirtualMachine.Config.Settings") for f in change.fields}
    if change.devices:
        wanted.add("VirtualMachine.Config.AddRemoveDevice")
    if change.extra_config:
        wanted.add("VirtualMachine.Config.AdvancedConfig")
    return tuple(p for p in VM_RECONFIGURE.privileges if p in wanted)


def _vm_needs(change: VmChange, observed: Observed, places: Places) -> list[Need]:
    vm = observed.vm_for(change)
    if vm is not None:
        target, label = ("VirtualMachine", vm.moid), f"vm {change.vm}"
    else:  # a clone inherits the permissions of the folder it is created in
        folder = folder_path(change.clone.folder) if change.clone is not None else None
        moid = observed.folder_moids.get(folder or "") or observed.moids.get("vm_folder", "")
        target, label = ("Folder", moid), f"folder {'/' + (folder or '')} (new vm {change.vm})"
    out = [] if change.clone is None else _clone_needs(change, observed, places, target, label)
    privileges = reconfigure_privileges(change)
    if privileges:
        out.append(Need(VM_RECONFIGURE, target, label, privileges))
    power = ((VM_POWER.privileges[0],) if change.power_on else ()) + ((VM_POWER.privileges[1],) if change.power_off
                                                                      else ())
    if power:
        out.append(Need(VM_POWER, target, label, power))
    return out


def _clone_needs(change: VmChange, observed: Observed, places: Places, folder: Entity, label: str) -> list[Need]:
    clone = change.clone
    assert clone is not None
    template = next((observed.vms[k] for k in observed.named(clone.template)), None)
    out = []
    if template is not None:
        source = ("VirtualMachine.Provisioning.Clone",) + (
            ("VirtualMachine.Provisioning.DeployTemplate",) if template.is_template else ())
        out.append(Need(VM_CLONE, ("VirtualMachine", template.moid), f"template {clone.template}", source))
        datastores, networks = places.template_storage.get(template.moid, ((), ()))
        out += [Need(VM_CLONE, d, f"datastore of {clone.template}", ("Datastore.AllocateSpace",)) for d in datastores]
        out += [Need(VM_CLONE, n, f"network of {clone.template}", ("Network.Assign",)) for n in networks]
    out.append(Need(VM_CLONE, folder, label, ("VirtualMachine.Inventory.CreateFromExisting",)))
    if clone.identity is not None and clone.identity.method == IdentityMethod.CUSTOMIZATION and template is not None:
        out.append(Need(VM_CUSTOMIZE, ("VirtualMachine", template.moid), f"template {clone.template}",
                        VM_CUSTOMIZE.privileges))
    pool = observed.cluster_pool_moids.get(clone.cluster or "") or (
        observed.hosts[clone.host].resource_pool_moid if clone.host in observed.hosts else "")
    if pool:
        out.append(Need(VM_CLONE, ("ResourcePool", pool), f"resource pool of {clone.cluster or clone.host}",
                        ("Resource.AssignVMToPool",)))
    return out


OWN_PRIVILEGES = _own_privileges()  # change kind -> the operation of the setting that plans it
BEYOND_HOST_OPERATIONS = _beyond_host_operations()  # change kind -> its setting's operation beyond the host


def _host_needs(plan: Plan, observed: Observed, places: Places) -> list[Need]:
    out: list[Need] = []
    for host in sorted({c.host for c in plan.host_changes}):
        moid = observed.hosts[host].moid if host in observed.hosts else ""
        changes = [c for c in plan.host_changes if c.host == host]
        entity, label = ("HostSystem", moid), f"host {host}"
        if needs_maintenance(changes):
            out.append(Need(HOST_MAINTENANCE, entity, label, HOST_MAINTENANCE.privileges))
        own = {c.kind for c in changes if c.kind in OWN_PRIVILEGES}
        if any(_written_through_vcenter(c) and c.kind not in own for c in changes):
            out.append(Need(HOST_SETTINGS, entity, label, HOST_SETTINGS.privileges))
        for op in dict.fromkeys(OWN_PRIVILEGES[k] for k in sorted(own)):
            out.append(Need(op, entity, label, op.privileges))
        out += _beyond_host_needs(changes, observed, places)
        out += _evacuation_needs(changes, observed)
    if plan.host_changes:
        out.append(Need(WORK_RECORDS, places.root, "the root folder", WORK_RECORDS.privileges))
        out.append(Need(LEASES, places.root, "the root folder", LEASES.privileges))
    return out


def _beyond_host_needs(changes: Iterable[HostChange], observed: Observed, places: Places) -> list[Need]:
    """What a host's changes ask on other objects than the host (its setting says: a cluster's vLCM image)."""
    out = []
    for c in changes:
        op, setting = BEYOND_HOST_OPERATIONS.get(c.kind), setting_of(c.kind)
        if op is None or setting is None:
            continue
        for need in setting.privileges_beyond_host(c):
            if need.place == PrivilegePlace.CLUSTER:
                host = observed.hosts.get(c.host)
                name = host.cluster if host is not None and host.cluster else need.moid
                out.append(Need(op, ("ClusterComputeResource", need.moid), f"cluster {name}", need.privileges))
            else:
                out.append(Need(op, places.root, "the root folder (vCenter's own operation)", need.privileges))
    return out


def _written_through_vcenter(change: HostChange) -> bool:
    """A setting whose apply step makes one vCenter write (UpdateGraphicsConfig, UpdateModuleOptionString); the
    steps without one write in the ESXi shell (MIG with nvidia-smi) and need no vCenter privilege."""
    step = step_of(change.kind)
    return step is not None and step.finish is not None


def _evacuation_needs(changes: Iterable[HostChange], observed: Observed) -> list[Need]:
    out = []
    for c in changes:
        vm = observed.vms.get(str(c.target)) if c.kind == ChangeKind.EVACUATE else None
        if vm is None:
            continue
        entity, label = ("VirtualMachine", vm.moid), f"vm {vm.name}"
        if isinstance(c.new, EvacuationAction) and c.new.kind == EvacuationKind.MIGRATE:
            out.append(Need(MIGRATE, entity, label, ("Resource.HotMigrate",)))
        else:
            out.append(Need(VM_POWER, entity, label, VM_POWER.privileges))
    return out


def needs(plan: Plan, observed: Observed, inventory: Inventory | None, places: Places) -> list[Need]:
    """What the plan's apply needs, per object; reading always (on the datacenter)."""
    out = [Need(READ, places.datacenter, f"datacenter {observed.datacenter}", READ.privileges)]
    for change in plan.changes:
        out += _vm_needs(change, observed, places)
    out += _host_needs(plan, observed, places)
    if any(observed.vm_for(c) is not None for c in plan.changes) and not plan.host_changes:
        # a run claims each VM it changes: a lock folder and the claim's attribute on the VM
        out.append(Need(WORK_RECORDS, places.root, "the root folder", WORK_RECORDS.privileges))
        out.append(Need(LEASES, places.root, "the root folder", LEASES.privileges))
    if inventory is not None and (inventory.vm_classes or inventory.namespaces):
        out.append(Need(VM_CLASSES, places.root, "the root folder", VM_CLASSES.privileges))
    return out


def removal_needs(vms: Iterable[tuple[str, str]]) -> list[Need]:
    """VMs (name, moid) the plan removes."""
    return [Need(VM_REMOVE, ("VirtualMachine", moid), f"vm {name}", VM_REMOVE.privileges) for name, moid in vms]


# what one more HasPrivilegeOnEntities call is worth, in (object, privilege) answers: merging two requests asks
# about privileges some objects do not need; worth it while the extra answers stay under this many. The requests
# go out together (hostaccess.has_privileges), so a further one costs vCenter its own small work, not a round
# trip's waiting. Measured against gpusim on loopback, a plan of 1,000 VMs (1,000 VMs x 3 privileges, the
# datacenter and root folder x 6): the two requests sent together 0.101 s for the whole plan, merged into one
# (6,000 more answers) 0.117 s, medians of 14 alternating runs; merges adding a few hundred answers are kept.
MERGE_SLACK = 500


def requests(all_needs: Iterable[Need]) -> list[tuple[list[Entity], list[str]]]:
    """HasPrivilegeOnEntities requests (objects, privileges asked on each): one per distinct privilege list with
    every object that needs it, then merged while a merge adds at most MERGE_SLACK answers -- a plan that
    reconfigures 1,000 VMs asks once for the VMs and the datacenter together."""
    grouped: dict[tuple[str, ...], dict[Entity, None]] = {}  # an ordered set of objects per privilege list
    for need in all_needs:
        entities = grouped.setdefault(tuple(sorted(need.privileges)), {})
        if need.entity[1]:
            entities[need.entity] = None
    groups = [(list(entities), set(privs)) for privs, entities in grouped.items() if entities]
    while len(groups) > 1:
        added, i, j = min((_merge_cost(groups[i], groups[j]), i, j)
                          for i in range(len(groups)) for j in range(i + 1, len(groups)))
        if added > MERGE_SLACK:
            break
        (first, first_privs), (second, second_privs) = groups[i], groups[j]
        seen = set(first)
        merged = (first + [e for e in second if e not in seen], first_privs | second_privs)
        groups = [g for k, g in enumerate(groups) if k not in (i, j)] + [merged]
    return [(entities, sorted(privs)) for entities, privs in groups]


def _merge_cost(a: tuple[list[Entity], set[str]], b: tuple[list[Entity], set[str]]) -> int:
    """How many more answers one request for both asks than the two alone."""
    objects = len(set(a[0]) | set(b[0]))
    return objects * len(a[1] | b[1]) - len(a[0]) * len(a[1]) - len(b[0]) * len(b[1])


FIX = ("grant them to the user's role on these objects (or on the datacenter, with propagation): the README's "
       "role table lists what vgpuctl needs")


def privilege_checks(all_needs: Sequence[Need], granted: Mapping[tuple[str, str], bool] | None,
                     error: str | None = None) -> list[PreflightCheck]:
    """One check per operation: pass, or fail naming each missing privilege and the objects it is missing on
    (a warning for optional operations); a warning for all when the privileges could not be read."""
    out = []
    by_operation: dict[str, list[Need]] = {}
    for need in all_needs:
        by_operation.setdefault(need.operation.key, []).append(need)
    for op in OPERATIONS:
        mine = by_operation.get(op.key, [])
        if not mine:
            continue
        check_id = f"privileges.{op.key}"
        if granted is None:
            out.append(PreflightCheck(check_id, CheckStatus.WARN, f"not checked: {error or 'no answer'}"))
            continue
        missing = _missing(mine, granted, op)
        if not missing:
            out.append(PreflightCheck(check_id, CheckStatus.PASS,
                                      f"{', '.join(_privileges(mine))} granted ({op.what})"))
            continue
        text = "; ".join(f"{priv} on {_labels(labels)}" for priv, labels in missing.items())
        status = CheckStatus.WARN if op.optional else CheckStatus.FAIL
        out.append(PreflightCheck(check_id, status, f"missing {text} ({op.what})", fix=FIX))
    return out


def _missing(mine: Sequence[Need], granted: Mapping[tuple[str, str], bool], op: Operation) -> dict[str, list[str]]:
    """Missing privilege -> the objects it is missing on, in the role table's order."""
    missing: dict[str, dict[str, None]] = {}  # an ordered set of labels per privilege
    for need in mine:
        for priv in need.privileges:
            if not granted.get((need.entity[1], priv), False):
                missing.setdefault(priv, {})[need.label] = None
    order = {p: i for i, p in enumerate(op.privileges)}
    return {priv: list(labels) for priv, labels in sorted(missing.items(),
                                                          key=lambda item: order.get(item[0], len(order)))}


def _privileges(mine: Sequence[Need]) -> list[str]:
    wanted = {p for n in mine for p in n.privileges}
    return [p for op in OPERATIONS for p in op.privileges if p in wanted and op == mine[0].operation]


def _labels(labels: list[str], limit: int = 5) -> str:
    more = f" and {len(labels) - limit} more" if len(labels) > limit else ""
    return ", ".join(labels[:limit]) + more



def ssh_service_needs(inventory: Inventory | None, observed: Observed, places: Places) -> list[Need]:
    """Hosts whose entry says `ssh: {service: manage}`: starting and stopping their SSH service, and the work
    record that remembers it was started."""
    if inventory is None:
        return []

    specs, _ = hostplan.resolve_hosts(inventory.hosts, observed)
    out = [Need(SSH_SERVICE, ("HostSystem", observed.hosts[h].moid), f"host {h}", SSH_SERVICE.privileges)
           for h, s in sorted(specs.items()) if s.ssh.service == SshService.MANAGE]
    if out:
        out.append(Need(WORK_RECORDS, places.root, "the root folder", WORK_RECORDS.privileges))
    return out
