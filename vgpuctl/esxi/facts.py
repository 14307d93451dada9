"""ESXi shell facts: each one a command and the parser of its output, kept together.

`GPU_MODES.gather(run)` runs the command through `run` (command line -> stdout) and parses what it prints.
tests/fixtures/nvidia-smi/cases.json holds real and simulated outputs with the command that printed them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Generic, TypeVar

from vgpuctl.esxi import commands, parsers
from vgpuctl.lazyclass import dataclass

T = TypeVar("T", covariant=True)
Runner = Callable[[str], str]  # runs one command line on the host, returns its stdout


@dataclass(frozen=True)
class Fact(Generic[T]):
    """One thing read from the host's shell: the command that prints it and the parser of that output."""

    name: str
    command: str
    parse: Callable[[str], T]

    def gather(self, run: Runner) -> T:
        return self.parse(run(self.command))


GPU_LIST = Fact("gpu_list", commands.list_gpus(), parsers.parse_list)
GPU_QUERY = Fact("gpu_query", commands.query(), parsers.parse_query)
GPU_MODES = Fact(  # index, bus id, name, memory, MIG mode current and pending per GPU
    "gpu_modes",
    commands.query_gpu(parsers.DEFAULT_QUERY_FIELDS, header=False, units=False),
    partial(parsers.parse_gpu_modes, fields=parsers.DEFAULT_QUERY_FIELDS),
)
# The host settings read the next three (vgpuctl.settings.facts); their values are plain data, kept as JSON.
MIG_PROFILES = Fact("mig_profiles", commands.list_gpu_instance_profiles(), parsers.parse_lgip)
MIG_PLACEMENTS = Fact("mig_placements", commands.list_gpu_instance_placements(), parsers.parse_lgipp)
MIG_INSTANCES = Fact("mig_instances", commands.list_gpu_instances(), parsers.parse_lgi)  # in use, with placements
NVLINK_STATUS = Fact("nvlink_status", commands.nvlink_status(), parsers.parse_nvlink_status)
TOPOLOGY = Fact("topology", commands.topology(), parsers.parse_topo_nvlinks)  # NVLink-connected pairs
MODULE_PARAMETERS = Fact(  # the names the nvidia module declares
    "module_parameters", commands.module_parameters_list("nvidia"), parsers.parse_module_parameter_names
)
VIBS = Fact("vibs", commands.vib_list(), parsers.parse_vib_list)  # the vGPU Manager's version (preflight)
# what the driver runs on each GPU at once: time-sliced vGPUs of different types, of different sizes (placement)
VGPU_CAPABILITIES = Fact("vgpu_capabilities", commands.query(), parsers.parse_vgpu_capabilities)

FACTS: dict[str, Fact[object]] = {
    f.name: f
    for f in (GPU_LIST, GPU_QUERY, GPU_MODES, MIG_PROFILES, MIG_PLACEMENTS, MIG_INSTANCES, NVLINK_STATUS, TOPOLOGY,
              MODULE_PARAMETERS, VIBS, VGPU_CAPABILITIES)
}
