"""pyVmomi host operations: graphics configuration, nvidia module options, maintenance mode, reboot and
waiting for the host to reconnect, and the power operations on a host's VMs that evacuation needs.

Every SOAP call goes through Session.invoke; tasks are waited for with a TaskWatcher (vsphere/tasks.py);
vCenter faults become VsphereFault (vim type name and message). pyVmomi is imported inside the functions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from vgpuctl.domain import (
    AssignmentPolicy,
    ConnectionState,
    GpuGraphicsType,
    GpuVgpuMode,
    GraphicsType,
    PowerState,
    ToolsStatus,
)
from vgpuctl.errors import NotFound, VgpuctlError, VsphereFault
from vgpuctl.lazyclass import dataclass
from vgpuctl.vsphere.faults import to_error
from vgpuctl.vsphere.tasks import TaskWatcher, dispatch, in_flight, read_props

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

log = logging.getLogger(__name__)

HOST_PATHS = [
    "name",
    "runtime.connectionState",
    "runtime.inMaintenanceMode",
    "runtime.bootTime",
    "config.graphicsConfig",
    "config.graphicsInfo",
    "config.sharedPassthruGpuTypes",
    "configManager.graphicsManager",
    "configManager.kernelModuleSystem",
    "vm",
]
VM_PATHS = ["name", "runtime.powerState", "config.hardware.device", "guest.toolsRunningStatus", "config.template"]


class RebootTimeout(VgpuctlError):
    """The host did not reconnect within the reboot timeout."""


@dataclass(frozen=True)
class DeviceType:
    pci_id: str
    graphics_type: str | None
    vgpu_mode: str | None


@dataclass
class HostApiState:
    name: str
    moid: str
    connection_state: str
    in_maintenance: bool
    boot_time: str | None
    default_graphics_type: str | None = None
    assignment_policy: str | None = None
    device_types: list[DeviceType] = field(default_factory=list)
    offered_profiles: list[str] = field(default_factory=list)
    vm_moids: list[str] = field(default_factory=list)
    gpus: list[GpuInfo] = field(default_factory=list)  # config.graphicsInfo
    graphics_manager: Any = field(default=None, repr=False)  # configManager.graphicsManager MoRef
    kernel_module_system: Any = field(default=None, repr=False)  # configManager.kernelModuleSystem MoRef


@dataclass(frozen=True)
class GpuInfo:
    pci_id: str
    device_name: str
    graphics_type: str
    vgpu_mode: str
    memory_kb: int
    vms: tuple[str, ...] = ()  # VM moids


@dataclass
class HostVm:
    name: str
    moid: str
    power_state: str
    vgpus: list[str]  # profiles
    tools_running: bool
    is_template: bool = False

    @property
    def running(self) -> bool:
        return self.power_state != PowerState.OFF


def stub_of(session: Session) -> Any:
    return session.stub if hasattr(session, "stub") else session.si._stub


_stub = stub_of


def host_object(session: Session, moid: str) -> Any:
    from pyVmomi import vim

    return vim.HostSystem(moid, _stub(session))


def vm_object(session: Session, moid: str) -> Any:
    from pyVmomi import vim

    return vim.VirtualMachine(moid, _stub(session))


def call_vim(session: Session, obj: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Session.invoke, with vim faults turned into VsphereFault naming `obj`."""
    from pyVmomi import vmodl

    try:
        return session.invoke(fn, *args, **kwargs)
    except vmodl.MethodFault as fault:
        raise to_error(fault, obj) from fault


def object_props(session: Session, moid: str, vim_type: str, paths: list[str]) -> dict[str, Any]:
    from pyVmomi import vim

    ref = getattr(vim, vim_type)(moid, _stub(session))
    found = read_props(session, [ref], vim_type, paths)
    if moid not in found:
        raise NotFound(f"{vim_type} {moid} not found")
    return found[moid]


def find_host(session: Session, name: str) -> str:
    """The MoRef id of the host called `name` (one container view read)."""
    from vgpuctl.vsphere.observe import retrieve_all

    objects = retrieve_all(session, [("HostSystem", ["name"])])
    for obj in objects.values():
        if obj.get("name") == name:
            return obj.moid
    known = ", ".join(sorted(str(o.get("name")) for o in objects.values())) or "none"
    raise NotFound(f"host {name!r} not found (hosts: {known})")


def read_host(session: Session, moid: str) -> HostApiState:
    p = object_props(session, moid, "HostSystem", HOST_PATHS)
    boot = p.get("runtime.bootTime")
    state = HostApiState(
        name=str(p.get("name")),
        moid=moid,
        connection_state=str(p.get("runtime.connectionState") or ConnectionState.CONNECTED),
        in_maintenance=bool(p.get("runtime.inMaintenanceMode")),
        boot_time=boot.isoformat() if isinstance(boot, datetime) else (str(boot) if boot else None),
        offered_profiles=sorted(str(x) for x in p.get("config.sharedPassthruGpuTypes") or []),
        vm_moids=[str(v._moId) for v in p.get("vm") or []],
        graphics_manager=p.get("configManager.graphicsManager"),
        kernel_module_system=p.get("configManager.kernelModuleSystem"),
    )
    for info in p.get("config.graphicsInfo") or []:
        state.gpus.append(
            GpuInfo(
                pci_id=str(info.pciId).lower(),
                device_name=str(info.deviceName or ""),
                graphics_type=str(info.graphicsType or GpuGraphicsType.BASIC),
                vgpu_mode=str(getattr(info, "vgpuMode", None) or GpuVgpuMode.NONE),
                memory_kb=int(info.memorySizeInKB or 0),
                vms=tuple(str(v._moId) for v in info.vm or []),
            )
        )
    state.gpus.sort(key=lambda g: g.pci_id)
    cfg = p.get("config.graphicsConfig")
    if cfg is not None:
        state.default_graphics_type = cfg.hostDefaultGraphicsType
        state.assignment_policy = cfg.sharedPassthruAssignmentPolicy
        for d in cfg.deviceType or []:
            state.device_types.append(DeviceType(str(d.deviceId).lower(), d.graphicsType, getattr(d, "vgpuMode", None)))
    return state


def _manager(session: Session, moid: str, path: str) -> Any:
    ref = object_props(session, moid, "HostSystem", [path]).get(path)
    if ref is None:
        raise NotFound(f"host {moid} has no {path}")
    return ref


# ---------------------------------------------------------------------------------------- graphics


def update_graphics(
    session: Session,
    moid: str,
    *,
    default_type: str | None = None,
    assignment_policy: str | None = None,
    devices: dict[str, dict[str, str]] | None = None,
    host: str | None = None,
) -> None:
    """UpdateGraphicsConfig with the host's current values for whatever is not changed.

    devices: PCI id -> {"graphics_type": ..., "vgpu_mode": ...} (either key may be missing).
    """
    from pyVmomi import vim

    state = read_host(session, moid)
    name = host or state.name
    current = {d.pci_id: d for d in state.device_types}
    policy = assignment_policy or state.assignment_policy or AssignmentPolicy.PERFORMANCE
    config = vim.host.GraphicsConfig(
        hostDefaultGraphicsType=str(default_type or state.default_graphics_type or GraphicsType.SHARED),
        sharedPassthruAssignmentPolicy=str(policy),
    )
    for pci, want in sorted((devices or {}).items()):
        cur = current.get(pci.lower())
        gtype = want.get("graphics_type") or (cur.graphics_type if cur else None) or config.hostDefaultGraphicsType
        dev = vim.host.GraphicsConfig.DeviceType(deviceId=pci, graphicsType=gtype)
        mode = want.get("vgpu_mode") or (cur.vgpu_mode if cur else None)
        if mode:
            dev.vgpuMode = mode
        config.deviceType.append(dev)
    gm = _manager(session, moid, "configManager.graphicsManager")
    in_flight(f"graphics host {name}", lambda: call_vim(session, name, gm.UpdateGraphicsConfig, config))
    try:
        call_vim(session, name, gm.RefreshGraphicsManager)
    except VsphereFault as err:  # the refresh only speeds up what vCenter shows
        log.debug("%s: RefreshGraphicsManager failed: %s", name, err)


# ---------------------------------------------------------------------------------------- module options


def configured_module_options(session: Session, moid: str, module: str = "nvidia", kms: Any = None) -> str:
    kms = kms if kms is not None else _manager(session, moid, "configManager.kernelModuleSystem")
    return str(call_vim(session, moid, kms.QueryConfiguredModuleOptionString, module) or "")


def effective_module_options(session: Session, moid: str, module: str = "nvidia", kms: Any = None) -> str | None:
    """The option string of the loaded module (None when the module is not listed)."""
    kms = kms if kms is not None else _manager(session, moid, "configManager.kernelModuleSystem")
    for info in call_vim(session, moid, kms.QueryModules) or []:
        if info.name == module:
            return str(info.optionString or "")
    return None


def update_module_options(
    session: Session, moid: str, options: str, module: str = "nvidia", host: str | None = None
) -> None:
    """Replace the module's whole option string (callers merge first); in effect after the next reboot."""
    kms = _manager(session, moid, "configManager.kernelModuleSystem")
    in_flight(f"module-options host {host or moid}",
              lambda: call_vim(session, moid, kms.UpdateModuleOptionString, module, options))  # fmt: skip


# ---------------------------------------------------------------------------------------- maintenance / reboot


def _wait_task(session: Session, watcher: Any, task: Any) -> Any:
    if watcher is not None:
        return watcher.wait(task)

    with TaskWatcher(session) as w:
        return w.wait(task)


def _task(session: Session, watcher: Any, obj: str, label: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Start the task and wait for it, listed as `label` for a second Ctrl-C's line once the request is sent."""
    try:
        return dispatch(label, lambda: call_vim(session, obj, fn, *args),
                        lambda task: _wait_task(session, watcher, task))
    except VsphereFault as err:
        if err.obj is None:
            raise err.about(obj) from err
        raise


def enter_maintenance(session: Session, moid: str, watcher: Any = None, host: str | None = None) -> None:
    h = host_object(session, moid)
    name = host or moid
    _task(session, watcher, name, f"enter-maintenance host {name}", h.EnterMaintenanceMode_Task, 0, False)


def exit_maintenance(session: Session, moid: str, watcher: Any = None, host: str | None = None) -> None:
    h = host_object(session, moid)
    _task(session, watcher, host or moid, f"exit-maintenance host {host or moid}", h.ExitMaintenanceMode_Task, 0)


def reboot(session: Session, moid: str, watcher: Any = None, host: str | None = None) -> str | None:
    """RebootHost_Task (force=False: the host must be in maintenance mode); returns the boot time before."""
    before = read_host(session, moid).boot_time
    h = host_object(session, moid)
    _task(session, watcher, host or moid, f"reboot host {host or moid}", h.RebootHost_Task, False)
    return before


def wait_reconnected(
    session: Session,
    moid: str,
    boot_time_before: str | None,
    timeout_s: float,
    *,
    poll_s: float = 0.5,
    progress: Callable[[float, str], None] | None = None,
    host: str | None = None,
) -> HostApiState:
    """Wait until the host is connected again after a reboot (a new boot time, or it went away and came back).

    Calls progress(elapsed_s, connection_state) on every poll; raises RebootTimeout after timeout_s."""
    start = time.monotonic()
    went_away = False
    while True:
        state = read_host(session, moid)
        elapsed = time.monotonic() - start
        if progress is not None:
            progress(elapsed, state.connection_state)
        if state.connection_state != ConnectionState.CONNECTED:
            went_away = True
        elif went_away or (state.boot_time is not None and state.boot_time != boot_time_before):
            return state
        if elapsed >= timeout_s:
            raise RebootTimeout(
                f"{host or state.name}: not back after {timeout_s:g}s of reboot (connection state "
                f"{state.connection_state})"
            )
        time.sleep(min(poll_s, max(0.01, timeout_s - elapsed)))


# ---------------------------------------------------------------------------------------- VMs of a host


def host_vms(session: Session, moid: str) -> list[HostVm]:
    """VMs registered on the host (templates left out), with power state and vGPU profiles."""
    from pyVmomi import vim

    refs = [vim.VirtualMachine(m, _stub(session)) for m in read_host(session, moid).vm_moids]
    if not refs:
        return []
    out = []
    for vm_moid, p in read_props(session, refs, "VirtualMachine", VM_PATHS).items():
        if p.get("config.template"):
            continue
        out.append(
            HostVm(
                name=str(p.get("name")),
                moid=vm_moid,
                power_state=str(p.get("runtime.powerState") or PowerState.OFF),
                vgpus=_vgpus(p.get("config.hardware.device") or []),
                tools_running=p.get("guest.toolsRunningStatus") == ToolsStatus.RUNNING,
            )
        )
    return sorted(out, key=lambda v: v.name)


def _vgpus(devices: list[Any]) -> list[str]:
    from pyVmomi import vim

    return [
        str(d.backing.vgpu)
        for d in devices
        if isinstance(d, vim.vm.device.VirtualPCIPassthrough)
        and isinstance(d.backing, vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo)
        and d.backing.vgpu
    ]


def vm_exists(session: Session, moid: str) -> bool:
    """Whether vCenter still has the VM (one property read)."""
    from pyVmomi import vmodl

    try:
        object_props(session, moid, "VirtualMachine", ["name"])
    except (NotFound, vmodl.fault.ManagedObjectNotFound):
        return False
    return True


def vm_power_state(session: Session, moid: str) -> str:
    return str(object_props(session, moid, "VirtualMachine", ["runtime.powerState"]).get("runtime.powerState"))


def shutdown_vm(
    session: Session, vm: HostVm, *, timeout_s: float = 120.0, poll_s: float = 0.5, watcher: Any = None
) -> str:
    """Graceful guest shutdown when VMware Tools run (wait up to timeout_s), else / then a hard power-off.

    Returns "shutdown" or "power-off" (what it took)."""
    from pyVmomi import vim, vmodl

    obj = vm_object(session, vm.moid)
    if vm.power_state == PowerState.OFF:
        return "already off"
    if vm.tools_running:
        try:
            in_flight(f"shutdown {vm.name}", lambda: session.invoke(obj.ShutdownGuest))
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if vm_power_state(session, vm.moid) == PowerState.OFF:
                    return "shutdown"
                time.sleep(poll_s)
            log.info("%s: guest did not shut down within %ss; powering off", vm.name, timeout_s)
        except (vim.fault.ToolsUnavailable, vim.fault.InvalidState, vmodl.fault.NotSupported) as err:
            log.info("%s: graceful shutdown not possible (%s); powering off", vm.name, type(err).__name__)
    try:
        _task(session, watcher, vm.name, f"power-off {vm.name}", obj.PowerOffVM_Task)
    except VsphereFault:
        if vm_power_state(session, vm.moid) != PowerState.OFF:
            raise
    return "power-off"


def power_on_vm(session: Session, vm_moid: str, name: str, watcher: Any = None) -> None:
    if vm_power_state(session, vm_moid) == PowerState.ON:
        return
    _task(session, watcher, name, f"power-on {name}", vm_object(session, vm_moid).PowerOnVM_Task)


def migrate_vm(session: Session, vm: HostVm, destination: str, watcher: Any = None) -> None:
    """vMotion a running VM to another host of its cluster (RelocateVM_Task; vCenter checks that the
    destination can run its vGPUs and that vGPU migration is enabled)."""
    from pyVmomi import vim

    spec = vim.vm.RelocateSpec(host=host_object(session, find_host(session, destination)))
    _task(session, watcher, vm.name, f"migrate {vm.name} to {destination}", vm_object(session, vm.moid).RelocateVM_Task,
          spec)  # fmt: skip
