"""A host name from vCenter that no resolver can be asked for is said so before any connection is tried."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpuctl.errors import SshUnreachable
from vgpuctl.esxi.ssh import EsxiShell, SshSettings, SshTarget, unresolvable_name

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["esx-01.gpu.sim", "10.0.0.7", "fe80::1", "bücher.example", "h" * 63 + ".sim"])
def test_names_a_resolver_takes(name: str) -> None:
    assert unresolvable_name(name) is None


@pytest.mark.parametrize("name", ["esx-01." + "h" * 64 + ".sim", "esx\ufffd.sim", "a..b"])
def test_names_no_resolver_takes(name: str) -> None:
    assert (unresolvable_name(name) or "").startswith("not a name DNS can look up")


def test_the_shell_refuses_such_a_name_as_an_unreachable_host(tmp_path: Path) -> None:
    host = "esx-01." + "h" * 64 + ".sim"
    settings = SshSettings(known_hosts=tmp_path / "known_hosts", password="secret", use_agent=False)
    with pytest.raises(SshUnreachable, match="not a name DNS can look up") as err:
        EsxiShell(SshTarget(host), settings).connect()
    assert err.value.host == host
