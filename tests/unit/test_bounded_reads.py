"""Every file named by an option or a variable is read within the limits an inventory is (size, nesting) and only
when it is a regular file: the password file, the ESXi host map (VGPUCTL_ESXI_HOSTS, written out or a file),
known_hosts, the SSH key and its certificate, `guest deploy --addresses`, the CA file and an experiment's results.
/dev/zero (which would exhaust memory when read whole) and a FIFO with no writer (which would hold the run on
open) are refused at once with one line; 50,000 nested brackets are one line, never a RecursionError."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from typer.testing import CliRunner

from vgpuctl import filelimits
from vgpuctl.cli.common import read_password_file
from vgpuctl.cli.main import app
from vgpuctl.errors import InventoryError, SshError, SshHostKeyError, UsageError, VgpuctlError
from vgpuctl.esxi.ssh import EsxiShell, SshSettings, SshTarget, load_known_hosts, load_private_key
from vgpuctl.experiment.store import ResultsDir
from vgpuctl.guest.addresses import load_address_file
from vgpuctl.hosts.facts import ENV_HOST_MAP, load_host_map

pytestmark = pytest.mark.unit

DEV_ZERO = Path("/dev/zero")
NOT_A_FILE = "not a regular file (vgpuctl reads this only from a file)"
DEEP = "[" * 50_000


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def _one_line(call: Callable[[], Any], kind: type[BaseException] = VgpuctlError) -> str:
    with pytest.raises(kind) as info:
        call()
    text = str(info.value)
    assert len(text.splitlines()) == 1 and "Recursion" not in text, text
    return text


def _specials(fifo: Path) -> list[tuple[Path, str]]:
    return [(DEV_ZERO, "a device"), (fifo, "a named pipe (FIFO)"), (fifo.parent, "a directory")]


# ---------------------------------------------------------------------------------------------- filelimits


def test_regular_reads_refuse_what_is_no_file(fifo: Path) -> None:
    for path, kind in _specials(fifo):
        with pytest.raises(filelimits.NotAFile) as info:
            filelimits.read_regular_bytes(path)
        assert str(info.value) == f"{kind}, {NOT_A_FILE}"
    big = fifo.parent / "big"
    big.write_bytes(b"x" * (filelimits.MAX_FILE_BYTES + 1))
    with pytest.raises(filelimits.FileTooLarge):
        filelimits.read_regular_text(big)
    big.write_bytes(b"a\r\nb")
    assert filelimits.read_regular_text(big) == "a\nb"


def test_json_is_parsed_within_the_nesting_limit() -> None:
    assert filelimits.parse_json("[" * 64 + "]" * 64)
    for text in (DEEP, "[" * 65 + "]" * 65, '{"a": ' * 500 + "1" + "}" * 500):
        with pytest.raises(filelimits.TooDeep):
            filelimits.parse_json(text)
    with pytest.raises(ValueError, match="NaN is not a JSON number"):
        filelimits.parse_json('{"port": NaN}')


# ------------------------------------------------------------------------------------------- password file


def test_a_password_file_that_is_no_file_is_refused_at_once(fifo: Path) -> None:
    for path, kind in _specials(fifo):
        assert _one_line(lambda p=path: read_password_file(p)) == f"--password-file {path}: {kind}, {NOT_A_FILE}"
    big = fifo.parent / "big"
    big.write_bytes(b"x" * (filelimits.MAX_FILE_BYTES + 1))
    assert _one_line(lambda: read_password_file(big)) == f"--password-file {big}: {filelimits.TOO_LARGE}"
    (fifo.parent / "pw").write_bytes(b"\xff\xfe")
    assert _one_line(lambda: read_password_file(fifo.parent / "pw")).endswith("not UTF-8 text")
    (fifo.parent / "pw").write_text("s3cret\nsecond line\n")
    assert read_password_file(fifo.parent / "pw") == "s3cret"


def test_the_cli_refuses_dev_zero_as_password_file_before_connecting() -> None:
    env = {"VGPUCTL_URL": "https://vc.invalid/sdk", "VGPUCTL_USERNAME": "admin"}
    result = CliRunner().invoke(app, ["--password-file", str(DEV_ZERO), "status"], env=env)
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == f"error: --password-file {DEV_ZERO}: a device, {NOT_A_FILE}", result.stderr


# ------------------------------------------------------------------------------------------- ESXi host map


def test_a_host_map_that_is_no_file_is_refused_at_once(fifo: Path) -> None:
    for path, kind in _specials(fifo):
        assert _one_line(lambda p=path: load_host_map(str(p)), UsageError) == (
            f"{ENV_HOST_MAP}={path}: {kind}, {NOT_A_FILE}")


def test_fifty_thousand_nested_brackets_in_the_host_map_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    path.write_text("{" + '"a": ' + DEEP)
    assert _one_line(lambda: load_host_map(str(path)), UsageError) == f"{ENV_HOST_MAP}={path}: {filelimits.TOO_DEEP}"
    written_out = '{"esx-01": ' + DEEP
    assert _one_line(lambda: load_host_map(written_out), UsageError) == (
        f"{ENV_HOST_MAP} (the JSON written out): {filelimits.TOO_DEEP}")
    path.write_text('{"esx-01": {"host": "127.0.0.1", "port": 22, "x": ' + "[" * 70 + "]" * 70 + "}}")
    assert _one_line(lambda: load_host_map(str(path)), UsageError).endswith(filelimits.TOO_DEEP)


def test_a_host_map_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    path.write_bytes(b" " * (filelimits.MAX_FILE_BYTES + 1))
    assert _one_line(lambda: load_host_map(str(path)), UsageError) == f"{ENV_HOST_MAP}={path}: {filelimits.TOO_LARGE}"


# ----------------------------------------------------------------------------------- known_hosts and keys


def _shell(**settings: Any) -> EsxiShell:
    # nothing listens on port 9 of a .invalid name: the checks must refuse before any connection is tried
    return EsxiShell(SshTarget("esx-01.invalid", port=9), SshSettings(use_agent=False, password="x", **settings))


def test_known_hosts_that_is_no_file_is_refused_before_connecting(fifo: Path) -> None:
    for path, kind in _specials(fifo):
        text = _one_line(lambda p=path: _shell(known_hosts=p).connect(), SshHostKeyError)
        assert f"cannot read known_hosts {path}: {kind}, {NOT_A_FILE}" in text, text


def test_a_key_file_that_is_no_file_is_refused_before_connecting(fifo: Path) -> None:
    missing = fifo.parent / "known_hosts"
    for path, kind in _specials(fifo):
        text = _one_line(lambda p=path: _shell(known_hosts=missing, key_file=p).connect(), SshError)
        assert f"cannot load SSH key {path}: {kind}, {NOT_A_FILE}" in text, text


def test_known_hosts_are_read_as_paramiko_reads_them(tmp_path: Path) -> None:
    key = paramiko.Ed25519Key.from_private_key_file(str(_key_files(tmp_path, "ed25519")[0]))
    line = f"{key.get_name()} {key.get_base64()}"
    hashed = paramiko.HostKeys.hash_host("[10.0.0.9]:2201")
    path = tmp_path / "known_hosts"
    path.write_text(f"# comment\n\nesx-01,10.0.0.1 {line}\n{hashed} {line}\nbroken line\n")
    theirs = paramiko.HostKeys(str(path))
    with path.open("a") as f:
        f.write("esx-02 ssh-ed25519 AAAAx\n")  # no key in it: paramiko's reader stops here, vgpuctl's skips it
    ours = paramiko.HostKeys()
    load_known_hosts(ours, path)
    for name in ("esx-01", "10.0.0.1", "[10.0.0.9]:2201", "esx-02"):
        assert ours.check(name, key) == theirs.check(name, key) == (name != "esx-02"), name


def _key_files(folder: Path, kind: str) -> tuple[Path, Path]:
    """One new private key, written plain and encrypted with the passphrase `s3cret` (OpenSSH format)."""
    private: Any = {"ed25519": ed25519.Ed25519PrivateKey.generate, "ecdsa": lambda: ec.generate_private_key(
        ec.SECP256R1()), "rsa": lambda: rsa.generate_private_key(65537, 2048)}[kind]()
    paths = []
    for name, encryption in (("plain", serialization.NoEncryption()),
                             ("encrypted", serialization.BestAvailableEncryption(b"s3cret"))):
        path = folder / f"id_{kind}_{name}"
        path.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                               encryption))
        paths.append(path)
    return paths[0], paths[1]


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa"])
def test_private_keys_load_as_paramiko_loads_them(tmp_path: Path, kind: str) -> None:
    plain, encrypted = _key_files(tmp_path, kind)
    assert load_private_key(plain, None).get_fingerprint() == paramiko.PKey.from_path(plain).get_fingerprint()
    assert load_private_key(encrypted, "s3cret").get_fingerprint() == load_private_key(plain, None).get_fingerprint()
    with pytest.raises(paramiko.PasswordRequiredException):
        load_private_key(encrypted, None)
    with pytest.raises(paramiko.SSHException, match="not a private key vgpuctl can read"):
        load_private_key(encrypted, "wrong")


def test_a_key_certificate_that_is_no_file_is_refused(tmp_path: Path) -> None:
    plain = _key_files(tmp_path, "ed25519")[0]
    os.mkfifo(f"{plain}-cert.pub")
    with pytest.raises(filelimits.NotAFile):
        load_private_key(plain, None)


# --------------------------------------------------------------------------------------- address files


def test_an_address_file_that_is_no_file_is_refused_at_once(fifo: Path) -> None:
    for path, kind in _specials(fifo):
        assert _one_line(lambda p=path: load_address_file(p), UsageError) == f"{path}: {kind}, {NOT_A_FILE}"


def test_fifty_thousand_nested_brackets_in_an_address_file_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "addresses.yaml"
    path.write_text("train-01: " + DEEP)
    text = _one_line(lambda: load_address_file(path), InventoryError)
    assert text.startswith(f"{path}:1:") and text.endswith(filelimits.TOO_DEEP), text


# ---------------------------------------------------------------------------------------- the CA file


def test_a_ca_file_that_is_no_file_is_refused_before_connecting(fifo: Path) -> None:
    env = {"VGPUCTL_URL": "https://vc.invalid/sdk", "VGPUCTL_USERNAME": "admin", "VGPUCTL_PASSWORD": "x"}
    for path, kind in _specials(fifo):
        result = CliRunner().invoke(app, ["--ca-file", str(path), "status"], env=env)
        assert result.exit_code == 1, result.output
        assert result.stderr.strip() == f"error: CA file {path}: {kind}, {NOT_A_FILE}", result.stderr


# ------------------------------------------------------------------------------------ experiment results


def test_an_experiment_record_that_is_no_file_or_no_json_is_one_line(tmp_path: Path, fifo: Path) -> None:
    results = ResultsDir(tmp_path / "results")
    results.root.mkdir()
    os.mkfifo(results.root / "experiment.json")
    text = _one_line(results.experiment, UsageError)
    assert text == f"{results.root / 'experiment.json'}: a named pipe (FIFO), {NOT_A_FILE}"
    state = results.root / "state.json"
    state.write_text(DEEP)
    assert _one_line(results.state, UsageError) == f"{state}: not a record vgpuctl wrote ({filelimits.TOO_DEEP})"
    state.write_text("{")
    assert _one_line(results.state, UsageError).startswith(f"{state}: not a record vgpuctl wrote (")
