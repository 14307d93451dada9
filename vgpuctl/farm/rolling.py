"""The farm through a rolling window of host changes: at each step some hosts leave service and their running VMs
are placed on the rest of their cluster as it is at that moment, with the VMs earlier steps moved there. Pure.

    rolling = Rolling(observed)
    rolling.begin({"esx-01"})                    # esx-01 leaves service
    placed = rolling.place(vm, rolling.others("esx-01"))
    rolling.end()                                # the moves of this step are where the VMs are from now on

The placement is vgpuctl.farm.state's (the host's GPUs, profiles, free framebuffer, NVLink sets, NICs), on the
GPUs as observe read them with the moves so far.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import replace

from vgpuctl.farm.placement import Placement
from vgpuctl.farm.state import FarmState, Request, farm_from_observed, place_farm
from vgpuctl.model import Observed, ObservedVm

FREE_PROBE_LIMIT = 64  # counting free room for a profile stops here


class Rolling:
    """The farm's VMs and GPUs step after step of a rolling window."""

    def __init__(self, observed: Observed):
        self.now = copy.deepcopy(observed)
        self.leaving: set[str] = set()
        self.state: FarmState = farm_from_observed(self.now)
        self._moves: dict[str, str] = {}

    def begin(self, leaving: Iterable[str]) -> None:
        """A step: these hosts leave service; the GPUs are the farm's with every move so far."""
        self.leaving = set(leaving)
        self.state = farm_from_observed(self.now)
        self._moves = {}

    def others(self, host: str) -> list[str]:
        """The hosts of the host's cluster VMs can go to now: usable, not leaving, by name."""
        cluster = self.now.hosts[host].cluster or ""
        return [h for h in self.now.clusters.get(cluster, []) if h not in self.leaving and self.now.host_usable(h)]

    def place(self, vm: ObservedVm, hosts: list[str]) -> Placement:
        """Place a running VM's vGPUs on the first of `hosts` where they fit now (committed to this step)."""
        profiles = [d.profile for d in vm.vgpus]
        grouped = any(d.device_group_key is not None for d in vm.vgpus)
        placed = place_farm(self.state, [Request(vm.name, profiles, hosts, grouped, vm.cluster)])[vm.name]
        if placed.ok and placed.host is not None:
            self._moves[vm.name] = placed.host
        return placed

    def moved(self, vm: str, host: str) -> None:
        """A VM without vGPUs moved to `host` in this step."""
        self._moves[vm] = host

    def free(self, profile: str, hosts: list[str]) -> int:
        """How many more vGPUs of a profile the hosts could take now (each a VM of its own)."""
        probe = copy.deepcopy(self.state)
        n = 0
        while n < FREE_PROBE_LIMIT:
            placed = place_farm(probe, [Request(f"probe-{n}", [profile], hosts)])
            if not placed[f"probe-{n}"].ok:
                break
            n += 1
        return n

    def end(self) -> dict[str, str]:
        """The step is over: the VMs it moved are on their new hosts from now on. Returns VM -> its new host."""
        for name, dest in self._moves.items():
            vm = self.now.vms.get(name)
            if vm is None or vm.host is None:
                continue
            source = self.now.hosts.get(vm.host)
            if source is not None:
                for gpu in source.gpus:
                    gpu.vms = [v for v in gpu.vms if v != name]
            self.now.vms[name] = replace(vm, host=dest, cluster=self.now.hosts[dest].cluster)
        moves, self._moves = self._moves, {}
        return moves
