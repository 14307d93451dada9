"""What a host needs before its VMs' PVRDMA adapters talk across hosts: a VMkernel adapter tagged for PVRDMA and
the `pvrdma` firewall ruleset enabled, on a host that is a member of a vSphere Distributed Switch.

Inventory: `pvrdma: {vmknic: vmk1, firewall: true}` (`firewall: false` leaves the ruleset as the host has it).
vSphere Networking, "Configure an ESXi Host for PVRDMA": tag a VMkernel adapter for PVRDMA, which is the host
advanced option `Net.PVRDMAVmknic` (a string, the adapter's name; OptionManager.QueryOptions/UpdateOptions),
and enable the firewall rule for PVRDMA (ruleset `pvrdma`, TCP 28250-28761 in and out, disabled by default;
HostFirewallSystem.EnableRuleset). "PVRDMA Support": a vSphere Distributed Switch whose only uplink is the
HCA; between hosts without an RDMA device PVRDMA falls back to TCP. Both changes are made online. Read one host
at a time (the NETWORK fact, vgpuctl.vsphere.hostnet): nothing here is in the bulk read. docs/multi-node.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vgpuctl.domain import ChangeKind, Phase
from vgpuctl.model import HostChange, ObservedHost
from vgpuctl.netrules import network_rules
from vgpuctl.records.netfacts import HostNetFacts
from vgpuctl.settings.base import (
    ApplyStep,
    Exported,
    HostPlan,
    HostSetting,
    HostWriter,
    PlanInput,
    Reads,
    SettingPrivileges,
    SettingState,
    host_change,
    names,
)
from vgpuctl.settings.facts import NETWORK, HostFacts
from vgpuctl.strictmodel import KeyPath, StrictModel
from vgpuctl.vsphere import hostnet

ENABLED, DISABLED = "enabled", "disabled"
VMKNIC_KEY, FIREWALL_KEY = "pvrdma.vmknic", "pvrdma.firewall"


class PvrdmaSpec(StrictModel):
    """`pvrdma:` of a hosts entry."""

    vmknic: str
    firewall: bool = True


PVRDMA_STEP = ApplyStep("pvrdma", 50)  # UpdateOptions and EnableRuleset, online


PVRDMA_VMKNIC = ChangeKind("pvrdma.vmknic")  # the VMkernel adapter PVRDMA uses (Net.PVRDMAVmknic)
PVRDMA_FIREWALL = ChangeKind("pvrdma.firewall")  # the pvrdma firewall ruleset


class Pvrdma(HostSetting[PvrdmaSpec | None]):
    key = "pvrdma"
    schema: Any = PvrdmaSpec | None
    kinds = (PVRDMA_VMKNIC, PVRDMA_FIREWALL)
    reads = Reads(api=(NETWORK,))
    apply_step = PVRDMA_STEP
    privileges = SettingPrivileges("PVRDMA on a host (`pvrdma`): the tagged VMkernel adapter, the firewall ruleset",
                                   ("UpdateOptions", "EnableRuleset"),
                                   ("Host.Config.AdvancedConfig", "Host.Config.NetService"))

    def problems(self, spec: object) -> list[tuple[KeyPath, str]]:
        p = self.of(spec)
        if p is not None and not p.vmknic.startswith("vmk"):
            return [((self.key, "vmknic"), f"must name a VMkernel adapter such as vmk1 (got {p.vmknic!r})")]
        return []

    def plan(self, inp: PlanInput) -> HostPlan:
        p, host, result = self.of(inp.spec), inp.host, HostPlan()
        if p is None:
            return result
        net = inp.facts.get(NETWORK) if inp.facts is not None else None
        if net is None:
            why = (inp.facts.unread_what(NETWORK) if inp.facts is not None else None) or "not read"
            result.errors.append(f"host {host.name}: pvrdma: its network state is unknown ({why})")
            return result
        errors = _cannot(host.name, p, net)
        if errors:
            result.errors += errors
            return result
        result.warnings += _warnings(host.name, p, net)
        if net.pvrdma_vmknic != p.vmknic:
            result.changes.append(host_change(inp, PVRDMA_VMKNIC, net.pvrdma_vmknic or None, p.vmknic,
                                              Phase.ONLINE))
        if p.firewall and not net.rulesets.get(_ruleset(), False):
            result.changes.append(host_change(inp, PVRDMA_FIREWALL, DISABLED, ENABLED, Phase.ONLINE))
        return result

    def apply(self, step: ApplyStep, changes: Sequence[HostChange], writer: HostWriter) -> None:
        for c in changes:
            writer.progress("pvrdma", f"{c.kind} {c.new}")
            if c.kind == PVRDMA_VMKNIC:
                hostnet.set_pvrdma_vmknic(writer.session, writer.moid, str(c.new))
            else:
                hostnet.enable_ruleset(writer.session, writer.moid, _ruleset())
        writer.done("pvrdma")

    def export(self, host: ObservedHost, facts: HostFacts | None) -> Exported:
        net = facts.get(NETWORK) if facts is not None else None
        if net is None or not net.pvrdma_vmknic:
            return Exported()
        return Exported({VMKNIC_KEY: net.pvrdma_vmknic, FIREWALL_KEY: net.rulesets.get(_ruleset(), False)})

    def status(self, host: ObservedHost, facts: HostFacts | None) -> list[SettingState]:
        net = facts.get(NETWORK) if facts is not None else None
        if net is None or net.pvrdma_vmknic is None:
            return []
        firewall = ENABLED if net.rulesets.get(_ruleset(), False) else DISABLED
        return [SettingState(VMKNIC_KEY, net.pvrdma_vmknic or "(none)"), SettingState(FIREWALL_KEY, firewall)]


def _ruleset() -> str:
    """The firewall ruleset PVRDMA needs (vgpuctl/data/network.yaml: `pvrdma`)."""
    return network_rules().pvrdma_host.firewall_ruleset


def _option() -> str:
    return network_rules().pvrdma_host.advanced_option


def _cannot(host: str, p: PvrdmaSpec, net: HostNetFacts) -> list[str]:
    """What keeps the host from PVRDMA: no such option (before ESXi 6.5), no such VMkernel adapter, no
    distributed switch, no pvrdma ruleset."""
    out = []
    if net.pvrdma_vmknic is None:
        out.append(f"host {host}: pvrdma: the host has no advanced option {_option()} (PVRDMA needs ESXi 6.5 or "
                   "later)")
    if net.vmknic(p.vmknic) is None:
        out.append(f"host {host}: pvrdma.vmknic: no VMkernel adapter {p.vmknic} "
                   f"({names(v.device for v in net.vmknics)})")
    if not net.switches:
        out.append(f"host {host}: pvrdma: the host is a member of no vSphere Distributed Switch, which PVRDMA needs "
                   "(vSphere Networking, \"PVRDMA Support\")")
    if p.firewall and _ruleset() not in net.rulesets:
        out.append(f"host {host}: pvrdma.firewall: the host's firewall has no ruleset {_ruleset()}")
    return out


def _warnings(host: str, p: PvrdmaSpec, net: HostNetFacts) -> list[str]:
    out = []
    vmknic = net.vmknic(p.vmknic)
    if vmknic is not None and vmknic.switch_uuid is None:
        out.append(f"host {host}: pvrdma.vmknic: {p.vmknic} is on the standard port group {vmknic.portgroup!r}, "
                   "not on a distributed switch")
    if net.rdma_devices is not None and not net.rdma_devices:
        out.append(f"host {host}: pvrdma: the host has no RDMA device; PVRDMA to VMs on other hosts falls back to "
                   "TCP (vSphere Networking, \"PVRDMA Support\")")
    return out


SETTING = Pvrdma()
