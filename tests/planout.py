"""A refused plan as the tests read it from `plan` and `apply`: the plan is shown with its problems (under the
host or VM they are about, the others at the end as `Error: ...`), and stderr says in one line that it was
refused."""

from __future__ import annotations

import re
from typing import Any

UNDER = "    x cannot be carried out: "
SUBJECTS = ("~ vm ", "+ vm ", "- vm ", "~ host ")


def shown_problems(text: str) -> list[str]:
    """Each problem of a plan's text as one line on its own: `vm NAME: reason` for one under a VM's change, the
    message for one under a host's (it names the host), the rest as the plan ends with them."""
    out, subject = [], ""
    for line in text.splitlines():
        if line.startswith(SUBJECTS):
            subject = line
        if line.startswith(UNDER):
            at, message = _located(line.removeprefix(UNDER))
            vm = subject.split()[2] if subject.split()[1] == "vm" else None
            text = f"vm {vm}: {message}" if vm is not None else message
            out.append(f"{at}: {text}" if at else text)
        elif line.startswith("Error: "):
            out.append(line.removeprefix("Error: "))
    return out


def _located(message: str) -> tuple[str | None, str]:
    """(FILE:LINE:COL, the rest) of a problem shown with its inventory key's place, else (None, message)."""
    m = re.match(r"(\S+:\d+:\d+): (.*)$", message)
    return (m[1], m[2]) if m else (None, message)


def refused(result: Any) -> list[str]:
    """The problems of a plan or apply that refused its plan (exit 1, no traceback, one error line naming them)."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
    assert len(errors) == 1 and errors[0].startswith("error: the plan has "), result.stderr
    problems = shown_problems(result.stdout)
    assert problems, result.stdout
    return problems
