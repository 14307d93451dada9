"""Credentials in the vCenter URL never reach anything a run leaves behind.

plan, apply and guest deploy run as real processes with `VGPUCTL_URL=https://user:PASSWORD@host/sdk` (and
`-vv`, the most talkative trace); then every file under the run's home and state folders, and each process's
stdout and stderr, are searched for the password (as typed and percent-encoded) and for every session cookie
vCenter handed out meanwhile (read back from its login events).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
from pyVim.connect import Disconnect
from pyVmomi import vim

pytestmark = pytest.mark.sim

PASSWORD = "Url:pw@7c41-e9"  # a ':' and an '@' so that the URL must percent-encode it
FARM = {
    "datacenter": "DC0",
    "clusters": [
        {"name": "C", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "graphics_type": "sharedDirect"}
    ],
    "vms": [{"name": "idle-01", "cpus": 2, "memory_mb": 4096, "firmware": "efi"}],
}


def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed: ssh is refused at once


INVENTORY = """\
apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
vms:
  - name: idle-01
    vgpus: {{profile: grid_a100-20c}}
    guest: {{group: workers}}
guests:
  connection: {{user: root, port: {port}}}
  groups:
    workers: {{roles: [gpu_validate]}}
"""


@pytest.fixture
def sim(gpusim_factory: Any) -> Any:
    return gpusim_factory(FARM, args=["-password", PASSWORD])


def url_with_credentials(sim: Any) -> str:
    parts = urlsplit(sim.url)
    netloc = f"{quote(sim.username, safe='')}:{quote(PASSWORD, safe='')}@{parts.netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def session_cookies(sim: Any) -> set[str]:
    """The session keys (the vmware_soap_session cookie values) of every login vCenter saw."""
    si = sim.connect()
    try:
        events = si.content.eventManager.QueryEvents(vim.event.EventFilterSpec())
        return {e.sessionId for e in events if isinstance(e, vim.event.UserLoginSessionEvent) and e.sessionId}
    finally:
        Disconnect(si)


def test_url_credentials_are_never_written(sim: Any, tmp_path: Path) -> None:
    run = tmp_path / "run"  # everything the runs may write to (gpusim's own files live beside it)
    home, state = run / "home", run / "state"
    home.mkdir(parents=True)
    inventory = run / "inv.yaml"
    inventory.write_text(INVENTORY.format(port=closed_port()))
    (run / "addresses.yaml").write_text("idle-01: 127.0.0.1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    env.update(HOME=str(home), XDG_STATE_HOME=str(state / "xdg"), VGPUCTL_STATE_DIR=str(state),
               VGPUCTL_URL=url_with_credentials(sim), VGPUCTL_INSECURE="1")
    runs = [
        ["-vv", "plan", "-f", str(inventory)],
        ["-vv", "-o", "json", "apply", "--yes", "-f", str(inventory)],
        ["-vv", "guest", "deploy", "-f", str(inventory)],  # reads the addresses from vCenter: none yet
        ["-vv", "-o", "json", "guest", "deploy", "-f", str(inventory), "--addresses", str(run / "addresses.yaml")],
    ]
    outputs = []
    for args in runs:
        done = subprocess.run([sys.executable, "-m", "vgpuctl", *args], capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, check=False)
        outputs.append((args, done))
    codes = [done.returncode for _, done in outputs]
    assert codes == [0, 0, 1, 1], [(a, d.returncode, d.stderr[-2000:]) for a, d in outputs]
    assert "SOAP -> " in outputs[1][1].stderr  # the -vv trace ran
    artifacts = list((state / "runs").glob("run-*/command"))
    assert len(artifacts) == 1 and "VGPUCTL_USERNAME" not in artifacts[0].read_text()

    cookies = session_cookies(sim)
    assert len(cookies) >= 3  # plan, apply and the first guest deploy logged in
    secrets = {PASSWORD, quote(PASSWORD, safe=""), *cookies}
    for args, done in outputs:
        for secret in secrets:
            assert secret not in done.stdout and secret not in done.stderr, (args, secret)
    files = [p for p in run.rglob("*") if p.is_file()]
    assert artifacts[0] in files
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="replace")
        for secret in secrets:
            assert secret not in text, (path, secret)
