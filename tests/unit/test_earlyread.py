"""The early read without a vCenter: its requests are pyVmomi's byte for byte, its version is the session's, it
starts only for a plan whose connection the environment fixes, and with the settings the CLI would use."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import typer.main
from pyVmomi import VmomiSupport, vim, vmodl
from pyVmomi.SoapAdapter import SoapStubAdapter
from typer.testing import CliRunner

from vgpuctl import pipeline
from vgpuctl.cli import entry
from vgpuctl.cli.main import app
from vgpuctl.settings import host_properties
from vgpuctl.vsphere import earlyread, readlist
from vgpuctl.vsphere.earlyread import Answer, EarlyRead, Sent
from vgpuctl.vsphere.objects import view_filter_spec
from vgpuctl.vsphere.session import ConnectionSettings, pick_vim_version, same_connection

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_vgpuctl_env")]

THUMB = "AB:" * 31 + "AB"


def stub(version: str = "8.0.3.0") -> Any:
    return SoapStubAdapter(url="https://vc.example/sdk", version=VmomiSupport.versionMap[f"vim25/{version}"])


def request(s: Any, mo: Any, method: str, args: list[Any]) -> bytes:
    return bytes(s.SerializeRequest(mo, mo._GetMethodInfo(method), args))


# ------------------------------------------------------------------------------------------ the requests


def test_the_bootstrap_request_is_the_sessions() -> None:
    s = stub(earlyread.BOOTSTRAP_VERSION)
    assert earlyread.service_content_request() == request(s, vim.ServiceInstance("ServiceInstance", s),
                                                          "RetrieveContent", [])
    assert earlyread.soap_action(earlyread.BOOTSTRAP_VERSION) == s.versionId


@pytest.mark.parametrize("user,password", [("user", "pass"), ("a<b>&c", "p&ss<w>rd\"'é"), ("DOMAIN\\me", " x ")])
def test_login_and_logout_are_pyvmomis(user: str, password: str) -> None:
    s = stub()
    manager = vim.SessionManager("SessionManager", s)
    assert earlyread.login_request("8.0.3.0", "SessionManager", user, password) == request(
        s, manager, "Login", [user, password, None])
    assert earlyread.logout_request("8.0.3.0", "SessionManager") == request(s, manager, "Logout", [])


def test_the_view_is_observes() -> None:
    s = stub()
    types = [getattr(vim, t) for t in readlist.TYPE_PROPS]
    assert earlyread.container_view_request("8.0.3.0", "ViewManager", "group-d1", list(readlist.TYPE_PROPS)) == \
        request(s, vim.view.ViewManager("ViewManager", s), "CreateContainerView",
                [vim.Folder("group-d1", s), types, True])


def test_every_read_is_the_one_observe_sends() -> None:
    """The small types, the hosts and the VMs, serialized as pyVmomi serializes observe's reads."""
    s = stub()
    pc = vmodl.query.PropertyCollector("propertyCollector", s)
    view = vim.view.ContainerView("session[52f1]5", s)
    early = EarlyRead(ConnectionSettings(url="vc", username="u", password="p", insecure=True))
    assert early._reads == readlist.bulk_reads()
    for type_props, size in early._reads:
        options = vmodl.query.PropertyCollector.RetrieveOptions(maxObjects=size)
        assert earlyread.retrieve_request("8.0.3.0", "propertyCollector", "session[52f1]5", type_props, size) == \
            request(s, pc, "RetrievePropertiesEx", [[view_filter_spec(view, type_props)], options])
    token = "a&b<c>1"
    assert earlyread.continue_request("8.0.3.0", "propertyCollector", token) == request(
        s, pc, "ContinueRetrievePropertiesEx", [token])


def test_the_big_reads_are_observes_whatever_the_settings_read() -> None:
    """The settings' own host properties go with the small types: the hosts' and the VMs' reads, which the early
    read sends, stay the same (a new setting adds nothing to readlist for them to be taken)."""
    ours = readlist.bulk_reads()
    for props in (host_properties(), (*host_properties(), "config.product.build"), ("summary.hardware.model",)):
        theirs = readlist.bulk_reads(props)
        assert theirs[1:] == ours[1:]
        extra = [p for p in props if p not in readlist.HOST_PROPS]
        assert theirs[0][0] == ours[0][0] + ([("HostSystem", extra)] if extra else [])


def test_the_versions_are_pyvmomis_and_the_pick_the_sessions() -> None:
    known = {ns.split("/", 1)[1] for ns in VmomiSupport.versionMap if ns.startswith("vim25/")}
    numeric = {v for v in known if all(p.isdigit() for p in v.split("."))}
    assert set(earlyread.VIM25_VERSIONS) == numeric, "pyVmomi knows other vim25 versions: update VIM25_VERSIONS"
    for api in ("6.0", "6.7.3", "7.0", "7.0.3.1", "8.0.0.1", "8.0.3.0", "8.0.3", "8.1", "9.0.0.0", "99.0", "x"):
        version = earlyread.vim_version(api)
        assert version is not None
        assert stub(version).versionId == SoapStubAdapter(
            url="https://vc/sdk", version=pick_vim_version(api)).versionId, api


def test_the_service_content_parts() -> None:
    body = (b'<?xml version="1.0"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/">'
            b'<soapenv:Body><RetrieveServiceContentResponse xmlns="urn:vim25"><returnval>'
            b'<rootFolder type="Folder">group-d1</rootFolder><propertyCollector type="PropertyCollector">'
            b'propertyCollector</propertyCollector><viewManager type="ViewManager">ViewManager</viewManager>'
            b'<about><apiVersion>8.0.3.0</apiVersion></about><sessionManager type="SessionManager">SessionManager'
            b'</sessionManager></returnval></RetrieveServiceContentResponse></soapenv:Body></soapenv:Envelope>')
    assert earlyread.service_content(body) == earlyread.ServiceContent(
        "8.0.3.0", "group-d1", "propertyCollector", "ViewManager", "SessionManager")
    assert earlyread.service_content(body.replace(b"<about>", b"<other>").replace(b"</about>", b"</other>")) is None
    assert earlyread.service_content(b"not xml") is None


# ------------------------------------------------------------------------------------------ when it starts


def plan_file(tmp_path: Path) -> str:
    path = tmp_path / "inventory.yaml"
    path.write_text("apiVersion: vgpuctl/v1\nvms: []\n")
    return str(path)


def test_a_plan_of_a_file_that_is_there_wants_it(tmp_path: Path) -> None:
    f = plan_file(tmp_path)
    for argv in (["plan", "-f", f], ["-o", "json", "plan", "-f", f], ["-ojson", "plan", f"--file={f}"],
                 ["plan", "-f", f, "--out", "p.json", "--host", "h", "--detailed-exitcode", "-ojson"],
                 ["--datacenter", "DC0", "plan", "--values", "v.yaml", f"-f{f}"]):
        assert entry.wanted(argv, {}), argv


def test_anything_else_does_not(tmp_path: Path) -> None:
    f = plan_file(tmp_path)
    for argv in (["status"], ["apply", "-f", f], ["plan"], ["plan", "-f", str(tmp_path / "missing.yaml")],
                 ["plan", "-f", f, "--no-such-option"], ["plan", "-f", f, "extra"], ["plan", "-f", f, "-f", f],
                 ["-v", "plan", "-f", f], ["plan", "-f", f, "-vv"], ["plan", "-f", f, "--url", "vc"],
                 ["plan", "-f", f, "--insecure"], ["--thumbprint=x", "plan", "-f", f], ["plan", "-f", f, "--help"],
                 ["plan", "-f", f, "--out"], ["--detailed-exitcode=1", "plan", "-f", f], []):
        assert not entry.wanted(argv, {}), argv
    assert not entry.wanted(["plan", "-f", f], {"VGPUCTL_EARLY_READ": "0"})
    assert not entry.wanted(["plan", "-f", f], {"_VGPUCTL_COMPLETE": "bash_complete"})


LOADED_AT_EXIT = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write(' '.join(sorted(m for m in sys.modules if m.startswith('vgpuctl')))))\n"
    "from vgpuctl.cli.entry import run\n"
    "run()\n"
)


@pytest.mark.parametrize("argv", [["--help"], ["plan", "--no-such-option"], ["status", "--help"]])
def test_other_command_lines_load_nothing_for_it(argv: list[str], tmp_path: Path) -> None:
    """`--help`, a usage error and other commands decide from the words alone: the reader is never imported."""
    done = subprocess.run([sys.executable, "-c", LOADED_AT_EXIT, *argv], capture_output=True, text=True,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "VGPUCTL_URL": "vc.example",
                                             "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "p", "VGPUCTL_INSECURE": "1"},
                          timeout=60)
    loaded = done.stderr.strip().splitlines()[-1].split()
    assert "vgpuctl.cli.main" in loaded, done.stderr
    assert "vgpuctl.vsphere.earlyread" not in loaded, done.stderr


def test_its_options_are_the_commands() -> None:
    """Every option plan takes is either known to leave the connection alone or one that stops the early read."""
    plan = typer.main.get_command(app).commands["plan"]  # type: ignore[attr-defined]
    flags = {f for p in plan.params for f in (*p.opts, *p.secondary_opts) if f.startswith("-")}
    takes = {f: not (getattr(p, "is_flag", False) or getattr(p, "count", False))
             for p in plan.params for f in (*p.opts, *p.secondary_opts)}
    assert flags == set(entry.PLAN_OPTIONS) | (set(entry.CONNECTION_OPTIONS) & flags)
    assert {f: takes[f] for f in entry.PLAN_OPTIONS} == entry.PLAN_OPTIONS
    root = typer.main.get_command(app)
    root_flags = {f for p in root.params for f in (*p.opts, *p.secondary_opts) if f.startswith("-")}
    assert root_flags <= set(entry.ROOT_OPTIONS) | set(entry.CONNECTION_OPTIONS)


ENVS = [
    {"VGPUCTL_URL": "vc.example", "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "p", "VGPUCTL_THUMBPRINT": THUMB},
    {"GOVC_URL": "https://u2:p%40ss@vc.example:8443/sdk", "GOVC_INSECURE": "true"},
    {"VGPUCTL_URL": "https://vc.example/sdk", "GOVC_URL": "other", "VGPUCTL_USERNAME": "u", "GOVC_PASSWORD": "p",
     "VGPUCTL_INSECURE": "1", "VGPUCTL_TIMEOUT": "7.5"},
    {"VGPUCTL_URL": "vc.example", "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "p", "VGPUCTL_INSECURE": "no"},
]


@pytest.mark.parametrize("env", ENVS, ids=range(len(ENVS)))
def test_its_settings_are_the_clis(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings the early read logs in with are those the run's session is opened with (or it is not taken)."""
    seen: list[ConnectionSettings] = []

    def plan_only(settings: ConnectionSettings, *args: Any) -> Any:
        seen.append(settings)
        raise SystemExit(0)

    monkeypatch.setattr(pipeline, "plan_only", plan_only)
    early = earlyread.settings_from(env)
    assert early is not None
    CliRunner().invoke(app, ["plan", "-f", plan_file(tmp_path)], env=env, catch_exceptions=False)
    assert len(seen) == 1 and same_connection(seen[0], early)


@pytest.mark.parametrize("env", [
    {"VGPUCTL_URL": "vc", "VGPUCTL_USERNAME": "u"},  # no password: a prompt
    {"VGPUCTL_URL": "vc", "VGPUCTL_PASSWORD": "p"},  # no user
    {"VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "p"},  # no URL: the inventory's
    {"VGPUCTL_URL": "http://vc/sdk", "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "p"},  # plain http
    {"VGPUCTL_URL": "vc", "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "p", "VGPUCTL_THUMBPRINT": "12"},
    {"VGPUCTL_URL": "vc", "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "p", "VGPUCTL_INSECURE": "maybe"},
    {"VGPUCTL_URL": "vc:99999", "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "p"},
    {"VGPUCTL_URL": "vc", "VGPUCTL_USERNAME": "u", "VGPUCTL_PASSWORD": "p", "VGPUCTL_TIMEOUT": "-1"},
])
def test_an_environment_that_leaves_the_connection_open_starts_nothing(env: dict[str, str]) -> None:
    assert earlyread.settings_from(env) is None


# ------------------------------------------------------------------------------------------ the answers


def test_an_answer_is_taken_once_and_only_for_its_exact_bytes() -> None:
    early = EarlyRead(ConnectionSettings(url="vc", username="u", password="p", insecure=True))
    sent = Sent()
    early._sent[("a", b"body")] = sent
    early._sending_done.set()
    assert early.pending
    assert early.take("a", b"other") is None
    assert early.take("b", b"body") is None
    taken = early.take("a", b"body")
    assert taken is sent and not early.pending
    assert early.take("a", b"body") is None
    threading.Timer(0.05, lambda: early._answered(("a", b"body"), answer=Answer(200, "OK", None, b"x"))).start()
    assert taken.result().body == b"x"  # waits for the answer still coming


def test_a_transport_error_is_the_takers() -> None:
    early = EarlyRead(ConnectionSettings(url="vc", username="u", password="p", insecure=True))
    early._sent[("a", b"body")] = Sent()
    early._sending_done.set()
    taken = early.take("a", b"body")
    early._fail_waiting(ConnectionResetError("reset by peer"))
    assert taken is not None
    with pytest.raises(ConnectionResetError):
        taken.result()
