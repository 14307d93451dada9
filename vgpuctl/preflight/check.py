"""One preflight check's result: what every check of vgpuctl.preflight returns, and a row of `vgpuctl preflight`'s
document (vgpuctl.reports.preflight). The same line a failing check prints there is what `plan` and `apply` refuse
with (`PreflightCheck.line`)."""

from __future__ import annotations

from dataclasses import field

from vgpuctl.domain import CheckStatus
from vgpuctl.lazyclass import dataclass


@dataclass
class PreflightCheck:
    """One check: `id` names what is checked (`host.vgpu-manager`), `subject` what it was checked on (a host, a
    template, a guest group; absent for vCenter-wide checks), `evidence` what vgpuctl saw, `fix` what to do."""

    id: str
    status: CheckStatus
    evidence: str
    subject: str | None = field(default=None, metadata={"omit_none": True})  # left out of JSON while None
    fix: str | None = field(default=None, metadata={"omit_none": True})

    @property
    def line(self) -> str:
        """`host.ssh esx-01: ...; fix: ...`: the text preflight shows and plan/apply refuse with."""
        where = f"{self.id} {self.subject}" if self.subject else self.id
        return f"{where}: {self.evidence}" + (f"; fix: {self.fix}" if self.fix else "")
