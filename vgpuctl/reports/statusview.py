"""`status` for people: a layout for the terminal's width, and plain lines when it is not a terminal.

- wide (a terminal of WIDE_COLUMNS or more): a hosts table, a GPU map per host, the VMs with vGPUs;
- narrow (less, e.g. 80 columns): fewer columns, host names without the domain they all share, PCI ids
  without the `0000:` domain they all share, so hosts and GPUs stay told apart; cells wrap, never cut;
- plain (a pipe or a file): one line per host, GPU and VM, nothing truncated, no table borders.
A GPU assignment vSphere does not report exactly (a VM mixing profiles) is marked `?` with a note. The VM
classes with vGPUs and their namespaces follow the VMs when a supervisor was read; warnings come last.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from vgpuctl.reports.base import whole

if TYPE_CHECKING:
    from vgpuctl.reports.base import VgpuCount
    from vgpuctl.reports.status import GpuVm, StatusGpu, StatusHost, StatusReport, StatusVmClass

WIDE_COLUMNS = 140
GUESS_MARK = "?"
GUESS_NOTE = (
    "? = GPU guessed: vSphere names the VMs on each GPU, not which of a VM's vGPUs; a VM mixing profiles is "
    "matched largest vGPU first"
)
NO_MANAGER = "no vGPU types offered: NVIDIA vGPU Manager missing?"


def render_status(report: StatusReport, width: int = 200, plain: bool = False) -> Any:
    """The status for a terminal `width` columns wide (rich renderables), or `plain` text lines."""
    if plain:
        return plain_status(report)
    return wide_status(report) if width >= WIDE_COLUMNS else narrow_status(report)


# ------------------------------------------------------------------------------------------ shared bits


def vgpu_summary(vgpus: Iterable[VgpuCount]) -> str:
    return ", ".join(f"{v.count} x {v.profile}" if v.count > 1 else v.profile for v in vgpus)


def held_by(vms: list[GpuVm], short_profile: bool = False) -> str:
    parts = []
    for v in vms:
        profile = v.profile.removeprefix("grid_") if short_profile else v.profile
        mark = GUESS_MARK if v.guessed else ""
        parts.append(f"{v.vm} ({profile}{mark})" if v.profile else v.vm)
    return ", ".join(parts) or "-"


def host_state(h: StatusHost) -> str:
    state = "maintenance" if h.in_maintenance else h.connection_state
    if h.held is not None:
        return f"{state}; {h.held.describe()}"
    return f"{state}; {NO_MANAGER}" if h.gpus and not h.vgpu_types else state


def nvlink_cell(g: StatusGpu) -> str:
    if g.nvlink_links:
        return f"{g.nvlink_active}/{g.nvlink_links} up"
    return "-" if g.nvlink_group is None else f"set {g.nvlink_group}"


def used(h: StatusHost) -> str:
    return f"{whole(sum(g.used_gb for g in h.gpus))}/{sum(g.fb_gb for g in h.gpus)}"


def common_suffix(names: list[str]) -> str:
    """The domain every host name shares (".gpu.example.com"), to leave out where columns are few."""
    domains = {n.split(".", 1)[1] if "." in n else "" for n in names}
    if len(domains) != 1 or not next(iter(domains)):
        return ""
    return "." + next(iter(domains))


def short_pci(pci_ids: list[str]) -> int:
    """How many leading characters all PCI ids share as their domain ("0000:"), to leave out."""
    domains = {p.split(":", 1)[0] for p in pci_ids}
    if len(domains) == 1 and all(p.count(":") == 2 for p in pci_ids):
        return len(next(iter(domains))) + 1
    return 0


def guessed(report: StatusReport) -> bool:
    return any(v.guessed for h in report.hosts for g in h.gpus for v in g.vms)


# ------------------------------------------------------------------------------------------ plain


def plain_status(report: StatusReport) -> str:
    """One line per host, GPU and VM with vGPUs; full names and ids, nothing cut."""
    lines = []
    for h in report.hosts:
        sched = h.scheduler or "-"
        nvlink = (h.nvlink or "-") + (f" ({h.nvlink_after_reboot} next boot)" if h.nvlink_after_reboot else "")
        lines.append(
            f"host {h.host}  cluster {h.cluster or '-'}  state {host_state(h)}  graphics {h.default_graphics_type}"
            f"/{h.assignment_policy}  nvlink {nvlink}  scheduler {sched}  gpus {len(h.gpus)}"
            f"  vgpus {sum(v.count for g in h.gpus for v in g.vgpus)}  used/total GB {used(h)}"
        )
        for g in h.gpus:
            mig = "" if g.mig_capable is False else f"  mig {g.mig or '-'}"  # a board without MIG: nothing to say
            lines.append(
                f"  gpu {g.index} {g.gpu} {g.model}  type {g.graphics_type}  mode {g.mode}{mig}"
                f"  nvlink {nvlink_cell(g)}  used/total GB {g.used_gb}/{g.fb_gb}  vms {held_by(g.vms)}"
            )
    with_vgpus = [v for v in report.vms if v.vgpus]
    for v in with_vgpus:
        lines.append(f"vm {v.vm}  host {v.host or '-'}  power {v.power_state}  vgpus {vgpu_summary(v.vgpus)}")
    if not with_vgpus:
        lines.append("No VM holds a vGPU.")
    others = len(report.vms) - len(with_vgpus)
    if others:
        lines.append(f"{others} VM(s) without vGPUs not listed (see --output json).")
    if guessed(report):
        lines.append(GUESS_NOTE)
    if report.supervisor_clusters:
        lines += [_class_line(c) for c in report.vm_classes] or [NO_GPU_CLASS]
    lines += [f"warning: {w}" for w in report.warnings]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ VM classes

NO_GPU_CLASS = "No VM class has vGPUs."


def _class_line(c: StatusVmClass) -> str:
    return (f"vm class {c.vm_class}  vgpus {vgpu_summary(c.vgpus)}  cpus {c.cpus}  memory MB {c.memory_mb}"
            f"  namespaces {', '.join(c.namespaces) or '-'}")


def _classes_table(report: StatusReport) -> list[Any]:
    """VM classes with vGPUs (when a supervisor was read) and the warnings, below the VMs."""
    from rich.text import Text

    out: list[Any] = []
    if report.supervisor_clusters:
        table = _table(f"VM classes with vGPUs (supervisor clusters: {', '.join(report.supervisor_clusters)})",
                       ("VM class", "vGPUs", "CPUs", "memory MB", "namespaces"))
        for c in report.vm_classes:
            used_by = ", ".join(c.namespaces) or "-"
            _row(table, c.vm_class, vgpu_summary(c.vgpus), str(c.cpus), str(c.memory_mb), used_by)
        out.append(table if report.vm_classes else Text(NO_GPU_CLASS))
    out += [Text(f"warning: {w}") for w in report.warnings]
    return out


# ------------------------------------------------------------------------------------------ tables


def _table(title: str, columns: Iterable[str], wrapping: Iterable[str] | None = None) -> Any:
    """A table whose cells fold, never cut; with `wrapping`, only those columns wrap and the others keep their
    width (the wide layout: a GPU row stays one line while it fits)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    keep = None if wrapping is None else set(wrapping)
    for col in columns:
        table.add_column(col, overflow="fold", no_wrap=keep is not None and col not in keep)
    return table


def _row(table: Any, *cells: str) -> None:
    from rich.text import Text

    table.add_row(*map(Text, cells))


def _vms_table(report: StatusReport, host_name: Any = str) -> list[Any]:
    from rich.text import Text

    with_vgpus = [v for v in report.vms if v.vgpus]
    table = _table("VMs with vGPUs", ("VM", "host", "power", "vGPUs"))
    for v in with_vgpus:
        _row(table, v.vm, host_name(v.host) if v.host else "-", v.power_state, vgpu_summary(v.vgpus))
    out: list[Any] = [table if with_vgpus else Text("No VM holds a vGPU.")]
    others = len(report.vms) - len(with_vgpus)
    if others:
        out.append(Text(f"{others} VM(s) without vGPUs not listed (see --output json)."))
    if guessed(report):
        out.append(Text(GUESS_NOTE))
    return out


def shows_mig(h: StatusHost) -> bool:
    """A MIG column only for hosts with a board that has MIG (or one the catalogue does not know)."""
    return any(g.mig_capable is not False for g in h.gpus)


def shared_model(h: StatusHost) -> str:
    return h.gpus[0].model if h.gpus and len({g.model for g in h.gpus}) == 1 else ""


def wide_status(report: StatusReport) -> list[Any]:
    hosts = _table(
        "Hosts",
        ("host", "cluster", "state", "graphics/policy", "NVLink", "scheduler", "GPUs", "vGPUs", "GB used"),
        wrapping=("state", "NVLink"),
    )
    for h in report.hosts:
        nvlink = (h.nvlink or "-") + (f" ({h.nvlink_after_reboot} next boot)" if h.nvlink_after_reboot else "")
        vgpus = str(sum(v.count for g in h.gpus for v in g.vgpus))
        _row(hosts, h.host, h.cluster or "-", host_state(h), f"{h.default_graphics_type}/{h.assignment_policy}",
             nvlink, h.scheduler or "-", str(len(h.gpus)), vgpus, used(h))  # fmt: skip
    out: list[Any] = [hosts]
    out += [_gpu_map(h) for h in report.hosts if h.gpus]
    return out + _vms_table(report) + _classes_table(report)


def _gpu_map(h: StatusHost) -> Any:
    """One host's GPUs, one line each while the terminal is wide enough: the model in the title when the GPUs
    share it, a MIG column only where a board has MIG; only the VMs column wraps."""
    model, mig = shared_model(h), shows_mig(h)
    columns = ["#", "PCI", *([] if model else ["model"]), "type", "mode", *(["MIG"] if mig else []), "NVLink",
               "GB used", "VMs (profile)"]  # fmt: skip
    gpus = _table(f"GPU map: {h.host}" + (f" ({model})" if model else ""), columns, wrapping=("VMs (profile)",))
    for g in h.gpus:
        cells = [str(g.index), g.gpu, *([] if model else [g.model]), g.graphics_type, g.mode]
        cells += [g.mig or ("n/a" if g.mig_capable is False else "-")] if mig else []
        _row(gpus, *cells, nvlink_cell(g), f"{g.used_gb}/{g.fb_gb}", held_by(g.vms))
    return gpus


def narrow_status(report: StatusReport) -> list[Any]:
    from rich.text import Text

    names = [h.host for h in report.hosts]
    suffix = common_suffix(names)

    def short(name: str) -> str:
        return name.removesuffix(suffix) if suffix else name

    title = "Hosts" + (f" (*{suffix})" if suffix else "")
    hosts = _table(title, ("host", "state", "NVLink", "sched", "GPUs", "vGPUs", "GB used"))
    for h in report.hosts:
        vgpus = str(sum(v.count for g in h.gpus for v in g.vgpus))
        _row(hosts, short(h.host), host_state(h), h.nvlink or "-", h.scheduler or "-", str(len(h.gpus)), vgpus,
             used(h))  # fmt: skip
    out: list[Any] = [hosts]
    for h in report.hosts:
        if not h.gpus:
            continue
        cut = short_pci([g.gpu for g in h.gpus])
        model = h.gpus[0].model if len({g.model for g in h.gpus}) == 1 else ""
        gpus = _table(f"GPU map: {short(h.host)}" + (f" ({model})" if model else ""),
                      ("#", "PCI", "mode", "NVLink", "GB used", "VMs (profile)"))  # fmt: skip
        for g in h.gpus:
            mode = g.mode.replace("time-sliced", "ts").replace("(sameSize)", "same").replace("(mixedSize)", "mixed")
            _row(gpus, str(g.index), g.gpu[cut:], mode, nvlink_cell(g), f"{g.used_gb}/{g.fb_gb}",
                 held_by(g.vms, short_profile=True))  # fmt: skip
        out.append(gpus)
    if report.hosts and not any(h.gpus for h in report.hosts):
        out.append(Text("No host has a GPU."))
    return out + _vms_table(report, short) + _classes_table(report)
