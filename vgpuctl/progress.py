"""Live progress displays on stderr: a rich Live view while stderr is a terminal, plain lines elsewhere."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from rich.console import Console


class LiveOnTerminal:
    """Context manager showing `self` (a rich renderable) live while the console is a terminal.

    Subclasses set `console` and render themselves (`__rich__`); `self.live` is None off a terminal, which tells
    them to print plain lines instead (CI logs stay readable).
    """

    refresh_per_second = 4
    console: Console
    live: Any = None

    def __enter__(self) -> Self:
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(self, console=self.console, refresh_per_second=self.refresh_per_second, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None
