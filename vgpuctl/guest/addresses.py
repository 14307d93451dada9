"""Guest IP addresses from vSphere: one bulk property read per poll, whatever the number of VMs."""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgpuctl import filelimits
from vgpuctl.errors import UsageError

if TYPE_CHECKING:
    from vgpuctl.vsphere.session import Session

_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:-]*")
VM_PROPS = ["name", "guest.ipAddress", "guest.net"]
Progress = Callable[[dict[str, str | None]], None]


def pick_address(primary: Any, nics: Any) -> str | None:
    """The guest's primary IPv4 address, else the first routable IPv4 of its NICs, else an IPv6 one."""
    candidates: list[str] = []
    if primary:
        candidates.append(str(primary))
    for nic in nics or []:
        candidates.extend(str(a) for a in (getattr(nic, "ipAddress", None) or []))
    usable = []
    for text in candidates:
        try:
            ip = ipaddress.ip_address(text.split("%")[0])
        except ValueError:
            continue
        if ip.is_loopback or ip.is_link_local or ip.is_unspecified:
            continue
        usable.append(ip)
    v4 = [ip for ip in usable if ip.version == 4]
    best = (v4 or usable or [None])[0]
    return str(best) if best is not None else None


def read_addresses(session: Session, names: Iterable[str]) -> dict[str, str | None]:
    """VM name -> guest address (None when vSphere knows none yet) for the given VMs, in one read."""
    from vgpuctl.vsphere.observe import retrieve_all

    wanted = set(names)
    found: dict[str, str | None] = dict.fromkeys(wanted)
    for obj in retrieve_all(session, [("VirtualMachine", VM_PROPS)]).values():
        name = obj.get("name")
        if name in wanted:
            found[name] = pick_address(obj.get("guest.ipAddress"), obj.get("guest.net"))
    return found


def wait_for_addresses(
    read: Callable[[], dict[str, str | None]],
    *,
    timeout_s: float,
    poll_s: float = 5.0,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, str | None]:
    """Poll `read` until every VM has an address or `timeout_s` passed; returns the last reading (VMs still
    without an address map to None and are reported by the deploy as unreachable)."""
    deadline = clock() + timeout_s
    while True:
        current = read()
        if progress is not None:
            progress(current)
        if all(current.values()) or clock() >= deadline:
            return current
        sleep(min(poll_s, max(deadline - clock(), 0.0)))


def load_address_file(path: Path) -> dict[str, str | None]:
    """A YAML/JSON mapping of VM name to address (IP or DNS name), for guests not read from vSphere; read within
    the limits an inventory is (size, nesting: InventoryError FILE:LINE:COL), and only from a regular file."""
    from vgpuctl.inventory.yamlpos import read_yaml_text

    try:
        text = filelimits.read_regular_text(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (filelimits.NotAFile, filelimits.FileTooLarge) as err:
        raise UsageError(f"{path}: {err}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    except OSError as err:
        raise UsageError(f"{path}: {err.strerror or err}") from None
    data = read_yaml_text(text, str(path)).data
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise UsageError(f"{path}: expected a mapping of VM name to IP address")
    out: dict[str, str | None] = {}
    for name, value in data.items():
        if value is not None and not _HOST.fullmatch(str(value)):
            raise UsageError(f"{path}: {name}: {value!r} is not an IP address or host name")
        out[name] = str(value) if value is not None else None
    return out
