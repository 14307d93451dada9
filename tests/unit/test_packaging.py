"""The package installs whole: a wheel built from the source tree, installed into a fresh virtualenv outside
it, runs `vgpuctl guest deploy --check` with the playbooks and templates it carries.

That venv borrows the dependencies of the interpreter running the tests (a .pth line to its site-packages) so
nothing is downloaded; vgpuctl itself can only come from the wheel. A second one gets the same wheel as a user
installs it, alone: pip brings its declared dependencies and nothing else (no extras, no development tools),
in the versions the tests run on, from pip's cache or the package index.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from ruamel.yaml import YAML

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "MANIFEST.in", "vgpuctl", "playbooks", "templates", "scripts")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pip wheel of a copy of the source tree (the working tree stays free of build/ and egg-info)."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    out = work / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (found,) = out.glob("vgpuctl-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the source tree with the wheel installed; returns its bin/ folder."""
    env_dir = tmp_path_factory.mktemp("venv") / "v"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # The test interpreter's dependencies; its editable vgpuctl hook is a .pth of that folder, never run from here.
    Path(purelib, "borrowed-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--no-index", str(wheel)], capture_output=True, text=True, cwd=env_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return env_dir / "bin"


def _members(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def _tracked(folder: str) -> set[str]:
    return {str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")}


def test_wheel_carries_playbooks_templates_and_data(wheel: Path) -> None:
    members = _members(wheel)
    for folder in ("playbooks", "templates"):
        files = _tracked(folder)
        assert files, folder
        missing = sorted(f for f in files if f"vgpuctl/_bundled/{f}" not in members)
        assert not missing, f"not in the wheel: {missing[:5]}"
    data = {str(p.relative_to(ROOT)) for p in (ROOT / "vgpuctl" / "data").glob("*") if p.suffix in (".yaml", ".json")}
    assert data and data <= members


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _outside_env(bin_dir: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "PYTHON"))}
    # ansible-playbook comes from the test interpreter's environment (a dependency, like the others)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "")])
    env["HOME"] = str(home)
    env["VGPUCTL_STATE_DIR"] = str(home / "state")
    return env


def test_installed_vgpuctl_runs_its_own_playbooks(installed: Path, tmp_path: Path) -> None:
    env = _outside_env(installed, tmp_path)
    where = subprocess.run([installed / "python", "-c", "import vgpuctl.guest.targets as t; "
                            "print(t.playbooks_dir()); print(t.templates_dir())"],
                           capture_output=True, text=True, cwd=tmp_path, env=env)
    assert where.returncode == 0, where.stderr
    playbooks, templates = map(Path, where.stdout.split())
    assert playbooks.parent == templates.parent and playbooks.parent.name == "_bundled"
    assert not playbooks.is_relative_to(ROOT) and (playbooks / "site.yml").is_file()

    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "apiVersion: vgpuctl/v1\n"
        "vms:\n  - {name: guest-01, guest: {group: checks}}\n"
        f"guests:\n  connection: {{user: nobody, port: {_free_port()}}}\n"
        "  groups:\n    checks: {roles: [gpu_validate]}\n"
    )
    addresses = tmp_path / "addresses.yaml"
    addresses.write_text("guest-01: 127.0.0.1\n")  # nothing listens on the port: ssh is refused
    proc = subprocess.run([installed / "vgpuctl", "guest", "deploy", "-f", inventory, "--addresses", addresses,
                           "--check"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "guest-01" in output and "unreachable" in output.lower(), output
    assert "no site.yml" not in output and "Traceback" not in output, output
    # ansible-runner ran the installed site.yml from the installed folder, as far as the refused connection
    (command,) = (tmp_path / "state").rglob("command")
    ran = json.loads(command.read_text())
    assert ran["cwd"] == str(playbooks) and ran["command"][-1] == "site.yml"
    (play,) = (p["name"] for p in YAML(typ="safe").load((playbooks / "site.yml").read_text()) if "name" in p)
    stdout = (command.parent / "stdout").read_text()
    assert f"PLAY [{play}]" in stdout and "UNREACHABLE" in stdout, stdout[-2000:]


def test_installed_sim_up_says_in_one_line_that_it_needs_a_checkout(installed: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in _outside_env(installed, tmp_path).items() if not k.startswith("GPUSIM_")}
    proc = subprocess.run([installed / "vgpuctl", "sim", "up"], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert "needs a source checkout and Go" in line, line


# ------------------------------------------------------------------ the wheel alone, as a user installs it


def _pins(folder: Path) -> Path:
    """A constraints file of every distribution the tests run on (constraints.txt under `make test`, the newest
    allowed under `make test-latest`), so the bare install gets the versions the tests ran on."""
    versions = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version
                for d in importlib.metadata.distributions() if d.metadata["Name"]}
    versions.pop("vgpuctl", None)
    path = folder / "pins.txt"
    path.write_text("".join(f"{name}=={version}\n" for name, version in sorted(versions.items())))
    return path


@pytest.fixture(scope="module")
def bare(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed by pip with its dependencies, no extras; returns its bin/ folder."""
    env_dir = tmp_path_factory.mktemp("bare") / "v"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_CONSTRAINT", "PIP_REQUIRE"))}
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                           "--disable-pip-version-check", "-c", str(_pins(env_dir.parent)), str(wheel)],
                          capture_output=True, text=True, cwd=env_dir.parent, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return env_dir / "bin"


def _run(bin_dir: Path, home: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([bin_dir / "vgpuctl", *map(str, args)], capture_output=True, text=True, cwd=home,
                          env=_outside_env(bin_dir, home), timeout=120)


def test_bare_install_has_no_extras_and_no_development_tools(bare: Path, tmp_path: Path) -> None:
    probe = ("import importlib.util as u; print(*(m for m in ('ortools', 'matplotlib', 'pytest', 'vgpuctl') "
             "if u.find_spec(m)))")
    proc = subprocess.run([bare / "python", "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                          env=_outside_env(bare, tmp_path))
    assert proc.stdout.split() == ["vgpuctl"], proc.stdout + proc.stderr


HELP_OF_EVERY_COMMAND = """
import json
import typer.main
from typer.testing import CliRunner
from vgpuctl.cli.main import app

def paths(command, path=()):
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from paths(sub, (*path, name))

result = {}
for path in paths(typer.main.get_command(app)):
    out = CliRunner().invoke(app, [*path, "--help"])
    result[" ".join(path)] = [out.exit_code, out.output, repr(out.exception) if out.exit_code else ""]
print(json.dumps(result))
"""


def test_bare_install_prints_every_commands_help(bare: Path, tmp_path: Path) -> None:
    """Every command's --help, in one process of the installed package (its own command tree)."""
    proc = subprocess.run([bare / "python", "-c", HELP_OF_EVERY_COMMAND], capture_output=True, text=True,
                          cwd=tmp_path, env=_outside_env(bare, tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    helps = json.loads(proc.stdout)
    assert len(helps) >= 30 and {"", "plan", "host mig", "k8s render", "experiment report"} <= set(helps)
    failed = {path: (code, error) for path, (code, _out, error) in helps.items() if code != 0}
    assert failed == {}
    assert all(out.startswith(f"Usage: vgpuctl {path}".rstrip() + " ") for path, (_c, out, _e) in helps.items())


@pytest.mark.parametrize("args", [["host"], ["status", "--no-such-option"]], ids=["bare group", "unknown option"])
def test_bare_install_usage_errors_with_and_without_json(bare: Path, tmp_path: Path, args: list[str]) -> None:
    text = _run(bare, tmp_path, *args)
    assert text.returncode == 1 and "Traceback" not in text.stderr, text.stderr
    assert f"Usage: vgpuctl {args[0]} " in text.stderr
    as_json = _run(bare, tmp_path, "-o", "json", *args)
    assert as_json.returncode == 1 and "Traceback" not in as_json.stderr, as_json.stderr
    assert json.loads(as_json.stdout)["error"]["type"] == "UsageError"


def test_bare_install_validates_the_example(bare: Path, tmp_path: Path) -> None:
    shutil.copy(ROOT / "inventory.example.yaml", tmp_path)
    proc = _run(bare, tmp_path, "validate", "-f", "inventory.example.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "inventory.example.yaml: valid" in proc.stdout


EXPERIMENT_SUMMARY = {"title": "t", "vms": ["train-01"], "repetitions": 1, "variants": [
    {"name": "on", "description": None, "workload": {"builtin": "nccl-tests", "test": "all_reduce_perf",
                                                     "scope": "per-vm", "key": "nccl", "label": "nccl"}}]}


@pytest.mark.parametrize("extra", ["capacity", "experiment"])
def test_bare_install_names_a_missing_extra_in_one_line(bare: Path, tmp_path: Path, extra: str) -> None:
    if extra == "capacity":
        (tmp_path / "demand.yaml").write_text("apiVersion: vgpuctl/v1\nkind: Demand\n"
                                              "demand:\n  - {name: a, count: 1, vgpus: {profile: grid_a100-40c}}\n")
        proc = _run(bare, tmp_path, "capacity", "--demand", "demand.yaml")
    else:
        (tmp_path / "results").mkdir()
        (tmp_path / "results" / "experiment.json").write_text(json.dumps(EXPERIMENT_SUMMARY))
        proc = _run(bare, tmp_path, "experiment", "report", "results")
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"pip install 'vgpuctl[{extra}]'" in line and f"pip install -e '.[{extra}]'" in line, line


# ------------------------------------------------------------------------------ make test sets itself up


def _fake_tools(tmp_path: Path, uid: int, installed: set[str]) -> dict[str, str]:
    """id, dpkg-query, apt-get and pytest stand-ins that log their calls, first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    scripts = {
        "id": f'echo {uid}',
        "dpkg-query": 'case " {} " in *" $3 "*) echo "install ok installed";; *) exit 1;; esac'.format(
            " ".join(sorted(installed))),
        "apt-get": f'echo "apt-get $*" >> {log}',
        "pytest": f'echo "pytest $*" >> {log}',
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _make_test(tmp_path: Path, uid: int, installed: set[str]) -> tuple[str, list[str]]:
    env = _fake_tools(tmp_path, uid, installed)
    # the prerequisites that build things are taken as done; BIN points pytest at the stand-in
    cmd = ["make", "-s", "-C", str(ROOT), "-o", "venv", "-o", "gpusim", "-o", "lint", "-o", "test-go",
           f"BIN={tmp_path / 'bin'}", "test"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    log = tmp_path / "calls.log"
    return proc.stdout, log.read_text().splitlines() if log.exists() else []


def _packages(suite: str = "guest") -> list[str]:
    lines = (ROOT / "scripts" / f"{suite}-test-packages.txt").read_text().splitlines()
    return [word for line in lines if (word := line.split("#")[0].strip())]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_as_root_installs_missing_guest_packages(tmp_path: Path) -> None:
    packages = _packages()
    assert "sshpass" in packages and "debootstrap" in packages
    out, calls = _make_test(tmp_path, 0, set(packages[1:]) | set(_packages("browser")))
    assert calls == [
        "apt-get update -qq",
        f"apt-get install -y -qq --no-install-recommends {packages[0]}",
        "pytest -m not live",
    ]
    assert "skipping" not in out


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_as_root_installs_the_page_tests_browser(tmp_path: Path) -> None:
    browser = _packages("browser")
    assert browser == ["chromium"]
    out, calls = _make_test(tmp_path, 0, set(_packages()))
    assert calls == [
        "apt-get update -qq",
        "apt-get install -y -qq --no-install-recommends chromium",
        "pytest -m not live",
    ]
    assert "installing the page tests' packages: chromium" in out


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_not_root_skips_guests_in_one_line(tmp_path: Path) -> None:
    out, calls = _make_test(tmp_path, 1000, set())
    assert calls == ["pytest -m not live and not guests"]
    (line,) = [ln for ln in out.splitlines() if "skipping" in ln]
    assert "guests suite" in line and "root" in line


def test_ci_runs_the_readme_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and ci.rstrip().endswith("make test")
    assert not [p for p in _packages() + _packages("browser") if p in ci]  # the lists are defined once, for make
