"""Launcher for gpusim, the GPU-aware vSphere simulator in tests/vcsim (Go, on govmomi's vcsim).

Used by the pytest fixtures in tests/conftest.py and by bench/. `Gpusim.start()` builds the binary when it
is missing or older than its Go sources, starts it on a free loopback port with `-catalogue` naming the vGPU
type catalogue the vgpuctl package reads, reads the environment it prints (`export VGPUCTL_URL=...
GPUSIM_CONTROL=...`) and offers helpers for the /gpusim/ control endpoint.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from vgpuctl.profiles import catalogue_path

VCSIM_DIR = Path(__file__).resolve().parent / "vcsim"
BINARY = VCSIM_DIR / "bin" / "gpusim"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
_SOURCE_SUFFIXES = (".go", ".mod", ".sum", ".yaml")


class GpusimError(RuntimeError):
    """gpusim could not be built or started, or exited unexpectedly."""


class ControlError(GpusimError):
    """The control endpoint refused a request (HTTP 4xx/5xx)."""

    def __init__(self, status: int, message: str):
        self.status = status
        self.message = message
        super().__init__(f"gpusim control: HTTP {status}: {message}")


def _sources(root: Path) -> Iterable[Path]:
    for path in root.rglob("*"):
        if path.suffix in _SOURCE_SUFFIXES and "bin" not in path.relative_to(root).parts and path.is_file():
            yield path


def needs_build(binary: Path = BINARY, src: Path = VCSIM_DIR) -> bool:
    """True when the binary is missing or older than any Go source, go.mod/go.sum or embedded YAML."""
    if not binary.exists():
        return True
    built = binary.stat().st_mtime
    return any(p.stat().st_mtime > built for p in _sources(src))


def build(force: bool = False, binary: Path = BINARY, src: Path = VCSIM_DIR) -> Path:
    """`go build -o bin/gpusim .` in tests/vcsim when needed; returns the binary."""
    if not force and not needs_build(binary, src):
        return binary
    go = shutil.which("go")
    if go is None:
        raise GpusimError("the Go toolchain (go) is not on PATH; it is needed to build gpusim")
    proc = subprocess.run([go, "build", "-o", str(binary), "."], cwd=src, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise GpusimError(f"go build of gpusim failed:\n{proc.stdout}{proc.stderr}")
    return binary


def parse_export_line(line: str) -> dict[str, str]:
    """Parse `export A=1 B='x y'` into {"A": "1", "B": "x y"}."""
    words = shlex.split(line)
    if not words or words[0] != "export":
        raise GpusimError(f"unexpected gpusim output: {line!r}")
    env: dict[str, str] = {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep:
            raise GpusimError(f"unexpected gpusim output: {line!r}")
        env[key] = value
    return env


def catalogue_args() -> list[str]:
    """`-catalogue PATH`: the catalogue file the vgpuctl package reads, so gpusim and the planner share it."""
    return ["-catalogue", str(catalogue_path())]


def _farm_args(farm: dict[str, Any] | str | Path | None, workdir: Path) -> list[str]:
    if farm is None:
        return []
    if isinstance(farm, Path):
        return ["-farm", str(farm)]
    path = workdir / ("farm.json" if isinstance(farm, dict) else "farm.yaml")
    path.write_text(json.dumps(farm) if isinstance(farm, dict) else farm)
    return ["-farm", str(path)]


class Gpusim:
    """A running gpusim process and its environment."""

    def __init__(self, process: subprocess.Popen[bytes], env: dict[str, str], workdir: Path, own_dir: bool):
        self.process = process
        self.printed = env  # the whole line gpusim printed
        # Tests opt in to the ESXi shells (vgpuctl_env(esxi=True)): the VGPUCTL_ESXI_* names gpusim prints for
        # people are left out of `env`, which tests spread into vgpuctl's environment.
        self.env = {k: v for k, v in env.items() if not k.startswith("VGPUCTL_ESXI_")}
        self.workdir = workdir
        self._own_dir = own_dir
        self._ssl = ssl._create_unverified_context()

    @classmethod
    def start(
        cls,
        args: Sequence[str] = (),
        farm: dict[str, Any] | str | Path | None = None,
        workdir: Path | None = None,
        timeout: float = START_TIMEOUT_S,
    ) -> Gpusim:
        """Build if needed and start gpusim; `farm` is a dict (JSON), YAML text or a farm file path."""
        binary = build()
        own_dir = workdir is None
        wd = Path(tempfile.mkdtemp(prefix="gpusim-")) if workdir is None else Path(workdir)
        wd.mkdir(parents=True, exist_ok=True)
        env_file = wd / "env"
        env_file.unlink(missing_ok=True)
        cmd = [str(binary), "-listen", "127.0.0.1:0", "-env-file", str(env_file), *catalogue_args()]
        cmd += [*_farm_args(farm, wd), *args]
        log = (wd / "gpusim.log").open("wb")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = env_file.read_text() if env_file.exists() else ""
            if text.endswith("\n"):
                return cls(proc, parse_export_line(text.strip()), wd, own_dir)
            if proc.poll() is not None:
                raise GpusimError(f"gpusim exited with status {proc.returncode}:\n{cls._tail(wd)}")
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        raise GpusimError(f"gpusim did not start within {timeout:.0f}s:\n{cls._tail(wd)}")

    @staticmethod
    def _tail(workdir: Path) -> str:
        log = workdir / "gpusim.log"
        return log.read_text(errors="replace")[-4000:] if log.exists() else ""

    @property
    def log(self) -> str:
        """The last lines gpusim wrote to stderr."""
        return self._tail(self.workdir)

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        """The gpusim process (alias of `process`)."""
        return self.process

    @property
    def url(self) -> str:
        return self.env["VGPUCTL_URL"]

    @property
    def username(self) -> str:
        return self.env["VGPUCTL_USERNAME"]

    @property
    def password(self) -> str:
        return self.env["VGPUCTL_PASSWORD"]

    @property
    def control(self) -> str:
        """Base URL of the control endpoint, e.g. https://127.0.0.1:PORT/gpusim."""
        return self.env["GPUSIM_CONTROL"]

    @property
    def host_port(self) -> tuple[str, int]:
        netloc = self.url.split("//", 1)[1].split("/", 1)[0]
        host, port = netloc.rsplit(":", 1)
        return host, int(port)

    def stop(self) -> None:
        """SIGTERM, wait; SIGKILL if it does not exit. Removes its temporary directory."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Gpusim:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    # control endpoint

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Call the control endpoint; raises ControlError with the server's message on HTTP errors."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.control + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=30) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                message = json.loads(raw).get("error", "")
            except ValueError:
                message = raw.decode(errors="replace")
            raise ControlError(err.code, message) from None

    def catalogue(self) -> dict[str, Any]:
        """The catalogue gpusim read: {"path", "sha256" (of the file's bytes), "models"}."""
        return dict(self.request("GET", "/")["catalogue"])

    def assignments(self) -> list[dict[str, Any]]:
        """Placed vGPUs: host, gpu (PCI id), model, vm (moref), vmName, profile, start/size (MIG)."""
        return list(self.request("GET", "/assignments")["assignments"])

    def hosts(self) -> list[dict[str, Any]]:
        """The farm's hosts with GPUs, module options and state."""
        return list(self.request("GET", "/hosts")["hosts"])

    def host(self, name: str) -> dict[str, Any]:
        return dict(self.request("GET", f"/hosts/{name}"))

    def arm_fault(
        self, obj: str, method: str, fault: str = "SystemError", count: int = 1, message: str | None = None
    ) -> dict[str, Any]:
        """Fail the next `count` calls of `method` on object `obj` (name or moref id) with a vim fault."""
        body: dict[str, Any] = {"object": obj, "method": method, "fault": fault, "count": count}
        if message is not None:
            body["message"] = message
        return dict(self.request("POST", "/faults", body))

    def delay(self, obj: str, method: str, seconds: float, count: int = 1) -> dict[str, Any]:
        """Delay the next `count` tasks of `method` on `obj` by `seconds`."""
        body = {"object": obj, "method": method, "seconds": seconds, "count": count}
        return dict(self.request("POST", "/delays", body))

    def followup(self, obj: str, num_cpus: int, method: str = "ReconfigVM_Task", count: int = 1) -> dict[str, Any]:
        """After the next `count` bodies of `method` (ReconfigVM_Task, PowerOffVM_Task, CloneVM_Task: the new
        VM's) on VM `obj`, before each task reports, set its vCPUs to `num_cpus`: another client's change landing
        between the caller's task and its next read."""
        body = {"object": obj, "method": method, "numCPUs": num_cpus, "count": count}
        return dict(self.request("POST", "/followups", body))

    def clear_faults(self) -> None:
        self.request("DELETE", "/faults")

    def hold(self, method: str, obj: str = "", count: int = 1) -> int:
        """Hold the next `count` calls of `method` (on `obj`, or on any object) when gpusim receives them, until
        `release`; their start shows in `holds`. Returns the hold's id."""
        return int(self.request("POST", "/holds", {"object": obj, "method": method, "count": count})["id"])

    def hold_queue(self, host: str, method: str = "PowerOnVM_Task", count: int = 1) -> int:
        """Hold the next `count` calls of `method` on the VMs of `host` (the host's power-on queue by default),
        VMs made after the hold included, until `release`; everything else goes on. Returns the hold's id."""
        return int(self.request("POST", "/holds", {"host": host, "method": method, "count": count})["id"])

    def state(self) -> dict[str, Any]:
        """What a client can change in vCenter: hosts (SSH service included), custom attribute definitions and
        values, folders, VMs (power, changeVersion), tasks created and calls of writing methods, per method."""
        return dict(self.request("GET", "/state"))

    def holds(self) -> list[dict[str, Any]]:
        """Every hold: id, method, object, started (moref ids of the tasks caught), waiting, released."""
        return list(self.request("GET", "/holds")["holds"])

    def release(self, hold: int | None = None) -> None:
        """Let the tasks of one hold (every hold when None) run."""
        self.request(*(("DELETE", "/holds") if hold is None else ("POST", f"/holds/{hold}/release")))

    def set_guest(
        self, vm: str, ip: str | None = None, state: str = "running", hostname: str | None = None
    ) -> dict[str, Any]:
        """Set a VM's guest IP and guest state (running, notRunning, ...)."""
        body: dict[str, Any] = {"state": state, "ip": ip or ""}
        if hostname is not None:
            body["hostname"] = hostname
        return dict(self.request("POST", f"/vms/{vm}/guest", body))

    def nics(self, host: str) -> list[dict[str, Any]]:
        """A host's NICs: model, ids, SR-IOV configured and in effect, VFs held per VM, passthrough holder."""
        return list(self.request("GET", f"/hosts/{host}/nics")["nics"])

    def customization_fault(self, vm: str, reason: str, event: str = "CustomizationLinuxIdentityFailed") -> None:
        """The next guest customization of the VM of this name fails with `event` and `reason`."""
        self.request("POST", f"/vms/{vm}/customization-fault", {"event": event, "reason": reason})

    def host_down(self, host: str) -> dict[str, Any]:
        return dict(self.request("POST", f"/hosts/{host}/down"))

    def host_up(self, host: str) -> dict[str, Any]:
        return dict(self.request("POST", f"/hosts/{host}/up"))

    def reboot_fault(self, host: str, ignore: list[str], count: int = 1) -> dict[str, Any]:
        """Make the next `count` reboots of `host` leave pending MIG modes ("mig") and/or configured module
        options ("modules") unapplied, as if the GPU or driver refused them."""
        body = {"ignore": ignore, "count": count}
        return dict(self.request("POST", f"/hosts/{host}/reboot-faults", body))

    def access(self, host: str, **fields: Any) -> dict[str, Any]:
        """Change a host's SSH service (ssh_running, ssh_policy), lockdown mode (lockdown, lockdown_exceptions)
        or vGPU Manager (vgpu_manager, "none" removes it); returns the host's access state."""
        return dict(self.request("POST", f"/hosts/{host}/access", fields)["access"])

    def set_perf(self, series: list[dict[str, Any]] | None = None, pattern: str | None = None,
                 statistics_level: int | None = None) -> dict[str, Any]:
        """PerformanceManager's GPU series: each {"host", "gpu" (PCI id; none: every GPU of the host), "counter"
        (utilization, mem.used, mem.usage, temperature, power.used), "points": [{"ago_s", "value"}, ...]}, a step
        function from its oldest point; `pattern` (by-vgpus, idle, busy) for the GPUs without one; every historical
        interval's `statistics_level`."""
        body: dict[str, Any] = {"series": series or []}
        if pattern is not None:
            body["pattern"] = pattern
        if statistics_level is not None:
            body["statistics_level"] = statistics_level
        return dict(self.request("POST", "/perf", body))

    def perf(self) -> dict[str, Any]:
        """The series set, the pattern, the counters and intervals, and the QueryPerf calls answered (`queries`)."""
        return dict(self.request("GET", "/perf"))

    def clear_reboot_fault(self, host: str) -> None:
        self.request("DELETE", f"/hosts/{host}/reboot-faults")

    def software(self) -> dict[str, Any]:
        """Depots, each host's vGPU Manager (running, installed, its component), each VM's guest driver and the
        incidents: running vGPU VMs on a pair NVIDIA does not list, or refused one."""
        return dict(self.request("GET", "/software"))

    def set_guest_driver(self, vm: str, version: str) -> None:
        """The guest driver the VM reports ("" none), as a driver install in the guest leaves it."""
        self.request("POST", f"/vms/{vm}/guest-driver", {"version": version})

    def remediation_fault(self, host: str, kind: str, count: int = 1) -> None:
        """The host's next installs fail (`fail`), or its next reboot never ends (`stay-down`)."""
        self.request("POST", f"/hosts/{host}/remediation-fault", {"kind": kind, "count": count})

    def depot_reachable(self, location: str, reachable: bool) -> None:
        self.request("POST", "/software/depots", {"location": location, "reachable": reachable})

    def rename_vm(self, old: str, new: str) -> None:
        """Rename a VM through vCenter's API, as another operator would (Rename_Task on its own connection)."""
        from pyVim.connect import Disconnect
        from pyVim.task import WaitForTask
        from pyVmomi import vim

        si = self.connect()
        try:
            view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
            WaitForTask(next(o for o in view.view if o.name == old).Rename_Task(new))
        finally:
            Disconnect(si)

    def connect(self) -> Any:
        """A pyVmomi ServiceInstance logged in to gpusim (vSphere API 8.0.3); Disconnect it when done."""
        from pyVim.connect import Connect

        host, port = self.host_port
        return Connect(
            host=host,
            port=port,
            user=self.username,
            pwd=self.password,
            version="vim.version.v8_0_3_0",  # pinned, not negotiated: the vGPU fields need 8.0.3
            disableSslCertValidation=True,
        )

    def os_environ(self) -> dict[str, str]:
        """os.environ updated with gpusim's environment (for subprocesses)."""
        return {**os.environ, **self.env}

    def vgpuctl_env(self, state_dir: Path | None = None, *, esxi: bool = True) -> dict[str, str]:
        """The VGPUCTL_* settings of a vgpuctl run against this simulator (its ESXi shells too, unless esxi=False)."""
        env = {
            "VGPUCTL_URL": self.url,
            "VGPUCTL_USERNAME": self.username,
            "VGPUCTL_PASSWORD": self.password,
            "VGPUCTL_INSECURE": "1",
        }
        if state_dir is not None:
            env["VGPUCTL_STATE_DIR"] = str(state_dir)
        if esxi:
            env |= {
                "VGPUCTL_ESXI_HOSTS": self.env["GPUSIM_SSH_HOSTS"],
                "VGPUCTL_ESXI_KNOWN_HOSTS": self.env["GPUSIM_SSH_KNOWN_HOSTS"],
                "VGPUCTL_ESXI_PASSWORD": self.password,
            }
        return env


# --------------------------------------------------------------------------------------------------------
# SSH (ESXi shell) side: helpers of the ESXi shell. gpusim serves one SSH endpoint
# per host (login root, password = the vSphere password) and writes ssh_known_hosts and ssh_hosts.json
# next to its env file; the control endpoint /gpusim/ssh shows them and arms SSH faults.


def ssh_known_hosts(sim: Gpusim) -> Path:
    """The known_hosts file gpusim wrote ("[127.0.0.1]:PORT,host-name ssh-ed25519 ..." per host)."""
    return Path(sim.env["GPUSIM_SSH_KNOWN_HOSTS"])


def ssh_host_map_path(sim: Gpusim) -> Path:
    """The host -> {"host","port","address","host_key","fingerprint"} JSON file gpusim wrote."""
    return Path(sim.env["GPUSIM_SSH_HOSTS"])


def ssh_hosts(sim: Gpusim) -> dict[str, dict[str, Any]]:
    return dict(json.loads(ssh_host_map_path(sim).read_text()))


def ssh_info(sim: Gpusim) -> dict[str, Any]:
    """GET /gpusim/ssh: user, known_hosts and host_map paths, hosts, armed faults."""
    return dict(sim.request("GET", "/ssh"))


def arm_ssh_fault(sim: Gpusim, kind: str, host: str = "", match: str = "", **extra: Any) -> dict[str, Any]:
    """Arm an SSH fault: kind hang | fail (exit, stdout, stderr) | refuse | drop; `times` = 0 until cleared;
    `match` is a substring of the command line ("" = every command)."""
    return dict(sim.request("POST", "/ssh/faults", {"host": host, "kind": kind, "match": match, **extra}))


def clear_ssh_faults(sim: Gpusim, host: str | None = None) -> None:
    sim.request("DELETE", "/ssh/faults" + (f"?host={host}" if host else ""))


# --------------------------------------------------------------------------------------------------------
# govmomi's own vcsim, unmodified (tests/vcsim/cmd/vcsim): an estate nobody here modelled.

VCSIM_BINARY = VCSIM_DIR / "bin" / "vcsim"


class PlainVcsim:
    """govmomi's vcsim command built from the pinned module: 4 hosts (a cluster of 3, one standalone), 4 VMs,
    no GPUs, no HostKernelModuleSystem, every privilege granted, any user name and password accepted."""

    USERNAME, PASSWORD = "user", "pass"

    def __init__(self, process: subprocess.Popen[bytes], url: str, workdir: Path):
        self.process, self.url, self.workdir = process, url, workdir

    @classmethod
    def start(cls, workdir: Path, timeout: float = START_TIMEOUT_S) -> PlainVcsim:
        go = shutil.which("go")
        if needs_build(VCSIM_BINARY, VCSIM_DIR):
            if go is None:
                raise GpusimError("the Go toolchain (go) is not on PATH; it is needed to build vcsim")
            proc = subprocess.run([go, "build", "-o", str(VCSIM_BINARY), "./cmd/vcsim"], cwd=VCSIM_DIR,
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise GpusimError(f"go build of vcsim failed:\n{proc.stdout}{proc.stderr}")
        workdir.mkdir(parents=True, exist_ok=True)
        env_file = workdir / "vcsim.env"
        env_file.write_text("")  # vcsim writes into an existing file (a fifo upstream)
        log = (workdir / "vcsim.log").open("wb")
        process = subprocess.Popen([str(VCSIM_BINARY), "-l", "127.0.0.1:0", "-E", str(env_file)],
                                   stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = env_file.read_text()
            if text.endswith("\n"):
                url = parse_export_line(text.strip())["GOVC_URL"]
                netloc = url.split("@", 1)[-1]  # https://user:pass@127.0.0.1:PORT/sdk
                return cls(process, "https://" + netloc, workdir)
            if process.poll() is not None:
                raise GpusimError(f"vcsim exited with status {process.returncode}")
            time.sleep(0.05)
        process.kill()
        process.wait()
        raise GpusimError(f"vcsim did not start within {timeout:.0f}s")

    def vgpuctl_env(self) -> dict[str, str]:
        return {"VGPUCTL_URL": self.url, "VGPUCTL_USERNAME": self.USERNAME, "VGPUCTL_PASSWORD": self.PASSWORD,
                "VGPUCTL_INSECURE": "1"}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
