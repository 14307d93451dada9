"""The time-sliced vGPU scheduler's RmPVMRL registry value: encode a policy, decode any value.

Layout and sources: docs/scheduler.md (NVIDIA AI Enterprise 5.0 user guide, 7.3 "RmPVMRL Registry Key"; the field
widths of the driver's `nvrm_registry.h`: frequency bits 21:12, time slice 23:16, averaging factor 31:24).
Pure: no I/O. Shared test vectors: tests/fixtures/scheduler/rmpvmrl.yaml (gpusim decodes the same way).
"""

from __future__ import annotations

from vgpuctl.lazyclass import dataclass

BEST_EFFORT, EQUAL_SHARE, FIXED_SHARE, UNKNOWN = "best-effort", "equal-share", "fixed-share", "unknown"
POLICY_BITS = {EQUAL_SHARE: 0x01, FIXED_SHARE: 0x11}
WITHOUT_STRICT_ROUND_ROBIN = 0x02
TIMESLICE_MS = (1, 30)  # TT: 0x01..0x1E; 00 = default, above 30 capped at 30
FREQUENCY_HZ = (63, 960)  # FFF: 0x3F..0x3C0; 000 = default, outside raised or capped
FREQUENCY_MASK = 0x3FF  # NV_REG_STR_RM_PVMRL_FREQUENCY is bits 21:12 in the driver (nvrm_registry.h), 10 bits
AVERAGING_FACTOR = (1, 60)  # AA: 0x01..0x3C; 00 = default (33), above 60 capped at 60


@dataclass(frozen=True)
class SchedulerState:
    """What an RmPVMRL value asks for. None in a field means the driver's default."""

    policy: str  # best-effort | equal-share | fixed-share | unknown
    timeslice_ms: int | None = None
    frequency_hz: int | None = None
    averaging_factor: int | None = None
    mode: str = "none"  # strict (round-robin by frequency) | timeslice (without strict round-robin) | none
    value: str | None = None  # as written; None when no key is set

    def __str__(self) -> str:
        if self.policy == UNKNOWN:
            return f"RmPVMRL={self.value}"
        return label(self.policy, self.timeslice_ms, self.frequency_hz, self.averaging_factor)


def label(
    policy: str, timeslice_ms: int | None = None, frequency_hz: int | None = None, averaging_factor: int | None = None
) -> str:
    """`equal-share`, `fixed-share (24 ms)`, `equal-share (960 Hz, averaging 60)`: how plans show a policy."""
    details = []
    if timeslice_ms:
        details.append(f"{timeslice_ms} ms")
    if frequency_hz:
        details.append(f"{frequency_hz} Hz")
    if averaging_factor:
        details.append(f"averaging {averaging_factor}")
    return policy + (f" ({', '.join(details)})" if details else "")


def parse_label(text: str) -> tuple[str, int | None, int | None, int | None]:
    """The inverse of `label`: (policy, timeslice_ms, frequency_hz, averaging_factor)."""
    policy, _, rest = str(text).partition(" (")
    timeslice = frequency = averaging = None
    for part in filter(None, (p.strip() for p in rest.rstrip(")").split(","))):
        number, _, unit = part.rpartition(" ")
        if unit == "ms":
            timeslice = int(number)
        elif unit == "Hz":
            frequency = int(number)
        elif number == "averaging":
            averaging = int(unit)
        else:
            raise ValueError(f"not a scheduler label: {text!r}")
    return policy, timeslice, frequency, averaging


def encode(
    policy: str, timeslice_ms: int | None = None, frequency_hz: int | None = None, averaging_factor: int | None = None
) -> str | None:
    """The RmPVMRL value for a policy; None (no key) for best effort. Raises ValueError for a bad combination."""
    tuned = any(v is not None for v in (timeslice_ms, frequency_hz, averaging_factor))
    if policy == BEST_EFFORT:
        if tuned:
            raise ValueError("a time slice, frequency or averaging factor applies to equal-share and fixed-share only")
        return None
    if policy not in POLICY_BITS:
        raise ValueError(f"unknown scheduler policy {policy!r} (best-effort, equal-share, fixed-share)")
    base = POLICY_BITS[policy]
    if timeslice_ms is not None:
        if frequency_hz is not None or averaging_factor is not None:
            raise ValueError("timeslice_ms cannot be combined with frequency_hz or averaging_factor")
        _check_range("time slice", timeslice_ms, TIMESLICE_MS, "ms")
        return f"0x{(timeslice_ms << 16) | base | WITHOUT_STRICT_ROUND_ROBIN:08X}"
    if not tuned:
        return f"0x{base:02X}"
    value = base
    if frequency_hz is not None:
        _check_range("scheduling frequency", frequency_hz, FREQUENCY_HZ, "Hz")
        value |= frequency_hz << 12
    if averaging_factor is not None:
        _check_range("averaging factor", averaging_factor, AVERAGING_FACTOR, "")
        value |= averaging_factor << 24
    return f"0x{value:08X}"


def _check_range(what: str, value: int, bounds: tuple[int, int], unit: str) -> None:
    low, high = bounds
    if not low <= value <= high:
        raise ValueError(f"{what} must be {low}..{high}{' ' + unit if unit else ''} (got {value})")


def to_int(value: str | None) -> int | None:
    """The number an RmPVMRL value stands for; None when unset or empty, -1 when it is not a number."""
    if value is None or not value.strip():
        return None
    try:
        return int(value.strip(), 0)  # 0x11 and 17 alike
    except ValueError:
        return -1


def decode(value: str | None) -> SchedulerState:
    """Every documented form; anything else is policy `unknown` and prints as raw hex."""
    n = to_int(value)
    if not n:  # None or 0
        return SchedulerState(BEST_EFFORT, value=value)
    unknown = SchedulerState(UNKNOWN, value=value)
    policy = _policy(n & 0xFF & ~WITHOUT_STRICT_ROUND_ROBIN)
    if n < 0 or policy is None:
        return unknown
    if n & WITHOUT_STRICT_ROUND_ROBIN:
        if n & 0xFF00FF00:  # AA and bits 15:8 are not part of this form
            return unknown
        tt = (n >> 16) & 0xFF
        return SchedulerState(policy, timeslice_ms=min(tt, TIMESLICE_MS[1]) or None, mode="timeslice", value=value)
    if n & 0x00C00F00:  # bits 11:8 are no field; bits 23:22 lie outside the driver's frequency field (21:12)
        return unknown
    fff, aa = (n >> 12) & FREQUENCY_MASK, (n >> 24) & 0xFF
    frequency = min(max(fff, FREQUENCY_HZ[0]), FREQUENCY_HZ[1]) if fff else None
    averaging = min(aa, AVERAGING_FACTOR[1]) if aa else None
    return SchedulerState(policy, frequency_hz=frequency, averaging_factor=averaging, mode="strict", value=value)


def _policy(bits: int) -> str | None:
    return next((name for name, b in POLICY_BITS.items() if b == bits), None)
