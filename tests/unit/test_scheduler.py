"""RmPVMRL encoding and decoding against the shared vectors (also run by gpusim's Go tests)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from vgpuctl.esxi import rmpvmrl as scheduler

pytestmark = pytest.mark.unit

VECTORS = yaml.safe_load((Path(__file__).parents[1] / "fixtures" / "scheduler" / "rmpvmrl.yaml").read_text())


@pytest.mark.parametrize("case", VECTORS["decode"], ids=lambda c: c["value"] or "empty")
def test_decode(case: dict[str, Any]) -> None:
    state = scheduler.decode(case["value"])
    got = (state.policy, state.mode, state.timeslice_ms, state.frequency_hz, state.averaging_factor, str(state))
    want = (case["policy"], case["mode"], case["timeslice_ms"], case["frequency_hz"], case["averaging_factor"])
    assert got == (*want, case["label"])
    assert state.value == case["value"]  # kept as written (gpusim keeps it too)


@pytest.mark.parametrize("case", VECTORS["encode"], ids=lambda c: str(c["value"]))
def test_encode_and_round_trip(case: dict[str, Any]) -> None:
    spec = case["spec"]
    value = scheduler.encode(
        spec["policy"], spec.get("timeslice_ms"), spec.get("frequency_hz"), spec.get("averaging_factor")
    )
    assert value == case["value"]
    state = scheduler.decode(value)
    assert (state.policy, state.timeslice_ms, state.frequency_hz, state.averaging_factor) == (
        spec["policy"], spec.get("timeslice_ms"), spec.get("frequency_hz"), spec.get("averaging_factor")
    )
    assert scheduler.parse_label(str(state)) == (
        spec["policy"], spec.get("timeslice_ms"), spec.get("frequency_hz"), spec.get("averaging_factor")
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("best-effort", 3), "equal-share and fixed-share only"),
        (("round-robin",), "unknown scheduler policy"),
        (("equal-share", 0), "time slice must be 1..30 ms (got 0)"),
        (("equal-share", 31), "time slice must be 1..30 ms (got 31)"),
        (("fixed-share", None, 62), "scheduling frequency must be 63..960 Hz (got 62)"),
        (("fixed-share", None, 961), "scheduling frequency must be 63..960 Hz (got 961)"),
        (("equal-share", None, None, 61), "averaging factor must be 1..60 (got 61)"),  # a factor has no unit
        (("equal-share", None, None, 0), "averaging factor must be 1..60 (got 0)"),
        (("equal-share", 3, 480), "cannot be combined"),
    ],
)
def test_encode_refuses_values_outside_the_documented_ranges(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        scheduler.encode(*args)


def test_parse_label_rejects_garbage() -> None:
    with pytest.raises(ValueError, match=re.escape("not a scheduler label: 'equal-share (3 parsecs)'")):
        scheduler.parse_label("equal-share (3 parsecs)")


@pytest.mark.parametrize(
    ("value", "number"),
    [(None, None), ("", None), ("  ", None), ("0x11", 17), ("0X11", 17), (" 0x00030003 ", 0x30003), ("17", 17),
     ("banana", -1), ("0x", -1)],
)
def test_to_int_reads_hex_and_decimal_and_says_what_is_no_number(value: str | None, number: int | None) -> None:
    """None: no value (best effort); -1: not a number (shown as written)."""
    assert scheduler.to_int(value) == number
