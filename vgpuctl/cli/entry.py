"""The console script's entry point: the early read first, then the CLI.

Only the standard library and vgpuctl.vsphere.earlyread load before the early read starts: a `plan` whose
connection the environment fixes is logging in and reading the farm while the CLI's own modules load.
"""

from __future__ import annotations

import os
import sys

from vgpuctl.vsphere.earlyread import begin
from vgpuctl.vsphere.session import end_early_read


def run() -> None:
    begin(sys.argv[1:], os.environ)
    try:
        from vgpuctl.cli.main import run as run_cli  # after the early read has started: the CLI's heavy imports

        run_cli()
    finally:
        end_early_read()
