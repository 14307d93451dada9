"""The `sim` documents: the simulator's environment (up, env) and its stop (down)."""

from __future__ import annotations

import shlex
from typing import ClassVar

from vgpuctl.lazyclass import dataclass
from vgpuctl.reports.base import TERMINAL, Report, TextLayout


@dataclass
class SimEnvReport(Report):
    """`sim up` / `sim env`: the variables that point vgpuctl (and govc) at the running simulator."""

    kind: ClassVar[str] = "sim-env"
    env: dict[str, str]
    env_file: str  # where gpusim wrote them

    def render_text(self, layout: TextLayout = TERMINAL) -> str:
        """`export` lines, for eval "$(vgpuctl sim env)"."""
        return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in self.env.items())


@dataclass
class SimDownReport(Report):
    """`sim down`: the simulator process stopped."""

    kind: ClassVar[str] = "sim-down"
    stopped: int  # its process id

    def render_text(self, layout: TextLayout = TERMINAL) -> None:
        """None: the command says on stderr what it stopped."""
        return None
