"""Session logic that needs no server: URL/thumbprint handling, secrets out of repr, version pick, re-login."""

from __future__ import annotations

import ssl
import threading

import pytest
from pyVmomi import vim

from vgpuctl.errors import AuthenticationError, ConnectionFailure, TlsError, UsageError, VsphereFault
from vgpuctl.vsphere import session as sess
from vgpuctl.vsphere import tasks
from vgpuctl.vsphere.session import ConnectionSettings, Session

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("vc.example.com", "https://vc.example.com/sdk"),
        ("https://vc.example.com", "https://vc.example.com/sdk"),
        ("https://vc.example.com/", "https://vc.example.com/sdk"),
        ("https://user:secret@vc.example.com:8443/sdk", "https://vc.example.com:8443/sdk"),
        ("127.0.0.1:18989", "https://127.0.0.1:18989/sdk"),
        ("https://[::1]:443/custom", "https://[::1]:443/custom"),
    ],
)
def test_normalize_url(given: str, expected: str) -> None:
    assert sess.normalize_url(given) == expected


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("ftp://vc/sdk", "must use https"),
        ("https://:443/sdk", "has no host"),
        ("https:///sdk", "has no host"),
        ("https://vc.example.com:99999/sdk", "the port must be 1 to 65535"),
        ("vc.example.com:99999", "the port must be 1 to 65535"),
        ("https://vc.example.com:0/sdk", "port 0"),
        ("https://vc.example.com:https/sdk", "the port is not a number"),
        ("https://[::1/sdk", "the IPv6 address in brackets is broken"),
        ("https://[fe80::1::2]:443/sdk", "the IPv6 address in brackets is broken"),
        ("https://vc example.com/sdk", "characters no host name has"),
    ],
)
def test_a_malformed_url_is_one_clear_usage_error(bad: str, why: str) -> None:
    with pytest.raises(UsageError, match=why) as info:
        sess.normalize_url(bad)
    assert len(str(info.value).splitlines()) == 1


def test_url_problems_never_repeat_the_password() -> None:
    for bad in ("https://admin:Hunter2pw@vc:99999/sdk", "ftp://admin:Hunter2pw@vc/sdk", "https://admin:Hunter2pw@[::1/"):
        with pytest.raises(UsageError) as info:
            sess.parse_url(bad)
        assert "Hunter2pw" not in str(info.value) and "admin" not in str(info.value)


@pytest.mark.parametrize(
    "bad",
    [
        "https://admin:p@ss-Hunter2@vc:99999/sdk",  # an @ in the password: everything up to the last @ goes
        "https://admin:pa/Hunter2@vc/sdk",  # a / in the password ends the authority: the URL does not parse
        "https://admin:pa#Hunter2@vc:0/sdk",
        "https://admin:pa?Hunter2@vc:x",
        "admin:pa/Hunter2@vc:99999",
        "ftp://admin:pa/Hunter2@vc/sdk",
    ],
)
def test_a_url_that_does_not_parse_never_repeats_any_part_of_the_user_info(bad: str) -> None:
    with pytest.raises(UsageError) as info:
        sess.parse_url(bad)
    text = str(info.value)
    assert "Hunter2" not in text and "admin" not in text and "@" not in text, text
    assert "vc" in text and len(text.splitlines()) == 1


def test_user_info_is_taken_out_of_the_url() -> None:
    parsed = sess.parse_url("https://bob%40corp:p%3Ass@vc.example.com:8443/sdk")
    assert (parsed.url, parsed.username, parsed.password) == ("https://vc.example.com:8443/sdk", "bob@corp", "p:ss")
    assert "p:ss" not in repr(parsed)
    assert sess.without_user_info("https://bob:pw@vc/sdk") == "https://vc/sdk"
    assert sess.without_user_info("bob:pw@vc") == "vc"
    assert sess.without_user_info("https://bob@corp:p@ss/x@vc:443/sdk") == "https://vc:443/sdk"
    assert sess.without_user_info("https://vc/sdk") == "https://vc/sdk"


@pytest.mark.parametrize(("given", "seconds"), [("30", 30.0), ("0.25", 0.25), (5, 5.0)])
def test_timeouts(given: str, seconds: float) -> None:
    assert sess.parse_timeout(given) == seconds


@pytest.mark.parametrize("bad", ["0", "-1", "soon", "inf", "nan"])
def test_bad_timeouts(bad: str) -> None:
    with pytest.raises(UsageError, match="timeout must be"):
        sess.parse_timeout(bad)


def test_default_timeout_is_30_seconds() -> None:
    assert ConnectionSettings(url="vc", username="u").timeout_s == 30.0


def test_thumbprint_forms() -> None:
    hexa = "ab" * 32
    colon = ":".join(["AB"] * 32)
    assert sess.normalize_thumbprint(hexa) == hexa
    assert sess.normalize_thumbprint(colon) == hexa
    assert sess.sha256_colon(hexa) == colon
    with pytest.raises(UsageError, match="SHA-256"):
        sess.normalize_thumbprint("ab" * 20)  # a sha1 thumbprint is not accepted


def test_password_never_in_repr() -> None:
    settings = ConnectionSettings(url="vc", username="admin", password="s3cr3t-pw")
    assert "s3cr3t-pw" not in repr(settings)
    assert "s3cr3t-pw" not in str(settings)


def test_ssl_context_modes(tmp_path) -> None:
    verified = sess.ssl_context(ConnectionSettings(url="vc", username="u"))
    assert verified.verify_mode == ssl.CERT_REQUIRED and verified.check_hostname
    insecure = sess.ssl_context(ConnectionSettings(url="vc", username="u", insecure=True))
    assert insecure.verify_mode == ssl.CERT_NONE and not insecure.check_hostname
    assert insecure.options == verified.options and insecure.minimum_version == verified.minimum_version
    assert insecure.cert_store_stats()["x509_ca"] == 0  # the system's CA store is not loaded: nothing uses it
    pinned = sess.ssl_context(ConnectionSettings(url="vc", username="u", thumbprint="00" * 32))
    assert pinned.verify_mode == ssl.CERT_NONE  # the pin check replaces CA verification
    with pytest.raises(TlsError, match="CA file"):
        sess.ssl_context(ConnectionSettings(url="vc", username="u", ca_file=str(tmp_path / "missing.pem")))


@pytest.mark.parametrize(
    ("api", "expected"),
    [("8.0.3.0", "vim.version.v8_0_3_0"), ("7.0.3.0", "vim.version.v7_0_3_0"), ("6.5", "vim.version.version11")],
)
def test_pick_vim_version(api: str, expected: str) -> None:
    assert sess.pick_vim_version(api) == expected


# ------------------------------------------------------------------------------------------ re-login


class FakeStub:
    def __init__(self) -> None:
        self.round_trips = 0
        self.session_ids: list[str | None] = []

    def SetSessionId(self, value):
        self.session_ids.append(value)


def fake_session(login) -> Session:
    s = Session.__new__(Session)
    s.settings = ConnectionSettings(url="vc", username="admin", password="pw")
    s.url = s.settings.sdk_url
    s._login_lock = threading.Lock()
    s._generation = 0
    s._closed = True
    s._stub = FakeStub()
    s._login = login
    return s


def test_invoke_relogs_in_once_and_retries() -> None:
    logins = []
    s = fake_session(lambda: logins.append(1))
    calls = []

    def fn(x):
        calls.append(x)
        if len(calls) == 1:
            raise vim.fault.NotAuthenticated()
        return x * 2

    assert s.invoke(fn, 21) == 42
    assert calls == [21, 21]
    assert logins == [1]
    assert s._generation == 1
    assert s._stub.session_ids == [None]  # the stale cookie is dropped before the new login


def test_invoke_fails_clearly_when_relogin_does_not_help() -> None:
    logins = []
    s = fake_session(lambda: logins.append(1))

    def fn():
        raise vim.fault.NotAuthenticated()

    with pytest.raises(AuthenticationError, match="rejected the session again"):
        s.invoke(fn)
    assert logins == [1]  # exactly one new login, no loop


def test_invoke_relogin_failure_is_authentication_error() -> None:
    def bad_login():
        raise AuthenticationError("login failed: wrong user name or password")

    s = fake_session(bad_login)
    with pytest.raises(AuthenticationError, match="wrong user name"):
        s.invoke(lambda: (_ for _ in ()).throw(vim.fault.NotAuthenticated()))


def test_relogin_once_for_concurrent_expiries() -> None:
    logins = []
    s = fake_session(lambda: logins.append(1))
    gen = s._generation
    s._relogin(gen)
    s._relogin(gen)  # a second thread that saw the same expiry does not log in again
    assert logins == [1]


@pytest.mark.parametrize(
    ("exc", "kind", "text"),
    [
        (ConnectionRefusedError(111, "refused"), ConnectionFailure, "connection refused"),
        (TimeoutError(), ConnectionFailure, r"no answer .* within 30 s \(set --timeout or VGPUCTL_TIMEOUT"),
        (ssl.SSLError(1, "handshake failure"), TlsError, "TLS handshake"),
    ],
)
def test_transport_errors_are_mapped(exc: BaseException, kind: type, text: str) -> None:
    s = fake_session(lambda: None)

    def fn():
        raise exc

    with pytest.raises(kind, match=text) as info:
        s._call(fn)
    assert "https://vc/sdk" in str(info.value)


def test_cert_verification_error_is_tls_error() -> None:
    s = fake_session(lambda: None)
    err = ssl.SSLCertVerificationError(1, "certificate verify failed")
    err.verify_message = "self-signed certificate"

    def fn():
        raise err

    with pytest.raises(TlsError, match="self-signed certificate"):
        s._call(fn)


def test_plain_http_refused_unless_insecure() -> None:
    with pytest.raises(UsageError, match="plain http"):
        Session(ConnectionSettings(url="http://127.0.0.1:1/sdk", username="u", password="p"))


# ------------------------------------------------------------------------------------------ task watcher


class FakeTask:
    def __init__(self, moid: str):
        self._moId = moid


def test_task_watcher_reads_all_tasks_in_one_call_per_poll(monkeypatch) -> None:
    calls: list[list[str]] = []
    polls: dict[str, int] = {}

    def fake_read(session, refs, vim_type, paths):
        assert vim_type == "Task"
        moids = [r._moId for r in refs]
        calls.append(moids)
        seen_all = any(len(c) == 4 for c in calls)  # tasks run until one read covered all four
        out = {}
        for m in moids:
            polls[m] = polls.get(m, 0) + 1
            done = (polls[m] >= 3 and seen_all) or polls[m] >= 500
            out[m] = {
                "info.state": "success" if done else "running",
                "info.progress": 100 if done else 50,
                "info.result": f"result-{m}",
            }
        return out

    monkeypatch.setattr(tasks, "read_props", fake_read)
    progress: dict[str, list[int]] = {}
    results: dict[str, str] = {}
    with tasks.TaskWatcher(session=None, min_interval=0.001, max_interval=0.01) as watcher:
        threads = [
            threading.Thread(
                target=lambda m=m: results.__setitem__(
                    m, watcher.wait(FakeTask(m), lambda p, m=m: progress.setdefault(m, []).append(p))
                )
            )
            for m in ("task-1", "task-2", "task-3", "task-4")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == {m: f"result-{m}" for m in ("task-1", "task-2", "task-3", "task-4")}
    assert all(p[0] == 50 and p[-1] == 100 and len(p) == 2 for p in progress.values())
    # tasks pending together share one collector call per poll
    assert sum(len(c) for c in calls) == sum(polls.values())
    assert max(len(c) for c in calls) == 4
    assert len(calls) < sum(polls.values())


def test_task_watcher_isolates_a_task_that_cannot_be_read(monkeypatch) -> None:
    from pyVmomi import vim as vim_

    def fake_read(session, refs, vim_type, paths):
        moids = [r._moId for r in refs]
        if "bad" in moids:
            raise KeyError("undecodable")
        return {
            m: {"info.state": "error", "info.error": vim_.fault.InsufficientResourcesFault(msg="no room")}
            for m in moids
        }

    monkeypatch.setattr(tasks, "read_props", fake_read)
    errors: dict[str, BaseException] = {}

    def wait(moid: str) -> None:
        try:
            watcher.wait(FakeTask(moid))
        except BaseException as err:
            errors[moid] = err

    with tasks.TaskWatcher(session=None, min_interval=0.001) as watcher:
        threads = [threading.Thread(target=wait, args=(m,)) for m in ("bad", "good")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert isinstance(errors["good"], VsphereFault)
    assert errors["good"].fault_type == "vim.fault.InsufficientResourcesFault"
    assert errors["good"].fault_message == "no room"
    assert isinstance(errors["bad"], VsphereFault) and "undecodable" in errors["bad"].fault_message


def test_task_watcher_fails_all_on_connection_loss(monkeypatch) -> None:
    def fake_read(session, refs, vim_type, paths):
        raise ConnectionFailure("cannot reach vCenter at https://vc/sdk: connection refused")

    monkeypatch.setattr(tasks, "read_props", fake_read)
    with tasks.TaskWatcher(session=None) as watcher, pytest.raises(ConnectionFailure):
        watcher.wait(FakeTask("task-9"))
