"""The VM calls of an apply: read one VM again, power it, reconfigure it, clone, destroy, and the host's NVLink
device groups. Calls that start a vCenter task return the task (vgpuctl.vsphere.tasks.TaskWatcher waits)."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from vgpuctl.domain import ToolsStatus
from vgpuctl.errors import DriftError
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import CloneSpec, ObservedDeviceGroup, ObservedHost, ObservedNic, ObservedVgpu
from vgpuctl.vsphere.netobserve import vm_nics
from vgpuctl.vsphere.nvlink import observed_groups
from vgpuctl.vsphere.session import Session
from vgpuctl.vsphere.vm import clone_spec

# ConfigSpec property -> where the VM's configuration shows it (VirtualMachineConfigInfo, VirtualHardware): what a
# reconfigure sets, read back after it. Not numCoresPerSocket: VirtualHardware says to ignore it on a powered-off
# VM whose autoCoresPerSocket is set (the socket size is assigned at power-on; vSphere API 8.0.0.1).
SPEC_READ_BACK = {
    "numCPUs": "config.hardware.numCPU",
    "memoryMB": "config.hardware.memoryMB",
    "memoryReservationLockedToMax": "config.memoryReservationLockedToMax",
    "firmware": "config.firmware",
}
VM_PATHS = [
    "name",
    "runtime.powerState",
    "runtime.host",
    "config.hardware.device",
    "guest.toolsRunningStatus",
    "config.template",
    "config.changeVersion",
    *SPEC_READ_BACK.values(),
]


@dataclass
class VmState:
    """One VM as read just before a step."""

    name: str
    power: str  # PowerState value
    devices: list[Any] = field(default_factory=list)  # config.hardware.device
    tools: bool = False  # VMware Tools running (a guest shutdown is possible)
    template: bool = False
    host: str = ""  # moid of its host
    change_version: str = ""  # config.changeVersion
    # the settings a reconfigure may set, by ConfigSpec property (SPEC_READ_BACK); one the server omits is absent
    settings: dict[str, int | bool | str] = field(default_factory=dict)

    @property
    def vgpus(self) -> list[ObservedVgpu]:
        from vgpuctl.vsphere.observe import split_devices

        return split_devices(self.devices)[0]

    @property
    def nics(self) -> list[ObservedNic]:
        """Its network adapters (kind and key; port group names are not resolved here)."""
        return vm_nics(self.devices, [])


def vm_ref(session: Session, moid: str) -> Any:
    from pyVmomi import vim

    return vim.VirtualMachine(moid, session.stub)


def read_vm(session: Session, vm: Any, name: str) -> VmState:
    """The VM as it is now (one property read); DriftError when it no longer exists."""
    from pyVmomi import vmodl

    from vgpuctl.vsphere.tasks import read_props

    try:
        props = read_props(session, [vm], "VirtualMachine", VM_PATHS).get(str(vm._moId))
    except vmodl.fault.ManagedObjectNotFound:
        props = None
    if props is None or "name" not in props:
        raise DriftError(f"{name}: the VM no longer exists; not touched")
    host = props.get("runtime.host")
    return VmState(
        name=str(props.get("name")),
        power=str(props.get("runtime.powerState")),
        devices=list(props.get("config.hardware.device") or []),
        tools=props.get("guest.toolsRunningStatus") == ToolsStatus.RUNNING,
        template=bool(props.get("config.template") or False),
        host=str(host._moId) if host is not None else "",
        change_version=str(props.get("config.changeVersion") or ""),
        settings={prop: props[path] for prop, path in SPEC_READ_BACK.items() if props.get(path) is not None},
    )


def power_on(session: Session, vm: Any) -> Any:
    return session.invoke(vm.PowerOnVM_Task)


def power_off(session: Session, vm: Any) -> Any:
    return session.invoke(vm.PowerOffVM_Task)


def shutdown_guest(session: Session, vm: Any) -> bool:
    """Ask the guest to shut down; False when it cannot (no Tools, wrong state, not supported)."""
    from pyVmomi import vim, vmodl

    try:
        session.invoke(vm.ShutdownGuest)
    except (vim.fault.ToolsUnavailable, vim.fault.InvalidState, vmodl.fault.NotSupported):
        return False
    return True


def reconfigure(session: Session, vm: Any, spec: Any) -> Any:
    return session.invoke(vm.ReconfigVM_Task, spec)


def destroy(session: Session, vm: Any) -> Any:
    return session.invoke(vm.Destroy_Task)


def clone(
    session: Session, template_moid: str, folder_moid: str, name: str, clone: CloneSpec, *, pool_moid: str,
    host_moid: str | None, device_changes: list[Any] | None = None, customization: Any | None = None,
) -> Any:
    """CloneVM_Task of the template into the folder, in the pool (and on the host when given), with its network
    adapters' device changes and guest customization."""
    from pyVmomi import vim

    spec = clone_spec(clone, session.stub, pool_moid=pool_moid, host_moid=host_moid, device_changes=device_changes,
                      customization=customization)
    source = vim.VirtualMachine(template_moid, session.stub)
    return session.invoke(source.CloneVM_Task, vim.Folder(folder_moid, session.stub), name, spec)


def server_time(session: Session) -> Any:
    """vCenter's clock (CurrentTime): where an event query for what follows begins."""
    return session.invoke(session.si.CurrentTime)


def device_groups(session: Session, host: ObservedHost) -> list[ObservedDeviceGroup]:
    """The NVLink vendor device groups the host offers now (its QueryConfigTarget)."""
    from pyVmomi import vim

    browser = vim.EnvironmentBrowser(host.environment_browser_moid, session.stub)
    target = session.invoke(browser.QueryConfigTarget, vim.HostSystem(host.moid, session.stub))
    return observed_groups(getattr(target, "vendorDeviceGroupInfo", None) or [])
