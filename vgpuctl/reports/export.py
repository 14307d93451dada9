"""The `export` document: the inventory written, and where."""

from __future__ import annotations

from typing import ClassVar

from vgpuctl.lazyclass import dataclass
from vgpuctl.reports.base import TERMINAL, Report, TextLayout


@dataclass
class ExportReport(Report):
    """`export`: an inventory (apiVersion vgpuctl/v1) of the farm as it is; `file` when it was written to one."""

    kind: ClassVar[str] = "export"
    file: str | None
    inventory: str  # the YAML text

    def render_text(self, layout: TextLayout = TERMINAL) -> str | None:
        """The inventory itself on stdout; nothing when it went to a file (the command says so on stderr)."""
        return self.inventory if self.file is None else None
