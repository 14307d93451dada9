"""One authenticated vCenter session per run: TLS policy, round-trip counting, re-login on expiry.

TLS is verified by default against the system CAs (or `ca_file`). A pinned sha256 `thumbprint` replaces CA
verification: every new TLS connection of the session compares the server certificate's digest with it
(pyVmomi's own pinning is only consulted when CA verification fails, so it is not used). `insecure` turns
verification off; the CLI warns about it.

pyVmomi is imported lazily so that importing this module stays cheap for the CLI.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import logging
import os
import re
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import field
from typing import Any, Protocol, TypeVar, cast
from urllib.parse import unquote, urlsplit, urlunsplit

from vgpuctl import trace
from vgpuctl.errors import AuthenticationError, ConnectionFailure, TlsError, UsageError
from vgpuctl.lazyclass import dataclass

log = logging.getLogger(__name__)

T = TypeVar("T")

# Namespace used for the very first call (RetrieveServiceContent); every vCenter still accepts it. The
# session then moves to the newest namespace pyVmomi knows that the server's about.apiVersion allows.
_BOOTSTRAP_NAMESPACE = "vim25/6.0"

DEFAULT_TIMEOUT_S = 30.0  # fails fast on a vCenter that does not answer; each bulk read is pages of PAGE_SIZE objects
TIMEOUT_HINT = "--timeout or VGPUCTL_TIMEOUT"


@dataclass(frozen=True)
class ConnectionSettings:
    url: str
    username: str
    password: str = field(default="", repr=False)
    insecure: bool = False
    ca_file: str | None = None
    thumbprint: str | None = None  # sha256 of the server certificate (hex, colons allowed)
    timeout_s: float = DEFAULT_TIMEOUT_S  # to connect, and to wait for each answer
    esxi_timeout_s: float | None = None  # each ESXi shell command and its connection (None: the shell's default)

    @property
    def sdk_url(self) -> str:
        return normalize_url(self.url)

    @property
    def pinned_sha256(self) -> str | None:
        return normalize_thumbprint(self.thumbprint) if self.thumbprint else None


@dataclass(frozen=True)
class VcenterUrl:
    """A vCenter URL as given, taken apart once: the URL without user info, and the user info (govc style)."""

    url: str  # scheme, host, port and path: nothing secret
    username: str | None = None
    password: str | None = field(default=None, repr=False)


def parse_url(text: str) -> VcenterUrl:
    """Take a vCenter URL apart; any problem is a UsageError that never repeats the user info.

    `vc.example.com` -> `https://vc.example.com/sdk`; `https://user:pass@vc/sdk` -> the URL without
    `user:pass@`, and the user and password (percent-decoded).
    """
    shown = without_user_info(text)
    try:
        parts = urlsplit(text.strip() if "://" in text else "https://" + text.strip())
        host, port = parts.hostname or "", parts.port
    except ValueError as err:  # a port beyond 65535 or not a number, an unclosed or invalid IPv6 literal
        raise UsageError(f"vCenter URL {shown!r} is not valid: {_reason(err)}") from None
    if parts.scheme not in ("https", "http"):
        raise UsageError(f"vCenter URL must use https: {shown!r}")
    if not host:
        raise UsageError(f"vCenter URL has no host: {shown!r}")
    if port == 0:
        raise UsageError(f"vCenter URL {shown!r} is not valid: port 0")
    if any(c.isspace() or c in '<>"{}|\\^`' for c in host):
        raise UsageError(f"vCenter URL {shown!r} is not valid: the host name {host!r} has characters no host name has")
    netloc = f"[{host}]" if ":" in host else host
    if port:
        netloc += f":{port}"
    path = parts.path if parts.path not in ("", "/") else "/sdk"
    return VcenterUrl(
        url=urlunsplit((parts.scheme, netloc, path, "", "")),
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )


def normalize_url(url: str) -> str:
    """`vc.example.com` -> `https://vc.example.com/sdk`; user info (govc style) is dropped."""
    return parse_url(url).url


def without_user_info(url: str) -> str:
    """The URL with any `user:password@` taken out, for messages: everything between the scheme and the last `@`
    goes, since a password may hold `@`, `/`, `?` or `#` (a URL that does not parse is shown this way too)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" not in rest:
        return url
    return scheme + sep + rest.rpartition("@")[2]


def _reason(err: ValueError) -> str:
    text = str(err)
    if "out of range" in text:
        return "the port must be 1 to 65535"
    if "IPv6" in text or "bracket" in text.lower() or "IPv4" in text:
        return "the IPv6 address in brackets is broken"
    if "cast to integer" in text:
        return "the port is not a number"
    return text


def parse_timeout(text: str | float) -> float:
    """A timeout in seconds from an option or environment variable: a positive number."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"timeout must be a number of seconds (got {text!r})") from None
    if not value > 0 or value == float("inf"):
        raise UsageError(f"timeout must be more than 0 seconds (got {text!r})")
    return value


def normalize_thumbprint(thumbprint: str) -> str:
    digest = thumbprint.replace(":", "").replace(" ", "").lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise UsageError("TLS thumbprint must be a SHA-256 digest: 64 hex digits, colons allowed")
    return digest


def sha256_colon(digest_hex: str) -> str:
    return ":".join(digest_hex[i : i + 2] for i in range(0, len(digest_hex), 2)).upper()


def ssl_context(settings: ConnectionSettings) -> ssl.SSLContext:
    if settings.insecure or settings.pinned_sha256:
        # create_default_context's context without the system's CA store, which nothing here verifies against
        # (a pinned thumbprint is checked on connect) and which takes tens of milliseconds to load
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        keylog = os.environ.get("SSLKEYLOGFILE")
        if keylog and not sys.flags.ignore_environment:
            ctx.keylog_filename = keylog
        return ctx
    try:
        return ssl.create_default_context(cafile=settings.ca_file)
    except (OSError, ssl.SSLError) as err:
        raise TlsError(f"cannot load CA file {settings.ca_file}: {err}") from err


def pinned_connection_class(expected: str, url: str) -> type[http.client.HTTPSConnection]:
    class PinnedHTTPSConnection(http.client.HTTPSConnection):
        def connect(self) -> None:
            super().connect()
            der = self.sock.getpeercert(binary_form=True) or b""
            actual = hashlib.sha256(der).hexdigest()
            if actual != expected:
                self.close()
                raise TlsError(
                    f"TLS thumbprint mismatch for {url}: expected {sha256_colon(expected)}, "
                    f"server presented {sha256_colon(actual)}"
                )

    return PinnedHTTPSConnection


class EarlyAnswers(Protocol):
    """Answers to requests sent before the session existed (vgpuctl.vsphere.earlyread.EarlyRead)."""

    settings: ConnectionSettings
    claimed: bool

    @property
    def pending(self) -> bool: ...

    def take(self, action: str, body: bytes) -> Any: ...  # None, or its answer to come (`result()`)

    def idle_connections(self) -> list[Any]: ...  # open connections no answer is coming on, for the stub's pool

    def end(self) -> None: ...


_early: list[EarlyAnswers] = []  # the process's early read, until a session takes it or the process ends


def offer_early_read(early: EarlyAnswers) -> None:
    """The first session opened with the same settings takes these answers (the console script's early read)."""
    _early[:] = [early]


def end_early_read() -> None:
    """At the end of the process: the early read stops, and its session is closed unless a session took it."""
    while _early:
        _early.pop().end()


def same_connection(a: ConnectionSettings, b: ConnectionSettings) -> bool:
    return (a.sdk_url, a.username, a.password, a.insecure, a.ca_file, a.pinned_sha256, a.timeout_s) == (
        b.sdk_url, b.username, b.password, b.insecure, b.ca_file, b.pinned_sha256, b.timeout_s)


def _claim_early_read(settings: ConnectionSettings) -> EarlyAnswers | None:
    """The early read for a session with these settings, once; one made with other settings is ended."""
    if not _early or _early[0].claimed:
        return None
    if not same_connection(_early[0].settings, settings):
        end_early_read()
        return None
    _early[0].claimed = True
    return _early[0]


def _counting_stub_class() -> type:
    from pyVmomi.SoapAdapter import SoapStubAdapter

    class CountingStub(SoapStubAdapter):
        """Counts every SOAP request (property reads through accessors go through InvokeMethod too)."""

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.round_trips = 0
            self._count_lock = threading.Lock()
            self.early: EarlyAnswers | None = None  # answers sent before the session: see `sent_early`

        def count_round_trip(self) -> None:
            with self._count_lock:
                self.round_trips += 1

        def sent_early(self, request: bytes) -> Any:
            """The early read's sending of this exact request (vgpuctl.vsphere.earlyread): its answer comes with
            `result()`; None when it did not send it."""
            early = self.early
            if early is None:
                return None
            if not early.pending:
                self.early = None
                for conn in early.idle_connections():  # this request and the next go on them, no new handshake
                    self.ReturnConnection(conn)
                return None
            return early.take(self.versionId, request)

        def InvokeMethod(self, mo, info, args, outerStub=None):
            self.count_round_trip()
            trace.soap_call(mo, info, args)
            start = time.monotonic()
            try:
                sent = self.sent_early(self.SerializeRequest(mo, info, args)) if self.early else None
                if sent is not None:
                    result = _early_result(self, sent.result(), info, outerStub or self)
                else:
                    result = super().InvokeMethod(mo, info, args, outerStub)
            except BaseException as err:
                trace.soap_result(info, time.monotonic() - start, err)
                raise
            trace.soap_result(info, time.monotonic() - start)
            return result

    return CountingStub


def _early_result(stub: Any, answer: Any, info: Any, outer: Any) -> Any:
    """An early answer handled as pyVmomi's InvokeMethod handles the one it reads: its session cookie kept, a 200
    answer's result returned, a 500 answer's fault raised, any other status an HTTPException."""
    from http.cookies import SimpleCookie

    from pyVmomi.SoapAdapter import COOKIE_NAME, SoapResponseDeserializer, StubAdapterBase

    if answer.cookie:
        stub.cookie = answer.cookie
        morsel = SimpleCookie(answer.cookie).get(COOKIE_NAME)
        if morsel:
            StubAdapterBase.SetSessionId(stub, morsel.value)
    if answer.status not in (200, 500):
        raise http.client.HTTPException(f"{answer.status} {answer.reason}")
    obj = SoapResponseDeserializer(outer).Deserialize(io.BytesIO(answer.body), info.result)
    if answer.status == 200:
        return obj
    if not isinstance(obj, BaseException):
        raise http.client.HTTPException(f"{answer.status} {answer.reason}: not a fault")
    raise obj


def _version_tuple(text: str) -> tuple[int, ...] | None:
    if not re.fullmatch(r"\d+(\.\d+)*", text):
        return None
    return tuple(int(p) for p in text.split("."))


def pick_vim_version(api_version: str) -> str:
    """The newest vim25 namespace pyVmomi knows that is not newer than the server's apiVersion."""
    from pyVmomi import VmomiSupport

    server = _version_tuple(api_version) or (6, 0)
    best: tuple[tuple[int, ...], str] | None = None
    for ns, name in VmomiSupport.versionMap.items():
        if not ns.startswith("vim25/"):
            continue
        ver = _version_tuple(ns.split("/", 1)[1])
        if ver is None or ver > server + (0,) * (len(ver) - len(server)):
            continue
        if best is None or ver > best[0]:
            best = (ver, name)
    return best[1] if best else VmomiSupport.versionMap[_BOOTSTRAP_NAMESPACE]


class Session:
    """A logged-in vCenter session. Use `open_session`; it is a context manager that logs out on exit."""

    def __init__(self, settings: ConnectionSettings):
        from pyVmomi import VmomiSupport, vim

        self.settings = settings
        self.url = settings.sdk_url
        if self.url.startswith("http:") and not settings.insecure:
            raise UsageError(f"{self.url} is plain http: the password would cross the network in clear; use https")
        self._login_lock = threading.Lock()
        self._generation = 0
        self._kept: dict[str, tuple[int, Any]] = {}  # per-login server objects (a view): see `kept`
        self._closers: list[Callable[[], None]] = []  # what ends with the session (a REST login): see `at_close`
        self.session_key = ""
        self._closed = False
        stub_class = _counting_stub_class()
        kwargs: dict[str, Any] = {
            "url": self.url,
            "version": VmomiSupport.versionMap[_BOOTSTRAP_NAMESPACE],
            "poolSize": 16,
            "httpConnectionTimeout": settings.timeout_s,
        }
        if self.url.startswith("https:"):
            kwargs["sslContext"] = ssl_context(settings)
        self._stub = stub_class(**kwargs)
        pinned = settings.pinned_sha256
        if pinned:
            self._stub.scheme = pinned_connection_class(pinned, self.url)
        self._stub.early = _claim_early_read(settings)
        self.si = vim.ServiceInstance("ServiceInstance", self._stub)
        self.content: Any = self._call(self.si.RetrieveContent)  # vim.ServiceContent
        self.api_version = str(self.content.about.apiVersion)
        self._stub.ComputeVersionInfo(pick_vim_version(self.api_version))
        self._login()

    # ------------------------------------------------------------------ public

    @property
    def round_trips(self) -> int:
        return self._stub.round_trips

    @property
    def stub(self) -> Any:
        return self._stub

    @property
    def generation(self) -> int:
        """How many times the session was renewed; objects a server keeps per session (views) die with it."""
        return self._generation

    def kept(self, key: str, make: Callable[[], T]) -> T:
        """A server object made once per login and reused (observe's ContainerView): made again after the session
        is renewed, since it died with the old one; Logout ends it with the session."""
        with self._login_lock:
            generation = self._generation
            found = self._kept.get(key)
            if found is not None and found[0] == generation:
                return cast(T, found[1])
        made = make()  # tagged with the login it began under: a renewal meanwhile makes it again next time
        with self._login_lock:
            self._kept[key] = (generation, made)
        return made

    def forget(self, key: str) -> None:
        """The server object `kept` under `key` is gone: the next `kept` makes it again."""
        with self._login_lock:
            self._kept.pop(key, None)

    def at_close(self, fn: Callable[[], None]) -> None:
        """Run `fn` when the session closes (before its logout): what a run opened beside it, a REST login."""
        self._closers.append(fn)

    def invoke(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call `fn`; on NotAuthenticated log in once more and retry once, then fail clearly."""
        from pyVmomi import vim

        generation = self._generation
        try:
            return self._call(fn, *args, **kwargs)
        except vim.fault.NotAuthenticated:
            log.info("vCenter session expired; logging in again")
        self._relogin(generation)
        try:
            return self._call(fn, *args, **kwargs)
        except vim.fault.NotAuthenticated as err:
            raise AuthenticationError(
                f"vCenter at {self.url} rejected the session again right after a new login ({_msg(err)})"
            ) from err

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fn in self._closers:
            try:
                fn()
            except Exception as err:  # what ends with the session must not hide the run's own result
                log.debug("closing %s failed: %s", fn, err)
        try:
            manager = self.content.sessionManager
            if manager is not None:
                manager.Logout()
        except Exception as err:  # a failed logout must not hide the run's own result
            log.debug("logout failed: %s", err)
        finally:
            self._stub.DropConnections()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session(url={self.url!r}, user={self.settings.username!r}, round_trips={self.round_trips})"

    # ----------------------------------------------------------------- private

    def _login(self) -> None:
        from pyVmomi import vim

        manager = self.content.sessionManager
        if manager is None:
            raise ConnectionFailure(f"{self.url} is not a vCenter SOAP endpoint (no session manager)")

        trace.add_secret(self.settings.password)
        try:
            user_session = self._call(manager.Login, self.settings.username, self.settings.password)
            self.session_key = str(getattr(user_session, "key", "") or "")  # HasPrivilegeOnEntities asks for it
            trace.add_cookie(getattr(self._stub, "cookie", None))
        except vim.fault.InvalidLogin as err:
            raise AuthenticationError(
                f"login to {self.url} as {self.settings.username!r} failed: wrong user name or password"
            ) from err

    def _relogin(self, generation: int) -> None:
        with self._login_lock:
            if self._generation != generation:
                return  # another thread renewed the session meanwhile
            # Log in without the old cookie: a server that still knows it would refuse a second Login.
            self._stub.SetSessionId(None)
            self._login()
            self._generation += 1

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one SOAP call, turning transport failures into ConnectionFailure/TlsError."""
        try:
            return fn(*args, **kwargs)
        except TlsError:
            raise
        except ssl.SSLCertVerificationError as err:
            seen = presented_thumbprint(self.url, self.settings.timeout_s)
            pin = (
                f"; it presented sha256 {seen}: check it with your vCenter admin, then pin it with "
                "--thumbprint (or vcenter.tls.thumbprint)"
                if seen
                else "; pin its sha256 thumbprint"
            )
            raise TlsError(
                f"TLS certificate of {self.url} is not trusted ({err.verify_message}){pin}, give a CA file "
                "(--ca-file), or use --insecure"
            ) from err
        except ssl.SSLError as err:
            raise TlsError(f"TLS handshake with {self.url} failed: {err}") from err
        except TimeoutError as err:
            raise ConnectionFailure(
                f"no answer from vCenter at {self.url} within {self.settings.timeout_s:g} s (set {TIMEOUT_HINT} "
                "to wait longer)"
            ) from err
        except (ConnectionError, socket.gaierror, http.client.HTTPException) as err:
            raise ConnectionFailure(f"cannot reach vCenter at {self.url}: {_transport_msg(err)}") from err
        except OSError as err:
            raise ConnectionFailure(f"cannot reach vCenter at {self.url}: {_transport_msg(err)}") from err


def presented_thumbprint(url: str, timeout: float = 10) -> str | None:
    """The sha256 thumbprint (colon form) of the certificate the server at `url` presents, read without
    verifying it, for the message of a TLS failure; None when it cannot be read."""
    parts = urlsplit(url)
    try:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with (
            socket.create_connection((parts.hostname or "", parts.port or 443), timeout=timeout) as raw,
            ctx.wrap_socket(raw, server_hostname=parts.hostname) as tls,
        ):
            der = tls.getpeercert(binary_form=True) or b""
    except (OSError, ValueError):
        return None
    return sha256_colon(hashlib.sha256(der).hexdigest()) if der else None


def _transport_msg(err: BaseException) -> str:
    if isinstance(err, socket.gaierror):
        return f"name resolution failed ({err.strerror})"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, TimeoutError | socket.timeout):
        return "timed out"
    text = str(err) or type(err).__name__
    return text


def _msg(err: BaseException) -> str:
    return getattr(err, "msg", None) or str(err) or type(err).__name__


def open_session(settings: ConnectionSettings) -> Session:
    """Connect and log in. The returned Session is a context manager: `with open_session(s) as session:`."""
    if settings.insecure:
        log.info("TLS verification is off for %s", settings.sdk_url)
    return Session(settings)
