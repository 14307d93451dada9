"""What a host says about its vGPU types, merged with the vGPU type catalogue.

The host is the authority for what it reports: `config.sharedPassthruGpuTypes` (the names it offers, read by
the bulk observe), `RetrieveVgpuProfileInfo` (framebuffer, sharing and class per profile; API 7.0.3) and
`RetrieveVgpuDeviceInfo` (per GPU model: largest framebuffer, time-sliced and MIG capability). The catalogue
(vgpuctl.profiles) adds what the API does not say: maxima per GPU, mixed-size placement, MIG geometry.
Each Retrieve call is one round trip per host; observe makes it once per distinct host configuration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from vgpuctl.lazyclass import dataclass
from vgpuctl.model import ObservedHost, ObservedProfile
from vgpuctl.profiles import VgpuType, observed_profile, try_parse

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

PROFILE_INFO_API = (7, 0, 3)  # RetrieveVgpuProfileInfo and RetrieveVgpuDeviceInfo


@dataclass(frozen=True)
class HostGpuType:
    """One offered vGPU type: the host's figures where it gave them, the catalogue row for the rest."""

    name: str  # as the host spells it
    fb_gb: float  # 0 when neither the host nor any table says
    sharing: str  # timeSliced | mig
    profile_class: str  # compute | quadro
    board: str | None
    row: VgpuType | None  # catalogue row (maxima, placement), None when the catalogue lacks the type
    reported: bool  # the host described it (RetrieveVgpuProfileInfo)

    @property
    def explained(self) -> bool:
        """Whether anything (host or catalogue) says what this type is."""
        return self.reported or self.row is not None


@dataclass(frozen=True)
class HostDeviceInfo:
    """One GPU model as RetrieveVgpuDeviceInfo describes it."""

    device_name: str
    max_fb_gb: int
    time_sliced: bool
    mig: bool
    compute: bool
    quadro: bool


def profile_from_info(info: Any) -> ObservedProfile:
    """One vim.vm.VgpuProfileInfo; fields the host leaves empty come from the name."""
    name = str(info.profileName)
    fallback = observed_profile(name)
    return ObservedProfile(
        name=name,
        fb_gb=int(getattr(info, "fbSizeInGib", 0) or fallback.fb_gb),
        sharing=str(getattr(info, "profileSharing", None) or fallback.sharing),
        profile_class=str(getattr(info, "profileClass", None) or fallback.profile_class),
    )


def device_from_info(info: Any) -> HostDeviceInfo:
    return HostDeviceInfo(
        device_name=str(getattr(info, "deviceName", "") or ""),
        max_fb_gb=int(getattr(info, "maxFbSizeInGib", 0) or 0),
        time_sliced=bool(getattr(info, "timeSlicedCapable", False)),
        mig=bool(getattr(info, "migCapable", False)),
        compute=bool(getattr(info, "computeProfileCapable", False)),
        quadro=bool(getattr(info, "quadroProfileCapable", False)),
    )


def retrieve_profiles(session: Session, graphics_manager: Any) -> dict[str, ObservedProfile]:
    """RetrieveVgpuProfileInfo on one host (one round trip): name -> what the host says."""
    infos = session.invoke(graphics_manager.RetrieveVgpuProfileInfo) or []
    return {str(i.profileName): profile_from_info(i) for i in infos}


def retrieve_devices(session: Session, graphics_manager: Any) -> list[HostDeviceInfo]:
    """RetrieveVgpuDeviceInfo on one host (one round trip)."""
    return [device_from_info(i) for i in session.invoke(graphics_manager.RetrieveVgpuDeviceInfo) or []]


def merge(offered: Iterable[str], reported: Mapping[str, ObservedProfile]) -> dict[str, HostGpuType]:
    """Each offered name with the host's figures (they win) and its catalogue row."""
    out: dict[str, HostGpuType] = {}
    for name in offered:
        parsed = try_parse(name)
        host = reported.get(name)
        named = observed_profile(name)
        said = host is not None and host.fb_gb > 0
        out[name] = HostGpuType(
            name=name,
            fb_gb=host.fb_gb if said and host is not None else named.fb_gb,
            sharing=(host or named).sharing,
            profile_class=(host or named).profile_class,
            board=parsed.board if parsed is not None else None,
            row=parsed.vgpu_type if parsed is not None else None,
            reported=said,
        )
    return out


def host_types(host: ObservedHost) -> dict[str, HostGpuType]:
    """The host's offered types merged with the catalogue, from what observe already read (no round trip)."""
    return merge(host.offered_profiles, host.profiles)


def unexplained(names: Iterable[str], reported: Mapping[str, ObservedProfile] | None = None) -> list[str]:
    """Names neither the host (a framebuffer in `reported`) nor the catalogue or the name grammar explains."""
    reported = reported or {}
    return sorted(
        {n for n in names if try_parse(n) is None and not (n in reported and reported[n].fb_gb > 0)}
    )
