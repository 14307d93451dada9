"""ESXi shell over SSH (paramiko) with known_hosts verification.

Host keys are checked against known_hosts and an unknown key is refused (paramiko's RejectPolicy). Only
with `trust_on_first_use=True` is an unknown key accepted: it is then appended to the known_hosts file and
reported (log warning and the `on_new_host_key` callback). A key that differs from the recorded one is
always refused. Authentication: a key file, the SSH agent, and/or a password from the environment
(VGPUCTL_ESXI_PASSWORD). Each command has a timeout; a non-zero exit raises SshError carrying stderr.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgpuctl import filelimits, trace
from vgpuctl.errors import SshAuthError, SshError, SshHostKeyError, SshUnreachable
from vgpuctl.lazyclass import dataclass

if TYPE_CHECKING:
    import paramiko

log = logging.getLogger(__name__)

ENV_PASSWORD = "VGPUCTL_ESXI_PASSWORD"
ENV_KEY_FILE = "VGPUCTL_ESXI_KEY_FILE"
ENV_KNOWN_HOSTS = "VGPUCTL_ESXI_KNOWN_HOSTS"
ENV_USER = "VGPUCTL_ESXI_USER"
ENV_KEY_PASSPHRASE = "VGPUCTL_ESXI_KEY_PASSPHRASE"
ENV_TIMEOUT = "VGPUCTL_ESXI_TIMEOUT"
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
# A JSON object (host name -> {"host": address, "port": n}) written out, or the path of a file holding it.
ENV_HOST_MAP = "VGPUCTL_ESXI_HOSTS"
DEFAULT_CONNECT_TIMEOUT_S = 30.0
DEFAULT_COMMAND_TIMEOUT_S = 120.0  # nvidia-smi and esxcli answer in seconds; a hang ends here
TIMEOUT_HINT = f"--timeout or {ENV_TIMEOUT} sets the limit"


def unresolvable_name(address: str) -> str | None:
    """Why the resolver cannot be asked for this host name (it comes from vCenter: a label over 63 characters, or a
    character IDNA refuses), or None. Names that cannot be looked up are said so per host, as an unreachable host
    is, not raised from deep inside the socket library."""
    try:
        address.encode("idna")
    except UnicodeError as err:
        return f"not a name DNS can look up ({err.__cause__ or err})"
    return None


@dataclass(frozen=True)
class SshTarget:
    """One ESXi host: its name (as vSphere knows it) and where its SSH server listens."""

    host: str
    address: str | None = None  # defaults to host
    port: int = 22

    @property
    def connect_address(self) -> str:
        return self.address or self.host

    @property
    def known_hosts_name(self) -> str:
        """The name known_hosts is searched for (OpenSSH's "[addr]:port" form off port 22)."""
        return self.connect_address if self.port == 22 else f"[{self.connect_address}]:{self.port}"


@dataclass(frozen=True)
class SshSettings:
    user: str = "root"
    known_hosts: Path = DEFAULT_KNOWN_HOSTS
    key_file: Path | None = None
    use_agent: bool = True
    password: str | None = field(default=None, repr=False)
    key_passphrase: str | None = field(default=None, repr=False)
    trust_on_first_use: bool = False
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT_S

    def limited_to(self, seconds: float | None) -> SshSettings:
        """These settings with each command, and the connection, bounded by `seconds` (None: unchanged)."""
        import dataclasses

        if seconds is None:
            return self
        return dataclasses.replace(self, command_timeout=seconds, connect_timeout=min(seconds, self.connect_timeout))

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        user: str | None = None,
        known_hosts: str | Path | None = None,
        key_file: str | Path | None = None,
        **kwargs: Any,
    ) -> SshSettings:
        """Explicit arguments (from the inventory) first, then VGPUCTL_ESXI_* variables, then defaults."""
        env = os.environ if env is None else env
        kh = known_hosts or env.get(ENV_KNOWN_HOSTS) or DEFAULT_KNOWN_HOSTS
        kf = key_file or env.get(ENV_KEY_FILE)
        return cls(
            user=user or env.get(ENV_USER) or "root",
            known_hosts=Path(kh).expanduser(),
            key_file=Path(kf).expanduser() if kf else None,
            password=env.get(ENV_PASSWORD) or None,
            key_passphrase=env.get(ENV_KEY_PASSPHRASE) or None,
            **kwargs,
        )


def files_read(env: Mapping[str, str]) -> dict[str, Path | None]:
    """The files a shell on the environment's settings reads (what each is -> its path): the known_hosts file, the
    key file and the host map's file; no output of a command may name one of them."""
    settings = SshSettings.from_env(env)
    host_map = env.get(ENV_HOST_MAP, "")
    return {
        f"the SSH known_hosts file ({ENV_KNOWN_HOSTS} or ssh.known_hosts)": settings.known_hosts,
        f"the SSH key file ({ENV_KEY_FILE} or ssh.key_file)": settings.key_file,
        f"the ESXi host map ({ENV_HOST_MAP})": Path(host_map).expanduser()
        if host_map.strip() and not host_map.lstrip().startswith("{") else None,
    }


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_status: int
    stdout: str
    stderr: str


class _UnknownHostKey(Exception):
    """Raised by the reject policy; turned into SshHostKeyError by connect()."""

    def __init__(self, hostname: str, key: paramiko.PKey):
        super().__init__(f"Server {hostname!r} not found in known_hosts")
        self.hostname = hostname
        self.key = key


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def load_known_hosts(keys: paramiko.HostKeys, path: Path) -> None:
    """Add the host keys of an OpenSSH known_hosts file to `keys`, as paramiko's HostKeys.load reads them (blank
    and comment lines skipped; lines without a readable key skipped too, where paramiko stops at some), from the
    file read within vgpuctl's limits: a FIFO, a device or a file over the size limit raises NotAFile or
    FileTooLarge instead of being read without end."""
    import paramiko
    from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

    for lineno, raw in enumerate(filelimits.read_regular_text(path).splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            entry = HostKeyEntry.from_line(line, lineno)
        except (paramiko.SSHException, InvalidHostKey):  # a line no key can be read from, as OpenSSH skips it
            continue
        if entry is not None and entry.key is not None:
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)


def load_private_key(path: Path, passphrase: str | None) -> paramiko.PKey:
    """The private key in `path` (RSA, ECDSA or Ed25519, OpenSSH or PEM format), and its certificate from
    `path-cert.pub` when there is one, as paramiko's PKey.from_path loads them, each file read within vgpuctl's
    limits. Raises PasswordRequiredException for an encrypted key without `passphrase`, SSHException or
    ValueError for one that cannot be read, NotAFile, FileTooLarge or OSError for the file itself."""
    import paramiko

    text = filelimits.read_regular_text(path)
    key = _private_key(text, passphrase, (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey))
    cert = Path(f"{path}-cert.pub")
    if cert.exists():
        key.load_certificate(filelimits.read_regular_text(cert).strip())
    return key


def _private_key(text: str, passphrase: str | None, kinds: tuple[type[paramiko.PKey], ...]) -> paramiko.PKey:
    import io

    import paramiko

    failures: list[str] = []
    for kind in kinds:
        try:
            return kind.from_private_key(io.StringIO(text), password=passphrase)
        except paramiko.PasswordRequiredException:
            raise
        except (paramiko.SSHException, ValueError) as err:
            failures.append(str(err))
    raise paramiko.SSHException(f"not a private key vgpuctl can read (RSA, ECDSA or Ed25519; or a wrong "
                                f"{ENV_KEY_PASSPHRASE}): {failures[-1]}")


class EsxiShell:
    """An SSH connection to one ESXi host; use as a context manager."""

    def __init__(
        self,
        target: SshTarget,
        settings: SshSettings,
        on_new_host_key: Callable[[str, str], None] | None = None,
    ):
        self.target = target
        self.settings = settings
        self.on_new_host_key = on_new_host_key
        self._client: paramiko.SSHClient | None = None

    def __enter__(self) -> EsxiShell:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _host_key_policy(self) -> paramiko.MissingHostKeyPolicy:
        import paramiko

        shell = self
        if not self.settings.trust_on_first_use:

            class Reject(paramiko.MissingHostKeyPolicy):
                def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
                    raise _UnknownHostKey(hostname, key)

            return Reject()

        class TrustOnFirstUse(paramiko.MissingHostKeyPolicy):
            def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
                shell._record_host_key(hostname, key)

        return TrustOnFirstUse()

    def _record_host_key(self, hostname: str, key: paramiko.PKey) -> None:
        path = self.settings.known_hosts
        path.parent.mkdir(parents=True, exist_ok=True)
        names = hostname if hostname == self.target.host else f"{hostname},{self.target.host}"
        with path.open("a") as f:
            f.write(f"{names} {key.get_name()} {key.get_base64()}\n")
        fp = fingerprint(key)
        log.warning(
            "trusted new SSH host key of %s (%s %s), recorded in %s", self.target.host, key.get_name(), fp, path
        )
        if self.on_new_host_key:
            self.on_new_host_key(self.target.host, fp)

    def connect(self) -> None:
        import paramiko

        client = paramiko.SSHClient()
        known = self.settings.known_hosts
        if known.exists():
            self._read_known_hosts(client)
        client.set_missing_host_key_policy(self._host_key_policy())
        s = self.settings
        if s.key_file is None and not s.use_agent and s.password is None:
            raise SshError(
                f"no SSH credentials: set {ENV_PASSWORD}, a key file or use the agent", host=self.target.host
            )
        pkey = self._load_key() if s.key_file else None
        name_problem = unresolvable_name(self.target.connect_address)
        if name_problem is not None:
            raise SshUnreachable(f"cannot connect to {self.target.connect_address!r}: {name_problem}",
                                 host=self.target.host)
        try:
            client.connect(
                self.target.connect_address,
                port=self.target.port,
                username=s.user,
                password=s.password,
                pkey=pkey,
                allow_agent=s.use_agent,
                look_for_keys=False,
                timeout=s.connect_timeout,
                banner_timeout=s.connect_timeout,
                auth_timeout=s.connect_timeout,
            )
        except paramiko.BadHostKeyException as e:
            client.close()
            raise SshHostKeyError(
                f"SSH host key of {self.target.known_hosts_name} does not match known_hosts {known} "
                f"(got {fingerprint(e.key)}): refusing to connect",
                host=self.target.host,
            ) from e
        except paramiko.AuthenticationException as e:
            client.close()
            raise SshAuthError(f"SSH authentication failed for user {s.user}", host=self.target.host) from e
        except _UnknownHostKey as e:
            client.close()
            raise SshHostKeyError(
                f"SSH host key of {self.target.known_hosts_name} ({fingerprint(e.key)}) is not in known_hosts "
                f"{known}: refusing to connect (add it, or allow trust on first use explicitly)",
                host=self.target.host,
            ) from e
        except paramiko.SSHException as e:
            client.close()
            raise SshError(f"SSH connection failed: {e}", host=self.target.host) from e
        except (TimeoutError, OSError) as e:
            client.close()
            addr = f"{self.target.connect_address}:{self.target.port}"
            raise SshUnreachable(f"cannot connect to {addr}: {e}", host=self.target.host) from e
        self._client = client

    def _read_known_hosts(self, client: paramiko.SSHClient) -> None:
        known = self.settings.known_hosts
        try:
            load_known_hosts(client.get_host_keys(), known)
        except (filelimits.NotAFile, filelimits.FileTooLarge) as e:
            why = str(e)
        except UnicodeDecodeError:
            why = "not UTF-8 text"
        except OSError as e:
            why = e.strerror or str(e)
        else:
            return
        raise SshHostKeyError(f"cannot read known_hosts {known}: {why}", host=self.target.host)

    def _load_key(self) -> paramiko.PKey:
        import paramiko

        path = self.settings.key_file
        assert path is not None
        try:
            return load_private_key(path, self.settings.key_passphrase)
        except paramiko.PasswordRequiredException as e:
            raise SshError(f"SSH key {path} is encrypted: set {ENV_KEY_PASSPHRASE}", host=self.target.host) from e
        except (filelimits.NotAFile, filelimits.FileTooLarge) as e:
            raise SshError(f"cannot load SSH key {path}: {e}", host=self.target.host) from None
        except OSError as e:
            raise SshError(f"cannot load SSH key {path}: {e.strerror or e}", host=self.target.host) from e
        except (paramiko.SSHException, ValueError) as e:  # UnicodeDecodeError too
            raise SshError(f"cannot load SSH key {path}: {e}", host=self.target.host) from e

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def run(self, command: str, timeout: float | None = None, check: bool = True) -> CommandResult:
        """Run one command; raise SshError on timeout, a dropped connection, or (check) a non-zero exit."""
        if self._client is None:
            self.connect()
        assert self._client is not None
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise SshError(f"connection lost before `{command}`", host=self.target.host)
        limit = self.settings.command_timeout if timeout is None else timeout
        trace.shell_command(self.target.host, command)
        start = time.monotonic()
        try:
            chan = transport.open_session(timeout=self.settings.connect_timeout)
            chan.exec_command(command)
        except Exception as e:  # paramiko raises SSHException, EOFError or socket errors here
            raise SshError(f"cannot start `{command}`: {e}", host=self.target.host) from e
        try:
            out, err, status = self._collect(chan, limit, command)
        finally:
            chan.close()
        trace.shell_result(self.target.host, status, time.monotonic() - start)
        result = CommandResult(command, status, out, err)
        if check and status != 0:
            reason = _first_line(err) or _first_line(out) or "no output"
            raise SshError(
                f"`{command}` exited {status}: {reason}", host=self.target.host, exit_status=status, stderr=err
            )
        return result

    def _collect(self, chan: paramiko.Channel, limit: float, command: str) -> tuple[str, str, int]:
        deadline = time.monotonic() + limit
        out, err = bytearray(), bytearray()
        while True:
            got = False
            if chan.recv_ready():
                out += chan.recv(65536)
                got = True
            if chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
                got = True
            if got:
                continue
            if chan.exit_status_ready():
                status = chan.recv_exit_status()
                # drain what arrived with the exit status
                while chan.recv_ready():
                    out += chan.recv(65536)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                if status == -1:
                    raise SshError(f"connection dropped while running `{command}`", host=self.target.host)
                return out.decode(errors="replace"), err.decode(errors="replace"), status
            if time.monotonic() > deadline:
                raise SshError(f"`{command}` did not finish within {limit:g} s ({TIMEOUT_HINT})", host=self.target.host)
            chan.status_event.wait(0.02)
