"""`capacity --drain HOST...`: whether hosts can be emptied for maintenance, `max_unavailable` at a time in the
order given, without an inventory change. Pure.

The same proof a driver upgrade window makes before it starts (vgpuctl.hosts.window): each step's hosts leave
service, and every running VM on them is placed on the rest of its cluster as it is at that moment, with the VMs
earlier steps moved there and the hosts earlier steps emptied back in service (vgpuctl.farm.rolling: the hosts'
GPUs, offered profiles, free framebuffer, NVLink sets, NICs). A VM with vGPUs moves only where vCenter allows
vMotion of running vGPU VMs; one with an SR-IOV adapter or a DirectPath I/O device does not move at all.
Powered-off VMs stay registered where they are (maintenance mode does not need them gone).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field

from vgpuctl.farm.rolling import Rolling
from vgpuctl.hosts.evacuation import RollingMigration, running, vms_on
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import Observed


@dataclass(frozen=True)
class DrainMove:
    """A running VM of a host leaving service: where it goes (None: nowhere, and why)."""

    vm: str
    host: str
    profiles: tuple[str, ...]
    to: str | None
    why: str = ""


@dataclass
class DrainStep:
    """Hosts that leave service together, their running VMs' moves, and hosts of the step left out (and why)."""

    hosts: list[str]
    moves: list[DrainMove] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def stuck(self) -> list[DrainMove]:
        return [m for m in self.moves if m.to is None]


@dataclass
class DrainAnswer:
    steps: list[DrainStep]
    vgpu_migration: bool

    @property
    def ok(self) -> bool:
        return not any(s.stuck for s in self.steps)


def drain(observed: Observed, hosts: Sequence[str], max_unavailable: int = 1, vgpu_migration: bool = False
          ) -> DrainAnswer:
    """Each step of `max_unavailable` hosts (in the order given) emptied onto the rest of their clusters: hosts
    emptied before first, then hosts not to be emptied, hosts of later steps last. A host already in maintenance
    mode or not connected is left out of its step, said why."""
    rolling = Rolling(observed)
    steps: list[DrainStep] = []
    done: set[str] = set()
    for i in range(0, len(hosts), max(max_unavailable, 1)):
        batch = list(hosts[i:i + max(max_unavailable, 1)])
        step = DrainStep(batch)
        leaving = []
        for name in batch:
            host = rolling.now.hosts[name]
            if host.in_maintenance:
                step.skipped[name] = "already in maintenance mode"
            elif not rolling.now.host_usable(name):
                step.skipped[name] = f"not in service ({host.connection_state})"
            else:
                leaving.append(name)
        rolling.begin(leaving)
        migration = RollingMigration(rolling, leaving, vgpu_migration, first=done, later=hosts[i:])
        for name in leaving:
            for vm in vms_on(rolling.now, name):
                if not running(vm):
                    continue
                dest, why = migration.target(vm, rolling.now.hosts[name])
                if dest is not None and not vm.vgpus:
                    rolling.moved(vm.name, dest)
                step.moves.append(DrainMove(vm.name, name, tuple(d.profile for d in vm.vgpus), dest, why))
        rolling.end()
        done |= set(leaving)
        steps.append(step)
    return DrainAnswer(steps, vgpu_migration)
