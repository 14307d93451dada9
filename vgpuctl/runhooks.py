"""What a run shows and asks, from its caller: `RunHooks` (the CLI renders one, a test records one) and
`QuietHooks`, which show nothing and never ask. `vgpuctl.pipeline.run` takes them."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from vgpuctl.outcome import Planned
    from vgpuctl.progress import Progress


class RunHooks(Protocol):
    """What a run shows and asks, from the caller (the CLI renders, a test records)."""

    def planned(self, planned: Planned) -> None:
        """The plan is made (also when it has errors: the run raises PlanError right after)."""

    def confirm(self, planned: Planned) -> None:
        """Before the first change (only when there is one); raise to stop with nothing changed."""

    def apply_progress(self, planned: Planned) -> AbstractContextManager[Progress]:
        """The live display of the apply stages."""

    def note(self, message: str) -> None:
        """A line for people: Ctrl-C, VM-class steps, guest addresses."""


class QuietHooks:
    """Hooks that show nothing and never ask (a plan read by a program; --yes with no display)."""

    def planned(self, planned: Planned) -> None:
        pass

    def confirm(self, planned: Planned) -> None:
        pass

    def apply_progress(self, planned: Planned) -> AbstractContextManager[Progress]:
        return nullcontext(_NO_PROGRESS)

    def note(self, message: str) -> None:
        pass


class _NoProgress:
    def vm_step(self, vm: str, step: str, percent: int | float | None = None) -> None:
        pass

    def host_step(self, host: str, step: str, detail: str | None) -> None:
        pass

    def vms_planned(self, vms: Sequence[str]) -> None:
        pass


_NO_PROGRESS = _NoProgress()
