"""Connection handling against gpusim over real TLS and SOAP: TLS policy, login errors, expiry, round trips."""

from __future__ import annotations

import hashlib
import logging
import socket
import ssl
import threading
from urllib.parse import urlsplit

import pytest
from pyVim.connect import Disconnect

from vgpuctl.cli.main import app
from vgpuctl.errors import AuthenticationError, ConnectionFailure, TlsError, VsphereFault
from vgpuctl.vsphere import hostaccess, rawread
from vgpuctl.vsphere.observe import observe
from vgpuctl.vsphere.session import ConnectionSettings, open_session

pytestmark = pytest.mark.sim

FARM = {
    "clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB"}],
    "templates": [{"name": "tmpl"}],
    "vms": [{"name": "vm-a"}],
}


@pytest.fixture(scope="module")
def sim(gpusim_session_factory):
    return gpusim_session_factory(FARM)


def settings(sim, **kw) -> ConnectionSettings:
    base = {"url": sim.url, "username": sim.username, "password": sim.password}
    base.update(kw)
    return ConnectionSettings(**base)


def server_cert(sim) -> bytes:
    parts = urlsplit(sim.url)
    pem = ssl.get_server_certificate((parts.hostname, parts.port))
    return ssl.PEM_cert_to_DER_cert(pem)


def test_insecure_login_counts_round_trips_and_logs_out(sim) -> None:
    admin = sim.connect()
    try:
        with open_session(settings(sim, insecure=True)) as session:
            assert session.round_trips == 2  # RetrieveServiceContent + Login
            assert session.api_version.startswith("8.")
            key = session.content.sessionManager.currentSession.key
            assert session.round_trips == 3  # the property read above is one more
            assert key in {s.key for s in admin.content.sessionManager.sessionList}
        assert key not in {s.key for s in admin.content.sessionManager.sessionList}  # logged out
    finally:
        Disconnect(admin)


def test_tls_is_verified_by_default(sim) -> None:
    with pytest.raises(TlsError, match="not trusted"):
        open_session(settings(sim))


def test_ca_file_is_trusted(sim, tmp_path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text(ssl.DER_cert_to_PEM_cert(server_cert(sim)))
    with open_session(settings(sim, ca_file=str(ca))) as session:
        assert session.round_trips == 2


def test_thumbprint_pin_matches(sim) -> None:
    digest = hashlib.sha256(server_cert(sim)).hexdigest()
    colon = ":".join(digest[i : i + 2] for i in range(0, 64, 2)).upper()
    with open_session(settings(sim, thumbprint=colon)) as session:
        assert session.round_trips == 2


def test_thumbprint_mismatch_names_both(sim) -> None:
    actual = hashlib.sha256(server_cert(sim)).hexdigest()
    wrong = "ab" * 32
    with pytest.raises(TlsError) as info:
        open_session(settings(sim, thumbprint=wrong))
    text = str(info.value)
    assert "mismatch" in text
    assert ("AB:" * 31 + "AB") in text
    assert ":".join(actual[i : i + 2] for i in range(0, 64, 2)).upper() in text


def test_wrong_password_is_authentication_error(sim, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(AuthenticationError, match="wrong user name or password") as info:
        open_session(settings(sim, insecure=True, password="not-the-password-xyz"))
    assert "not-the-password-xyz" not in str(info.value)
    assert "not-the-password-xyz" not in caplog.text


def test_unreachable_is_connection_failure() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    with pytest.raises(ConnectionFailure, match=f"cannot reach vCenter at https://127.0.0.1:{port}/sdk"):
        open_session(ConnectionSettings(url=f"127.0.0.1:{port}", username="u", password="p", insecure=True))


def test_terminated_session_is_renewed_once(sim) -> None:
    admin = sim.connect()
    try:
        with open_session(settings(sim, insecure=True)) as session:
            key = session.content.sessionManager.currentSession.key
            admin.content.sessionManager.TerminateSession([key])  # the session expires under our feet
            before = session.round_trips
            about = session.invoke(lambda: session.content.sessionManager.currentSession)
            assert about is not None and about.key != key
            assert session._generation == 1
            # failed call + Login + retried call
            assert session.round_trips - before == 3
    finally:
        Disconnect(admin)


def test_session_that_cannot_be_renewed_fails_clearly(sim) -> None:
    admin = sim.connect()
    try:
        session = open_session(settings(sim, insecure=True))
        key = session.content.sessionManager.currentSession.key
        admin.content.sessionManager.TerminateSession([key])
        object.__setattr__(session.settings, "password", "changed-meanwhile")
        with pytest.raises(AuthenticationError, match="wrong user name or password"):
            session.invoke(lambda: session.content.sessionManager.currentSession)
        session.close()
    finally:
        Disconnect(admin)


def test_observe_after_expiry_logs_in_again(sim) -> None:
    admin = sim.connect()
    try:
        with open_session(settings(sim, insecure=True)) as session:
            key = session.content.sessionManager.currentSession.key
            admin.content.sessionManager.TerminateSession([key])
            observed = observe(session)
            assert session._generation == 1
            assert observed.hosts and observed.vms
    finally:
        Disconnect(admin)


def test_lean_reader_raises_server_faults(sim) -> None:
    from pyVmomi import vim, vmodl

    with open_session(settings(sim, insecure=True)) as session:
        content = session.content
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        view.DestroyView()  # the server answers the read below with a SOAP fault
        before = session.round_trips
        with pytest.raises(vmodl.fault.ManagedObjectNotFound):
            rawread.retrieve_vms(session, view, ["name"], 10)
        assert session.round_trips == before + 1


def test_reads_sent_together_leave_no_unread_answer_behind_a_fault(sim, monkeypatch) -> None:
    """Two paged reads whose first requests go out together: the first one's fault is raised, the second one's
    answer, never read, has its connection closed (not pooled), and the session reads on."""
    from pyVmomi import vim, vmodl

    sent: list[rawread.SentRequest] = []
    abandoned: list[rawread.SentRequest] = []
    real_init, real_abandon = rawread.SentRequest.__init__, rawread.SentRequest.abandon

    def init(self, *args):
        real_init(self, *args)
        sent.append(self)

    def abandon(self):
        abandoned.append(self)
        real_abandon(self)

    monkeypatch.setattr(rawread.SentRequest, "__init__", init)
    monkeypatch.setattr(rawread.SentRequest, "abandon", abandon)
    reads = [[("HostSystem", ["name"])], [("VirtualMachine", ["name"])]]
    with open_session(settings(sim, insecure=True)) as session:
        content = session.content
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem, vim.VirtualMachine], True)
        view.DestroyView()  # the server answers both reads below with a SOAP fault
        before = session.round_trips
        with pytest.raises(vmodl.fault.ManagedObjectNotFound):
            rawread.retrieve_each(session, view, reads, 10)
        assert session.round_trips == before + 2
        assert len(sent) == 2 and sent[1] in abandoned
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem, vim.VirtualMachine], True)
        objects = rawread.retrieve_each(session, view, reads, 10)
        assert {o.type for o in objects} == {"HostSystem", "VirtualMachine"}
        assert [o.type for o in objects] == sorted(o.type for o in objects)  # the hosts' read first


def test_observe_survives_expiry_between_view_and_read(sim, monkeypatch) -> None:
    from pyVmomi import vim

    admin = sim.connect()
    try:
        with open_session(settings(sim, insecure=True)) as session:
            key = session.content.sessionManager.currentSession.key
            real = session.invoke
            views: list[object] = []

            def invoke(fn, *args, **kwargs):
                result = real(fn, *args, **kwargs)
                if isinstance(result, vim.view.ContainerView) and not views:
                    views.append(result)
                    admin.content.sessionManager.TerminateSession([key])  # the view dies with the session
                return result

            monkeypatch.setattr(session, "invoke", invoke)
            observed = observe(session)
            assert session.generation == 1
            assert len(views) == 1
            assert set(observed.vms) == {"tmpl", "vm-a"}
    finally:
        Disconnect(admin)


@pytest.fixture
def silent_listener():
    """A loopback port that accepts connections and never answers; yields its URL."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.getsockname()[1]}/sdk", held
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def test_a_vcenter_that_never_answers_fails_after_the_timeout(silent_listener) -> None:
    url, held = silent_listener
    with pytest.raises(ConnectionFailure, match=rf"no answer from vCenter at {url} within 0.3 s") as info:
        open_session(ConnectionSettings(url=url, username="u", password="p", insecure=True, timeout_s=0.3))
    assert "--timeout or VGPUCTL_TIMEOUT" in str(info.value)
    assert held  # it did connect: the answer is what never came


@pytest.mark.parametrize("how", ["option", "variable"])
def test_the_cli_timeout_bounds_the_wait(silent_listener, how: str) -> None:
    from typer.testing import CliRunner

    url, _ = silent_listener
    env = {"VGPUCTL_URL": url, "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "p", "VGPUCTL_INSECURE": "1"}
    args = ["status"]
    if how == "option":
        args += ["--timeout", "0.3"]
    else:
        env["VGPUCTL_TIMEOUT"] = "0.3"
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
    assert errors == [
        f"error: no answer from vCenter at {url} within 0.3 s (set --timeout or VGPUCTL_TIMEOUT to wait longer)"
    ]


def test_privilege_requests_go_out_together_and_a_fault_leaves_no_unread_answer(sim, monkeypatch) -> None:
    """has_privileges sends its requests together and reads them in turn: both answered; with the first one's
    fault raised (typed), the second one's connection is closed unread, and the session asks on."""
    sent: list[object] = []
    abandoned: list[object] = []
    real_init, real_abandon = rawread.SentRequest.__init__, rawread.SentRequest.abandon

    def init(self, *args):  # type: ignore[no-untyped-def]
        real_init(self, *args)
        sent.append(self)

    def abandon(self):  # type: ignore[no-untyped-def]
        abandoned.append(self)
        real_abandon(self)

    monkeypatch.setattr(rawread.SentRequest, "__init__", init)
    monkeypatch.setattr(rawread.SentRequest, "abandon", abandon)
    with open_session(settings(sim, insecure=True)) as session:
        root = ("Folder", str(session.content.rootFolder._moId))
        asked = [([root], ["System.View"]), ([root], ["System.Read", "Folder.Create"])]
        before = session.round_trips
        assert hostaccess.has_privileges(session, asked) == {(root[1], "System.View"): True,
                                                             (root[1], "System.Read"): True,
                                                             (root[1], "Folder.Create"): True}
        assert session.round_trips == before + 2 and len(sent) == 2 and not abandoned
        sim.arm_fault("AuthorizationManager", "HasPrivilegeOnEntities", "SystemError", message="busy")
        with pytest.raises(VsphereFault, match="busy"):
            hostaccess.has_privileges(session, asked)
        assert len(sent) == 4 and sent[3] in abandoned  # the second request's answer, never read
        assert hostaccess.has_privileges(session, asked[:1]) == {(root[1], "System.View"): True}
