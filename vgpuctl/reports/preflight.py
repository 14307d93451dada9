"""`vgpuctl preflight`'s document: one row per check with its id, status, subject, evidence and fix.

The same line a failing check prints here is what `plan` and `apply` refuse with (PreflightCheck.line).
"""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar

from vgpuctl.domain import CheckStatus
from vgpuctl.lazyclass import dataclass
from vgpuctl.preflight.check import PreflightCheck
from vgpuctl.reports.base import TERMINAL, Report, TextLayout
from vgpuctl.visible import lines_text

_ORDER = (CheckStatus.FAIL, CheckStatus.WARN, CheckStatus.PASS, CheckStatus.SKIP)


@dataclass
class PreflightReport(Report):
    """Every check of a preflight run; `ok` is false when one failed (the command then exits 1)."""

    kind: ClassVar[str] = "preflight"
    vcenter: str
    ok: bool
    counts: dict[str, int]
    checks: list[PreflightCheck] = field(default_factory=list)

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        """Failures first, then warnings, passes and skips; checks with the same id, evidence and fix on several
        subjects share one line naming them; the fix is indented below its check."""
        lines = []
        for status in _ORDER:
            groups: dict[tuple[str, str, str | None], list[str]] = {}
            for c in (c for c in self.checks if c.status == status):
                groups.setdefault((c.id, c.evidence, c.fix), []).append(c.subject or "")
            for (check, evidence, fix), subjects in groups.items():
                where = f"{check} {_subjects(subjects)}".rstrip()
                lines.append(f"{status.value.upper():<4}  {where}: {evidence}")
                if fix and status in (CheckStatus.FAIL, CheckStatus.WARN):
                    lines.append(f"      fix: {fix}")
        summary = ", ".join(f"{self.counts.get(s.value, 0)} {s.value}" for s in _ORDER)
        lines.append(f"{self.vcenter}: {summary}" + ("" if self.ok else ": preflight failed"))
        return lines_text(lines)


def _subjects(subjects: list[str], limit: int = 6) -> str:
    named = [s for s in subjects if s]
    more = f" and {len(named) - limit} more" if len(named) > limit else ""
    return ", ".join(named[:limit]) + more


def preflight_report(vcenter: str, checks: list[PreflightCheck]) -> PreflightReport:
    counts = {s.value: sum(1 for c in checks if c.status == s) for s in _ORDER}
    ordered = sorted(checks, key=lambda c: (c.id, c.subject or ""))
    return PreflightReport(vcenter, counts[CheckStatus.FAIL.value] == 0, counts, ordered)
