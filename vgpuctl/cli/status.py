"""status and profiles: what the farm has, read in one bulk observe pass."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.errors import NotFound

if TYPE_CHECKING:
    from vgpuctl.model import Observed, ObservedGpu, ObservedHost

KB_PER_GB = 1024 * 1024

OptionalInventory = Annotated[
    Path | None,
    typer.Option(
        "--file", "-f", help="Take vCenter settings (URL, datacenter, TLS) from this inventory.", dir_okay=False
    ),
]


def register(app: typer.Typer) -> None:
    app.command("status")(status_cmd)
    app.command("profiles")(profiles_cmd)


def _observe(opts: GlobalOptions, file: Path | None, *, nvlink: bool = False, also: Any = None) -> tuple[Observed, int]:
    """One bulk observe; with `nvlink`, also each GPU host's NVLink sets (one QueryConfigTarget per host)."""
    from vgpuctl import pipeline

    inventory = pipeline.load(file) if file else None
    with common.connect(opts, inventory) as session:
        observed = pipeline.observe(session, common.datacenter_for(opts, inventory), inventory, all_nvlink=nvlink)
        if also is not None:  # more reads in the same session (host facts for status)
            also(session, observed, inventory)
        return observed, session.round_trips


# ------------------------------------------------------------------------------------------ status


ShellOpt = Annotated[
    bool | None,
    typer.Option(
        "--shell/--no-shell",
        help="Read MIG pending and NVLink links over SSH from every host (default: when VGPUCTL_ESXI_* "
        "or the inventory's hosts configure SSH).",
    ),
]


def _host_rows(session: Any, observed: Observed, inventory: Any, shell: bool | None) -> dict[str, Any]:
    """Per host MIG current/pending, NVLink links, scheduler (over SSH when configured)."""
    from vgpuctl import hoststatus
    from vgpuctl.hosttargets import specs_by_host

    specs = specs_by_host(inventory, observed)
    use_shell = hoststatus.shell_configured(specs) if shell is None else shell
    return hoststatus.collect_host_status(session, observed, specs, shell=use_shell)


def status_cmd(ctx: typer.Context, file: OptionalInventory = None, shell: ShellOpt = None) -> None:
    """Hosts, GPUs (model, mode, NVLink, used/free), a GPU map per host, and the VMs' vGPUs."""
    opts: GlobalOptions = ctx.obj
    from vgpuctl.hoststatus import merge_status

    rows: dict[str, Any] = {}
    observed, round_trips = _observe(
        opts, file, nvlink=True, also=lambda s, o, inv: rows.update(_host_rows(s, o, inv, shell))
    )
    doc = merge_status(status_document(observed), rows)
    doc["round_trips"] = round_trips
    common.emit(doc, render_status, opts)


def gpu_gb(gpu: ObservedGpu) -> int:
    return round(gpu.memory_kb / KB_PER_GB)


def gpu_mode(gpu: ObservedGpu) -> str:
    if gpu.vgpu_mode == "multiInstanceGpu":
        return "mig"
    if gpu.vgpu_mode in ("sameSize", "mixedSize"):
        return f"time-sliced ({gpu.vgpu_mode})"
    return "time-sliced"


def profile_fb(name: str, host: ObservedHost | None) -> int:
    from vgpuctl.profiles import ProfileError, parse_profile

    if host is not None and name in host.profiles:
        return host.profiles[name].fb_gb
    try:
        return parse_profile(name).fb_gb
    except ProfileError:
        return 0


def gpu_occupancy(observed: Observed, host: ObservedHost) -> dict[str, list[tuple[str, str]]]:
    """(vm, profile) per GPU pci id. graphicsInfo says which VMs sit on a GPU, not which of a VM's vGPUs:
    each vGPU of a VM is on its own GPU, so a VM's vGPUs (largest first) are matched to its GPUs in PCI order,
    which is exact whenever a VM's vGPUs share one profile."""
    by_vm: dict[str, list[str]] = {}
    for gpu in sorted(host.gpus, key=lambda g: g.pci_id):
        for vm in gpu.vms:
            by_vm.setdefault(vm, []).append(gpu.pci_id)
    occupancy: dict[str, list[tuple[str, str]]] = {g.pci_id: [] for g in host.gpus}
    for vm_name, pci_ids in by_vm.items():
        vm = observed.vms.get(vm_name)
        profiles = sorted((d.profile for d in vm.vgpus), key=lambda p: -profile_fb(p, host)) if vm else []
        for i, pci in enumerate(pci_ids):
            occupancy[pci].append((vm_name, profiles[i] if i < len(profiles) else ""))
    return occupancy


def status_document(observed: Observed) -> dict[str, Any]:
    hosts = []
    for host in sorted(observed.hosts.values(), key=lambda h: h.name):
        occupancy = gpu_occupancy(observed, host)
        gpus = []
        for index, gpu in enumerate(sorted(host.gpus, key=lambda g: g.pci_id)):
            held = occupancy.get(gpu.pci_id, [])
            used_gb = sum(profile_fb(p, host) for _, p in held)
            gpus.append(
                {
                    "index": index,
                    "pci_id": gpu.pci_id,
                    "model": gpu.device_name,
                    "graphics_type": gpu.graphics_type,
                    "vgpu_mode": gpu.vgpu_mode,
                    "mode": gpu_mode(gpu),
                    "nvlink_set": gpu.nvlink_set,
                    "memory_gb": gpu_gb(gpu),
                    "vgpus": len(held),
                    "used_gb": used_gb,
                    "free_gb": max(gpu_gb(gpu) - used_gb, 0),
                    "vms": [{"vm": vm, "profile": p} for vm, p in held],
                }
            )
        hosts.append(
            {
                "name": host.name,
                "cluster": host.cluster,
                "connection_state": host.connection_state,
                "in_maintenance": host.in_maintenance,
                "power_state": host.power_state,
                "default_graphics_type": host.default_graphics_type,
                "assignment_policy": host.assignment_policy,
                "gpus": gpus,
            }
        )
    vms = [
        {
            "name": vm.name,
            "host": vm.host,
            "cluster": vm.cluster,
            "power_state": str(vm.power_state),
            "vgpus": [d.profile for d in vm.vgpus],
        }
        for vm in sorted(observed.vms.values(), key=lambda v: v.name)
        if not vm.is_template
    ]
    return {"datacenter": observed.datacenter, "api_version": observed.api_version, "hosts": hosts, "vms": vms}


def _host_state(host: dict[str, Any]) -> str:
    if host["in_maintenance"]:
        return "maintenance"
    return host["connection_state"]


def _vgpu_summary(profiles: list[str]) -> str:
    counts: dict[str, int] = {}
    for p in profiles:
        counts[p] = counts.get(p, 0) + 1
    return ", ".join(f"{n} x {p}" if n > 1 else p for p, n in counts.items())


def render_status(doc: dict[str, Any]) -> list[Any]:
    from rich.table import Table
    from rich.text import Text

    out: list[Any] = []
    hosts = Table(title="Hosts", title_justify="left")
    for col in (
        "host",
        "cluster",
        "state",
        "graphics",
        "policy",
        "NVLink",
        "scheduler",
        "GPUs",
        "vGPUs",
        "used/total GB",
    ):
        hosts.add_column(col)
    for h in doc["hosts"]:
        used = sum(g["used_gb"] for g in h["gpus"])
        total = sum(g["memory_gb"] for g in h["gpus"])
        hosts.add_row(
            *map(
                Text,
                (
                    h["name"],
                    h["cluster"] or "-",
                    _host_state(h),
                    h["default_graphics_type"],
                    h["assignment_policy"],
                    h.get("nvlink", "-")
                    + (f" ({h['nvlink_after_reboot']} next boot)" if "nvlink_after_reboot" in h else ""),
                    h.get("scheduler", "-"),
                    str(len(h["gpus"])),
                    str(sum(g["vgpus"] for g in h["gpus"])),
                    f"{used}/{total}",
                ),
            )
        )
    out.append(hosts)
    for h in doc["hosts"]:
        if not h["gpus"]:
            continue
        gpus = Table(title=f"GPU map: {h['name']}", title_justify="left")
        for col in ("#", "PCI", "model", "type", "mode", "MIG", "NVLink", "used GB", "free GB", "VMs (profile)"):
            gpus.add_column(col)
        for g in h["gpus"]:
            held = ", ".join(f"{v['vm']} ({v['profile']})" if v["profile"] else v["vm"] for v in g["vms"])
            nvlink = "-" if g["nvlink_set"] is None else f"set {g['nvlink_set']}"
            if g.get("nvlink_links"):
                nvlink = f"{g['nvlink_active']}/{g['nvlink_links']} up"
            row = (
                str(g["index"]),
                g["pci_id"],
                g["model"],
                g["graphics_type"],
                g["mode"],
                g.get("mig", "-"),
                nvlink,
                f"{g['used_gb']}/{g['memory_gb']}",
                str(g["free_gb"]),
                held or "-",
            )
            gpus.add_row(*map(Text, row))
        out.append(gpus)
    with_vgpus = [v for v in doc["vms"] if v["vgpus"]]
    vms = Table(title="VMs with vGPUs", title_justify="left")
    for col in ("VM", "host", "power", "vGPUs"):
        vms.add_column(col)
    for v in with_vgpus:
        vms.add_row(*map(Text, (v["name"], v["host"] or "-", v["power_state"], _vgpu_summary(v["vgpus"]))))
    out.append(vms if with_vgpus else Text("No VM holds a vGPU."))
    others = len(doc["vms"]) - len(with_vgpus)
    if others:
        out.append(Text(f"{others} VM(s) without vGPUs not listed (see --output json)."))
    return out


# ---------------------------------------------------------------------------------------- profiles


def profiles_cmd(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option("--host", "-H", help="Only this host.")] = None,
    file: OptionalInventory = None,
) -> None:
    """vGPU profiles the hosts offer: framebuffer, series, sharing (time-sliced or MIG), max per GPU."""
    opts: GlobalOptions = ctx.obj
    observed, round_trips = _observe(opts, file)
    if host is not None and host not in observed.hosts:
        raise NotFound(f"host {host!r} not found (known: {_names(observed.hosts)})")
    hosts = [observed.hosts[host]] if host else sorted(observed.hosts.values(), key=lambda h: h.name)
    doc = {"hosts": [{"name": h.name, "profiles": host_profiles(h)} for h in hosts], "round_trips": round_trips}
    common.emit(doc, render_profiles, opts)


def _names(items: dict[str, Any], limit: int = 8) -> str:
    names = sorted(items)
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more if names else "none"


def max_per_gpu(profile: Any, sharing: str, host: ObservedHost) -> int | None:
    """How many vGPUs of this profile one GPU of the host can hold (MIG: placements of its GI profile)."""
    from vgpuctl.profiles import board_for_device, gi_geometry

    boards = {board_for_device(g.device_name, gpu_gb(g)): g for g in host.gpus}
    gpu = boards.get(profile.board)
    if sharing == "mig" or profile.is_mig:
        geometry = gi_geometry(profile.board, profile.gi_profile or "")
        return len(geometry.starts) if geometry else None
    if gpu is None or not profile.fb_gb:
        return None
    return gpu_gb(gpu) // profile.fb_gb


def host_profiles(host: ObservedHost) -> list[dict[str, Any]]:
    from vgpuctl.profiles import ProfileError, parse_profile

    rows = []
    for name in sorted(host.offered_profiles):  # what the GPUs offer in their current modes
        info = host.profiles.get(name)
        try:
            parsed = parse_profile(name)
        except ProfileError:
            parsed = None
        sharing = info.sharing if info else ("mig" if parsed and parsed.is_mig else "timeSliced")
        rows.append(
            {
                "name": name,
                "fb_gb": info.fb_gb if info else (parsed.fb_gb if parsed else None),
                "series": parsed.series.upper() if parsed else None,
                "board": parsed.board if parsed else None,
                "sharing": sharing,
                "class": info.profile_class if info else None,
                "max_per_gpu": max_per_gpu(parsed, sharing, host) if parsed else None,
            }
        )
    return rows


def render_profiles(doc: dict[str, Any]) -> list[Any]:
    """One table per distinct set of profiles, titled with the hosts that offer it (64 equal hosts: one table)."""
    from rich.table import Table
    from rich.text import Text

    groups: dict[str, tuple[list[str], list[dict[str, Any]]]] = {}
    for h in doc["hosts"]:
        key = repr(h["profiles"])
        groups.setdefault(key, ([], h["profiles"]))[0].append(h["name"])
    out: list[Any] = []
    for names, rows in groups.values():
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        table = Table(title=f"Profiles on {shown}", title_justify="left")
        for col in ("profile", "framebuffer", "series", "sharing", "max per GPU"):
            table.add_column(col)
        for r in rows:
            table.add_row(
                *map(
                    Text,
                    (
                        r["name"],
                        f"{r['fb_gb']} GB" if r["fb_gb"] is not None else "?",
                        r["series"] or "?",
                        "MIG" if r["sharing"] == "mig" else "time-sliced",
                        str(r["max_per_gpu"]) if r["max_per_gpu"] is not None else "?",
                    ),
                )
            )
        out.append(table if rows else Text(f"{shown}: no vGPU profiles offered"))
    return out
