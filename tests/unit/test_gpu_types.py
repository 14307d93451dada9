"""What a host reports about its vGPU types, merged with the catalogue (vgpuctl.vsphere.gpu_types)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from vgpuctl.model import ObservedHost, ObservedProfile
from vgpuctl.profiles import observed_profile
from vgpuctl.vsphere import gpu_types

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "fb", "sharing", "cls"),
    [
        ("grid_a100-3-20c", 20, "mig", "compute"),
        ("nvidia_h100l-94c", 94, "timeSliced", "compute"),
        ("grid_a100-1-5cme", 5, "mig", "compute"),
        ("grid_l40s-48q", 48, "timeSliced", "quadro"),
        ("grid_t4-16q", 16, "timeSliced", "quadro"),  # grammar only
        ("nvidia_rtx_pro_6000_blackwell_dc-4-96q", 0, "timeSliced", "compute"),  # nothing explains it
    ],
)
def test_profile_from_name(name: str, fb: int, sharing: str, cls: str) -> None:
    p = observed_profile(name)
    assert (p.fb_gb, p.sharing, p.profile_class) == (fb, sharing, cls)


class _Session:
    def __init__(self) -> None:
        self.calls = 0

    def invoke(self, fn: Any) -> Any:
        self.calls += 1
        return fn()


def _gm(profiles: list[Any], devices: list[Any]) -> SimpleNamespace:
    return SimpleNamespace(RetrieveVgpuProfileInfo=lambda: profiles, RetrieveVgpuDeviceInfo=lambda: devices)


def test_retrieve_is_one_round_trip_each_and_the_host_wins() -> None:
    infos = [
        SimpleNamespace(profileName="grid_a100x-40c", fbSizeInGib=40, profileSharing="timeSliced",
                        profileClass="compute"),
        SimpleNamespace(profileName="nvidia_rtx_pro_6000_blackwell_dc-4-96q", fbSizeInGib=24,
                        profileSharing="timeSliced", profileClass="quadro"),
        SimpleNamespace(profileName="grid_a100x-1-5cme", fbSizeInGib=None, profileSharing=None, profileClass=None),
    ]
    devices = [SimpleNamespace(deviceName="NVIDIA A100-SXM4-40GB", maxFbSizeInGib=40, timeSlicedCapable=True,
                               migCapable=True, computeProfileCapable=True, quadroProfileCapable=False)]
    session = _Session()
    reported = gpu_types.retrieve_profiles(session, _gm(infos, devices))
    assert session.calls == 1
    assert reported["grid_a100x-1-5cme"] == ObservedProfile("grid_a100x-1-5cme", 5, "mig", "compute")
    assert gpu_types.retrieve_devices(session, _gm(infos, devices)) == [
        gpu_types.HostDeviceInfo("NVIDIA A100-SXM4-40GB", 40, True, True, True, False)
    ]
    assert session.calls == 2
    merged = gpu_types.merge([*reported, "grid_zz-odd"], reported)
    assert merged["grid_a100x-40c"].row is not None and merged["grid_a100x-40c"].row.max_equal == 1
    blackwell = merged["nvidia_rtx_pro_6000_blackwell_dc-4-96q"]
    assert (blackwell.fb_gb, blackwell.reported, blackwell.row, blackwell.explained) == (24, True, None, True)
    assert not merged["grid_zz-odd"].explained
    assert gpu_types.unexplained(merged, reported) == ["grid_zz-odd"]


def test_host_types_need_no_round_trip() -> None:
    host = ObservedHost("h", offered_profiles=["grid_a100-40c", "grid_a100-20c"],
                        profiles={"grid_a100-40c": ObservedProfile("grid_a100-40c", 39)})
    types = gpu_types.host_types(host)
    assert types["grid_a100-40c"].fb_gb == 39 and types["grid_a100-40c"].reported  # the host's figure wins
    assert types["grid_a100-20c"].fb_gb == 20 and not types["grid_a100-20c"].reported
    assert types["grid_a100-20c"].row is not None and types["grid_a100-20c"].row.max_mixed == 2
