"""Command lines vgpuctl runs in the ESXi shell (nvidia-smi, esxcli), built with proper quoting.

GPUs are selected by nvidia-smi index or PCI bus id (both accepted by `-i`).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from vgpuctl.esxi.parsers import DEFAULT_QUERY_FIELDS

GpuId = int | str


def _gpu_arg(gpu: GpuId | Sequence[GpuId] | None) -> list[str]:
    if gpu is None:
        return []
    ids = [gpu] if isinstance(gpu, int | str) else list(gpu)
    if not ids:
        raise ValueError("empty GPU selection")
    return ["-i", ",".join(str(g) for g in ids)]


def _join(args: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


def list_gpus() -> str:
    return "nvidia-smi -L"


def query(gpu: GpuId | Sequence[GpuId] | None = None) -> str:
    return _join(["nvidia-smi", "-q", *_gpu_arg(gpu)])


def query_gpu(
    fields: Sequence[str] = DEFAULT_QUERY_FIELDS,
    gpu: GpuId | Sequence[GpuId] | None = None,
    header: bool = True,
    units: bool = True,
) -> str:
    fmt = ["csv"] + ([] if header else ["noheader"]) + ([] if units else ["nounits"])
    return _join(["nvidia-smi", f"--query-gpu={','.join(fields)}", f"--format={','.join(fmt)}", *_gpu_arg(gpu)])


def set_mig_mode(gpu: GpuId, enable: bool) -> str:
    return _join(["nvidia-smi", *_gpu_arg(gpu), "-mig", "1" if enable else "0"])


def list_gpu_instance_profiles(gpu: GpuId | None = None) -> str:
    return _join(["nvidia-smi", "mig", "-lgip", *_gpu_arg(gpu)])


def list_gpu_instances(gpu: GpuId | None = None) -> str:
    """`nvidia-smi mig -lgi [-i N]`: the GPU instances in use and their placements."""
    return _join(["nvidia-smi", "mig", "-lgi", *_gpu_arg(gpu)])


def list_gpu_instance_placements(gpu: GpuId | None = None) -> str:
    return _join(["nvidia-smi", "mig", "-lgipp", *_gpu_arg(gpu)])


def nvlink_status(gpu: GpuId | None = None) -> str:
    return _join(["nvidia-smi", "nvlink", "-s", *_gpu_arg(gpu)])


def topology() -> str:
    return "nvidia-smi topo -m"


def vib_list() -> str:
    """The installed VIBs, NVIDIA's vGPU Manager among them."""
    return _join(["esxcli", "software", "vib", "list"])


def module_parameters_list(module: str = "nvidia") -> str:
    return _join(["esxcli", "system", "module", "parameters", "list", "-m", module])


def module_parameters_set(options: str, module: str = "nvidia") -> str:
    """Replaces the module's whole option string (read, merge, then write)."""
    return _join(["esxcli", "system", "module", "parameters", "set", "-m", module, "-p", options])
