"""The early read: `vgpuctl plan`'s login and bulk read, sent while the command's modules are still loading.

A plan process spends its first half second importing modules and reading the inventory before it would connect,
and the bulk read (observe) is most of what it then waits for. When the environment alone fixes the connection
(URL, user, password, TLS: the flags and environment win over the inventory, and no flag that changes them is
given), the console script starts this reader first: a thread that logs in and sends the requests observe will
send (RetrieveServiceContent, Login, CreateContainerView, the small types' read, the hosts' and the VMs' reads,
each next page as soon as the page before names its token), with the standard library only, and keeps each
answer as bytes.

The run then uses an answer only for a request it makes itself: the session's stub and the lean reader look up
each request they are about to send, by its SOAP action and its exact bytes (serialized by pyVmomi as always), and
take the answer instead of sending it. So what is read, and how each answer is handled (a fault raised with its
type and message, a transport error reported as the run's own), is the run's own, byte for byte; a request this
reader made that the run never makes (another version, other properties, a setting that differs) is not used. The
run takes the early read only when its connection settings equal the reader's (`claim`); otherwise, and whenever
the process ends without taking its login, the reader's session is logged out (`end`). VGPUCTL_EARLY_READ=0 turns
it off; -v does too (the trace and the logs show every call as the run makes it).
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import threading
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit

from vgpuctl.errors import UsageError
from vgpuctl.lazyclass import dataclass
from vgpuctl.vsphere import readlist
from vgpuctl.vsphere.rawread import LeadingToken
from vgpuctl.vsphere.session import (
    DEFAULT_TIMEOUT_S,
    ConnectionSettings,
    normalize_thumbprint,
    offer_early_read,
    parse_timeout,
    parse_url,
    pinned_connection_class,
    ssl_context,
)

log = logging.getLogger(__name__)

SESSION_COOKIE = "vmware_soap_session"
BOOTSTRAP_VERSION = "6.0"  # the session's first call (vgpuctl.vsphere.session)
# The vim25 API versions pyVmomi serializes (VmomiSupport.versionMap; a test keeps the two equal): the run moves to
# the newest one not newer than the server's apiVersion, and so does this reader.
VIM25_VERSIONS = ("2.5", "4.0", "4.1", "5.0", "5.1", "5.5", "6.0", "6.5", "6.7", "6.7.1", "6.7.2", "6.7.3", "6.8.7",
                  "6.9.1", "7.0.0.0", "7.0.0.2", "7.0.1.0", "7.0.1.1", "7.0.2.0", "7.0.2.1", "7.0.3.0", "7.0.3.1",
                  "7.0.3.2", "8.0.0.0", "8.0.0.1", "8.0.0.2", "8.0.1.0", "8.0.2.0", "8.0.3.0", "8.0.3.1", "9.0.0.0",
                  "9.1.0.0", "9.1.1.0")
READ_BYTES = 64 * 1024

_Q = "{urn:vim25}"


# ------------------------------------------------------------------------------------------ the connection


def settings_from(environ: Mapping[str, str]) -> ConnectionSettings | None:
    """The connection the CLI makes from this environment when no flag changes it, or None when the environment
    leaves any of it open (the inventory or a prompt would say) or says something the CLI would refuse."""
    url_text = _first(environ, "VGPUCTL_URL", "GOVC_URL")
    insecure = _boolean(_first(environ, "VGPUCTL_INSECURE", "GOVC_INSECURE"))
    ca_file = _first(environ, "VGPUCTL_CA_FILE", "GOVC_TLS_CA_CERTS")
    thumbprint = _first(environ, "VGPUCTL_THUMBPRINT")
    timeout = _first(environ, "VGPUCTL_TIMEOUT")
    if not url_text or insecure is None:
        return None
    try:
        url = parse_url(url_text)
        settings = ConnectionSettings(
            url=url.url,
            username=_first(environ, "VGPUCTL_USERNAME", "GOVC_USERNAME") or url.username or "",
            password=_first(environ, "VGPUCTL_PASSWORD", "GOVC_PASSWORD") or url.password or "",
            insecure=insecure,
            ca_file=os.path.expanduser(ca_file) if ca_file else None,
            thumbprint=thumbprint,
            timeout_s=parse_timeout(timeout) if timeout else DEFAULT_TIMEOUT_S,
        )
        if thumbprint:
            normalize_thumbprint(thumbprint)  # one the CLI refuses
    except UsageError:
        return None
    if not settings.username or not settings.password or (settings.url.startswith("http:") and not insecure):
        return None
    return settings


def _first(environ: Mapping[str, str], *names: str) -> str | None:
    return next((environ[n] for n in names if environ.get(n)), None)


def _boolean(text: str | None) -> bool | None:
    """click's reading of a boolean environment variable; None for a value it would refuse."""
    if text is None:
        return False
    value = text.strip().lower()
    if value in ("1", "true", "t", "yes", "y", "on"):
        return True
    if value in ("0", "false", "f", "no", "n", "off", ""):
        return False
    return None


# ------------------------------------------------------------------------------------------ the requests


def soap_action(version: str) -> str:
    """The SOAPAction header pyVmomi sends (its stub's versionId)."""
    return f'"urn:vim25/{version}"'


def vim_version(api_version: str) -> str | None:
    """The newest vim25 version pyVmomi knows that is not newer than the server's (vsphere.session's rule)."""
    server = _numbers(api_version) or (6, 0)
    known = [(n, v) for v in VIM25_VERSIONS if (n := _numbers(v)) is not None]
    fitting = [(n, v) for n, v in known if n <= server + (0,) * (len(n) - len(server))]
    return max(fitting)[1] if fitting else None


def _numbers(text: str) -> tuple[int, ...] | None:
    parts = text.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


_ENVELOPE = ('<?xml version="1.0" encoding="UTF-8"?>\n<soapenv:Envelope xmlns:soapenc="http://schemas.xmlsoap.org/soap/'
             'encoding/" xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsi="http://www.w3.org/2001/'
             'XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema">\n<soapenv:Body>{}</soapenv:Body>\n'
             '</soapenv:Envelope>')


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")  # pyVmomi's XmlEscape


def _call(method: str, version: str, this_type: str, this: str, params: str = "") -> bytes:
    body = (f'<{method} xmlns="urn:vim25"><_this versionId="{version}" type="{this_type}">{_escape(this)}</_this>'
            f"{params}</{method}>")
    return _ENVELOPE.format(body).encode()


def service_content_request() -> bytes:
    return _call("RetrieveServiceContent", BOOTSTRAP_VERSION, "ServiceInstance", "ServiceInstance")


def login_request(version: str, session_manager: str, username: str, password: str) -> bytes:
    return _call("Login", version, "SessionManager", session_manager,
                 f'<userName versionId="{version}">{_escape(username)}</userName>'
                 f'<password versionId="{version}">{_escape(password)}</password>')


def logout_request(version: str, session_manager: str) -> bytes:
    return _call("Logout", version, "SessionManager", session_manager)


def container_view_request(version: str, view_manager: str, folder: str, types: Sequence[str]) -> bytes:
    listed = "".join(f"<type>{t}</type>" for t in types)
    return _call("CreateContainerView", version, "ViewManager", view_manager,
                 f'<container versionId="{version}" type="Folder">{_escape(folder)}</container>{listed}'
                 f'<recursive versionId="{version}">true</recursive>')


def retrieve_request(version: str, collector: str, view: str, type_props: Sequence[tuple[str, Sequence[str]]],
                     max_objects: int) -> bytes:
    props = "".join(f"<propSet><type>{t}</type>{''.join(f'<pathSet>{_escape(p)}</pathSet>' for p in paths)}"
                    "</propSet>" for t, paths in type_props)
    spec = (f'<specSet>{props}<objectSet><obj type="ContainerView">{_escape(view)}</obj><skip>true</skip>'
            '<selectSet xsi:type="TraversalSpec"><name>view</name><type>ContainerView</type><path>view</path>'
            "<skip>false</skip></selectSet></objectSet></specSet>")
    options = f'<options versionId="{version}"><maxObjects>{max_objects}</maxObjects></options>'
    return _call("RetrievePropertiesEx", version, "PropertyCollector", collector, spec + options)


def continue_request(version: str, collector: str, token: str) -> bytes:
    return _call("ContinueRetrievePropertiesEx", version, "PropertyCollector", collector,
                 f'<token versionId="{version}">{_escape(token)}</token>')


@dataclass(frozen=True)
class ServiceContent:
    """The parts of the ServiceContent the early read needs."""

    api_version: str
    root_folder: str
    property_collector: str
    view_manager: str
    session_manager: str


def service_content(body: bytes) -> ServiceContent | None:
    ret = _returnval(body)
    if ret is None:
        return None
    values = (ret.findtext(f"{_Q}about/{_Q}apiVersion"), *(ret.findtext(f"{_Q}{name}") for name in (
        "rootFolder", "propertyCollector", "viewManager", "sessionManager")))
    if not all(values):
        return None
    return ServiceContent(*(str(v) for v in values))


def _returnval(body: bytes) -> ET.Element | None:
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    return next(root.iter(f"{_Q}returnval"), None)


# ------------------------------------------------------------------------------------------ the answers


@dataclass
class Answer:
    """One request's answer as received: status, reason, the Set-Cookie header, the body (gunzipped)."""

    status: int
    reason: str
    cookie: str | None
    body: bytes


@dataclass
class Sent:
    """A request the early read sent: its answer once it has come (`result`)."""

    done: threading.Event = field(default_factory=threading.Event)
    answer: Answer | None = None
    error: BaseException | None = None

    def result(self) -> Answer:
        """The answer, waiting for it; a transport error the early read met is raised as the run's own."""
        self.done.wait()
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer


_InFlight = tuple[tuple[str, bytes], http.client.HTTPConnection]  # a request's key and the connection it went on


class Stopped(Exception):
    """The early read stopped before this request's answer came (the process is ending)."""


class EarlyRead:
    """The reader thread and the answers it keeps, by (SOAP action, request bytes), each taken at most once."""

    def __init__(self, settings: ConnectionSettings):
        self.settings = settings
        self._reads = readlist.bulk_reads()  # observe's; its lean reads whatever the settings read
        self._lock = threading.Lock()
        self._sent: dict[tuple[str, bytes], Sent] = {}
        self._taken: set[tuple[str, bytes]] = set()
        self._sending_done = threading.Event()  # every first request is out (or the reader stopped)
        self._stop = threading.Event()
        self._connections: list[http.client.HTTPConnection] = []
        self._idle: list[http.client.HTTPConnection] = []
        self._cookie: str | None = None
        self._login_key: tuple[str, bytes] | None = None
        self._login_taken = False
        self._logout: tuple[str, bytes] | None = None
        self.claimed = False
        self._thread = threading.Thread(target=self._run, name="vgpuctl-early-read", daemon=True)

    def start(self) -> EarlyRead:
        self._thread.start()
        return self

    # ------------------------------------------------------------------ the run's side

    @property
    def pending(self) -> bool:
        """Whether any answer is still there to take."""
        with self._lock:
            return len(self._taken) < len(self._sent) or not self._sending_done.is_set()

    def take(self, action: str, body: bytes) -> Sent | None:
        """This exact request if the early read sent it (its answer may still be coming), else None; each is
        taken once."""
        self._sending_done.wait(self.settings.timeout_s)
        key = (action, body)
        with self._lock:
            sent = self._sent.get(key)
            if sent is None or key in self._taken:
                return None
            self._taken.add(key)
            if key == self._login_key:
                self._login_taken = True
        return sent

    def idle_connections(self) -> list[http.client.HTTPConnection]:
        """The connections no answer is coming on any more, handed to the run's session (open TLS connections to
        the same vCenter, verified as its own would be): its first requests of its own need no new handshake. The
        early read keeps no hold on them (a later page of its own goes on another connection)."""
        with self._lock:
            handed, self._idle = self._idle, []
            self._connections = [conn for conn in self._connections if conn not in handed]
        return handed

    def end(self) -> None:
        """Stop reading; log out the early session unless the run took its login (the run's session logs out)."""
        self._stop.set()
        with self._lock:
            login = self._sent.get(self._login_key) if self._login_key else None
            taken = self._login_taken
        if login is not None and not taken:
            login.done.wait(self.settings.timeout_s)  # a login in flight: its session is closed too
        for conn in list(self._connections):
            _shut(conn)
        self._thread.join(self.settings.timeout_s if self._sending_done.is_set() else 0)
        with self._lock:
            cookie, logout, taken = self._cookie, self._logout, self._login_taken
        if cookie and logout and not taken:
            try:
                conn = self._connection()
                self._post(conn, logout[0], logout[1], cookie)
                conn.close()
            except Exception as err:  # the session expires on its own
                log.debug("the early read's logout failed: %s", err)

    # ------------------------------------------------------------------ the reader's side

    def _run(self) -> None:
        try:
            self._read()
        except BaseException as err:  # every request still waiting gets the error, as the run would have
            self._fail_waiting(err)
        finally:
            self._sending_done.set()
            self._fail_waiting(Stopped("the early read stopped"))

    def _read(self) -> None:
        answer = self._exchange(soap_action(BOOTSTRAP_VERSION), service_content_request())
        content = service_content(answer.body) if answer.status == 200 else None
        version = vim_version(content.api_version) if content is not None else None
        if content is None or version is None:
            return
        action = soap_action(version)
        self._logout = (action, logout_request(version, content.session_manager))
        login = login_request(version, content.session_manager, self.settings.username, self.settings.password)
        self._login_key = (action, login)
        answer = self._exchange(action, login)
        self._cookie = _session_cookie(answer.cookie) if answer.status == 200 else None
        if self._cookie is None:
            return
        answer = self._exchange(action, container_view_request(version, content.view_manager, content.root_folder,
                                                               list(readlist.TYPE_PROPS)))
        ret = _returnval(answer.body) if answer.status == 200 else None
        if ret is None or not ret.text:
            return
        firsts = [self._send(action, retrieve_request(version, content.property_collector, ret.text, props, size))
                  for props, size in self._reads]
        self._sending_done.set()
        for first in firsts:
            self._follow(first, lambda token: continue_request(version, content.property_collector, token), action)

    def _follow(self, first: _InFlight | None, next_request: Callable[[str], bytes], action: str) -> None:
        """Read a paged read's answers, asking for each next page as soon as a page names its token."""
        current = first
        while current is not None and not self._stop.is_set():
            key, conn = current
            head, following = LeadingToken(), None

            def on_chunk(chunk: bytes, head: LeadingToken = head) -> None:
                nonlocal following
                if not head.done:
                    head.feed(chunk)
                    if head.token:
                        following = self._send(action, next_request(head.token))

            answer = self._receive(key, conn, on_chunk)
            if answer is None or answer.status != 200:
                return
            current = following

    def _exchange(self, action: str, body: bytes) -> Answer:
        sent = self._send(action, body)
        if sent is None:
            raise Stopped("the early read stopped")
        answer = self._receive(*sent)
        if answer is None:
            raise Stopped("the early read stopped")
        return answer

    def _send(self, action: str, body: bytes) -> _InFlight | None:
        if self._stop.is_set():
            return None
        key = (action, body)
        with self._lock:
            self._sent[key] = Sent()
        with self._lock:
            idle = self._idle.pop() if self._idle else None
        conn = idle if idle is not None else self._connection()
        headers = {"SOAPAction": action, "Content-Type": "text/xml; charset=UTF-8", "Accept-Encoding": "gzip"}
        if self._cookie:
            headers["Cookie"] = self._cookie
        try:
            conn.request("POST", _path(self.settings), body, headers)
        except BaseException as err:
            self._answered(key, error=err)
            raise
        return key, conn

    def _receive(self, key: tuple[str, bytes], conn: http.client.HTTPConnection,
                 on_chunk: Callable[[bytes], None] | None = None) -> Answer | None:
        try:
            resp = conn.getresponse()
            gzipped = (resp.getheader("Content-Encoding") or "").lower() == "gzip"
            inflate = zlib.decompressobj(wbits=31) if gzipped else None
            parts = []
            while chunk := resp.read(READ_BYTES):
                if inflate is not None:
                    chunk = inflate.decompress(chunk)
                if on_chunk is not None:
                    on_chunk(chunk)
                parts.append(chunk)
            if inflate is not None:
                parts.append(inflate.flush())
        except BaseException as err:
            self._answered(key, error=Stopped("the early read stopped") if self._stop.is_set() else err)
            raise
        answer = Answer(resp.status, resp.reason, resp.getheader("Set-Cookie"), b"".join(parts))
        with self._lock:
            self._idle.append(conn)
        self._answered(key, answer=answer)
        return answer

    def _answered(self, key: tuple[str, bytes], answer: Answer | None = None, error: BaseException | None = None
                  ) -> None:
        with self._lock:
            sent = self._sent.get(key)
        if sent is None:
            return
        sent.answer, sent.error = answer, error
        sent.done.set()

    def _fail_waiting(self, err: BaseException) -> None:
        with self._lock:
            waiting = [s for s in self._sent.values() if not s.done.is_set()]
        for sent in waiting:
            sent.error = err
            sent.done.set()

    def _connection(self) -> http.client.HTTPConnection:
        settings = self.settings
        url = settings.sdk_url
        host, port = _host_port(url)
        conn: http.client.HTTPConnection
        if url.startswith("https:"):
            pinned = settings.pinned_sha256
            cls = pinned_connection_class(pinned, url) if pinned else http.client.HTTPSConnection
            conn = cls(host, port, timeout=settings.timeout_s, context=ssl_context(settings))
        else:
            conn = http.client.HTTPConnection(host, port, timeout=settings.timeout_s)
        with self._lock:
            self._connections.append(conn)
        return conn

    def _post(self, conn: http.client.HTTPConnection, action: str, body: bytes, cookie: str) -> None:
        conn.request("POST", _path(self.settings), body,
                     {"SOAPAction": action, "Content-Type": "text/xml; charset=UTF-8", "Cookie": cookie})
        conn.getresponse().read()


def _session_cookie(header: str | None) -> str | None:
    """The session cookie as pyVmomi sends it back (its stub's SetSessionId form)."""
    if not header:
        return None
    try:
        morsel = SimpleCookie(header).get(SESSION_COOKIE)
    except CookieError:
        return None
    return f'{SESSION_COOKIE}="{morsel.value}"' if morsel is not None and morsel.value else None


def _path(settings: ConnectionSettings) -> str:
    rest = settings.sdk_url.split("://", 1)[1]
    return "/" + rest.split("/", 1)[1] if "/" in rest else "/"


def _host_port(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port


def _shut(conn: http.client.HTTPConnection) -> None:
    sock = conn.sock
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.shutdown(2)  # SHUT_RDWR: a read blocked on it returns


# ------------------------------------------------------------------------------------------ one per process


def begin(environ: Mapping[str, str]) -> EarlyRead | None:
    """Start the early read when the environment fixes the connection (the console script has seen that the
    command line wants it); the first session opened with the same settings takes it (vgpuctl.vsphere.session)."""
    settings = settings_from(environ)
    if settings is None:
        return None
    early = EarlyRead(settings)
    offer_early_read(early)
    return early.start()
