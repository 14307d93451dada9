"""Placement across a farm: the hosts' GPUs as observe read them (`farm_from_observed`) and VMs placed on them one
after the other in power-on order (`place_farm`), each by the one-VM rules of vgpuctl.farm.placement; the hosts
where NVLink VMs may run (`nvlink_hosts_for`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import field
from typing import TYPE_CHECKING

from vgpuctl.domain import AssignmentPolicy, NvlinkRequirement, PowerState
from vgpuctl.farm.nics import NicLedger, NicNeed, commit, fit_on, ledgers_from_observed
from vgpuctl.farm.placement import Gpu, Placement, add_vgpu, gpus_from_observed, place_vm, remove_vgpu
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import folder_path

if TYPE_CHECKING:
    from vgpuctl.inventory import Inventory
    from vgpuctl.model import Observed, ObservedHost


@dataclass
class Request:
    """One VM to place: `hosts` are candidate hosts in preference order (one for an existing VM)."""

    vm: str
    profiles: list[str]
    hosts: list[str]
    nvlink: bool = False
    cluster: str | None = None
    nics: tuple[NicNeed, ...] = ()  # SR-IOV and passthrough adapters it holds while it runs


@dataclass
class FarmState:
    gpus: dict[str, list[Gpu]]  # host -> GPUs
    policy: dict[str, str]  # host -> assignment policy
    nics: dict[str, NicLedger] = field(default_factory=dict)  # host -> free VFs and passthrough NICs


def farm_from_observed(observed: Observed, release: Iterable[str] = ()) -> FarmState:
    """GPU state of every host with the vGPUs of running VMs, minus the VMs in `release` (to be powered
    off or reconfigured)."""
    released = set(release)
    profiles = {
        name: [d.profile for d in vm.vgpus] for name, vm in observed.vms.items() if not vm.is_template
    }
    # vCenter's reads are no one snapshot (observe reads hosts and VMs apart): a GPU naming a VM that the VMs'
    # read shows powered off was read before that VM stopped, and the VM holds nothing there now
    stopped = {name for name, vm in observed.vms.items() if vm.power_state == PowerState.OFF}
    order = {vm: i for i, vm in enumerate(released)}  # released VMs leave each GPU in this one order
    running = _running_with_vgpus(observed, released)
    gpus: dict[str, list[Gpu]] = {}
    policy: dict[str, str] = {}
    for name in sorted(observed.hosts):
        host = observed.hosts[name]
        host_gpus = gpus_from_observed(host, profiles, stopped)
        for g in host_gpus:
            og_vms = [vm for vm in _vms_on(host, g.id) if vm not in stopped]
            for vm in sorted({vm for vm in og_vms if vm in order}, key=order.__getitem__):
                for _ in range(og_vms.count(vm)):
                    _release_one(g, profiles.get(vm, []))
        listed = {vm for g in host.gpus for vm in g.vms}
        unlisted = [vm for vm in running.get(name, ()) if vm not in listed]
        _place_unlisted(host_gpus, name, host.assignment_policy, unlisted, observed)
        gpus[name] = host_gpus
        policy[name] = host.assignment_policy
    return FarmState(gpus, policy, ledgers_from_observed(observed, released))


def _running_with_vgpus(observed: Observed, released: set[str]) -> dict[str, list[str]]:
    """host -> the VMs the VMs' read shows running there with vGPUs (not those in `released`)."""
    running: dict[str, list[str]] = {}
    for name, vm in observed.vms.items():
        if vm.power_state == PowerState.ON and vm.vgpus and vm.host and not vm.is_template and name not in released:
            running.setdefault(vm.host, []).append(name)
    return running


def _place_unlisted(gpus: list[Gpu], host: str, policy: str, vms: Sequence[str], observed: Observed) -> None:
    """VMs that run on the host with vGPUs no GPU of it names started after the host was read (observe reads hosts
    and VMs apart): their vGPUs are on the host's GPUs now, where the host's own placement put them at power-on;
    they are placed the same way. One that does not fit blocks the host's GPUs: what they hold is not known."""
    for name in sorted(vms):
        vm = observed.vms[name]
        res = place_vm(gpus, name, [d.profile for d in vm.vgpus], policy,
                       nvlink=any(d.device_group_key is not None for d in vm.vgpus), host=host)
        if not res.ok:
            for g in gpus:
                g.block(f"{name} runs on {host} with vGPUs that no GPU listed when the host was read", history=False)
            return
        by_id = {g.id: g for g in gpus}
        for pl in res.placed:
            add_vgpu(by_id[pl.gpu], pl.profile)


def _vms_on(host: ObservedHost, gpu_id: str) -> list[str]:
    return next((list(g.vms) for g in host.gpus if g.pci_id == gpu_id), [])


def _release_one(gpu: Gpu, vm_profiles: Sequence[str]) -> None:
    for p in vm_profiles:
        if p in gpu.vgpus:
            remove_vgpu(gpu, p)
            return


def place_farm(state: FarmState, requests: Sequence[Request]) -> dict[str, Placement]:
    """Place VMs in the given order, committing each success to `state` (mutated). A request with
    several candidate hosts takes the first host where it fits."""
    results: dict[str, Placement] = {}
    for req in requests:
        failures: list[Placement] = []
        chosen: Placement | None = None
        for host in req.hosts:
            host_gpus = state.gpus.get(host)
            assigned, why = fit_on(state.nics, host, req.nics)  # SR-IOV VFs and passthrough NICs first
            if host_gpus is None or why is not None:
                failures.append(Placement(req.vm, host, reason="is not a known host" if host_gpus is None else why))
                continue
            res = place_vm(host_gpus, req.vm, req.profiles, state.policy.get(host, AssignmentPolicy.PERFORMANCE),
                           nvlink=req.nvlink, host=host)
            res.nics = assigned
            if res.ok:
                chosen = res
                break
            failures.append(res)
        if chosen is None:
            results[req.vm] = _farm_failure(req, failures)
            continue
        by_id = {g.id: g for g in state.gpus[chosen.host or ""]}
        for pl in chosen.placed:
            add_vgpu(by_id[pl.gpu], pl.profile)
        commit(state.nics, chosen.host or "", req.nics, chosen.nics)
        results[req.vm] = chosen
    return results


def _farm_failure(req: Request, failures: list[Placement]) -> Placement:
    if len(failures) == 1:
        f = failures[0]
        return Placement(req.vm, f.host, fitted=f.fitted, reason=f"host {f.host} {f.reason}")
    if not failures:
        return Placement(req.vm, None, reason="no candidate host")
    scope = f"cluster {req.cluster}" if req.cluster else "the candidate hosts"
    detail = "; ".join(f"{f.host}: {f.reason}" for f in failures)
    best = max(f.fitted for f in failures)
    return Placement(req.vm, None, fitted=best, reason=f"no host of {scope} has GPU capacity ({detail})")


def nvlink_hosts_for(inventory: Inventory, observed: Observed) -> set[str]:
    """Observed hosts where a VM with `nvlink: required` is or may be powered on.

    An existing VM is admitted on its current host (vgpuctl does not move VMs); a new VM on its named host,
    else on any host of its cluster.
    """
    hosts: set[str] = set()
    for vm in inventory.vms:
        if vm.nvlink != NvlinkRequirement.REQUIRED:
            continue
        current = [observed.vms[k] for k in observed.named(vm.name, folder_path(getattr(vm, "folder", None)))]
        if any(not c.is_template and c.host for c in current):
            hosts.update(c.host for c in current if not c.is_template and c.host)
        elif vm.host:
            hosts.add(vm.host)
        elif vm.cluster:
            hosts.update(observed.clusters.get(vm.cluster, []))
    return {h for h in hosts if h in observed.hosts}
