"""sim up/down/env: run the bundled GPU simulator (gpusim, Go, tests/vcsim) in the background for people.

Tests start gpusim through their own pytest fixture; this is the human path (`make demo`). State lives in
$VGPUCTL_STATE_DIR or ~/.vgpuctl/sim: the env file gpusim writes, its pid, its log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Annotated

import typer

import vgpuctl
from vgpuctl.cli import common, simguests
from vgpuctl.errors import UsageError, VgpuctlError

app = typer.Typer(help="Start and stop the bundled GPU simulator (gpusim).", no_args_is_help=True)

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
GUESTS_STOP_TIMEOUT_S = 300.0  # gpusim stops its guests as it ends (a fraction of a second each)


class SimError(VgpuctlError):
    """The simulator could not be built, started or stopped."""


def state_dir() -> Path:
    return Path(os.environ.get("VGPUCTL_STATE_DIR") or Path.home() / ".vgpuctl" / "sim").expanduser()


def env_path() -> Path:
    return state_dir() / "env"


def pid_path() -> Path:
    return state_dir() / "gpusim.pid"


def log_path() -> Path:
    return state_dir() / "gpusim.log"


def source_dir() -> Path:
    """tests/vcsim of the checkout vgpuctl runs from (editable install), or $GPUSIM_SRC."""
    explicit = os.environ.get("GPUSIM_SRC")
    if explicit:
        path = Path(explicit).expanduser()
        if not (path / "go.mod").is_file():
            raise SimError(f"GPUSIM_SRC={explicit} has no go.mod: point it at the gpusim sources (tests/vcsim)")
        return path
    checkout = Path(vgpuctl.__file__).resolve().parent.parent / "tests" / "vcsim"
    if (checkout / "go.mod").is_file():
        return checkout
    raise SimError(
        "vgpuctl sim needs a source checkout and Go: the simulator is built from the repository's tests/vcsim "
        "(pip install -e . in a checkout, or set GPUSIM_SRC to that folder or GPUSIM_BIN to a built gpusim)"
    )


def binary_path(src: Path) -> Path:
    """tests/vcsim/bin/gpusim when the checkout is writable, else a copy in the state directory."""
    in_tree = src / "bin" / "gpusim"
    if os.access(src, os.W_OK):
        return in_tree
    return state_dir() / "gpusim"


def _newest_source_mtime(src: Path) -> float:
    files = [p for p in src.rglob("*") if p.suffix in (".go", ".yaml", ".json") or p.name in ("go.mod", "go.sum")]
    return max((p.stat().st_mtime for p in files if "bin" not in p.relative_to(src).parts), default=0.0)


def build(src: Path | None) -> Path:
    """`go build` gpusim unless the binary is newer than every source file. $GPUSIM_BIN skips the build."""
    prebuilt = os.environ.get("GPUSIM_BIN")
    if prebuilt:
        if not os.access(prebuilt, os.X_OK):
            raise SimError(f"GPUSIM_BIN={prebuilt} is not an executable file")
        return Path(prebuilt)
    src = src or source_dir()
    binary = binary_path(src)
    if binary.exists() and binary.stat().st_mtime >= _newest_source_mtime(src):
        return binary
    go = shutil.which("go")
    if go is None:
        raise SimError("Go is needed to build the simulator: install Go >= 1.25 (https://go.dev/dl/) or set GPUSIM_BIN")
    binary.parent.mkdir(parents=True, exist_ok=True)
    common.info(f"building gpusim in {src} ...")
    proc = subprocess.run([go, "build", "-o", str(binary), "."], cwd=src, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise SimError(f"go build of gpusim failed:\n{tail}")
    return binary


def running_pid() -> int | None:
    try:
        pid = int(pid_path().read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def farm_args(farm: Path | None, topology: dict[str, object]) -> list[str]:
    """gpusim's own flags for the farm; only what the user gave (gpusim's defaults fit inventory.example.yaml).

    `topology` maps gpusim flag names (hosts, gpus, model, ...) to values; None or False means not given."""
    given = {name: value for name, value in topology.items() if value is not None and value is not False}
    if farm is not None:
        if not farm.is_file():
            raise UsageError(f"--farm {farm}: no such file")
        if given:
            flags = ", ".join(f"--{name}" for name in given)
            raise UsageError(f"--farm describes the whole farm: do not combine it with {flags}")
        return ["-farm", str(farm.resolve())]
    args: list[str] = []
    for name, value in given.items():
        args += [f"-{name}"] if value is True else [f"-{name}", str(value)]
    return args


def parse_env_file(text: str) -> dict[str, str]:
    """`export A=1 B=2` or `A=1` lines -> dict (values may be single- or double-quoted)."""
    import shlex

    env: dict[str, str] = {}
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"]:
            words = words[1:]
        for word in words:
            if "=" in word:
                key, value = word.split("=", 1)
                env[key] = value
    return env


def _wait_for_env(proc: subprocess.Popen[bytes], path: Path) -> dict[str, str]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = "\n".join(log_path().read_text(errors="replace").strip().splitlines()[-15:])
            raise SimError(f"gpusim exited with status {proc.returncode} while starting:\n{tail}")
        text = path.read_text() if path.is_file() else ""
        if text.endswith("\n"):  # gpusim writes one line; a partial write has no newline yet
            env = parse_env_file(text)
            if "VGPUCTL_URL" in env:
                return env
        time.sleep(0.2)
    _terminate(proc.pid)
    raise SimError(f"gpusim did not write {path} within {START_TIMEOUT_S:.0f}s; see {log_path()}")


def _terminate(pid: int, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM, wait, then SIGKILL. True when the process is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        _reap(pid)
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    return False


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _catalogue() -> Path:
    from vgpuctl.profiles import catalogue_path  # the catalogue module and the model: not on every command's start

    return catalogue_path()


@app.command("up")
def up_cmd(
    ctx: typer.Context,
    farm: Annotated[Path | None, typer.Option(help="Farm description (YAML or JSON) for gpusim.")] = None,
    clusters: Annotated[int | None, typer.Option(min=1, help="Clusters.")] = None,
    hosts: Annotated[int | None, typer.Option(min=1, help="Hosts per cluster.")] = None,
    gpus: Annotated[int | None, typer.Option(min=0, help="GPUs per host.")] = None,
    model: Annotated[
        str | None, typer.Option(help="GPU model, e.g. A100-40GB, H100-SXM5-80GB, L40S (`gpusim -models` lists all).")
    ] = None,
    nvlink: Annotated[
        str | None, typer.Option(help="NVLink topology: pairs, quads, nvswitch or none (default: the board's own).")
    ] = None,
    mig: Annotated[bool, typer.Option("--mig", help="GPUs start in MIG mode.")] = False,
    vgpu_mode: Annotated[str | None, typer.Option(help="Time-sliced mode: sameSize or mixedSize.")] = None,
    policy: Annotated[str | None, typer.Option(help="Assignment policy: performance or consolidation.")] = None,
    vms: Annotated[int | None, typer.Option(min=0, help="Powered-off VMs vm-0001... to create.")] = None,
    templates: Annotated[str | None, typer.Option(help="Comma-separated VM template names.")] = None,
    api_version: Annotated[str | None, typer.Option(help="vSphere API version to report (e.g. 8.0.3.0).")] = None,
    guests: Annotated[
        bool,
        typer.Option("--guests", help="Root only: each VM that powers on gets a guest (a Debian chroot with sshd in "
                                      "a network namespace of its own) whose address gpusim reports, for `provision`."),
    ] = False,
) -> None:
    """Build gpusim if needed, start it in the background, and print the environment to use it."""
    topology: dict[str, object] = {
        "clusters": clusters,
        "hosts": hosts,
        "gpus": gpus,
        "model": model,
        "nvlink": nvlink,
        "mig": mig,
        "vgpu-mode": vgpu_mode,
        "policy": policy,
        "vms": vms,
        "templates": templates,
    }
    if guests:
        simguests.check_can_run()  # before anything is built or started
    args = [*farm_args(farm, topology), "-catalogue", str(_catalogue())]
    if api_version is not None:
        args += ["-api-version", api_version]
    pid = running_pid()
    if pid is not None:
        raise SimError(f"gpusim is already running (pid {pid}); `vgpuctl sim env` prints its environment")
    binary = build(None if os.environ.get("GPUSIM_BIN") else source_dir())
    state_dir().mkdir(parents=True, exist_ok=True)
    pid, env = _start_with_guests(binary, args) if guests else _start(binary, args, {})
    common.info(f"gpusim running (pid {pid}); log {log_path()}; stop it with `vgpuctl sim down`")
    if guests:
        common.info("guests: each VM that powers on gets one, its address in vSphere once its sshd answers (root "
                    "login: the password in GPUSIM_GUEST_PASSWORD, or the key GPUSIM_GUEST_KEY_FILE)")
    _checkout_stand_ins()
    _print_env(env, ctx.obj)


def _start_with_guests(binary: Path, args: list[str]) -> tuple[int, dict[str, str]]:
    """gpusim with the guests attached (simguests): the folder prepared first, removed again when gpusim fails to
    start."""
    script = simguests.guestctl(_checkout())
    directory = state_dir()
    simguests.tear_down(script, directory)  # what a session that died left
    guest_args = simguests.prepare(script, directory)
    try:
        return _start(binary, [*args, *guest_args], simguests.hook_env(directory))
    except BaseException:
        simguests.tear_down(script, directory)
        raise


def _start(binary: Path, args: list[str], extra_env: dict[str, str]) -> tuple[int, dict[str, str]]:
    """gpusim in the background (its pid in the state folder) and the environment it wrote."""
    env_file = env_path()
    env_file.unlink(missing_ok=True)
    with open(log_path(), "wb") as log:
        proc = subprocess.Popen(
            [str(binary), "-env-file", str(env_file), "-state-dir", str(state_dir()), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **extra_env},
            start_new_session=True,  # survives this command and the terminal's Ctrl-C
        )
    pid_path().write_text(f"{proc.pid}\n")
    try:
        return proc.pid, _wait_for_env(proc, env_file)
    except BaseException:
        pid_path().unlink(missing_ok=True)
        raise


def _checkout() -> Path:
    """The checkout gpusim's sources are in (tests/vcsim's grandparent)."""
    return source_dir().parent.parent


def _checkout_stand_ins() -> None:
    """Started from a checkout: its example inventory's guest files, as stand-ins where absent."""
    if os.environ.get("GPUSIM_SRC") or os.environ.get("GPUSIM_BIN"):
        return
    written = write_stand_ins(_checkout())
    if written:
        common.info("wrote simulator stand-ins for the guest files inventory.example.yaml names (not NVIDIA's: "
                    "replace them with the real files for real guests): " + ", ".join(map(str, written)))


EXAMPLE_INVENTORY = "inventory.example.yaml"
STAND_IN_FOLDER = "files"  # beside the example; .gitignore keeps it out of the repository


def write_stand_ins(root: Path) -> list[Path]:
    """The guest files the checkout's inventory.example.yaml names under files/ (the vGPU guest driver installer,
    the licence token), written as stand-ins where absent, so that `preflight -f inventory.example.yaml` against
    the simulator finds them: the simulator's environment provides what preflight checks. Never overwrites a
    file; names outside files/ are left alone."""
    import yaml

    from vgpuctl.preflight.guests import DRIVER_VARS, TOKEN_VARS

    example = root / EXAMPLE_INVENTORY
    if not example.is_file():
        return []
    groups = ((yaml.safe_load(example.read_text(encoding="utf-8")) or {}).get("guests") or {}).get("groups") or {}
    folder = (root / STAND_IN_FOLDER).resolve()
    names = {str(v) for g in groups.values() for k, v in ((g or {}).get("vars") or {}).items()
             if k in (*DRIVER_VARS, *TOKEN_VARS) and isinstance(v, str)}
    written = []
    for name in sorted(names):
        path = (root / name).resolve()
        if path.parent != folder or path.exists():
            continue
        folder.mkdir(exist_ok=True)
        path.write_text(f"gpusim stand-in for {path.name}, written by `vgpuctl sim up` for {EXAMPLE_INVENTORY}: "
                        "not NVIDIA's file; put the real one here for real guests\n", encoding="utf-8")
        written.append(path)
    return written


# gpusim's ESXi shells, as vgpuctl's host commands look for them (VGPUCTL_ESXI_*): the host -> address map,
# the known_hosts gpusim wrote, and the login (gpusim's password; the simulator holds no real secret).
ESXI_FROM_GPUSIM = {
    "VGPUCTL_ESXI_HOSTS": "GPUSIM_SSH_HOSTS",
    "VGPUCTL_ESXI_KNOWN_HOSTS": "GPUSIM_SSH_KNOWN_HOSTS",
    "VGPUCTL_ESXI_USER": "GPUSIM_SSH_USER",
    "VGPUCTL_ESXI_PASSWORD": "VGPUCTL_PASSWORD",
}


def with_esxi_env(env: dict[str, str]) -> dict[str, str]:
    if "GPUSIM_SSH_HOSTS" not in env:  # started with -no-ssh
        return env
    return {**env, **{ours: env[theirs] for ours, theirs in ESXI_FROM_GPUSIM.items() if theirs in env}}


def _print_env(env: dict[str, str], opts: common.GlobalOptions) -> None:
    from vgpuctl.reports.sim import SimEnvReport

    common.emit(SimEnvReport(with_esxi_env(env), str(env_path())), opts)


@app.command("env")
def env_cmd(ctx: typer.Context) -> None:
    """Print the running simulator's environment as `export` lines (eval "$(vgpuctl sim env)")."""
    if running_pid() is None or not env_path().is_file():
        raise SimError("gpusim is not running: start it with `vgpuctl sim up`")
    _print_env(parse_env_file(env_path().read_text()), ctx.obj)


@app.command("down")
def down_cmd(ctx: typer.Context) -> None:
    """Stop the simulator started by `vgpuctl sim up`, and its guests (`sim up --guests`)."""
    pid = running_pid()
    if pid is None:
        pid_path().unlink(missing_ok=True)
        common.info("gpusim is not running")
    else:
        with_guests = simguests.guests_dir(state_dir()).is_dir()
        if not _terminate(pid, GUESTS_STOP_TIMEOUT_S if with_guests else STOP_TIMEOUT_S):
            raise SimError(f"gpusim (pid {pid}) did not stop")
        pid_path().unlink(missing_ok=True)
        env_path().unlink(missing_ok=True)
        common.info(f"gpusim (pid {pid}) stopped")
    _stop_guests()
    if pid is not None and ctx.obj.json:
        from vgpuctl.reports.sim import SimDownReport

        common.emit(SimDownReport(pid), ctx.obj)


def _stop_guests() -> None:
    """The guests gpusim stopped as it ended, checked, and their folder removed (stopped here when gpusim could
    not: it was killed)."""
    if not simguests.guests_dir(state_dir()).is_dir():
        return
    try:
        script: Path | None = simguests.guestctl(_checkout())
    except (SimError, simguests.GuestsError):
        script = None  # no checkout any more: only the check
    if simguests.tear_down(script, state_dir()):
        common.info("guests stopped: no guest process, network namespace or mount is left")
