"""vSphere's limits on one VM, from vgpuctl/data/vm-limits.yaml (its sources: the file and docs/sources.md): the
virtual CPUs, the memory and its granularity, the virtual network adapters. Pure; the file is read once. Each
`*_problem` says why a value breaks a limit (None when it does not), in the words the inventory's errors use.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

from vgpuctl.datafiles import data_folder, load_yaml_data
from vgpuctl.lazyclass import dataclass


@dataclass(frozen=True)
class VmLimits:
    cpus: int
    memory_gb: int
    memory_multiple_mb: int
    network_adapters: int
    sources: dict[str, dict[str, str]]

    def cpus_problem(self, cpus: int) -> str | None:
        """Past the maximum (the schema's `ge=1` says so below 1)."""
        if cpus > self.cpus:
            return f"must be at most {self.cpus}, the most virtual CPUs vSphere gives one VM (got {cpus})"
        return None

    def memory_problem(self, gb: float) -> str | None:
        """A size in GB: finite, positive, at most the VM maximum, and a whole multiple of the memory granularity
        (checked in that order, so that an overflowing size is never multiplied out)."""
        multiple = self.memory_multiple_mb
        if not math.isfinite(gb) or gb <= 0:
            return f"must be a positive size in GB that is a whole multiple of {multiple} MB (got {gb})"
        if gb > self.memory_gb:
            return f"must be at most {self.memory_gb} GB, the most memory vSphere gives one VM (got {gb:g})"
        mb = gb * 1024
        if mb != int(mb) or int(mb) % multiple:
            return f"must be a positive size in GB that is a whole multiple of {multiple} MB (got {gb})"
        return None

    def adapters_problem(self, count: int) -> str | None:
        if count > self.network_adapters:
            return (f"{count} network adapters; vSphere gives one VM at most {self.network_adapters} (vmxnet3, PVRDMA "
                    "and SR-IOV adapters count, passthrough NICs do not)")
        return None


def limits_path() -> Path:
    return data_folder() / "vm-limits.yaml"


@cache
def vm_limits(path: Path | None = None) -> VmLimits:
    data = load_yaml_data(path or limits_path())
    vm = data["vm"]
    return VmLimits(
        cpus=int(vm["cpus"]["max"]),
        memory_gb=int(vm["memory_gb"]["max"]),
        memory_multiple_mb=int(vm["memory_multiple_mb"]["value"]),
        network_adapters=int(vm["network_adapters"]["max"]),
        sources=dict(data["sources"]),
    )
