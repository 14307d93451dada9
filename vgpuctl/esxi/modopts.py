"""The nvidia kernel module's option string: parse, format, and the settings vgpuctl keeps in it.

An option string is what `esxcli system module parameters set -m nvidia -p` writes and
QueryConfiguredModuleOptionString returns: `NAME=value` words, a value quoted when it holds spaces.
vgpuctl reads and changes two things in it, keeping every other option as it is:
- NVLink: `NVreg_NvLinkDisable=1` turns it off; without it NVLink is on.
- the time-sliced scheduler: the `RmPVMRL` entry of `NVreg_RegistryDwords` (`KEY=value;KEY=value`), whose
  value vgpuctl.esxi.rmpvmrl encodes and decodes. `NVreg_RegistryDwordsPerDevice` can set it per GPU.
Sources: docs/scheduler.md, docs/host-changes.md. Pure: no I/O.
"""

from __future__ import annotations

import shlex

from vgpuctl.domain import NvlinkState
from vgpuctl.errors import OutputFormatError
from vgpuctl.esxi import rmpvmrl
from vgpuctl.esxi.rmpvmrl import SchedulerState

NVLINK_DISABLE = "NVreg_NvLinkDisable"
REGISTRY_DWORDS = "NVreg_RegistryDwords"
REGISTRY_PER_DEVICE = "NVreg_RegistryDwordsPerDevice"
RMPVMRL = "RmPVMRL"

Options = dict[str, str]  # option name -> value, in the order of the string


def parse_module_options(options: str) -> Options:
    """A module option string ("A=1 B=x=y C=\"a;b\"") -> ordered name -> value (first '=' splits)."""
    out: Options = {}
    try:
        words = shlex.split(options)
    except ValueError as e:
        raise OutputFormatError(f"module options {options!r}: {e}") from None
    for word in words:
        name, sep, value = word.partition("=")
        if not sep or not name:
            raise OutputFormatError(f"module option {word!r} is not name=value")
        out[name] = value
    return out


def format_module_options(options: Options) -> str:
    """The inverse of parse_module_options; values with spaces or quotes are quoted."""
    parts = []
    for name, value in options.items():
        needs_quotes = value == "" or any(c in value for c in " \t\"'")
        parts.append(f'{name}="{value}"' if needs_quotes and '"' not in value else f"{name}={value}")
    return " ".join(parts)


def lenient(options: str | None) -> Options:
    """parse_module_options, or no options when the string cannot be parsed (what a reader makes of it)."""
    try:
        return parse_module_options(options or "")
    except OutputFormatError:
        return {}


def registry_entries(value: str) -> list[tuple[str, str]]:
    """`KEY=value;KEY=value` (an NVreg_RegistryDwords value) -> its entries in order."""
    out = []
    for item in value.split(";"):
        if item.strip():
            key, _, val = item.partition("=")
            out.append((key.strip(), val.strip()))
    return out


# ------------------------------------------------------------------------------------------ reading


def nvlink_of(options: str | None) -> NvlinkState:
    """NVLink as the option string leaves it: disabled only with NVreg_NvLinkDisable=1."""
    disabled = lenient(options).get(NVLINK_DISABLE, "").strip() == "1"
    return NvlinkState.DISABLED if disabled else NvlinkState.ENABLED


def rmpvmrl_of(options: str | None) -> str | None:
    """The host-wide RmPVMRL value in a module option string, or None."""
    return dict(registry_entries(lenient(options).get(REGISTRY_DWORDS, ""))).get(RMPVMRL)


def scheduler_of(options: str | None) -> SchedulerState:
    return rmpvmrl.decode(rmpvmrl_of(options))


def sets_rmpvmrl_per_device(options: str | None) -> bool:
    """NVreg_RegistryDwordsPerDevice sets RmPVMRL for some GPUs (it overrides the host-wide value there)."""
    return RMPVMRL in lenient(options).get(REGISTRY_PER_DEVICE, "")


# ------------------------------------------------------------------------------------------ changing


def set_nvlink(options: Options, state: NvlinkState | str) -> None:
    """NVLink enabled (NVreg_NvLinkDisable removed) or disabled (set to 1), in place."""
    if state == NvlinkState.DISABLED:
        options[NVLINK_DISABLE] = "1"
    elif state == NvlinkState.ENABLED:
        options.pop(NVLINK_DISABLE, None)
    else:
        raise ValueError(f"nvlink must be enabled or disabled (got {state!r})")


def set_rmpvmrl(options: Options, value: str | None) -> None:
    """The host-wide RmPVMRL entry set to `value` (None removes it: best effort), other entries kept, in place."""
    entries = [(k, v) for k, v in registry_entries(options.get(REGISTRY_DWORDS, "")) if k != RMPVMRL]
    if value is not None:
        entries.append((RMPVMRL, str(value)))
    if entries:
        options[REGISTRY_DWORDS] = ";".join(f"{k}={v}" for k, v in entries)
    else:
        options.pop(REGISTRY_DWORDS, None)


_KEEP = object()


def merge_module_options(current: str, *, nvlink: str | None = None, scheduler: object = _KEEP) -> str:
    """The option string with NVLink and/or the RmPVMRL value changed and everything else kept.

    nvlink: "enabled" | "disabled" | None (keep). scheduler: an RmPVMRL value, None to remove RmPVMRL (best
    effort), or omitted to keep it.
    """
    opts = parse_module_options(current or "")
    if nvlink is not None:
        set_nvlink(opts, nvlink)
    if scheduler is not _KEEP:
        set_rmpvmrl(opts, None if scheduler is None else str(scheduler))
    return format_module_options(opts)
