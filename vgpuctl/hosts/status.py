"""Host GPU state for `host show` and `status`: per GPU MIG current/pending and NVLink links, per host the
scheduler and NVLink, from the vSphere API and (when SSH is set up) the ESXi shell, as typed reports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from vgpuctl.domain import ConnectionState, GpuVgpuMode
from vgpuctl.errors import VgpuctlError
from vgpuctl.hosts.facts import (
    ENV_HOST_MAP,
    HostFacts,
    api_facts,
    esxi_timeout,
    gather_host_facts,
    open_shell,
    shell_runner,
)
from vgpuctl.hosts.settings import SETTINGS, nvlink, scheduler, wants_network
from vgpuctl.hosts.settings.base import ModuleOptions as ModuleOptionsView
from vgpuctl.inventory import HostSpec
from vgpuctl.model import Observed, ObservedGpu, ObservedHost
from vgpuctl.reports.status import HostGpu, HostReport, ModuleOptions, SettingValue, StatusReport

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

# the settings `host show` and `status` have fields of their own for (every setting is in `settings` too)
NVLINK, SCHEDULER = nvlink.SETTING.key, scheduler.SETTING.key


def setting_values(host: ObservedHost, facts: HostFacts | None) -> list[SettingValue]:
    """Every host-wide setting's value now (and after the next reboot when that differs), in registry order."""
    return [
        SettingValue(state.key, state.value, state.after_reboot)
        for setting in SETTINGS
        for state in setting.status(host, facts)
    ]


def host_status(host: ObservedHost, facts: HostFacts | None, shell_error: str | None = None) -> HostReport:
    """One host's GPU state: module options (configured and in effect), its settings, per GPU facts."""
    options = ModuleOptionsView.of(host, facts)
    values = setting_values(host, facts)
    by_key = {v.setting: v for v in values}
    return HostReport(
        host=host.name,
        connection_state=host.connection_state,
        in_maintenance=host.in_maintenance,
        default_graphics_type=host.default_graphics_type,
        assignment_policy=host.assignment_policy,
        module_options=ModuleOptions(options.configured, options.effective),
        nvlink=by_key[NVLINK].value,
        scheduler=by_key[SCHEDULER].value,
        gpus=[_gpu_row(g, facts) for g in host.gpus],
        nvlink_after_reboot=by_key[NVLINK].after_reboot,
        scheduler_after_reboot=by_key[SCHEDULER].after_reboot,
        shell_error=shell_error,
        settings=values,
    )


def _gpu_row(gpu: ObservedGpu, facts: HostFacts | None) -> HostGpu:
    gf = facts.gpus.get(gpu.pci_id.lower()) if facts is not None else None
    shell = gf is not None and facts is not None and facts.shell
    return HostGpu(
        gpu=gpu.pci_id,
        device=gpu.device_name,
        graphics_type=gpu.graphics_type,
        vgpu_mode=gpu.vgpu_mode,
        mig_current=gf.mig_current if shell and gf is not None else None,
        mig_pending=gf.mig_pending if shell and gf is not None else None,
        nvlink_links=gf.nvlink_links if gf is not None else None,
        nvlink_active=gf.nvlink_active if gf is not None else None,
        nvlink_peers=list(gf.nvlink_peers) if gf is not None else [],
        vms=list(gpu.vms),
    )


def collect_host_status(
    session: Session, observed: Observed, specs: dict[str, HostSpec] | None = None, *, shell: bool = True,
    read: dict[str, HostFacts] | None = None,
) -> dict[str, HostReport]:
    """host_status of every connected host for `vgpuctl status`: API facts always, shell facts (MIG pending,
    NVLink links) when `shell`; a host whose SSH fails gets `shell_error` instead of failing the command. What a
    host could not say makes those fields unknown; `read` receives every host's facts, whose `unread` say why
    (hosts.facts.unread_warnings: one warning per cause). Never fails for what one or all hosts could not say."""
    specs = specs or {}
    found: dict[str, HostFacts] = {}

    def one(name: str) -> HostReport:
        host = observed.hosts[name]
        network = wants_network(specs.get(name))
        if not shell:
            found[name] = api_facts(session, host.moid, name, network=network)
            return host_status(host, found[name])
        try:
            with open_shell(name, specs.get(name), timeout_s=esxi_timeout(session)) as sh:
                found[name] = gather_host_facts(session, host.moid, name, shell_runner(sh), network=network)
                return host_status(host, found[name])
        except VgpuctlError as err:
            found[name] = api_facts(session, host.moid, name, network=network)
            return host_status(host, found[name], shell_error=str(err))

    names = sorted(n for n, h in observed.hosts.items() if h.connection_state == ConnectionState.CONNECTED)
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(names)), thread_name_prefix="vgpuctl-status") as pool:
        rows = dict(zip(names, pool.map(one, names), strict=True))
    if read is not None:
        read.update(found)
    return rows


def mig_instance_totals(run: Any) -> dict[str, int]:
    """GPU instance profile name -> total instances per GPU, as `nvidia-smi mig -lgip` reports them on the host
    (the smallest over its MIG GPUs); empty on a host without MIG GPUs."""
    from vgpuctl.esxi.facts import MIG_PROFILES

    totals: dict[str, int] = {}
    for row in MIG_PROFILES.gather(run):
        totals[row.name] = min(row.total, totals.get(row.name, row.total))
    return totals


def read_reported_maxima(
    observed: Observed, names: list[str], specs: dict[str, HostSpec], timeout_s: float | None = None
) -> list[str]:
    """For `profiles`: each named host with a MIG GPU reports its GPU instance totals over SSH, recorded as the
    maxima of its MIG-backed types (statusreport.with_reported_maxima). Returns one warning per host whose shell
    could not be read (its rows keep the catalogue's maxima)."""
    from vgpuctl.reports.status import with_reported_maxima

    warnings = []
    for name in names:
        host = observed.hosts[name]
        has_mig = any(g.vgpu_mode == GpuVgpuMode.MIG for g in host.gpus)
        if host.connection_state != ConnectionState.CONNECTED or not has_mig:
            continue
        try:
            with open_shell(name, specs.get(name), timeout_s=timeout_s) as sh:
                with_reported_maxima(host, mig_instance_totals(shell_runner(sh)))
        except VgpuctlError as err:
            warnings.append(f"host {name}: MIG instance totals not read ({err}); showing the catalogue's maxima")
    return warnings


def merge_status(report: StatusReport, rows: dict[str, HostReport]) -> StatusReport:
    """Add host facts (collect_host_status) to `vgpuctl status`'s report: per host NVLink and scheduler, per GPU
    MIG current/pending and NVLink links; `mig` is a short label for tables."""
    for host in report.hosts:
        row = rows.get(host.host)
        if row is None:
            continue
        host.nvlink, host.nvlink_after_reboot = row.nvlink, row.nvlink_after_reboot
        host.scheduler, host.scheduler_after_reboot = row.scheduler, row.scheduler_after_reboot
        host.shell_error = row.shell_error
        host.settings = list(row.settings)
        by_gpu = {g.gpu: g for g in row.gpus}
        for gpu in host.gpus:
            facts = by_gpu.get(gpu.gpu)
            if facts is None:
                continue
            gpu.mig_current, gpu.mig_pending = facts.mig_current, facts.mig_pending
            gpu.nvlink_links, gpu.nvlink_active = facts.nvlink_links, facts.nvlink_active
            gpu.nvlink_peers = list(facts.nvlink_peers)
            if gpu.mig_capable is not False:  # a board without MIG has no MIG state to show
                gpu.mig = mig_label(facts.mig_current, facts.mig_pending, gpu.vgpu_mode)
    return report


def mig_label(current: bool | None, pending: bool | None, vgpu_mode: str | None = None) -> str:
    """on / off / "off (on pending)" / n/a; from vSphere's vgpuMode when the shell was not read."""
    if current is None:
        if vgpu_mode == GpuVgpuMode.MIG:
            return "on"
        return "n/a" if vgpu_mode is None else "off?"
    text = "on" if current else "off"
    if pending is not None and pending != current:
        text += f" ({'on' if pending else 'off'} pending)"
    return text


def shell_configured(specs: Mapping[str, HostSpec | None], env: dict[str, str] | None = None) -> bool:
    """Whether SSH to the hosts is set up: VGPUCTL_ESXI_* variables (password, key file, host map) or an
    inventory hosts entry with ssh credentials. `status` reads shell facts only then."""
    from vgpuctl.esxi.ssh import ENV_KEY_FILE, ENV_PASSWORD

    env = dict(os.environ) if env is None else env
    if any(env.get(name) for name in (ENV_PASSWORD, ENV_KEY_FILE, ENV_HOST_MAP)):
        return True
    return any(s is not None and (s.ssh.key_file or s.ssh.password_env) for s in specs.values())
