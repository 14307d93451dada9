"""VGPUCTL_ESXI_HOSTS: where each host's SSH server listens (a JSON object, or the path of a file with it); bad
values are one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpuctl.errors import UsageError
from vgpuctl.hosts.facts import ENV_HOST_MAP, load_host_map, ssh_target
from vgpuctl.inventory import HostSpec

pytestmark = pytest.mark.unit


def test_a_host_in_the_map_connects_where_the_map_says(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    path.write_text('{"esx-01": {"host": "127.0.0.1", "port": 2201}}')
    env = {ENV_HOST_MAP: str(path)}
    target = ssh_target("esx-01", None, env)
    assert (target.host, target.connect_address, target.port) == ("esx-01", "127.0.0.1", 2201)
    other = ssh_target("esx-02", HostSpec(name="esx-02", ssh={"port": 2222}), env)
    assert (other.connect_address, other.port) == ("esx-02", 2222)
    assert ssh_target("esx-01", None, {}).port == 22


def test_only_the_vgpuctl_variable_is_read(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    path.write_text('{"esx-01": {"host": "127.0.0.1", "port": 2201}}')
    assert ssh_target("esx-01", None, {"GPUSIM_SSH_HOSTS": str(path)}).port == 22


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the ESXi host map"),
        ("{not json", "not JSON"),
        ('["esx-01"]', "expected an object"),
        ('{"esx-01": {"host": "127.0.0.1"}}', "entry 'esx-01' needs"),
        ('{"esx-01": {"host": "127.0.0.1", "port": "twenty"}}', "entry 'esx-01' needs"),
    ],
)
def test_a_missing_or_malformed_map_is_one_usage_error(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "hosts.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=message) as info:
        load_host_map(str(path))
    assert str(info.value).startswith(f"{ENV_HOST_MAP}={path}: ") and "\n" not in str(info.value)


def test_the_map_written_out_in_the_variable_works_too() -> None:
    env = {ENV_HOST_MAP: ' {"esx-01": {"host": "127.0.0.1", "port": 2201}}'}
    target = ssh_target("esx-01", None, env)
    assert (target.connect_address, target.port) == ("127.0.0.1", 2201)
    with pytest.raises(UsageError, match="not JSON") as info:
        load_host_map('{"esx-01": ')
    assert str(info.value).startswith(f"{ENV_HOST_MAP} (the JSON written out): ")
