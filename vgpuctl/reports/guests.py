"""The guest-run and provision documents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vgpuctl.reports.base import Report
from vgpuctl.reports.plan import ApplyReport


@dataclass
class GuestResult:
    vm: str
    group: str
    status: str  # ok | changed | failed | unreachable
    ok: int
    changed: int
    failed: int
    unreachable: int
    skipped: int
    message: str


@dataclass
class GuestRunReport(Report):
    """`guest deploy`: each guest's playbook result."""

    kind: ClassVar[str] = "guests"
    guests: list[GuestResult]
    check: bool
    runner_status: str
    rc: int
    artifacts: str | None


@dataclass
class ProvisionReport(Report):
    kind: ClassVar[str] = "provision"
    apply: ApplyReport
    guests: GuestRunReport | None  # None: no VM has a guest group
