"""pyVmomi reads (and the two writes) preflight and the SSH service step need: each host's ESXi version, lockdown
mode, SSH service state and RDMA devices in one property read; its installed software packages
(HostImageConfigManager.fetchSoftwarePackages); its lockdown exception users; the session's privileges on
entities (AuthorizationManager.HasPrivilegeOnEntities); starting and stopping the SSH service
(HostServiceSystem). Faults come back as VsphereFault with the vim type name, so callers tell "no privilege"
(NoPermission) from "not implemented" (ManagedObjectNotFound, MethodNotFound) without reading messages.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from vgpuctl.errors import VsphereFault
from vgpuctl.lazyclass import dataclass
from vgpuctl.vsphere.faults import to_error
from vgpuctl.vsphere.tasks import read_props

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

SSH_SERVICE = "TSM-SSH"  # HostServiceInfo key of the SSH service (the vSphere Client's "SSH")

HOST_ACCESS_PATHS = [
    "name",
    "config.product.version",
    "config.product.build",
    "config.lockdownMode",
    "config.service",
    "config.network.rdmaDevice",
    "configManager.imageConfigManager",
    "configManager.serviceSystem",
    "configManager.hostAccessManager",
]


@dataclass
class HostAccess:
    """A host's access facts as vCenter reports them (None: the host did not report it)."""

    host: str
    moid: str
    product_version: str = ""  # ESXi version, e.g. 8.0.3
    build: str = ""
    lockdown: str | None = None  # lockdownDisabled | lockdownNormal | lockdownStrict
    ssh_running: bool | None = None
    ssh_policy: str | None = None  # on | off | automatic
    rdma_devices: int | None = None
    image_manager: str = ""  # moids of its HostImageConfigManager, HostServiceSystem, HostAccessManager
    service_system: str = ""
    access_manager: str = ""


@dataclass(frozen=True)
class Package:
    """One installed software package (a VIB) as fetchSoftwarePackages lists it."""

    name: str
    version: str
    vendor: str


def _moid(ref: Any) -> str:
    return str(ref._moId) if ref is not None else ""


def read_host_access(session: Session, moids: dict[str, str]) -> dict[str, HostAccess]:
    """Host name -> HostAccess of the given hosts (name -> moid), in one property read."""
    from pyVmomi import vim

    if not moids:
        return {}
    refs = [vim.HostSystem(m, session.stub) for m in moids.values()]
    found = read_props(session, refs, "HostSystem", HOST_ACCESS_PATHS)
    out = {}
    for name, moid in moids.items():
        props = found.get(moid, {})
        out[name] = _access(name, moid, props)
    return out


def _access(name: str, moid: str, props: dict[str, Any]) -> HostAccess:
    access = HostAccess(
        host=name,
        moid=moid,
        product_version=str(props.get("config.product.version") or ""),
        build=str(props.get("config.product.build") or ""),
        lockdown=str(props["config.lockdownMode"]) if props.get("config.lockdownMode") else None,
        image_manager=_moid(props.get("configManager.imageConfigManager")),
        service_system=_moid(props.get("configManager.serviceSystem")),
        access_manager=_moid(props.get("configManager.hostAccessManager")),
    )
    services = props.get("config.service")
    for svc in getattr(services, "service", None) or []:
        if svc.key == SSH_SERVICE:
            access.ssh_running, access.ssh_policy = bool(svc.running), str(svc.policy)
    if "config.network.rdmaDevice" in props or props.get("config.product.version"):
        access.rdma_devices = len(props.get("config.network.rdmaDevice") or [])
    return access


def _invoke(session: Session, obj: str, fn: Any, *args: Any) -> Any:
    from pyVmomi import vmodl

    try:
        return session.invoke(fn, *args)
    except vmodl.MethodFault as fault:
        raise to_error(fault, obj) from fault


def software_packages(session: Session, host: str, image_manager: str) -> list[Package]:
    """The host's installed packages (HostImageConfigManager.fetchSoftwarePackages, vSphere API 6.5, privilege
    Host.Config.Image). VsphereFault when the host cannot or may not say."""
    from pyVmomi import vim

    if not image_manager:
        raise VsphereFault("vmodl.fault.ManagedObjectNotFound", "the host has no image configuration manager", host)
    manager = vim.host.ImageConfigManager(image_manager, session.stub)
    packages = _invoke(session, host, manager.FetchSoftwarePackages) or []
    return [Package(str(p.name), str(p.version), str(p.vendor)) for p in packages]


def lockdown_exceptions(session: Session, host: str, access_manager: str) -> list[str]:
    """The users that keep their access in lockdown mode (privilege Global.Settings)."""
    from pyVmomi import vim

    manager = vim.host.HostAccessManager(access_manager, session.stub)
    return [str(u) for u in _invoke(session, host, manager.QueryLockdownExceptions) or []]


def set_ssh_service(session: Session, host: str, service_system: str, running: bool) -> None:
    """Start or stop the host's SSH service (privilege Host.Config.NetService)."""
    from pyVmomi import vim

    system = vim.host.ServiceSystem(service_system, session.stub)
    _invoke(session, host, system.StartService if running else system.StopService, SSH_SERVICE)


def session_key(session: Session) -> str:
    """The key of this session (SessionManager.currentSession), read once and kept on the session."""
    key = getattr(session, "session_key", None)
    if not key:
        current = _invoke(session, "SessionManager", lambda: session.content.sessionManager.currentSession)
        key = str(current.key) if current is not None else ""
        session.session_key = key  # type: ignore[attr-defined]
    return str(key)


def has_privileges(
    session: Session, requests: Iterable[tuple[Sequence[tuple[str, str]], Sequence[str]]]
) -> dict[tuple[str, str], bool]:
    """(entity moid, privilege id) -> granted to this session, for each (entities as (vim type, moid), privilege
    ids) request: one HasPrivilegeOnEntities per request (vSphere API 5.5, privilege System.View), all sent
    together and their answers read in turn (a second request costs no waiting of its own). The answer (an entry
    per object and privilege, 3,000 for 1,000 VMs and 3 privileges) is read with ElementTree, as observe reads its
    bulk answers: about 10x faster than pyVmomi's deserializer."""
    from pyVmomi import vmodl

    asked = [(entities, privileges) for entities, privileges in requests if entities and privileges]
    if not asked:
        return {}
    try:
        return session.invoke(_ask_privileges, session, asked)
    except vmodl.MethodFault as fault:
        raise to_error(fault, "AuthorizationManager") from fault


def _ask_privileges(session: Session, asked: list[tuple[Sequence[tuple[str, str]], Sequence[str]]]
                    ) -> dict[tuple[str, str], bool]:
    from vgpuctl.vsphere.rawread import SentRequest

    manager = session.content.authorizationManager
    key = session_key(session)
    sent: list[Any] = []
    out: dict[tuple[str, str], bool] = {}
    read = 0
    try:
        for entities, privileges in asked:
            refs = [_vim_type(kind)(moid, session.stub) for kind, moid in entities]
            sent.append(SentRequest(session.stub, manager, "HasPrivilegeOnEntities", [refs, key, list(privileges)]))
        for request in sent:
            read += 1  # read (or dropped) by its own chunks() from here on
            out.update(parse_privilege_availability(b"".join(request.chunks())))
    except BaseException:
        for unread in sent[read:]:  # their answers will not be read: their connections cannot serve another
            unread.abandon()
        raise
    return out


def parse_privilege_availability(body: bytes) -> dict[tuple[str, str], bool]:
    """A HasPrivilegeOnEntitiesResponse: (entity moid, privilege id) -> isGranted. The plain form vCenter writes
    is scanned (`_plain_privilege_availability`, about 5x faster than a parse); anything else is parsed."""
    plain = _plain_privilege_availability(body)
    return plain if plain is not None else _parsed_privilege_availability(body)


def _parsed_privilege_availability(body: bytes) -> dict[tuple[str, str], bool]:
    import xml.etree.ElementTree as ET

    q = "{urn:vim25}"
    out: dict[tuple[str, str], bool] = {}
    for entity in ET.fromstring(body).iter(f"{q}returnval"):
        moid = (entity.findtext(f"{q}entity") or "").strip()
        for availability in entity.iterfind(f"{q}privAvailability"):
            granted = (availability.findtext(f"{q}isGranted") or "").strip() in ("true", "1")
            out[(moid, (availability.findtext(f"{q}privId") or "").strip())] = granted
    return out


_RESPONSE = b'<HasPrivilegeOnEntitiesResponse xmlns="urn:vim25">'
_RETURNVAL = b"<returnval>"
_ENTITY = re.compile(rb"""\s*<entity\s+type\s*=\s*(?:"[^"<&]*"|'[^'<&]*')\s*>([^<&]*)</entity>""")
_AVAILABILITY = re.compile(
    rb"<privAvailability>\s*<privId>([^<&]*)</privId>\s*<isGranted>\s*(true|false|1|0)\s*</isGranted>\s*"
    rb"</privAvailability>")


def _plain_privilege_availability(body: bytes) -> dict[tuple[str, str], bool] | None:
    """The answer read without a parse where it has the plain form (elements only, the vim25 namespace the
    default one, no attributes but the entity's type, no character references, each privAvailability in that
    form); None where anything differs: then ElementTree reads it."""
    from vgpuctl.vsphere.rawread import elements_only

    if not elements_only(body) or body.count(_RESPONSE) != 1 or body.count(b"xmlns") != body.count(b"xmlns:") + 1:
        return None
    pieces = body.split(_RETURNVAL)
    out: dict[tuple[str, str], bool] = {}
    names: dict[bytes, str] = {}
    entries = 0
    for piece in pieces[1:]:
        entity = _ENTITY.match(piece)
        if entity is None:
            return None
        moid = entity.group(1).strip().decode()
        found = _AVAILABILITY.findall(piece, entity.end())
        entries += len(found)
        for privilege, granted in found:
            name = names.get(privilege)
            if name is None:
                name = names[privilege] = privilege.strip().decode()
            out[(moid, name)] = granted in (b"true", b"1")
    if body.count(b"<returnval") != len(pieces) - 1 or body.count(b"<privAvailability") != entries:
        return None
    return out


Entity = tuple[str, str]  # (vim type name, moid), as has_privileges takes entities


def _entity(ref: Any) -> Entity:
    return type(ref).__name__.removeprefix("vim."), _moid(ref)


@functools.cache  # a privileges request names 1,000 VMs: one lookup, not an import and a walk each
def _vim_type(name: str) -> Any:
    """`HostSystem` -> vim.HostSystem, `dvs.DistributedVirtualPortgroup` -> vim.dvs.DistributedVirtualPortgroup."""
    from pyVmomi import vim

    kind: Any = vim
    for part in name.split("."):
        kind = getattr(kind, part)
    return kind


def vm_storage(session: Session, moids: Sequence[str]) -> dict[str, tuple[list[Entity], list[Entity]]]:
    """VM moid -> (its datastores, its networks): where a clone of it allocates space and which networks its
    adapters join."""
    from pyVmomi import vim

    if not moids:
        return {}
    found = read_props(session, [vim.VirtualMachine(m, session.stub) for m in moids], "VirtualMachine",
                       ["datastore", "network"])
    return {m: ([_entity(d) for d in p.get("datastore") or []], [_entity(n) for n in p.get("network") or []])
            for m, p in found.items()}
