"""Host GPU state rows for `host show` and `status`: per GPU MIG current/pending and NVLink links, per host
scheduler and NVLink, from the vSphere API and (when SSH is set up) the ESXi shell.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from vgpuctl import hostplan
from vgpuctl.errors import VgpuctlError
from vgpuctl.hostfacts import HostFacts, api_facts, gather_host_facts, open_shell, shell_runner
from vgpuctl.inventory import HostSpec
from vgpuctl.model import Observed, ObservedHost


def host_status(host: ObservedHost, facts: HostFacts | None) -> dict[str, Any]:
    """One host's GPU state for `host show` and `status`: per GPU MIG current/pending, NVLink, scheduler."""
    configured = (
        facts.options_configured if facts is not None and facts.options_configured is not None else host.module_options
    )
    effective = facts.options_effective if facts is not None and facts.options_effective is not None else configured
    out: dict[str, Any] = {
        "host": host.name,
        "connection_state": host.connection_state,
        "in_maintenance": host.in_maintenance,
        "default_graphics_type": host.default_graphics_type,
        "assignment_policy": host.assignment_policy,
        "module_options": {"configured": configured, "effective": effective},
        "nvlink": hostplan.nvlink_of(effective),
        "scheduler": str(hostplan.scheduler_of(effective)),
        "gpus": [],
    }
    if hostplan.nvlink_of(configured) != out["nvlink"]:
        out["nvlink_after_reboot"] = hostplan.nvlink_of(configured)
    if str(hostplan.scheduler_of(configured)) != out["scheduler"]:
        out["scheduler_after_reboot"] = str(hostplan.scheduler_of(configured))
    if facts is not None and facts.options_configured is None and facts.warnings:  # the host could not say
        out["nvlink"] = out["scheduler"] = "unknown"
        out.pop("nvlink_after_reboot", None)
        out.pop("scheduler_after_reboot", None)
    for g in host.gpus:
        gf = facts.gpus.get(g.pci_id.lower()) if facts is not None else None
        row: dict[str, Any] = {
            "pci_id": g.pci_id,
            "device": g.device_name,
            "graphics_type": g.graphics_type,
            "vgpu_mode": g.vgpu_mode,
            "mig_current": gf.mig_current if gf is not None and facts is not None and facts.shell else None,
            "mig_pending": gf.mig_pending if gf is not None and facts is not None and facts.shell else None,
            "nvlink_links": gf.nvlink_links if gf is not None else None,
            "nvlink_active": gf.nvlink_active if gf is not None else None,
            "nvlink_peers": list(gf.nvlink_peers) if gf is not None else [],
            "vms": list(g.vms),
        }
        out["gpus"].append(row)
    return out


def collect_host_status(
    session: Any, observed: Observed, specs: dict[str, HostSpec] | None = None, *, shell: bool = True
) -> dict[str, dict[str, Any]]:
    """host_status of every connected host for `vgpuctl status`: API facts always, shell facts (MIG pending,
    NVLink links) when `shell`; a host whose SSH fails gets "shell_error" instead of failing the command."""
    specs = specs or {}

    def one(name: str) -> dict[str, Any]:
        host = observed.hosts[name]
        error = None
        try:
            if shell:
                with open_shell(name, specs.get(name)) as sh:
                    facts = gather_host_facts(session, host.moid, name, shell_runner(sh))
            else:
                facts = api_facts(session, host.moid, name)
        except VgpuctlError as err:
            error = str(err)
            facts = api_facts(session, host.moid, name)
        doc = host_status(host, facts)
        if error is not None:
            doc["shell_error"] = error
        return doc

    names = sorted(n for n, h in observed.hosts.items() if h.connection_state == "connected")
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(names)), thread_name_prefix="vgpuctl-status") as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


def merge_status(doc: dict[str, Any], rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Add host facts (collect_host_status) to `vgpuctl status`'s document: per host nvlink and scheduler,
    per GPU mig_current / mig_pending and nvlink_links / nvlink_active; `mig` is a short label for tables."""
    for host in doc.get("hosts", []):
        row = rows.get(host.get("name"))
        if row is None:
            continue
        for key in ("nvlink", "nvlink_after_reboot", "scheduler", "scheduler_after_reboot", "shell_error"):
            if key in row:
                host[key] = row[key]
        by_pci = {g["pci_id"]: g for g in row["gpus"]}
        for gpu in host.get("gpus", []):
            facts = by_pci.get(gpu.get("pci_id"))
            if facts is None:
                continue
            for key in ("mig_current", "mig_pending", "nvlink_links", "nvlink_active", "nvlink_peers"):
                gpu[key] = facts[key]
            gpu["mig"] = mig_label(facts["mig_current"], facts["mig_pending"], gpu.get("vgpu_mode"))
    return doc


def mig_label(current: bool | None, pending: bool | None, vgpu_mode: str | None = None) -> str:
    """on / off / "off (on pending)" / n/a; from vSphere's vgpuMode when the shell was not read."""
    if current is None:
        if vgpu_mode == "multiInstanceGpu":
            return "on"
        return "n/a" if vgpu_mode is None else "off?"
    text = "on" if current else "off"
    if pending is not None and pending != current:
        text += f" ({'on' if pending else 'off'} pending)"
    return text


def shell_configured(specs: dict[str, HostSpec], env: dict[str, str] | None = None) -> bool:
    """Whether SSH to the hosts is set up: VGPUCTL_ESXI_* variables (password, key file, host map) or an
    inventory hosts entry with ssh credentials. `status` reads shell facts only then."""
    from vgpuctl.esxi.ssh import ENV_KEY_FILE, ENV_PASSWORD
    from vgpuctl.hostfacts import ENV_HOST_MAP

    env = dict(os.environ) if env is None else env
    if any(env.get(name) for name in (ENV_PASSWORD, ENV_KEY_FILE, *ENV_HOST_MAP)):
        return True
    return any(s.ssh.key_file or s.ssh.password_env for s in specs.values())
