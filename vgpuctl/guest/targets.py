"""Which guests the playbooks run on, and the Ansible inventory rendered for them.

Pure: takes the vgpuctl inventory and the guest addresses read from vSphere, returns the groups, the hosts
and the problems found before any SSH (a guest group with no VMs, a VM without an address, an unknown role).
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgpuctl.domain import NvlinkRequirement
from vgpuctl.errors import InventoryErrors, UsageError
from vgpuctl.lazyclass import dataclass

if TYPE_CHECKING:
    from vgpuctl.inventory import Inventory

ROLES = (
    "gpu_facts",
    "vgpu_guest_driver",
    "vgpu_licensing",
    "cuda_toolkit",
    "nccl",
    "rdma_roce",
    "ml_stack",
    "mpi_ssh_trust",
    "horovod",
    "train_launcher",
    "gpu_validate",
)

# Group variables that name files on the controller: relative paths are taken from the inventory's folder.
PATH_VARS = frozenset(
    {
        "vgpu_driver_src",
        "vgpu_guest_driver_src",
        "vgpu_guest_driver_signing_key",
        "vgpu_guest_driver_signing_cert",
        "vgpu_license_token_src",
        "vgpu_licensing_token_src",
        "rdma_roce_mofed_src",
        "ml_stack_wheel_src",
    }
)

_GROUP_NAME = re.compile(r"[^A-Za-z0-9_]")


@dataclass
class GuestHost:
    name: str
    group: str
    address: str | None
    vars: dict[str, Any] = field(default_factory=dict)


@dataclass
class GuestGroupTarget:
    name: str  # the guest group's name in the vgpuctl inventory
    ansible_name: str  # the same, made a valid Ansible group name
    roles: list[str]
    vars: dict[str, Any]
    hosts: list[GuestHost] = field(default_factory=list)


@dataclass
class Problem:
    """Something found before the run that stops a host (or a whole group) from being configured."""

    subject: str  # a VM name, or "group NAME"
    group: str
    message: str
    status: str = "failed"  # failed | unreachable


@dataclass
class GuestTargets:
    groups: list[GuestGroupTarget]
    problems: list[Problem]

    @property
    def hosts(self) -> list[GuestHost]:
        return [h for g in self.groups for h in g.hosts]

    @property
    def runnable(self) -> list[GuestHost]:
        return [h for h in self.hosts if h.address]


def ansible_group_name(name: str) -> str:
    cleaned = _GROUP_NAME.sub("_", name)
    return f"g_{cleaned}" if cleaned[:1].isdigit() or not cleaned else cleaned


def resolve_path_vars(values: dict[str, Any], base: Path) -> dict[str, Any]:
    """Controller file paths in group vars become absolute (relative to the inventory file's folder)."""
    out = dict(values)
    for key in PATH_VARS & values.keys():
        value = values[key]
        if not isinstance(value, str) or not value or "{{" in value:
            continue
        path = Path(os.path.expanduser(value))
        out[key] = str(path if path.is_absolute() else (base / path).resolve())
    return out


def build_targets(inv: Inventory, addresses: dict[str, str | None]) -> GuestTargets:
    """Group the inventory's VMs by guest group; `addresses` maps VM name to its guest IP (None: none yet)."""
    _check_roles(inv)
    base = Path(inv.source_path).resolve().parent if inv.source_path else Path.cwd()
    groups: dict[str, GuestGroupTarget] = {}
    for name, spec in inv.guests.groups.items():
        groups[name] = GuestGroupTarget(
            name=name,
            ansible_name=ansible_group_name(name),
            roles=list(spec.roles),
            vars=resolve_path_vars(dict(spec.vars), base),
        )
    problems: list[Problem] = []
    for vm in inv.vms:
        group_name = vm.guest.group if vm.guest is not None else None
        if group_name is None or group_name not in groups:
            continue
        address = addresses.get(vm.name)
        host = GuestHost(name=vm.name, group=group_name, address=address, vars=_host_vars(vm, address))
        groups[group_name].hosts.append(host)
        if not address:
            problems.append(
                Problem(
                    vm.name,
                    group_name,
                    "no guest IP address (VM powered off, or VMware Tools not running)",
                    status="unreachable",
                )
            )
    for group in groups.values():
        if not group.hosts:
            problems.append(
                Problem(
                    f"group {group.name}",
                    group.name,
                    f"guest group {group.name!r} has no VMs (no VM in vms: has guest.group: {group.name})",
                )
            )
    return GuestTargets(groups=list(groups.values()), problems=problems)


def _check_roles(inv: Inventory) -> None:
    errors = []
    for name, spec in inv.guests.groups.items():
        for i, role in enumerate(spec.roles):
            if role not in ROLES:
                errors.append(
                    inv.error(
                        ("guests", "groups", name, "roles", i), f"unknown role {role!r} (roles: {', '.join(ROLES)})"
                    )
                )
        errors += _line_value_problems(inv, name, spec.vars)
    if errors:
        raise InventoryErrors(errors)


# guest variables the playbooks write as `KEY=value` lines (nccl.conf, gridd.conf): one line each, or a value
# would add settings of its own
LINE_VALUES = ("nccl_socket_ifname", "nccl_ib_hca", "nccl_ib_traffic_class", "nccl_ib_gid_index", "nccl_ib_disable",
               "nccl_debug")  # fmt: skip
LINE_MAPPINGS = ("nccl_extra", "vgpu_licensing_gridd_extra")
_SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _line_value_problems(inv: Inventory, group: str, values: dict[str, Any]) -> list[Any]:
    out = []
    base = ("guests", "groups", group, "vars")
    for key in LINE_VALUES:
        if key in values and _breaks_line(values[key]):
            out.append(inv.error((*base, key), f"must be one line: it is written as {key.upper()}=VALUE"))
    for key in LINE_MAPPINGS:
        mapping = values.get(key)
        if not isinstance(mapping, dict):
            continue
        for name, value in mapping.items():
            if not _SETTING_NAME.fullmatch(str(name)):
                out.append(inv.error((*base, key), f"{name!r} is no setting name (letters, digits and '_')"))
            elif _breaks_line(value):
                out.append(inv.error((*base, key, name), "must be one line: it is written as NAME=VALUE"))
    return out


def _breaks_line(value: Any) -> bool:
    return not isinstance(value, bool | int | float) and any(unicodedata.category(c)[0] == "C" for c in str(value))


def _host_vars(vm: Any, address: str | None) -> dict[str, Any]:
    profiles = list(vm.vgpu_profiles)
    out: dict[str, Any] = {
        "vgpuctl_vgpu_count": len(profiles),
        "vgpuctl_vgpu_profile": profiles[0] if profiles else "",
        "vgpuctl_vgpu_profiles": profiles,
        "vgpuctl_nvlink_required": vm.nvlink == NvlinkRequirement.REQUIRED,
    }
    rdma = rdma_adapters(vm)
    if rdma:
        out["vgpuctl_rdma_adapters"] = rdma
    if vm.gpudirect_rdma:
        out["vgpuctl_gpudirect_rdma"] = True
    if address:
        out["ansible_host"] = address
    return out


def rdma_adapters(vm: Any) -> list[dict[str, Any]]:
    """The VM's RDMA adapters as the rdma_roce and nccl roles read them: type, port group, the static address
    its identity gives it on that port group (empty: DHCP or none) and its traffic class (NCCL_IB_TC)."""
    from vgpuctl.inventory.netchecks import pool_address

    out = []
    for adapter in vm.adapters:
        if not adapter.kind.is_rdma:
            continue
        address = pool_address(vm, adapter.portgroup) if adapter.portgroup else None
        out.append({
            "type": str(adapter.kind),
            "portgroup": adapter.portgroup or "",
            "address": address[0] if address else "",
            "prefix": address[1] if address else None,
            "traffic_class": adapter.traffic_class,
        })
    return out


def connection_vars(inv: Inventory, *, known_hosts: Path, password_file: Path | None) -> dict[str, Any]:
    """`all` group vars: how Ansible reaches the guests. A password is only ever referenced by file."""
    conn = inv.guests.connection
    out: dict[str, Any] = {"ansible_user": conn.user, "ansible_port": conn.port}
    if conn.key_file:
        out["ansible_ssh_private_key_file"] = os.path.expanduser(conn.key_file)
    # Trust on first use for freshly cloned guests, verified on every later run; kept per state dir.
    out["ansible_ssh_common_args"] = f"-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={known_hosts}"
    if password_file is not None:
        lookup = "{{ lookup('ansible.builtin.file', " + repr(str(password_file)) + ") }}"
        out["ansible_password"] = lookup
        out["ansible_become_password"] = lookup
    return out


def render_inventory(targets: GuestTargets, connection: dict[str, Any], source: str = "inventory") -> str:
    """The Ansible YAML inventory, written by the YAML emitter (vgpuctl.yamlout): a VM, group or variable name is a
    key or a value, never structure. Hosts without an address are left out (they are reported as problems)."""
    from vgpuctl import yamlout

    children: dict[str, Any] = {}
    for g in targets.groups:
        group_vars = {"vgpuctl_group": g.ansible_name, "vgpuctl_roles": list(g.roles), **dict(sorted(g.vars.items()))}
        hosts = {h.name: dict(sorted(h.vars.items())) for h in g.hosts if h.address}
        children[g.ansible_name] = {"vars": group_vars, "hosts": hosts}
    document = {"all": {"vars": dict(sorted(connection.items())), "children": children}}
    note = f"Rendered by vgpuctl from {source}; one group per guest group, guest addresses read from vSphere."
    return yamlout.comment(note) + yamlout.dump(document)


# ------------------------------------------------------------------------------------------- templates


def shipped_dir(name: str) -> Path:
    """playbooks/ or templates/: inside the installed package (a wheel), else at the checkout's top level."""
    package = Path(__file__).resolve().parents[1]
    bundled = package / "_bundled" / name
    return bundled if bundled.is_dir() else package.parent / name


def templates_dir() -> Path:
    override = os.environ.get("VGPUCTL_TEMPLATES_DIR")
    return Path(override) if override else shipped_dir("templates")


def playbooks_dir() -> Path:
    override = os.environ.get("VGPUCTL_PLAYBOOKS_DIR")
    path = Path(override) if override else shipped_dir("playbooks")
    if not (path / "site.yml").is_file():
        raise UsageError(f"{path}: no site.yml (set VGPUCTL_PLAYBOOKS_DIR to the playbooks folder)")
    return path


def render_template(name: str, filters: dict[str, Any] | None = None, **context: Any) -> str:
    """Render one of templates/*.j2 outside Ansible (strict: an undefined variable is an error), with extra
    Jinja filters."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=False,  # as Ansible's template module
        autoescape=False,
    )
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "ensure_ascii": False}
    env.filters.update(filters or {})
    return env.get_template(name).render(**context)
