"""`python -m vgpuctl` is the `vgpuctl` command."""

from vgpuctl.cli.entry import run

run()
