"""A VM's network adapters: the inventory's `network` list diffed against the VM's adapters. Pure.

Adapters are matched by kind and port group (SR-IOV also by the NIC its `device` names, passthrough by the NIC
itself); a PVRDMA adapter on the right port group with another protocol is changed in place. Adapters the
list does not name stay, unless `network_exclusive`: then vmxnet3 and PVRDMA adapters left over are re-pointed
to the port groups still wanted, and the rest removed. What each adapter type needs (a distributed switch,
hardware version, all memory reserved) comes from vgpuctl/data/network.yaml (vgpuctl.netrules).
"""

from __future__ import annotations

from dataclasses import field

from vgpuctl.domain import AdapterType, NetworkKind
from vgpuctl.farm.nics import NicNeed, usable_nics
from vgpuctl.inventory.network import AdapterSpec
from vgpuctl.inventory.schema import VmSpec
from vgpuctl.inventory.yamlpos import KeyPath
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import (
    NicChange,
    Observed,
    ObservedHost,
    ObservedHostNic,
    ObservedNetwork,
    ObservedNic,
    ObservedVm,
    Op,
)
from vgpuctl.netrules import hardware_version, network_rules
from vgpuctl.nicselect import DeviceSelect, selects
from vgpuctl.profiles import api_at_least
from vgpuctl.vmlimits import vm_limits

RDMA_KINDS = {str(k) for k in AdapterType if k.is_rdma}
ETHERNET_KINDS = {str(AdapterType.VMXNET3), str(AdapterType.PVRDMA), str(AdapterType.SRIOV)}


@dataclass
class NetPlan:
    """What one VM's `network` list asks: the adapter changes, the physical adapters it holds while running
    (`needs`, for placement), its ethernet adapters' port groups in PCI order after the change (for its
    identity), and the problems found, each at the key it is about."""

    changes: list[NicChange] = field(default_factory=list)
    needs: list[NicNeed] = field(default_factory=list)
    adds: dict[int, NicChange] = field(default_factory=dict)  # adapter index -> its add (device set by placement)
    ethernet: list[str] = field(default_factory=list)
    errors: list[tuple[KeyPath, str]] = field(default_factory=list)
    reserve_memory: bool = False
    hosts: list[str] | None = None  # hosts that reach every port group it names (None: no constraint)


def _path(spec: VmSpec, j: int, *rest: str) -> KeyPath:
    return ("vms", spec._index, "network", j, *rest)


def plan_network(spec: VmSpec, base: ObservedVm, observed: Observed, candidates: list[str]) -> NetPlan:
    """The adapter diff of one VM; `base` is the VM (or the template a clone starts from), `candidates` the hosts
    it is on or may be created on."""
    out = NetPlan(ethernet=[n.network for n in _ethernet(base.nics)], hosts=list(candidates) if candidates else None)
    if spec.network is None:
        out.needs = _kept_needs(base.nics, {}, set())
        return out
    host = observed.hosts.get(base.host or "") if base.host else None
    networks = _check_portgroups(spec, observed, candidates, out)
    _check_versions(spec, base, out)
    matched = _match(spec, base.nics, host, networks)
    _changes(spec, base.nics, matched, networks, out, host)
    removed = {c.key for c in out.changes if c.op == Op.REMOVE}
    out.needs = _kept_needs(base.nics, matched, removed)
    for j, adapter in enumerate(spec.adapters):
        if adapter.kind.is_physical and j not in matched:
            out.needs.append(NicNeed(j, adapter.kind, select=adapter.select))
    out.reserve_memory = any(network_rules().adapter(a.kind).reserve_memory for a in spec.adapters)
    out.ethernet = _ethernet_after(spec, base.nics, matched, out.changes)
    problem = vm_limits().adapters_problem(len(out.ethernet))
    if problem:  # the adapters the VM keeps (network_exclusive: false) count too
        out.errors.append((("vms", spec._index, "network"), f"with the adapters it keeps: {problem}"))
    _check_nics(spec, observed, out)
    return out


def _check_nics(spec: VmSpec, observed: Observed, out: NetPlan) -> None:
    """Each SR-IOV or passthrough adapter to add must find its NIC, with virtual functions or enabled for
    passthrough, on some candidate host (whether one is free is placement's question); hosts without it drop
    out of a new VM's candidates."""
    hosts = out.hosts
    for j in out.adds:
        adapter = spec.adapters[j]
        if not adapter.kind.is_physical or adapter.select is None:
            continue
        names = hosts if hosts is not None else list(observed.hosts)
        found = {h: usable_on(observed.hosts[h], adapter) for h in names if h in observed.hosts}
        fit = [h for h, (nics, _) in found.items() if nics]
        if not fit:
            why = "; ".join(f"host {h} {reason}" for h, (_, reason) in found.items()) or "no candidate host"
            out.errors.append((_path(spec, j, "device"), why))
        hosts = fit
    if hosts is not None:
        out.hosts = hosts


def _ethernet(nics: list[ObservedNic]) -> list[ObservedNic]:
    return sorted((n for n in nics if n.kind != AdapterType.PASSTHROUGH),
                  key=lambda n: (n.slot if n.slot is not None else 1 << 30, n.key))


# ------------------------------------------------------------------------------------------ port groups


def _check_portgroups(spec: VmSpec, observed: Observed, candidates: list[str],
                      out: NetPlan) -> dict[int, ObservedNetwork]:
    found: dict[int, ObservedNetwork] = {}
    reach: set[str] | None = None
    for j, adapter in enumerate(spec.adapters):
        if adapter.portgroup is None:
            continue
        named = observed.networks_named(adapter.portgroup)
        if not named:
            known = ", ".join(sorted({n.name for n in observed.networks})) or "none observed"
            out.errors.append((_path(spec, j, "portgroup"), f"unknown port group {adapter.portgroup!r} "
                                                            f"(port groups: {known})"))
            continue
        if len(named) > 1:
            switches = ", ".join(sorted(n.switch or "a standard switch" for n in named))
            out.errors.append((_path(spec, j, "portgroup"), f"port group name {adapter.portgroup!r} is on "
                                                            f"{len(named)} switches ({switches}): rename one"))
            continue
        net = named[0]
        if network_rules().adapter(adapter.kind).needs_distributed_switch and net.kind != NetworkKind.DISTRIBUTED:
            out.errors.append((_path(spec, j, "type"), f"PVRDMA needs a port group of a vSphere Distributed "
                                                       f"Switch; {adapter.portgroup!r} is on a standard switch"))
            continue
        found[j] = net
        reach = set(net.hosts) if reach is None else reach & set(net.hosts)
    if reach is not None and candidates:
        out.hosts = [h for h in candidates if h in reach]
        if not out.hosts:
            names = ", ".join(sorted({found[j].name for j in found}))
            out.errors.append((("vms", spec._index, "network"), f"no candidate host ({', '.join(candidates)}) reaches "
                                                              f"every port group it names ({names})"))
    return found


def _check_versions(spec: VmSpec, base: ObservedVm, out: NetPlan) -> None:
    hw = hardware_version(base.hardware_version)
    if hw is None:
        return
    rules = network_rules()
    for j, adapter in enumerate(spec.adapters):
        rule = rules.adapter(adapter.kind, dynamic=_dynamic(adapter))
        if hw < rule.min_hardware_version:
            out.errors.append((_path(spec, j, "type"), f"a {adapter.kind} adapter needs virtual hardware "
                                                       f"vmx-{rule.min_hardware_version} or later (the VM is "
                                                       f"{base.hardware_version})"))


def _dynamic(adapter: AdapterSpec) -> bool:
    """A passthrough NIC named by model is added by Dynamic DirectPath I/O (vendor and device id)."""
    return adapter.kind is AdapterType.PASSTHROUGH and adapter.select is not None and adapter.select.by == "model"


# ---------------------------------------------------------------------------------------------- matching


def _match(spec: VmSpec, nics: list[ObservedNic], host: ObservedHost | None,
           networks: dict[int, ObservedNetwork]) -> dict[int, int]:
    """Adapter index -> index into `nics` of the adapter that already is it (same kind, port group, NIC)."""
    matched: dict[int, int] = {}
    taken: set[int] = set()
    for exact in (True, False):  # exact first, then PVRDMA with another protocol (changed in place)
        for j, adapter in enumerate(spec.adapters):
            if j in matched or (adapter.portgroup is not None and j not in networks):
                continue
            for i, nic in enumerate(nics):
                if i not in taken and _same(adapter, nic, host, exact):
                    matched[j] = i
                    taken.add(i)
                    break
    return matched


def _same(adapter: AdapterSpec, nic: ObservedNic, host: ObservedHost | None, exact: bool) -> bool:
    if nic.kind != adapter.kind:
        return False
    if adapter.portgroup is not None and nic.network != adapter.portgroup:
        return False
    if adapter.mac is not None and nic.mac.lower() != adapter.mac:
        return False
    if adapter.kind is AdapterType.PVRDMA and exact:
        return (nic.protocol or str(adapter.roce_protocol)) == adapter.roce_protocol
    if adapter.kind.is_physical and adapter.select is not None:
        return _same_device(adapter.select, nic, host)
    return True


def _same_device(select: DeviceSelect, nic: ObservedNic, host: ObservedHost | None) -> bool:
    if nic.device is None:  # Dynamic DirectPath, powered off: its allowed device ids say which model
        known = next((m for m in network_rules().nic_models if m.model.lower() == select.value.lower()), None)
        return known is not None and [network_rules().nic_vendor_id, known.device_id] in nic.allowed
    if select.by == "pci":
        return nic.device.lower() == select.value
    phys = next((n for n in (host.nics if host else []) if n.pci_id.lower() == nic.device.lower()), None)
    return phys is not None and selects(select, phys)


# ----------------------------------------------------------------------------------------------- changes


def _changes(spec: VmSpec, nics: list[ObservedNic], matched: dict[int, int],
             networks: dict[int, ObservedNetwork], out: NetPlan, host: ObservedHost | None = None) -> None:
    for j, i in sorted(matched.items()):
        adapter, nic = spec.adapters[j], nics[i]
        if adapter.kind is AdapterType.PVRDMA and nic.protocol and nic.protocol != adapter.roce_protocol:
            out.changes.append(NicChange(Op.CHANGE, str(adapter.kind), adapter.portgroup, nic.key,
                                         protocol=str(adapter.roce_protocol), old=nic.protocol))
    leftover = [i for i in range(len(nics)) if i not in matched.values()]
    wanted = [j for j in range(len(spec.adapters)) if j not in matched and
              (spec.adapters[j].portgroup is None or j in networks)]
    if spec.network_exclusive:
        wanted = _repoint(spec, nics, leftover, wanted, out)
        for i in leftover:
            nic = nics[i]
            if nic.kind == AdapterType.PASSTHROUGH and not is_nic(nic, host):
                continue  # a passthrough device that is not a NIC (a GPU, NVMe, ...): never vgpuctl's to remove
            out.changes.append(NicChange(Op.REMOVE, nic.kind, nic.network or None, nic.key, device=nic.device))
    for j in wanted:
        adapter = spec.adapters[j]
        add = NicChange(Op.ADD, str(adapter.kind), adapter.portgroup, mac=adapter.mac,
                        protocol=str(adapter.roce_protocol) if adapter.kind is AdapterType.PVRDMA else None,
                        select=adapter.device)
        if _dynamic(adapter):
            add.allowed = _allowed(adapter)
        out.changes.append(add)
        out.adds[j] = add


def is_nic(nic: ObservedNic, host: ObservedHost | None) -> bool:
    """A passthrough device is a NIC when its host lists it as a network controller, or, for Dynamic
    DirectPath, when its allowed ids are those of a known NIC model."""
    if nic.device is not None and host is not None:
        return any(n.pci_id.lower() == nic.device.lower() for n in host.nics)
    rules = network_rules()
    return bool(nic.allowed) and all(v == rules.nic_vendor_id and rules.nic_model(d) is not None
                                     for v, d in nic.allowed)


def _repoint(spec: VmSpec, nics: list[ObservedNic], leftover: list[int], wanted: list[int], out: NetPlan) -> list[int]:
    """`network_exclusive`: a vmxnet3 or PVRDMA adapter left over takes a wanted port group of its kind (keeping
    its MAC address) instead of one removal and one add. Returns the adapters still to add."""
    still = []
    for j in wanted:
        adapter = spec.adapters[j]
        i = next((i for i in leftover if nics[i].kind == adapter.kind and not adapter.kind.is_physical
                  and adapter.mac is None), None)
        if i is None:
            still.append(j)
            continue
        leftover.remove(i)
        nic = nics[i]
        protocol = str(adapter.roce_protocol) if adapter.kind is AdapterType.PVRDMA else None
        out.changes.append(NicChange(Op.CHANGE, str(adapter.kind), adapter.portgroup, nic.key, protocol=protocol,
                                     old=f"on {nic.network}" if nic.network else "on no port group"))
    return still


def _allowed(adapter: AdapterSpec) -> list[list[int]]:
    rules = network_rules()
    value = (adapter.device or "").lower()
    model = next((m for m in rules.nic_models if m.model.lower() == value), None)
    return [[rules.nic_vendor_id, model.device_id]] if model is not None else []


def _kept_needs(nics: list[ObservedNic], matched: dict[int, int], removed: set[int | None]) -> list[NicNeed]:
    """Physical adapters the VM keeps hold their NICs again at power-on: indexed by the inventory adapter they
    are, or from 1000 on for those it does not name."""
    by_nic = {i: j for j, i in matched.items()}
    needs = []
    for i, nic in enumerate(nics):
        if nic.kind in (AdapterType.SRIOV, AdapterType.PASSTHROUGH) and nic.device and nic.key not in removed:
            needs.append(NicNeed(by_nic.get(i, 1000 + i), AdapterType(nic.kind), pinned=nic.device))
    return needs


def _ethernet_after(spec: VmSpec, nics: list[ObservedNic], matched: dict[int, int],
                    changes: list[NicChange]) -> list[str]:
    """Port groups of the VM's ethernet adapters after the change, in PCI slot order: the ones it keeps (by
    slot), then the added ones in the inventory's order."""
    removed = {c.key for c in changes if c.op == Op.REMOVE}
    repointed = {c.key: c.portgroup for c in changes if c.op == Op.CHANGE and c.portgroup}
    kept = [repointed.get(n.key, n.network) for n in _ethernet(nics) if n.key not in removed]
    added = [c.portgroup for c in changes if c.op == Op.ADD and c.kind in ETHERNET_KINDS and c.portgroup]
    return [p or "" for p in kept] + added


def usable_on(host: ObservedHost, adapter: AdapterSpec) -> tuple[list[ObservedHostNic], str]:
    """usable_nics, and for Dynamic DirectPath a host whose API has it (vSphere 7.0)."""
    rule = network_rules().adapter(adapter.kind, dynamic=_dynamic(adapter))
    if rule.min_api and not api_at_least(host.api_version, tuple(int(x) for x in rule.min_api.split("."))):
        return [], f"is vSphere {host.api_version}: Dynamic DirectPath I/O needs {rule.min_api} or later"
    assert adapter.select is not None
    return usable_nics(host, adapter.kind, adapter.select)


def resolve_devices(spec: VmSpec, host: ObservedHost, out: NetPlan) -> None:
    """A VM the plan does not power on gets the first usable NIC of each SR-IOV or passthrough adapter it adds
    (placement chooses for the others)."""
    for j, add in out.adds.items():
        adapter = spec.adapters[j]
        if adapter.kind.is_physical and adapter.select is not None and add.device is None:
            nics, _ = usable_nics(host, adapter.kind, adapter.select)
            add.device = nics[0].pci_id if nics else None
