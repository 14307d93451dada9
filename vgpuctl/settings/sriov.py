"""SR-IOV virtual functions on the host's NICs: what SR-IOV network adapters of VMs are placed on.

Inventory: `sriov: [{device: ConnectX-7, vfs: 8}]`: each item names NICs by PCI id, vmnic name or model (every
NIC of that model) and the virtual functions they should have; `vfs: 0` turns SR-IOV off. NICs no item names
are left as they are. vSphere: `config.pciPassthruInfo` (HostSriovInfo: sriovCapable, sriovEnabled,
numVirtualFunctionRequested, numVirtualFunction, maxVirtualFunctionSupported, sriovActive "enabled +
rebooted"), written with `HostPciPassthruSystem.UpdatePassthruConfig` and a `HostSriovConfig`
(vgpuctl.vsphere.hostnet.update_sriov). It takes effect at the next reboot unless the host can rebind devices
without one (`HostCapability.deviceRebindWithoutRebootSupported`, API 7.0): maintenance mode and a reboot, or
maintenance mode alone on such a host (VMs using the NIC's virtual functions leave it first). More virtual
functions than the NIC supports, or a NIC that is not SR-IOV capable, is a plan error. docs/multi-node.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from vgpuctl.domain import ChangeKind, CheckStatus, Phase
from vgpuctl.model import HostChange, ObservedHost, ObservedHostNic
from vgpuctl.netrules import firmware_fix, firmware_sriov_off
from vgpuctl.nicselect import DeviceSelect, describe_nics, matching_nics
from vgpuctl.settings.base import (
    ApplyStep,
    Exported,
    Finding,
    HostPlan,
    HostSetting,
    HostWriter,
    PlanInput,
    Reads,
    SettingPrivileges,
    SettingState,
    host_change,
)
from vgpuctl.settings.facts import NETWORK, HostFacts
from vgpuctl.strictmodel import KeyPath, StrictModel
from vgpuctl.vsphere import hostnet

OFF = "off"
_VFS = re.compile(r"(\d+) VFs?")


class SriovSpec(StrictModel):
    """One item of `sriov:`: the NICs `device` names and their virtual functions (0: SR-IOV off)."""

    device: str
    vfs: int = Field(ge=0)

    def __str__(self) -> str:
        return f"{self.device}: {vf_text(self.vfs)}"


def vf_text(vfs: int) -> str:
    return OFF if vfs == 0 else f"{vfs} VF" + ("s" if vfs != 1 else "")


def vfs_of(text: str) -> int:
    """A change's value back to its count ("8 VFs" -> 8, "off" -> 0)."""
    m = _VFS.fullmatch(text)
    return int(m.group(1)) if m else 0


def matching(host: ObservedHost, device: str) -> list[ObservedHostNic]:
    """The NICs (not virtual functions) a PCI id, vmnic name or model names (vgpuctl.farm.nics)."""
    return matching_nics(host, DeviceSelect.parse(device))


def state_text(nic: ObservedHostNic) -> str:
    """`8 VFs`, `off`, `off (8 VFs after reboot)`: in effect now, then what is configured when that differs."""
    now = vf_text(nic.num_vf if nic.sriov_enabled or nic.num_vf else 0)
    configured = vf_text(nic.num_vf_requested if nic.sriov_enabled else 0)
    return now if configured == now else f"{now} ({configured} after reboot)"


def in_sync(nic: ObservedHostNic, vfs: int) -> bool:
    """The NIC has `vfs` virtual functions configured and in effect (off: none configured)."""
    if vfs == 0:
        return not nic.sriov_enabled and nic.num_vf == 0
    return nic.sriov_enabled and nic.num_vf_requested == vfs and nic.num_vf == vfs


def _label(nic: ObservedHostNic) -> str:
    return f"{nic.pci_id} ({nic.vmnic})" if nic.vmnic else nic.pci_id


SRIOV_STEP = ApplyStep("sriov", 40)  # one UpdatePassthruConfig for the host's NICs
FIRMWARE_CHECK = "host.sriov-firmware"  # preflight: SR-IOV on in the firmware of the NICs an entry names


SRIOV = ChangeKind("sriov")  # a NIC's SR-IOV virtual functions


class Sriov(HostSetting[list[SriovSpec]]):
    key = "sriov"
    schema: Any = list[SriovSpec]
    default: Any = Field(default_factory=list)
    kinds = (SRIOV,)
    reads = Reads(
        properties=("config.pciPassthruInfo", "config.network.pnic", "hardware.pciDevice"),
        host_fields=("nics",),
        api=(NETWORK,),
    )
    drift_fields = ("nics",)
    privileges = SettingPrivileges("SR-IOV virtual functions on a host NIC (`sriov`)", ("UpdatePassthruConfig",),
                                   ("Host.Config.PciPassthru",))
    apply_step = SRIOV_STEP

    def problems(self, spec: object) -> list[tuple[KeyPath, str]]:
        """The same device named twice."""
        seen: dict[str, int] = {}
        out: list[tuple[KeyPath, str]] = []
        for i, item in enumerate(self.of(spec)):
            key = item.device.lower()
            if key in seen:
                out.append(((self.key, i, "device"), f"{item.device} is already listed (item {seen[key] + 1})"))
            seen.setdefault(key, i)
        return out

    def plan(self, inp: PlanInput) -> HostPlan:
        host, result = inp.host, HostPlan()
        wanted: dict[str, tuple[ObservedHostNic, int, str]] = {}
        for item in self.of(inp.spec):
            nics = matching(host, item.device)
            if not nics:
                result.errors.append(f"host {host.name}: sriov: no NIC {item.device} ({_nics_text(host)})")
                continue
            for nic in nics:
                problem = _cannot(nic, item.vfs)
                if problem:
                    result.errors.append(f"host {host.name}: sriov: {item.device}: {_label(nic)} {problem}")
                elif nic.pci_id in wanted and wanted[nic.pci_id][1] != item.vfs:
                    result.errors.append(f"host {host.name}: sriov: {_label(nic)} is named by {wanted[nic.pci_id][2]} "
                                         f"and {item.device} with other virtual function counts")
                else:
                    wanted[nic.pci_id] = (nic, item.vfs, item.device)
        phase = _phase(inp)
        for pci, (nic, vfs, _) in sorted(wanted.items()):
            if not in_sync(nic, vfs):
                result.changes.append(host_change(inp, SRIOV, state_text(nic), vf_text(vfs), phase, pci))
        return result

    def preflight(self, spec: object, host: ObservedHost) -> list[Finding]:
        """Each NIC an item gives virtual functions has SR-IOV on in its firmware (vSphere reports it SR-IOV capable
        with maxVirtualFunctionSupported above 0); else the firmware step that fixes it (the mlxconfig step for a
        ConnectX; data/network.yaml, sriov_firmware)."""
        wanted = [item for item in self.of(spec) if item.vfs > 0]
        nics = {n.pci_id: (n, item) for item in wanted for n in matching(host, item.device)}
        off = [(n, item) for n, item in nics.values() if firmware_sriov_off(n.sriov_capable, n.max_vf)]
        out = []
        for nic, item in off:
            state = "is not SR-IOV capable" if not nic.sriov_capable else "reports maxVirtualFunctionSupported 0"
            out.append(Finding(FIRMWARE_CHECK, CheckStatus.FAIL, f"NIC {nic.vmnic or nic.pci_id} ({nic.pci_id}) "
                               f"{state}: SR-IOV is off in its firmware (sriov: {item})", firmware_fix(nic.vendor_id)))
        if nics and not off:
            shown = ", ".join(f"{n.vmnic or pci} (at most {n.max_vf} VFs)" for pci, (n, _) in sorted(nics.items()))
            out.append(Finding(FIRMWARE_CHECK, CheckStatus.PASS, f"SR-IOV on in the firmware of {shown}"))
        return out

    def predict(self, host: ObservedHost, changes: Sequence[HostChange]) -> None:
        by_pci = {n.pci_id: n for n in host.nics}
        for c in changes:
            nic = by_pci.get(c.target)
            if nic is None:
                continue
            vfs = vfs_of(str(c.new))
            nic.sriov_enabled = nic.sriov_active = vfs > 0
            nic.num_vf = nic.num_vf_requested = vfs

    def apply(self, step: ApplyStep, changes: Sequence[HostChange], writer: HostWriter) -> None:
        passthru = hostnet.passthru_enabled(writer.session, writer.moid)
        nics = {c.target: (vfs_of(str(c.new)), passthru.get(c.target, False)) for c in changes}
        writer.progress("sriov", ", ".join(f"{c.target} {c.new}" for c in changes))
        hostnet.update_sriov(writer.session, writer.moid, nics)
        writer.done("sriov")

    def export(self, host: ObservedHost, facts: HostFacts | None) -> Exported:
        items = [{"device": n.vmnic or n.pci_id, "vfs": n.num_vf_requested}
                 for n in host.nics if n.sriov_capable and n.sriov_enabled]
        return Exported({self.key: items} if items else {})

    def status(self, host: ObservedHost, facts: HostFacts | None) -> list[SettingState]:
        out = []
        for n in host.nics:
            if not n.sriov_capable or not (n.sriov_enabled or n.num_vf):
                continue
            now = vf_text(n.num_vf)
            configured = vf_text(n.num_vf_requested if n.sriov_enabled else 0)
            out.append(SettingState(f"sriov[{n.vmnic or n.pci_id}]", now, configured if configured != now else None))
        return out


def _cannot(nic: ObservedHostNic, vfs: int) -> str | None:
    if vfs == 0:
        return None
    if firmware_sriov_off(nic.sriov_capable, nic.max_vf):
        state = "is not SR-IOV capable" if not nic.sriov_capable else "reports maxVirtualFunctionSupported 0"
        return f"{state}: {firmware_fix(nic.vendor_id)}"
    if vfs > nic.max_vf:
        return f"supports at most {nic.max_vf} virtual functions, not {vfs}"
    return None


def _phase(inp: PlanInput) -> Phase:
    """Maintenance mode alone where the host says it rebinds devices without a reboot, else a reboot too."""
    network = inp.facts.get(NETWORK) if inp.facts is not None else None
    return Phase.MAINTENANCE if network is not None and network.rebind else Phase.REBOOT


def _nics_text(host: ObservedHost) -> str:
    return describe_nics(host) or "no NICs observed"


SETTING = Sriov()
