"""The console script's entry point: the early read first, then the CLI.

Whether a command line wants the early read is decided here from the words and the environment alone, with nothing
imported beyond the standard library's os and sys: `--help`, a usage error and every other command load nothing
for it. For a `plan` whose connection the environment fixes, vgpuctl.vsphere.earlyread starts logging in and
reading the farm while the CLI's own modules load.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

ENV_SWITCH = "VGPUCTL_EARLY_READ"
COMMAND = "plan"
# The root's options that leave the connection as the environment says (option -> whether it takes a value).
ROOT_OPTIONS = {"--output": True, "-o": True, "--datacenter": True, "--lock-timeout": True}
# plan's own options (and the root's above, which it takes too); a test keeps them equal to the command's, with
# CONNECTION_OPTIONS. Any other word, or a file that is not there: the command line is refused before any read.
PLAN_OPTIONS = {**ROOT_OPTIONS, "--file": True, "-f": True, "--detailed-exitcode": False,
                "--ssh-trust-on-first-use": False, "--out": True, "--explain": True, "--host": True, "--cluster": True,
                "--vm": True, "--events": True, "--no-history": False, "--vcenter": True, "--values": True,
                "--env": True, "--allow-include-outside": False}
# Any of these anywhere on the command line: the connection is not the environment's alone (or -v asks to see
# every call as the run makes it, or nothing is read).
CONNECTION_OPTIONS = ("--url", "--username", "-u", "--password-file", "--insecure", "--no-insecure", "--ca-file",
                      "--thumbprint", "--timeout", "--verbose", "-v", "--version", "--help", "-h",
                      "--install-completion", "--show-completion")


def run() -> None:
    early = wanted(sys.argv[1:], os.environ)
    if early:
        from vgpuctl.vsphere.earlyread import begin

        begin(os.environ)
    try:
        from vgpuctl.cli.main import run as run_cli  # after the early read has started: the CLI's heavy imports

        run_cli()
    finally:
        if early:
            from vgpuctl.vsphere.session import end_early_read

            end_early_read()


def wanted(argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether this command line is a plan of an inventory file that is there, with nothing on it that changes the
    connection the environment gives (and no word the command would refuse)."""
    if environ.get(ENV_SWITCH, "").strip().lower() in ("0", "false", "no", "off"):
        return False
    if any(key.endswith("_COMPLETE") for key in environ):
        return False
    root = _options(argv, ROOT_OPTIONS)
    if root is None or root[1] != [COMMAND]:
        return False
    command = _options(root[2], PLAN_OPTIONS)
    if command is None or command[1]:
        return False
    files = command[0].get("--file", []) + command[0].get("-f", [])
    return len(files) == 1 and os.path.isfile(files[0])


def _options(argv: Sequence[str], known: Mapping[str, bool]
             ) -> tuple[dict[str, list[str]], list[str], list[str]] | None:
    """The known options' values up to the first other word (or all of them for a command's), that word, and the
    words after it; None at an option not known (or one of CONNECTION_OPTIONS: `-vv`, `-ojson -v` included)."""
    values: dict[str, list[str]] = {}
    words = list(argv)
    at = 0
    while at < len(words):
        word = words[at]
        if not word.startswith("-") or word == "-":
            return (values, [word], words[at + 1:]) if known is ROOT_OPTIONS else None
        name, given, value = word.partition("=")
        if not word.startswith("--") and len(word) > 2:  # -fFILE, -ojson
            name, given, value = word[:2], "=", word[2:]
        takes = known.get(name)
        if takes is None or (given and not takes):
            return None
        if takes and not given:
            at += 1
            if at >= len(words):
                return None
            value = words[at]
        values.setdefault(name, []).append(value)
        at += 1
    return values, [], []
