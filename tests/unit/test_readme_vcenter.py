"""The README's real-vCenter section: the govc role command grants exactly the privileges its table lists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vgpuctl.reports.status import NO_MANAGER

pytestmark = pytest.mark.unit

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
SECTION = README.split("### What a real vCenter needs", 1)[1].split("\n## ", 1)[0]


def table_privileges() -> set[str]:
    found: set[str] = set()
    for row in SECTION.splitlines():
        if not row.startswith("| ") or "privileges" in row or row.startswith("|---"):
            continue
        last = ""
        for token in re.findall(r"`([A-Za-z.]+)`", row.rsplit("|", 2)[-2]):
            name = last.rsplit(".", 1)[0] + token if token.startswith(".") else token
            last = name
            found.add(name)
    return found - {"System.View", "System.Read"}  # every role has them


def test_role_command_grants_what_the_table_lists() -> None:
    command = SECTION.split("govc role.create vgpuctl", 1)[1].split("\ngovc permissions.set", 1)[0]
    granted = set(command.replace("\\", " ").split())
    assert table_privileges() == granted
    assert {"Host.Config.Maintenance", "Host.Config.Settings", "Global.SetCustomField", "Namespaces.Manage"} <= granted


def test_status_says_what_the_readme_says_of_a_host_without_the_vgpu_manager() -> None:
    assert f'"{NO_MANAGER}"' in " ".join(SECTION.split())


def test_section_covers_ssh_vib_licence_and_pinning() -> None:
    for needle in ("TSM-SSH", "vGPU Manager", "no vGPU types offered", "DLS", "vgpu_license_token_src",
                   "--thumbprint", "sha256"):  # fmt: skip
        assert needle in SECTION, needle
