"""The collector pause: nested and concurrent pauses, the collector's state restored."""

from __future__ import annotations

import gc

import pytest

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
