"""`python -m vgpuctl` is the `vgpuctl` command."""

from vgpuctl.cli.main import run

run()
