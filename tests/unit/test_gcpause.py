"""The collector pause: nested and concurrent pauses, the collector's state restored."""

from __future__ import annotations

import gc

import pytest

from vgpuctl import gcpause
from vgpuctl.cli import main
from vgpuctl.gcpause import paused_gc

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_pause_nests_and_restores_the_collector(enabled: bool) -> None:
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with paused_gc():
            assert not gc.isenabled()
            with paused_gc():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the outer pause still runs
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_only_a_one_command_process_freezes_what_a_pause_built() -> None:
    import subprocess
    import sys

    script = """
import gc, sys
from vgpuctl import gcpause
if sys.argv[1] == "command":
    gcpause.one_command_process()
with gcpause.paused_gc():
    built = [[i] for i in range(10000)]
print(gc.get_freeze_count(), gc.isenabled())
"""
    frozen = {}
    for mode in ("command", "library"):
        done = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, check=True)
        count, enabled = done.stdout.split()
        assert enabled == "True"
        frozen[mode] = int(count)
    assert frozen["command"] >= 10000 and frozen["library"] == 0


def test_the_vgpuctl_command_runs_as_a_one_command_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gcpause, "_freeze", False)
    monkeypatch.setattr(main, "app_for", lambda args: lambda **_: None)  # the command is not run
    main.run()
    assert gcpause._freeze
