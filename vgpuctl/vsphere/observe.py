"""Bulk read of a datacenter into `vgpuctl.model.Observed` in a fixed number of round trips, whatever the
number of hosts and VMs (docs/architecture.md, "Reads"): one container view, one paged property read for the
inventory objects and one for hosts and VMs (lean XML reader, rawread.py), one profile-info call per distinct
host GPU signature, and, on request, one QueryConfigTarget per host for its NVLink sets (`observe_nvlink`).
VMs that share a name in different folders are all kept, keyed by their folder paths.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from vgpuctl.domain import (
    ConnectionState,
    Firmware,
    GpuGraphicsType,
    GpuVgpuMode,
    HostPowerState,
    PowerState,
    ToolsStatus,
)
from vgpuctl.errors import NotFound, UsageError
from vgpuctl.gcpause import paused_gc
from vgpuctl.model import (
    Observed,
    ObservedGpu,
    ObservedHost,
    ObservedProfile,
    ObservedVgpu,
    ObservedVm,
)
from vgpuctl.profiles import max_vgpus_per_vm, observed_profile
from vgpuctl.vsphere import netobserve
from vgpuctl.vsphere.nvlink import device_group_sets, observed_groups
from vgpuctl.vsphere.objects import Obj, view_filter_spec
from vgpuctl.vsphere.readlist import PAGE_SIZE, TYPE_PROPS, Reads, bulk_reads, merged, settings_own
from vgpuctl.vsphere.tasks import retrieve
from vgpuctl.vsphere.vimtypes import device_types

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

log = logging.getLogger(__name__)

NVLINK_WORKERS = 4  # concurrent QueryConfigTarget calls for NVLink sets
NVLINK_API = (8, 0, 0, 1)  # vendorDeviceGroupInfo


def observe(
    session: Session, datacenter: str | None = None, *, nvlink_hosts: Iterable[str] | None = None,
    host_properties: Sequence[str] = (),
) -> Observed:
    """Read hosts, GPUs, profiles, clusters, folders and VMs of one datacenter in a fixed number of round trips.

    `nvlink_hosts`: hosts whose NVLink sets to read (one QueryConfigTarget each); the others keep nvlink_set None.
    `host_properties`: HostSystem properties the host settings read (vgpuctl.settings.host_properties); those the
    farm model does not read itself are read with the small types and land in ObservedHost.properties.
    """
    extra = settings_own(host_properties)
    start = session.round_trips
    with paused_gc():
        objects = _retrieve_observed(session, bulk_reads(host_properties))
        observed = build_observed(objects, datacenter)
        _keep_properties(objects, observed, extra)
    about = session.content.about
    observed.api_version = str(about.apiVersion)
    observed.about = str(about.fullName)
    _fill_profiles(session, objects, observed)
    observed.round_trips = session.round_trips - start
    if nvlink_hosts:
        observe_nvlink(session, observed, nvlink_hosts)
    return observed


# ------------------------------------------------------------------------------------------ bulk retrieve


def retrieve_all(session: Session, type_props: list[tuple[str, list[str]]], root: Any = None) -> dict[str, Obj]:
    """One ContainerView over `root` and one paged RetrievePropertiesEx for all the given types (pyVmomi); read
    again once if the session was renewed under it (its ContainerView died with the old session)."""
    from pyVmomi import vmodl

    generation = getattr(session, "generation", 0)
    try:
        return _retrieve_all_once(session, type_props, root)
    except vmodl.fault.ManagedObjectNotFound:
        if getattr(session, "generation", 0) == generation:
            raise
        log.info("the session was renewed during a bulk read; reading again")
        return _retrieve_all_once(session, type_props, root)


def _retrieve_all_once(session: Session, type_props: list[tuple[str, list[str]]], root: Any) -> dict[str, Obj]:
    from pyVmomi import vim

    content = session.content
    view = session.invoke(
        content.viewManager.CreateContainerView,
        root or content.rootFolder,
        [getattr(vim, t) for t, _ in type_props],
        True,
    )
    try:
        return _collect(session, view_filter_spec(view, type_props))
    finally:
        try:
            session.invoke(view.DestroyView)
        except Exception as err:  # the view dies with the session anyway
            log.debug("DestroyView failed: %s", err)


RAW_VMS = True  # read VirtualMachine and HostSystem properties with the lean XML reader (vsphere/rawread.py)


def _retrieve_observed(session: Session, reads: Reads) -> dict[str, Obj]:
    """Everything observe reads, over the session's view; a view found gone (it dies with an expired session,
    before or during the read) is made again once, renewing the session if that is why."""
    from pyVmomi import vmodl

    view = _observe_view(session)
    try:
        return _read_view(session, view, reads)
    except vmodl.fault.ManagedObjectNotFound as err:
        if _moid(getattr(err, "obj", None)) != _moid(view):
            raise
        log.info("the bulk read's view is gone (the session ended?); making it again")
        session.forget("observe-view")
        return _read_view(session, _observe_view(session), reads)


def _observe_view(session: Session) -> Any:
    """The session's ContainerView over every type observe reads, made by its first observe and reused by the next
    ones (a ContainerView follows what is created and removed under its root); it ends with the session."""
    from pyVmomi import vim

    def create() -> Any:
        content = session.content
        return session.invoke(content.viewManager.CreateContainerView, content.rootFolder,
                              [getattr(vim, t) for t in TYPE_PROPS], True)

    return session.kept("observe-view", create)


def _read_view(session: Session, view: Any, reads: Reads) -> dict[str, Obj]:
    """The small read through pyVmomi, the lean ones through the lean reader; a host's properties from the small
    read (the settings' own) are added to what the lean read has of it."""
    if not RAW_VMS:
        return _collect(session, view_filter_spec(view, merged(reads)))
    (small, _), lean_reads = reads[0], reads[1:]
    # The reads go out together: while vCenter answers the big ones, pyVmomi reads the small types.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="vgpuctl-observe") as pool:
        lean = pool.submit(_lean_objects, session, view, lean_reads)
        try:
            objects = _collect(session, view_filter_spec(view, small))
        finally:
            lean_objects = lean.result()  # waits, and raises the lean read's own error first
    lean_types = {t for type_props, _ in lean_reads for t, _ in type_props}
    settings_props = {m: objects.pop(m).props for m, obj in list(objects.items()) if obj.type in lean_types}
    for moid, obj in lean_objects.items():
        obj.props.update(settings_props.get(moid, {}))
    objects.update(lean_objects)
    return objects


def _lean_objects(session: Session, view: Any, reads: Reads) -> dict[str, Obj]:
    import xml.etree.ElementTree as ET

    from vgpuctl.vsphere import rawread

    page_size = max(size for _, size in reads)
    try:
        objects = rawread.retrieve_each(session, view, [type_props for type_props, _ in reads], page_size)
    except (ET.ParseError, ValueError, AttributeError, KeyError, TypeError, AssertionError) as err:
        log.debug("lean read failed (%r); reading through pyVmomi", err)
        return _collect(session, view_filter_spec(view, merged(reads)))
    return {obj.moid: obj for obj in objects}


def _collect(session: Session, spec: Any) -> dict[str, Obj]:
    objects: dict[str, Obj] = {}
    for content in retrieve(session, spec, PAGE_SIZE):
        obj = Obj(ref=content.obj, type=type(content.obj).__name__.rsplit(".", 1)[-1])
        for prop in content.propSet or []:
            obj.props[prop.name] = prop.val
        objects[obj.moid] = obj
    return objects


def _keep_properties(objects: dict[str, Obj], observed: Observed, paths: Sequence[str]) -> None:
    """The values of the settings' own properties, on each host (ObservedHost.properties)."""
    if not paths:
        return
    for host in observed.hosts.values():
        obj = objects.get(host.moid)
        if obj is not None:
            host.properties = {p: obj.get(p) for p in paths if obj.get(p) is not None}


# ------------------------------------------------------------------------------------------ build Observed


def build_observed(objects: dict[str, Obj], datacenter: str | None) -> Observed:
    dc = _pick_datacenter(objects, datacenter)
    tree = _Tree(objects)
    in_dc = {moid for moid in objects if tree.datacenter_of(moid) == dc.moid}
    observed = Observed(datacenter=str(dc.get("name")))
    vm_root = _moid(dc.get("vmFolder"))
    observed.moids = {"datacenter": dc.moid, "vm_folder": vm_root}

    for moid in sorted(in_dc):
        obj = objects[moid]
        if obj.type == "Folder" and _is_under(objects, moid, vm_root) and moid != vm_root:
            path = tree.folder_path(moid, vm_root)
            observed.folders.append(path)
            observed.folder_moids[path] = moid
        elif obj.type in ("ComputeResource", "ClusterComputeResource"):
            pool = _moid(obj.get("resourcePool"))
            if obj.type == "ClusterComputeResource":
                name = str(obj.get("name"))
                observed.clusters.setdefault(name, [])
                observed.cluster_moids[name] = moid
                observed.cluster_pool_moids[name] = pool
    observed.folders.sort()

    by_name = sorted(in_dc, key=lambda m: str(objects[m].get("name", "")))
    host_names = {m: str(objects[m].get("name")) for m in in_dc if objects[m].type == "HostSystem"}
    observed.networks = netobserve.networks(objects, in_dc, host_names)
    networks = netobserve.NetworkNames(observed.networks)
    vms = [_vm(tree, objects[m], vm_root, networks) for m in by_name if _is_vm(objects[m])]
    keys = vm_keys(vms)
    for moid in by_name:
        obj = objects[moid]
        if obj.type == "HostSystem":
            host = _host(objects, obj, keys)
            observed.hosts[host.name] = host
            if host.cluster is not None:
                observed.clusters.setdefault(host.cluster, []).append(host.name)
    for vm in sorted(vms, key=lambda v: keys[v.moid]):
        observed.vms[keys[vm.moid]] = vm
        if keys[vm.moid] != vm.name:
            observed.same_name.setdefault(vm.name, []).append(keys[vm.moid])
    return observed


def _is_vm(obj: Obj) -> bool:
    return obj.type == "VirtualMachine" and "name" in obj.props


def vm_keys(vms: list[ObservedVm]) -> dict[str, str]:
    """moid -> key in Observed.vms: the name, or the folder path and name when VMs in several folders share it
    (vSphere keeps names unique per folder, so a path names one VM)."""
    count = Counter(vm.name for vm in vms)
    return {vm.moid: vm.name if count[vm.name] == 1 else vm.path for vm in vms}


def _pick_datacenter(objects: dict[str, Obj], name: str | None) -> Obj:
    dcs = sorted((o for o in objects.values() if o.type == "Datacenter"), key=lambda o: str(o.get("name")))
    if name is not None:
        for dc in dcs:
            if dc.get("name") == name:
                return dc
        known = ", ".join(str(d.get("name")) for d in dcs) or "none"
        raise NotFound(f"datacenter {name!r} not found (datacenters: {known})")
    if len(dcs) == 1:
        return dcs[0]
    if not dcs:
        raise NotFound("vCenter has no datacenter")
    raise UsageError(
        "vCenter has several datacenters (" + ", ".join(str(d.get("name")) for d in dcs) + "); name one in "
        "vcenter.datacenter"
    )


def _moid(ref: Any) -> str:
    return str(ref._moId) if ref is not None else ""


def _parents(objects: dict[str, Obj], moid: str):
    seen = set()
    while moid and moid in objects and moid not in seen:
        seen.add(moid)
        yield moid
        moid = _moid(objects[moid].get("parent"))


def _is_under(objects: dict[str, Obj], moid: str, ancestor: str) -> bool:
    return ancestor in set(_parents(objects, moid))


def _folder_path(objects: dict[str, Obj], moid: str, vm_root: str) -> str:
    names = []
    for m in _parents(objects, moid):
        if m == vm_root:
            break
        names.append(str(objects[m].get("name")))
    return "/".join(reversed(names))


class _Tree:
    """The parent walks of one build, each answered once per object: 1,000 VMs share a few folders and hosts."""

    def __init__(self, objects: dict[str, Obj]):
        self.objects = objects
        self._datacenters: dict[str, str | None] = {}
        self._folders: dict[tuple[str, str], str] = {}
        self._hosts: dict[str, tuple[str | None, str | None]] = {}

    def datacenter_of(self, moid: str) -> str | None:
        """The datacenter above an object (itself for a datacenter), None if there is none (or a cycle)."""
        known = self._datacenters
        chain: list[str] = []
        found: str | None = None
        while moid and moid in self.objects and moid not in chain:
            if moid in known:
                found = known[moid]
                break
            chain.append(moid)
            if self.objects[moid].type == "Datacenter":
                found = moid
                break
            moid = _moid(self.objects[moid].get("parent"))
        for m in chain:
            known[m] = found
        return found

    def folder_path(self, moid: str, vm_root: str) -> str:
        key = (moid, vm_root)
        if key not in self._folders:
            self._folders[key] = _folder_path(self.objects, moid, vm_root)
        return self._folders[key]

    def host_and_cluster(self, moid: str) -> tuple[str | None, str | None]:
        """A VM's host name and that host's cluster name (None where unknown)."""
        if moid not in self._hosts:
            host_obj = self.objects.get(moid)
            host = str(host_obj.get("name")) if host_obj is not None else None
            cluster = None
            if host_obj is not None:
                parent = self.objects.get(_moid(host_obj.get("parent")))
                if parent is not None and parent.type == "ClusterComputeResource":
                    cluster = str(parent.get("name"))
            self._hosts[moid] = (host, cluster)
        return self._hosts[moid]


def _host(objects: dict[str, Obj], obj: Obj, vm_keys: dict[str, str]) -> ObservedHost:
    parent = objects.get(_moid(obj.get("parent")))
    cluster = str(parent.get("name")) if parent is not None and parent.type == "ClusterComputeResource" else None
    api = str(obj.get("config.product.apiVersion") or obj.get("summary.config.product.apiVersion") or "")
    host = ObservedHost(
        name=str(obj.get("name")),
        moid=obj.moid,
        cluster=cluster,
        connection_state=str(obj.get("runtime.connectionState") or ConnectionState.CONNECTED),
        in_maintenance=bool(obj.get("runtime.inMaintenanceMode", False)),
        power_state=str(obj.get("runtime.powerState") or HostPowerState.ON),
        api_version=api or ObservedHost.api_version,
        offered_profiles=sorted(str(p) for p in obj.get("config.sharedPassthruGpuTypes", [])),
        max_vgpus_per_vm=max_vgpus_per_vm(api),
        resource_pool_moid=_moid(parent.get("resourcePool")) if parent is not None else "",
        environment_browser_moid=_moid(parent.get("environmentBrowser")) if parent is not None else "",
        graphics_manager_moid=_moid(obj.get("configManager.graphicsManager")),
        image_config_manager_moid=_moid(obj.get("configManager.imageConfigManager")),
    )
    config = obj.get("config.graphicsConfig")
    if config is not None:
        host.default_graphics_type = str(config.hostDefaultGraphicsType or host.default_graphics_type)
        host.assignment_policy = str(config.sharedPassthruAssignmentPolicy or host.assignment_policy)
    pci = {str(d.id): d for d in obj.get("hardware.pciDevice", [])}
    for info in obj.get("config.graphicsInfo", []):
        host.gpus.append(_gpu(objects, info, pci.get(str(info.pciId)), vm_keys))
    host.gpus.sort(key=lambda g: g.pci_id)
    netobserve.place_gpus(host.gpus, obj, pci)
    host.nics = netobserve.host_nics(obj, pci)
    names = _by_key(obj.get("availableField", {}), "name")
    values = _by_key(obj.get("customValue", {}), "value")
    host.custom_values = {names[k]: str(v) for k, v in values.items() if k in names and v}
    return host


def _by_key(items: Any, attr: str) -> dict[int, Any]:
    """key -> attr of custom field definitions or values (the lean reader already gives a dict)."""
    if isinstance(items, dict):
        return items
    return {int(i.key): getattr(i, attr, None) for i in items}


def _gpu(objects: dict[str, Obj], info: Any, pci: Any, vm_keys: dict[str, str]) -> ObservedGpu:
    vms = sorted(vm_keys.get(_moid(v)) or str(objects[_moid(v)].get("name")) for v in (info.vm or [])
                 if _moid(v) in objects)
    gpu = ObservedGpu(
        pci_id=str(info.pciId),
        device_name=str(info.deviceName or ""),
        memory_kb=int(info.memorySizeInKB or 0),
        graphics_type=str(info.graphicsType or GpuGraphicsType.BASIC),
        vgpu_mode=str(getattr(info, "vgpuMode", None) or GpuVgpuMode.NONE),
        vms=vms,
    )
    if pci is not None:
        gpu.vendor_id = int(pci.vendorId) & 0xFFFF
        gpu.device_id = int(pci.deviceId) & 0xFFFF
    return gpu


def _vm(tree: _Tree, obj: Obj, vm_root: str, networks: netobserve.NetworkNames) -> ObservedVm:
    p = obj.props  # read as Obj.get reads (None is absent), without its call: a fifth of building 1,000 VMs
    host, cluster = tree.host_and_cluster(_moid(p.get("runtime.host")))
    folder_moid = _moid(p.get("parent"))
    folder = tree.folder_path(folder_moid, vm_root) if folder_moid in tree.objects else None
    cpus, memory_mb = p.get("config.hardware.numCPU"), p.get("config.hardware.memoryMB")
    vm = ObservedVm(
        name=str(p.get("name")),
        moid=obj.moid,
        is_template=bool(p.get("config.template")),
        host=host,
        cluster=cluster,
        folder=folder or None,
        power_state=str(p.get("runtime.powerState") or PowerState.OFF),
        cpus=int(cpus if cpus is not None else 1),
        memory_mb=int(memory_mb if memory_mb is not None else 1024),
        memory_reservation_locked=bool(p.get("config.memoryReservationLockedToMax")),
        memory_reservation_mb=int(p.get("config.memoryAllocation.reservation") or 0),
        firmware=str(p.get("config.firmware") or Firmware.BIOS),
        hardware_version=str(p.get("config.version") or ""),
        extra_config={str(o.key): str(o.value) for o in p.get("config.extraConfig") or []},
        guest_state=str(p.get("guest.guestState") or "notRunning"),
        tools_running=p.get("guest.toolsRunningStatus") == ToolsStatus.RUNNING,
        guest_ips=_guest_ips(obj),
        change_version=str(p.get("config.changeVersion") or ""),
    )
    devices = p.get("config.hardware.device") or []
    vm.vgpus, vm.other_passthrough = split_devices(devices)
    vm.nics = netobserve.vm_nics(devices, networks)
    vm.guest_hostname = str(p.get("guest.hostName") or "")
    return vm


def split_devices(devices: list[Any]) -> tuple[list[ObservedVgpu], int]:
    """vGPUs (VirtualPCIPassthrough whose backing IS a VmiopBackingInfo) and the count of other passthrough."""
    t = device_types()
    vgpus: list[ObservedVgpu] = []
    other = 0
    for dev in devices:
        if not isinstance(dev, t.passthrough):
            continue
        if isinstance(dev.backing, t.vmiop) and dev.backing.vgpu:
            group = getattr(dev, "deviceGroupInfo", None)
            vgpus.append(
                ObservedVgpu(
                    key=int(dev.key),
                    profile=str(dev.backing.vgpu),
                    device_group_key=int(group.groupInstanceKey) if group is not None else None,
                )
            )
        else:
            other += 1
    vgpus.sort(key=lambda v: v.key)
    return vgpus, other


def _guest_ips(obj: Obj) -> list[str]:
    ips: list[str] = []
    primary = obj.get("guest.ipAddress")
    if primary:
        ips.append(str(primary))
    for nic in obj.get("guest.net", []):
        for ip in nic.ipAddress or []:
            if str(ip) not in ips:
                ips.append(str(ip))
    return ips


# ------------------------------------------------------------------------------------------ profiles

PROFILE_INFO_API = (7, 0, 3)  # RetrieveVgpuProfileInfo


def _at_least(version: str, wanted: tuple[int, ...]) -> bool:
    parts = tuple(int(p) for p in re.findall(r"\d+", version or "")[: len(wanted)])
    return parts >= wanted


def host_signature(host: ObservedHost) -> tuple:
    return (
        host.api_version,
        tuple(host.offered_profiles),
        tuple(sorted((g.device_name, g.vgpu_mode, g.graphics_type) for g in host.gpus)),
    )


def _fill_profiles(session: Session, objects: dict[str, Obj], observed: Observed) -> None:
    """One RetrieveVgpuProfileInfo per distinct host signature; sizes from names when the host cannot say."""
    cache: dict[tuple, dict[str, ObservedProfile]] = {}
    for host in observed.hosts.values():
        if not host.offered_profiles or host.connection_state != ConnectionState.CONNECTED:
            host.profiles = {p: observed_profile(p) for p in host.offered_profiles}
            continue
        if not (_at_least(observed.api_version, PROFILE_INFO_API) and _at_least(host.api_version, PROFILE_INFO_API)):
            host.profiles = {p: observed_profile(p) for p in host.offered_profiles}
            continue
        sig = host_signature(host)
        if sig not in cache:
            cache[sig] = _retrieve_profiles(session, objects, host)
        known = cache[sig]
        host.profiles = {p: known.get(p) or observed_profile(p) for p in host.offered_profiles}


def _retrieve_profiles(session: Session, objects: dict[str, Obj], host: ObservedHost) -> dict[str, ObservedProfile]:
    from pyVmomi import vmodl

    gm_ref = objects[host.moid].get("configManager.graphicsManager")
    if gm_ref is None:
        return {}
    try:
        infos = session.invoke(gm_ref.RetrieveVgpuProfileInfo) or []
    except vmodl.MethodFault as err:  # too old (MethodNotFound), not responding, ...: sizes from the names
        log.debug("%s cannot describe its vGPU profiles (%s); using the names", host.name, type(err).__name__)
        return {}
    result: dict[str, ObservedProfile] = {}
    for info in infos:
        name = str(info.profileName)
        fallback = observed_profile(name)
        result[name] = ObservedProfile(
            name=name,
            fb_gb=int(info.fbSizeInGib or fallback.fb_gb),
            sharing=str(info.profileSharing or fallback.sharing),
            profile_class=str(info.profileClass or fallback.profile_class),
        )
    return result


# ------------------------------------------------------------------------------------------ NVLink


def observe_nvlink(session: Session, observed: Observed, hosts: Iterable[str]) -> list[str]:
    """Fill ObservedGpu.nvlink_set on the named hosts from their NVLink device groups; returns the hosts read.

    One QueryConfigTarget per host, NVLINK_WORKERS at a time. Hosts not observed, not connected, without GPUs
    or compute resource are skipped; so is everything before vSphere 8.0.0.1 (no vendorDeviceGroupInfo). A host
    whose call fails keeps nvlink_set None and gets a warning in `observed.warnings`. The calls are added to
    `observed.round_trips`, so this can also follow a plain `observe` (observe, nvlink_hosts_for, observe_nvlink).
    """
    if not _at_least(observed.api_version, NVLINK_API):
        log.debug("vSphere %s has no vendorDeviceGroupInfo; NVLink sets not read", observed.api_version)
        return []
    names = sorted(n for n in set(hosts) if _can_read_nvlink(observed.hosts.get(n)))
    if not names:
        return []
    start = session.round_trips
    with ThreadPoolExecutor(max_workers=min(NVLINK_WORKERS, len(names)), thread_name_prefix="vgpuctl-nvlink") as pool:
        results = list(pool.map(lambda n: _query_device_groups(session, observed.hosts[n]), names))
    observed.round_trips += session.round_trips - start
    done = []
    unread: dict[str, list[str]] = {}  # cause -> hosts: one warning per cause, naming the hosts
    for name, groups in zip(names, results, strict=True):
        if isinstance(groups, str):
            unread.setdefault(groups, []).append(name)
            continue
        host = observed.hosts[name]
        host.device_groups = observed_groups(groups)
        offered = device_group_sets(groups, (g.pci_id for g in host.gpus))
        set_nvlink_sets(observed, name, [s.gpus for s in offered], [s.group_sizes for s in offered],
                        [s.profiles for s in offered])
        done.append(name)
    for why, hosts in unread.items():
        where = f"hosts {', '.join(hosts)}" if len(hosts) > 1 else f"host {hosts[0]}"
        observed.warnings.append(f"{where}: NVLink sets not read ({why})")
    return done


def _can_read_nvlink(host: ObservedHost | None) -> bool:
    return (
        host is not None
        and host.connection_state == ConnectionState.CONNECTED
        and bool(host.gpus)
        and bool(host.environment_browser_moid)
        and _at_least(host.api_version, NVLINK_API)
    )


def _query_device_groups(session: Session, host: ObservedHost) -> list[Any] | str:
    """The host's vendorDeviceGroupInfo, or the fault's name and message when the call fails."""
    from pyVmomi import vim, vmodl

    stub = session.stub if hasattr(session, "stub") else session.si._stub
    browser = vim.EnvironmentBrowser(host.environment_browser_moid, stub)
    try:
        target = session.invoke(browser.QueryConfigTarget, vim.HostSystem(host.moid, stub))
    except vmodl.MethodFault as err:
        kind = type(err).__name__.rsplit(".", 1)[-1]
        msg = getattr(err, "msg", "")
        return f"{kind}: {msg}" if msg else kind
    return list(getattr(target, "vendorDeviceGroupInfo", None) or []) if target is not None else []


def set_nvlink_sets(observed: Observed, host: str, sets: list[list[str]],
                    group_sizes: list[list[int]] | None = None, group_profiles: list[list[str]] | None = None) -> None:
    """Record NVLink-connected GPU sets read elsewhere (vgpuctl.settings.facts.nvlink_sets, from the ESXi shell).

    vCenter does not say which physical GPUs are linked, so the bulk read leaves `nvlink_set` None; this numbers
    each set (0, 1, ...) on its GPUs, and clears GPUs in no set. `group_sizes` (per set) are the device group
    sizes the host reports; without them placement takes the board's catalogue topology. `group_profiles` (per
    set) are the profiles the groups' names offer them for; without them, the board's whole-GPU C-series types.
    """
    index = {pci.lower(): i for i, group in enumerate(sets) for pci in group}
    for gpu in observed.hosts[host].gpus:
        gpu.nvlink_set = index.get(gpu.pci_id.lower())
        gpu.nvlink_groups = list(group_sizes[gpu.nvlink_set]) if group_sizes and gpu.nvlink_set is not None else []
        gpu.nvlink_profiles = (list(group_profiles[gpu.nvlink_set])
                               if group_profiles and gpu.nvlink_set is not None else [])
