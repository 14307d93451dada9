"""The ESXi shell's software commands and their parsers: a depot's components, installing from a depot, and the
running vGPUs with the guest driver each VM reports.

- `esxcli software sources component list -d DEPOT` and `esxcli software component apply -d DEPOT -n NAME` (or
  `esxcli software vib install -d DEPOT`): DEPOT is "the full remote URL to the index.xml file of the online depot
  or the local absolute datastore path to an offline bundle .zip file" (VMware, ESXCLI Concepts and Examples 8.0,
  "Manage Base Images and Add-Ons with ESXCLI"). An install prints esxcli's result block (Installed, Removed,
  Message, Reboot Required).
- `nvidia-smi vgpu -q` on the host: per GPU its active vGPUs with "VM Name" and "Guest Driver Version", the
  version NVML's nvmlVgpuInstanceGetVmDriverVersion reports ("Not Available" while no driver is loaded in the
  guest; NVML API Reference, vGPU Management).
tests/fixtures/nvidia-smi/cases.json holds the outputs each parser is checked against.
"""

from __future__ import annotations

import re
import shlex

from vgpuctl.esxi.parsers import OutputFormatError, esxcli_table, text_lines
from vgpuctl.lazyclass import dataclass

VGPU_QUERY = "nvidia-smi vgpu -q"
_NOT_REPORTED = {"", "not available", "n/a", "na"}


@dataclass(frozen=True)
class DepotComponent:
    """One component of a depot: `NVD-AIE-800`, `580.65.05-1OEM.800.1.0.20613240`, `NVIDIA`."""

    name: str
    version: str
    vendor: str


@dataclass(frozen=True)
class InstallResult:
    installed: tuple[str, ...]
    removed: tuple[str, ...]
    reboot_required: bool
    message: str


@dataclass(frozen=True)
class VgpuGuest:
    """A running vGPU on the host and the guest driver its VM reports (None: none reported)."""

    bus_id: str
    vm: str
    vgpu: str
    guest_driver: str | None


def component_list(depot: str) -> str:
    return shlex.join(["esxcli", "software", "sources", "component", "list", "-d", depot])


def component_apply(depot: str, component: str | None = None) -> str:
    named = ["-n", component] if component else []
    return shlex.join(["esxcli", "software", "component", "apply", "-d", depot, *named])


def vib_install(depot: str) -> str:
    return shlex.join(["esxcli", "software", "vib", "install", "-d", depot])


def parse_component_list(text: str) -> list[DepotComponent]:
    """`esxcli software sources component list -d DEPOT`: its table's Name, Version and Vendor."""
    rows = esxcli_table(text)
    try:
        return [DepotComponent(r["Name"], r["Version"], r["Vendor"]) for r in rows]
    except KeyError as e:
        raise OutputFormatError(f"esxcli software sources component list: missing column {e}") from None


def parse_install_result(text: str) -> InstallResult:
    """The result block of `esxcli software component apply` / `vib install`."""
    fields: dict[str, str] = {}
    for line in text_lines(text):
        key, sep, value = line.strip().partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if "Reboot Required" not in fields:
        raise OutputFormatError("esxcli install: no 'Reboot Required' in its result")

    def items(suffix: str) -> tuple[str, ...]:
        value = next((v for k, v in fields.items() if k.endswith(suffix)), "")
        return tuple(x.strip() for x in value.split(",") if x.strip())

    return InstallResult(items("Installed"), items("Removed"), fields["Reboot Required"].lower() == "true",
                         fields.get("Message", ""))


_GPU = re.compile(r"^GPU\s+(\S+)\s*$")


def parse_vgpu_query(text: str) -> list[VgpuGuest]:
    """`nvidia-smi vgpu -q`: each active vGPU's GPU, VM name, vGPU name and guest driver version."""
    out: list[VgpuGuest] = []
    bus, current = "", dict[str, str]()

    def flush() -> None:
        if current.get("VM Name"):
            driver = current.get("Guest Driver Version", "")
            out.append(VgpuGuest(bus, current["VM Name"], current.get("vGPU Name", ""),
                                 None if driver.lower() in _NOT_REPORTED else driver))

    for line in text_lines(text):
        if (m := _GPU.match(line.strip())) is not None:
            flush()
            bus, current = m.group(1), {}
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "vGPU ID":
            flush()
            current = {}
        current[key] = value.strip()
    flush()
    if text.strip() and not bus:
        raise OutputFormatError("nvidia-smi vgpu -q: no GPU section")
    return out


def guest_drivers(text: str) -> dict[str, str | None]:
    """VM name -> the guest driver it reports, from `nvidia-smi vgpu -q` (one VM may hold several vGPUs)."""
    out: dict[str, str | None] = {}
    for v in parse_vgpu_query(text):
        out[v.vm] = out.get(v.vm) or v.guest_driver
    return out
