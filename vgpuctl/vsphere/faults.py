"""vCenter faults -> (vim type name, message), and VsphereFault from them."""

from __future__ import annotations

from typing import Any

from vgpuctl.errors import VsphereFault


def fault_type(fault: Any) -> str:
    """`vim.fault.InsufficientResourcesFault`-style name of a pyVmomi fault (or the Python type otherwise)."""
    name = type(fault).__name__
    if "." in name:
        return name
    return f"{type(fault).__module__}.{name}" if not type(fault).__module__.startswith("builtins") else name


def fault_message(fault: Any) -> str:
    messages = [str(m.message) for m in (getattr(fault, "faultMessage", None) or []) if getattr(m, "message", None)]
    for attr in ("msg", "localizedMessage"):
        text = getattr(fault, attr, None)
        if text:
            messages.insert(0, str(text))
            break
    if not messages:
        text = str(fault) if not hasattr(fault, "_wsdlName") else ""
        messages.append(text or type(fault).__name__.rsplit(".", 1)[-1])
    seen: list[str] = []
    for m in messages:
        if m not in seen:
            seen.append(m)
    return "; ".join(seen)


def to_error(fault: Any, obj: str | None = None) -> VsphereFault:
    from pyVmomi import vim

    privilege = getattr(fault, "privilegeId", None)
    return VsphereFault(fault_type(fault), fault_message(fault), obj, str(privilege) if privilege else None,
                        lacks_resources=isinstance(fault, vim.fault.InsufficientResourcesFault))


def cause(err: VsphereFault) -> str:
    """A fault as the cause of something unread, the same on every host it hit: its short type and the missing
    privilege, or its message."""
    short = err.fault_type.rsplit(".", 1)[-1]
    return f"{short}: {err.privilege} missing" if err.privilege else f"{short}: {err.fault_message}"
