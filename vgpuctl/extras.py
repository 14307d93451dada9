"""Optional parts of vgpuctl and the one line that says how to install one that is missing.

`capacity --demand` solves with OR-Tools (extra `capacity`), `experiment report` plots with matplotlib (extra
`experiment`), `exporter` serves its metrics with prometheus_client (extra `exporter`), and the guest playbooks
run `ansible-playbook`, which the `ansible-core` dependency brings.
`require` is called where a command first needs one; the CLI's error handler also turns a ModuleNotFoundError
of one of these modules into the same line (vgpuctl.cli.common.report_error), so no path ends in "a bug".
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

from vgpuctl.errors import UsageError

# top-level module -> (the extra that installs it, what needs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "ortools": ("capacity", "the capacity layout solver (capacity --demand)"),
    "matplotlib": ("experiment", "the experiment plots (experiment run/report)"),
    "prometheus_client": ("exporter", "the Prometheus metrics endpoint (exporter)"),
}


class MissingExtra(UsageError):
    """An optional module is not installed; the message names the pip lines that install it (from the package
    index, and into a source checkout's editable install), and `instead`, what works without it, if anything."""

    def __init__(self, module: str, instead: str = ""):
        extra, what = EXTRAS[module]
        self.module, self.extra = module, extra
        super().__init__(f"{what} needs {module}, which is not installed: pip install 'vgpuctl[{extra}]' (in a "
                         f"source checkout: pip install -e '.[{extra}]')" + (f"; or {instead}" if instead else ""))


def require(module: str, instead: str = "") -> ModuleType:
    """Import an optional module, or raise MissingExtra naming its extra (and `instead`, what does without it)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        if _top(getattr(err, "name", None) or module) == module:
            raise MissingExtra(module, instead) from None
        raise  # the module is there but one of its own imports failed: that error says more


def missing_extra(err: BaseException) -> MissingExtra | None:
    """The MissingExtra an import error of an optional module means, else None."""
    if isinstance(err, ImportError):
        top = _top(getattr(err, "name", None) or "")
        if top in EXTRAS:
            return MissingExtra(top)
    return None


def _top(name: str) -> str:
    return name.split(".", 1)[0]


ANSIBLE_PLAYBOOK = "ansible-playbook"


def ansible_playbook() -> str:
    """The ansible-playbook the guest playbooks run: beside the running interpreter (a virtualenv's bin/), else
    on PATH; UsageError naming the package when there is none."""
    beside = Path(sys.executable).parent / ANSIBLE_PLAYBOOK
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(ANSIBLE_PLAYBOOK)
    if found is None:
        raise UsageError(
            "the guest playbooks need ansible-playbook, which is not installed: pip install 'ansible-core>=2.16' "
            "into vgpuctl's environment (a dependency of vgpuctl since this release: reinstall vgpuctl)"
        )
    return found
