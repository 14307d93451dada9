"""The `-vv` trace: one debug line per SOAP call and per ESXi shell command, secrets redacted.

Logged on the `vgpuctl.trace` logger (debug level, which `-vv` turns on). Arguments whose name says they are
secret (passwords, session ids and cookies, tokens) and option values after `password`/`token` words in shell
commands are replaced by `***`; any value registered with `add_secret` (the vCenter password of the run, the
session cookie) is replaced wherever it appears.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

log = logging.getLogger("vgpuctl.trace")
REDACTED = "***"
SECRET_NAMES = re.compile(r"pass(word)?|secret|token|cookie|session_?id|credential|key_?passphrase", re.IGNORECASE)
_SECRET_VALUES: set[str] = set()
_LOCK = threading.Lock()
_SHELL_SECRET = re.compile(r"((?:--?)?[\w.-]*(?:password|passwd|token|secret)[\w.-]*[= ]+)(\S+)", re.IGNORECASE)
MAX_VALUE = 120


def enabled() -> bool:
    return log.isEnabledFor(logging.DEBUG)


def add_secret(value: str | None) -> None:
    """Redact this value from every later trace line (a password, a session cookie)."""
    if value and len(value) >= 4:
        with _LOCK:
            _SECRET_VALUES.add(value)


def add_cookie(cookie: str | None) -> None:
    """Redact a session cookie: the whole header value and the id inside it."""
    add_secret(cookie)
    for value in re.findall(r'=\s*"?([^";\s]{8,})"?', cookie or ""):
        add_secret(value)


def registered_secrets() -> list[str]:
    """The values `add_secret` registered, longest first (the order `redact` replaces them in)."""
    with _LOCK:
        return sorted(_SECRET_VALUES, key=len, reverse=True)


def redact(text: str) -> str:
    """`text` with every registered secret value replaced."""
    for secret in registered_secrets():
        text = text.replace(secret, REDACTED)
    return text


# A URL's user info: all up to the last @ before a space, a quote or an angle bracket (a password may hold @, /,
# ? or #), with the `://` before it (kept when the user info is cut out). A pattern that starts with its literal
# is searched for that literal first, about 20x faster over the record of a large plan than a look-behind tried
# at every character.
URL_USER_INFO = re.compile(r"(://)[^\s\"'<>]*@")
# govc's form without a scheme, at the start of a value: user:password@vc
_SCHEMELESS_USER_INFO = re.compile(r"[^/?#@\s:]+:[^\s\"'<>]*@")


def holds_url_user_info(value: str) -> bool:
    """Whether a value holds a URL with user info (https://user:password@vc/sdk) or is govc's form without a
    scheme (user:password@vc)."""
    return URL_USER_INFO.search(value) is not None or _SCHEMELESS_USER_INFO.match(value) is not None


def without_url_user_info(text: str) -> str:
    """`text` with the user info of every URL in it cut out (https://vc/sdk of https://user:password@vc/sdk)."""
    return URL_USER_INFO.sub(r"\1", text)


def _short(value: Any) -> str:
    text = " ".join(str(getattr(value, "_moId", None) or repr(value)).split())  # data objects repr on many lines
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 3] + "..."


def soap_arguments(info: Any, args: Any) -> str:
    """`name=value, ...` of one SOAP call's arguments, secret ones as ***."""
    params = list(getattr(info, "params", None) or [])
    parts = []
    for i, value in enumerate(args or ()):
        name = str(getattr(params[i], "name", f"arg{i}")) if i < len(params) else f"arg{i}"
        shown = REDACTED if SECRET_NAMES.search(name) and value is not None else _short(value)
        parts.append(f"{name}={shown}")
    return ", ".join(parts)


def soap_call(mo: Any, info: Any, args: Any) -> None:
    if not enabled():
        return
    target = f"{type(mo).__name__.split('.')[-1]}:{getattr(mo, '_moId', '?')}"
    log.debug(redact(f"SOAP -> {target}.{getattr(info, 'wsdlName', '?')}({soap_arguments(info, args)})"))


def soap_result(info: Any, elapsed_s: float, error: BaseException | None = None) -> None:
    if not enabled():
        return
    outcome = f"fault {type(error).__name__}" if error is not None else "ok"
    log.debug(redact(f"SOAP <- {getattr(info, 'wsdlName', '?')}: {outcome} in {elapsed_s * 1000:.0f} ms"))


def shell_command(host: str, command: str) -> None:
    if enabled():
        log.debug(redact(f"SSH {host} $ {_SHELL_SECRET.sub(lambda m: m[1] + REDACTED, command)}"))


def shell_result(host: str, status: int, elapsed_s: float) -> None:
    if enabled():
        log.debug(f"SSH {host} exit {status} in {elapsed_s * 1000:.0f} ms")
