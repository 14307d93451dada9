"""The commands README.md and docs/*.md tell people to type, for the docs tests.

- A line of a shell code block (```sh) is a command to follow as typed: the sim docs test runs it against
  gpusim, or it is listed in NOT_RUN with the reason (a real vCenter or ESXi host, guests, the project's own
  make targets).
- A command in the text (an inline code span starting with `vgpuctl ` or another tool) is a mention: its
  vgpuctl command and every option it names must exist (placeholders like FILE and `[...]` allowed); other
  tools' commands must be in NOT_RUN.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = {"sh", "bash", "shell", "console"}
TOOLS = ("govc", "esxcli", "ssh-keyscan", "openssl", "make", "kubectl")  # other tools named with arguments

# Commands the docs give that no test here runs, by how they start, with why.
NOT_RUN: tuple[tuple[str, str], ...] = (
    ("export VGPUCTL_URL=https://vc.example.com", "a real vCenter's address and account (gpusim's stand in)"),
    ("export VGPUCTL_PASSWORD=", "a real vCenter's password (gpusim's stands in)"),
    ("govc ", "a real vCenter's roles, permissions and host services"),
    ("esxcli ", "a real ESXi host's vGPU Manager install"),
    ("ssh-keyscan ", "a real ESXi host's SSH key"),
    ("openssl ", "a real vCenter's certificate"),
    ("kubectl ", "a Kubernetes cluster"),
    ("make ", "make targets: the project's own (CI runs `make test`, which runs this test) or a benchmark's "
              "build inside the guests"),
    ("python3 -m venv", "the install itself: `make test` and the packaging test install vgpuctl"),
    ("vgpuctl provision ", "guest VMs reachable over SSH (tests/guests runs the playbooks in chroots)"),
    ("vgpuctl sim up --guests", "root: the simulator's guests run in network namespaces (tests/guests/"
                                "test_sim_guests.py runs it with `provision -f inventory.sim-guests.yaml`)"),
    ("vgpuctl guest deploy", "guest VMs reachable over SSH (tests/guests runs the playbooks in chroots)"),
    ("vgpuctl experiment run ", "guest VMs that run the benchmark (tests/guests; the runner is tested with a "
                                "recording farm)"),
    ("vgpuctl experiment report ", "the results of an experiment run in guests"),
    ("pip wheel ", "the packaging test builds vgpuctl's wheel (tests/unit/test_packaging.py)"),
    ("ansible-galaxy collection build ", "tests/unit/test_guest_playbooks.py builds and installs the collection "
                                         "offline"),
    ("ansible-builder build ", "a container runtime and the network; tests/unit/test_guest_playbooks.py creates "
                               "the image's build context offline"),
    ("vgpuctl exporter ", "it serves until stopped (tests/sim/test_exporter_sim.py starts it against gpusim, "
                          "scrapes it and stops it)"),
    ("vgpuctl --install-completion", "it changes the user's shell startup files"),
    ("vgpuctl --show-completion >>", "it changes the user's shell startup files"),
)


@dataclass(frozen=True)
class Command:
    doc: str  # path relative to the repository
    line: int
    text: str  # as written, the comment left out
    block: bool  # a line of a shell block (to follow as typed), else a mention in the text

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def not_run_reason(text: str) -> str | None:
    return next((why for start, why in NOT_RUN if text.startswith(start)), None)


def without_comment(line: str) -> str:
    """The line up to a `#` that starts a shell comment (outside quotes, after a space)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def block_commands(path: Path) -> list[Command]:
    out: list[Command] = []
    lang: str | None = None
    pending, start = "", 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if raw.startswith("```"):
            lang = None if lang is not None else raw[3:].strip()
            continue
        if lang not in SHELL:
            continue
        line = without_comment(raw.removeprefix("$ "))
        if not line and not pending:
            continue
        start = start if pending else number
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        out.append(Command(str(path.relative_to(REPO)), start, pending + line.strip(), True))
        pending = ""
    return out


SPAN = re.compile(r"`([^`]+)`")


def prose(path: Path) -> str:
    """The document with its fenced code blocks blanked out (line numbers kept)."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return "\n".join(lines)


def mentions(path: Path) -> list[Command]:
    text = prose(path)
    found = []
    for m in SPAN.finditer(text):
        span = " ".join(m.group(1).split())
        first = span.split(" ", 1)[0]
        if (first == "vgpuctl" or first in TOOLS) and " " in span:
            found.append(Command(str(path.relative_to(REPO)), text.count("\n", 0, m.start()) + 1, span, False))
    return found


def all_commands() -> list[Command]:
    return [c for path in DOCS for c in (*block_commands(path), *mentions(path))]


# ------------------------------------------------------------------------------------------ vgpuctl's own


PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")


def words(text: str) -> list[str]:
    """The command's words (up to a pipe or a redirection), brackets and `...` of a synopsis left out."""
    text = re.split(r"\s(?:\||>>|>)\s", text)[0]
    try:
        parts = shlex.split(text)
    except ValueError:
        parts = text.split()
    return [p.strip("[]") for p in parts if p.strip("[]") not in ("", "...", "…")]


def is_synopsis(text: str) -> bool:
    """Placeholders (FILE, HOST), optional parts ([...]) or alternatives (add/remove): a form, not a command."""
    return "[" in text or "..." in text or any(PLACEHOLDER.match(w) for w in words(text)[1:])


def check_vgpuctl(text: str, root: Any) -> list[str]:
    """What does not exist in a vgpuctl command: a command name, or an option of the command it names."""
    tokens, command, problems = words(text)[1:], root, []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in ("--help", "-h"):
            pass
        elif token.startswith("-") and len(token) > 1:
            flag = token.split("=", 1)[0]
            param = next((p for p in command.params if flag in (*getattr(p, "opts", ()),
                                                                 *getattr(p, "secondary_opts", ()))), None)
            if param is None:
                problems.append(f"{' '.join(command_path(text, command))}: no option {flag}")
            elif "=" not in token and not (getattr(param, "is_flag", False) or getattr(param, "count", False)):
                i += 1  # its value
        elif getattr(command, "commands", None):
            name = next((n for n in token.split("/") if n in command.commands), None)
            if name is None or not all(n in command.commands for n in token.split("/")):
                problems.append(f"no command {token!r} under {command.name}")
                break
            command = command.commands[name]
        i += 1
    return problems


def command_path(text: str, command: Any) -> list[str]:
    return ["vgpuctl", command.name] if command.name != "vgpuctl" else ["vgpuctl"]
