"""Preflight checks of the guest stage: the guest driver's branch against each host's vGPU Manager (NVIDIA's
compatibility rule, vgpuctl.preflight.branches), and the files the guest playbooks copy (the licence token, the
driver installer) present and readable. The token's content is never read past its first byte, never shown."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vgpuctl import filelimits
from vgpuctl.domain import CheckStatus
from vgpuctl.guest.targets import resolve_path_vars
from vgpuctl.inventory import Inventory
from vgpuctl.preflight import branches
from vgpuctl.preflight.check import PreflightCheck
from vgpuctl.preflight.facts import ManagerFacts, Scope

DRIVER_ROLE = "vgpu_guest_driver"
LICENSING_ROLE = "vgpu_licensing"
DRIVER_VARS = ("vgpu_guest_driver_src", "vgpu_driver_src")  # the role's name first, then the DESIGN name
DRIVER_VERSION_VARS = ("vgpu_guest_driver_version", "vgpu_driver_version")
TOKEN_VARS = ("vgpu_licensing_token_src", "vgpu_license_token_src")
_RANK = {CheckStatus.PASS: 0, CheckStatus.SKIP: 0, CheckStatus.WARN: 1, CheckStatus.FAIL: 2}


def _first(values: Mapping[str, Any], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = values.get(name)
        if isinstance(value, str) and value and "{{" not in value:
            return value
    return None


def _used_groups(inventory: Inventory) -> dict[str, list[str]]:
    """Guest group -> its VMs."""
    out: dict[str, list[str]] = {}
    for vm in inventory.vms:
        if vm.guest is not None and vm.guest.group in inventory.guests.groups:
            out.setdefault(vm.guest.group, []).append(vm.name)
    return out


def guest_driver(values: Mapping[str, Any]) -> tuple[str | None, str]:
    """The guest driver version a group deploys and where it was taken from."""
    explicit = _first(values, DRIVER_VERSION_VARS)
    if explicit:
        return branches.driver_version(explicit) or explicit, "its version variable"
    src = _first(values, DRIVER_VARS)
    if src:
        return branches.driver_version(Path(src).name), Path(src).name
    return None, "no driver file"


def driver_branch_checks(inventory: Inventory | None, scope: Scope,
                         managers: Mapping[str, ManagerFacts]) -> list[PreflightCheck]:
    """Per guest group that installs the driver: its branch against the vGPU Manager of every host its VMs are on
    or may be created on."""
    if inventory is None:
        return []
    out = []
    for group, vms in sorted(_used_groups(inventory).items()):
        spec = inventory.guests.groups[group]
        if DRIVER_ROLE not in spec.roles and _first(spec.vars, DRIVER_VARS) is None:
            continue
        hosts = sorted({h for vm in vms for h in scope.vm_hosts.get(vm, [])})
        out.append(_branch_check(f"group {group}", spec.vars, hosts, managers))
    return out


def _branch_check(subject: str, values: Mapping[str, Any], hosts: list[str],
                  managers: Mapping[str, ManagerFacts]) -> PreflightCheck:
    version, source = guest_driver(values)
    guest = branches.branch_of(version or "")
    if guest is None:
        return PreflightCheck("guest.driver-branch", CheckStatus.WARN, f"no guest driver version ({source})", subject,
                              "name the driver file NVIDIA-Linux-x86_64-<version>-grid.run, or set "
                              "vgpu_guest_driver_version")
    by_branch: dict[int, list[str]] = {}
    unknown = []
    for host in hosts:
        found = managers.get(host)
        branch = branches.branch_of(found.version or "") if found is not None else None
        if branch is None:
            unknown.append(host)
        else:
            by_branch.setdefault(branch, []).append(host)
    if not by_branch:
        where = ", ".join(unknown) or "no host"
        return PreflightCheck("guest.driver-branch", CheckStatus.WARN, f"guest driver {version} (R{guest}); the vGPU "
                              f"Manager's version is unknown on {where}", subject,
                              "see host.vgpu-manager for why it could not be read")
    verdicts = [(branches.compatibility(m, guest), m, h) for m, h in sorted(by_branch.items())]
    worst = max((v.status for v, _, _ in verdicts), key=lambda s: _RANK[s])
    parts = [f"{v.reason} on {', '.join(h)} (vGPU Manager R{m})" for v, m, h in verdicts]
    if unknown:
        parts.append(f"unknown on {', '.join(unknown)}")
    fix = None if worst == CheckStatus.PASS else (
        "deploy the guest driver of the vGPU Manager's release (NVIDIA's package carries both), or update the "
        "vGPU Manager on those hosts")
    return PreflightCheck("guest.driver-branch", worst, f"guest driver {version}: " + "; ".join(parts), subject, fix)


def file_checks(inventory: Inventory | None) -> list[PreflightCheck]:
    """Per guest group: the licence token (and the driver installer) present and readable on this machine."""
    if inventory is None:
        return []

    base = Path(inventory.source_path).resolve().parent if inventory.source_path else Path.cwd()
    out = []
    for group in sorted(_used_groups(inventory)):
        spec = inventory.guests.groups[group]
        values = resolve_path_vars(dict(spec.vars), base)
        if LICENSING_ROLE in spec.roles or _first(spec.vars, TOKEN_VARS):
            out.append(_file_check("guest.license-token", f"group {group}", _first(values, TOKEN_VARS), TOKEN_VARS))
        if DRIVER_ROLE in spec.roles or _first(spec.vars, DRIVER_VARS):
            out.append(_file_check("guest.driver-file", f"group {group}", _first(values, DRIVER_VARS), DRIVER_VARS))
    return out


def _file_check(check: str, subject: str, path: str | None, names: tuple[str, ...]) -> PreflightCheck:
    if path is None:
        return PreflightCheck(check, CheckStatus.FAIL, f"no file named ({' or '.join(names)} is not set)", subject,
                              f"set {names[-1]} in the group's vars to the file's path")
    problem = unreadable(Path(path))
    if problem:
        return PreflightCheck(check, CheckStatus.FAIL, f"{path}: {problem}", subject,
                              f"put the file there (readable by this user), or correct {names[-1]}")
    size = Path(path).stat().st_size
    return PreflightCheck(check, CheckStatus.PASS, f"{path} present and readable ({size} bytes)", subject)


def unreadable(path: Path) -> str | None:
    """Why the file cannot be read (None when it can); reads at most one byte, and never waits on a FIFO or reads a
    device (refused at once, as vgpuctl.filelimits refuses them)."""
    try:
        with filelimits.open_regular(path) as handle:
            first = handle.read(1)
    except filelimits.NotAFile as err:
        return str(err)
    except FileNotFoundError:
        return "no such file"
    except PermissionError:
        return "not readable by this user (permission denied)"
    except OSError as err:
        return err.strerror or str(err)
    if not first:
        return "empty"
    if not os.access(path, os.R_OK):
        return "not readable by this user"
    return None
