"""SR-IOV virtual functions and passthrough NICs as capacity, the way GPUs are: which physical NIC of a host an
adapter's `device` names, how many virtual functions and whole NICs are free, and fitting a VM's adapters on
one host (all or nothing). Pure; used by placement (vgpuctl.farm.placement.place_farm) and `capacity`.

A physical function's virtual functions are handed out at power-on (vSphere Networking 6.7, "Assign a
Virtual Function as SR-IOV Passthrough Adapter", step 11); a passthrough NIC belongs to one running VM.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import field

from vgpuctl.domain import AdapterType
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed, ObservedHost, ObservedHostNic, ObservedVm, PowerState
from vgpuctl.nicselect import DeviceSelect, describe_nics, is_virtual_function, matching_nics, nic_model


def usable_nics(host: ObservedHost, kind: AdapterType, select: DeviceSelect) -> tuple[list[ObservedHostNic], str]:
    """The NICs an adapter of this kind may use on the host, or none and why not."""
    found = matching_nics(host, select)
    if not found:
        return [], f"has no NIC {select} ({describe_nics(host) or 'no NICs observed'})"
    if kind is AdapterType.SRIOV:
        ok = [n for n in found if n.sriov_enabled and n.num_vf > 0]
        if not ok:
            shown = ", ".join(f"{n.pci_id} ({_sriov_state(n)})" for n in found)
            return [], f"has no SR-IOV virtual functions on {select}: {shown}"
        return ok, ""
    ok = [n for n in found if n.passthru_enabled]
    if not ok:
        shown = ", ".join(n.pci_id for n in found)
        return [], f"has {select} ({shown}) but not enabled for passthrough"
    return ok, ""


def _sriov_state(nic: ObservedHostNic) -> str:
    if not nic.sriov_capable:
        return "not SR-IOV capable"
    if nic.max_vf == 0:
        return "maxVirtualFunctionSupported 0: SR-IOV is off in its firmware"
    if not nic.sriov_enabled:
        return "SR-IOV disabled"
    if nic.num_vf_requested and not nic.num_vf:
        return f"{nic.num_vf_requested} VFs requested, not active until the host reboots"
    return "0 VFs"


# ------------------------------------------------------------------------------------------------ ledger


@dataclass(frozen=True)
class NicNeed:
    """One physical adapter a VM holds while it runs: the adapter's position in the VM's list, its kind, and
    either the NIC it already uses (`pinned`) or what the inventory selects."""

    index: int
    kind: AdapterType
    select: DeviceSelect | None = None
    pinned: str | None = None

    def label(self) -> str:
        return f"{self.kind} {self.pinned or self.select}"


@dataclass
class NicLedger:
    """What a host's NICs have free: virtual functions per physical function, whole NICs for passthrough."""

    host: ObservedHost
    vfs_free: dict[str, int] = field(default_factory=dict)  # PF PCI id -> free VFs
    pt_free: set[str] = field(default_factory=set)  # PCI ids of passthrough NICs no running VM holds


def ledgers_from_observed(observed: Observed, release: Iterable[str] = ()) -> dict[str, NicLedger]:
    """Per host, the free VFs and passthrough NICs, counting every running VM except those in `release` (keys in
    observed.vms of VMs the plan powers off)."""
    released = set(release)
    ledgers: dict[str, NicLedger] = {}
    for name, host in observed.hosts.items():
        pfs = [n for n in host.nics if not is_virtual_function(n)]
        ledgers[name] = NicLedger(host, {n.pci_id: n.num_vf for n in pfs if n.sriov_enabled},
                                  {n.pci_id for n in pfs if n.passthru_enabled})
    for key, vm in observed.vms.items():
        ledger = ledgers.get(vm.host or "")
        if ledger is None or key in released or vm.power_state not in (PowerState.ON, PowerState.SUSPENDED):
            continue
        _hold(ledger, vm)
    return ledgers


def _hold(ledger: NicLedger, vm: ObservedVm) -> None:
    for nic in vm.nics:
        if nic.kind == AdapterType.SRIOV and nic.device in ledger.vfs_free:
            ledger.vfs_free[nic.device] -= 1
        elif nic.kind == AdapterType.PASSTHROUGH and nic.device:
            ledger.pt_free.discard(nic.device)


def fit(ledger: NicLedger, needs: Sequence[NicNeed]) -> tuple[dict[int, str], str | None]:
    """The NIC each need gets on this host (adapter index -> PCI id), or why they do not all fit. Pinned needs
    first; an SR-IOV need takes the matching physical function with the most free VFs."""
    vfs = dict(ledger.vfs_free)
    pt = set(ledger.pt_free)
    out: dict[int, str] = {}
    for need in sorted(needs, key=lambda n: n.pinned is None):
        candidates = _candidates(ledger.host, need)
        if need.kind is AdapterType.SRIOV:
            free = [c for c in candidates if vfs.get(c, 0) > 0]
            if not free:
                return {}, _no_vf(ledger, need, candidates)
            pick = max(free, key=lambda c: (vfs[c], c))
            vfs[pick] -= 1
        else:
            free = [c for c in candidates if c in pt]
            if not free:
                return {}, f"has no free passthrough NIC {need.pinned or need.select}" + (
                    f" ({', '.join(candidates)} in use by running VMs)" if candidates else "")
            pick = free[0]
            pt.discard(pick)
        out[need.index] = pick
    return out, None


def _candidates(host: ObservedHost, need: NicNeed) -> list[str]:
    if need.pinned is not None:
        return [need.pinned]
    assert need.select is not None
    nics, _ = usable_nics(host, need.kind, need.select)
    return [n.pci_id for n in nics]


def _no_vf(ledger: NicLedger, need: NicNeed, candidates: list[str]) -> str:
    if not candidates:
        _, why = usable_nics(ledger.host, need.kind, need.select) if need.select else ([], "")
        return why or f"has no SR-IOV NIC {need.pinned}"
    total = {n.pci_id: n.num_vf for n in ledger.host.nics}
    shown = ", ".join(f"{c}: {total.get(c, 0)} of {total.get(c, 0)} in use" for c in candidates)
    return f"has no free SR-IOV virtual function on {need.pinned or need.select} ({shown})"


def fit_on(ledgers: dict[str, NicLedger], host: str, needs: Sequence[NicNeed]) -> tuple[dict[int, str], str | None]:
    """`fit` on the host's ledger; no needs always fit."""
    if not needs:
        return {}, None
    ledger = ledgers.get(host)
    if ledger is None:
        return {}, "has no NICs observed"
    return fit(ledger, needs)


def commit(ledgers: dict[str, NicLedger], host: str, needs: Sequence[NicNeed], assigned: dict[int, str]) -> None:
    """Take the NICs `fit` chose on the host."""
    for need in needs:
        pci = assigned[need.index]
        if need.kind is AdapterType.SRIOV:
            ledgers[host].vfs_free[pci] -= 1
        else:
            ledgers[host].pt_free.discard(pci)


@dataclass(frozen=True)
class NicCapacity:
    """Free virtual functions or passthrough NICs of one NIC model on one host (`capacity`)."""

    host: str
    nic: str  # PCI id
    model: str
    kind: AdapterType  # SRIOV | PASSTHROUGH
    total: int
    free: int


def nic_capacity(observed: Observed, host: str | None = None) -> list[NicCapacity]:
    ledgers = ledgers_from_observed(observed)
    out: list[NicCapacity] = []
    for name, ledger in sorted(ledgers.items()):
        if host is not None and name != host:
            continue
        for nic in sorted(ledger.host.nics, key=lambda n: n.pci_id):
            if nic.pci_id in ledger.vfs_free:
                out.append(NicCapacity(name, nic.pci_id, nic_model(nic), AdapterType.SRIOV, nic.num_vf,
                                       max(0, ledger.vfs_free[nic.pci_id])))
            elif nic.passthru_enabled and not is_virtual_function(nic):
                out.append(NicCapacity(name, nic.pci_id, nic_model(nic), AdapterType.PASSTHROUGH, 1,
                                       int(nic.pci_id in ledger.pt_free)))
    return out
