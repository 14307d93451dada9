"""The playbooks and roles: ansible-playbook --syntax-check, ansible-lint --offline, the role guards that need
no guest (run against localhost with a local connection, failing before they change anything), and the roles as
the vgpuctl.guest collection with its execution environment (built offline)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vgpuctl.guest import targets

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
ROLES = sorted(p.name for p in (PLAYBOOKS / "roles").iterdir() if p.is_dir())
BIN = Path(sys.executable).parent


def ansible_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        ANSIBLE_ROLES_PATH=str(PLAYBOOKS / "roles"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
    )
    return env


def assert_syntax_ok(play: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [BIN / "ansible-playbook", "--syntax-check", "-i", "localhost,", str(play)],
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_role_has_the_documented_layout():
    assert set(ROLES) == set(targets.ROLES)
    for role in ROLES:
        for sub in ("defaults", "tasks", "templates", "handlers", "meta"):
            assert (PLAYBOOKS / "roles" / role / sub).is_dir(), f"{role}/{sub}"
        defaults = (PLAYBOOKS / "roles" / role / "defaults" / "main.yml").read_text()
        assert defaults.count("\n# ") + defaults.count("\n#") >= 1, f"{role}: defaults are not documented"
        meta = yaml.safe_load((PLAYBOOKS / "roles" / role / "meta" / "main.yml").read_text())
        assert meta["galaxy_info"]["description"]


def test_site_yml_runs_every_role_in_order():
    site = yaml.safe_load((PLAYBOOKS / "site.yml").read_text())
    included = [t["ansible.builtin.include_role"]["name"] for t in site[0]["tasks"]]
    assert included[0] == "gpu_facts"
    assert sorted(included) == ROLES
    assert included.index("vgpu_guest_driver") < included.index("vgpu_licensing") < included.index("gpu_validate")


@pytest.mark.parametrize("role", ROLES)
def test_role_syntax(role, tmp_path):
    play = tmp_path / f"{role}.yml"
    play.write_text(yaml.safe_dump([{"name": role, "hosts": "all", "roles": [role]}]))
    assert_syntax_ok(play, tmp_path)


def test_site_syntax(tmp_path):
    assert_syntax_ok(PLAYBOOKS / "site.yml", tmp_path)


def test_driver_yml_syntax_and_roles(tmp_path):
    """The driver upgrade window's guest playbook: the GPU facts, then the driver role alone."""
    play = yaml.safe_load((PLAYBOOKS / "driver.yml").read_text())
    assert [t["ansible.builtin.include_role"]["name"] for t in play[0]["tasks"]] == ["gpu_facts", "vgpu_guest_driver"]
    assert_syntax_ok(PLAYBOOKS / "driver.yml", tmp_path)


def test_ansible_lint_offline_production_profile(tmp_path):
    env = ansible_env(tmp_path)
    env["ANSIBLE_HOME"] = str(tmp_path / "ansible-home")  # no galaxy cache, no network
    proc = subprocess.run(
        [BIN / "ansible-lint", "--offline", "--nocolor", "playbooks/"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "profile 'production'" in (proc.stdout + proc.stderr).lower()


def run_role_locally(tmp_path: Path, role: str, extra: dict) -> tuple[int, list[dict]]:
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"name": "t", "hosts": "localhost", "gather_facts": False, "roles": [role]}]))
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(extra))
    proc = subprocess.run(
        [BIN / "ansible-playbook", "-i", "localhost,", "-c", "local", "-e", f"@{vars_file}", str(play)],
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    doc = json.loads(proc.stdout)
    results = [{"task": t["task"]["name"], **t["hosts"].get("localhost", {})} for p in doc["plays"] for t in p["tasks"]]
    return proc.returncode, results


@pytest.mark.parametrize("bad", [["cuda"], ["cuda-drivers"], ["cuda-toolkit-12-4", "nvidia-driver-550"], []])
def test_cuda_toolkit_refuses_anything_but_toolkit_packages(tmp_path, bad):
    rc, results = run_role_locally(
        tmp_path,
        "cuda_toolkit",
        {"cuda_toolkit_packages": bad, "cuda_toolkit_install": False, "cuda_toolkit_profile": False},
    )
    assert rc != 0
    failed = [r for r in results if r.get("failed")]
    assert [r["task"] for r in failed] == ["cuda_toolkit : Refuse anything but cuda-toolkit-X-Y packages"]
    for name in bad:
        if not name.startswith("cuda-toolkit-"):
            assert name in failed[0]["msg"]


def test_cuda_toolkit_accepts_versioned_toolkit_packages(tmp_path):
    rc, results = run_role_locally(
        tmp_path,
        "cuda_toolkit",
        {
            "cuda_toolkit_packages": ["cuda-toolkit-12-4", "cuda-toolkit-12-6=12.6.2-1"],
            "cuda_toolkit_install": False,
            "cuda_toolkit_profile": False,
        },
    )
    assert rc == 0, results
    assert not any(r.get("changed") for r in results)


def fake_venv(tmp_path: Path, versions: dict[str, str]) -> Path:
    """A virtualenv stand-in whose python answers the horovod role's framework probe."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/sh\necho '{json.dumps(versions)}'\n")
    python.chmod(0o755)
    return venv


@pytest.mark.parametrize(
    ("frameworks", "installed", "expected"),
    [
        (["torch"], {"torch": "2.3.1"}, "torch 2.3.1 is too new (needs < 2.1)"),
        (["tensorflow"], {"tensorflow": "2.16.1"}, "tensorflow 2.16.1 is too new (needs < 2.16)"),
        (["torch", "tensorflow"], {"torch": "2.0.1"}, "tensorflow is not installed"),
    ],
)
def test_horovod_stops_before_a_build_against_an_unsupported_framework(tmp_path, frameworks, installed, expected):
    rc, results = run_role_locally(
        tmp_path,
        "horovod",
        {
            "horovod_venv": str(fake_venv(tmp_path, installed)),
            "horovod_frameworks": frameworks,
            "horovod_config_dir": str(tmp_path / "etc"),
            "ansible_python_interpreter": sys.executable,
        },
    )
    assert rc != 0
    failed = [r for r in results if r.get("failed")]
    assert [r["task"] for r in failed] == ["horovod : Stop before a build that cannot succeed"]
    assert expected in failed[0]["msg"] and "torch==2.0.1" in failed[0]["msg"]
    assert not any(r.get("changed") for r in results if "Install" in r["task"] or "Build" in r["task"])


def test_every_task_touching_the_licence_token_has_no_log():
    touching_modules = {"copy", "stat", "find", "file", "slurp", "template", "command", "shell", "fetch", "lineinfile"}
    tasks = yaml.safe_load((PLAYBOOKS / "roles" / "vgpu_licensing" / "tasks" / "main.yml").read_text())
    checked = 0
    for task in tasks:
        module = next((k for k in task if k.startswith("ansible.builtin.")), "")
        args = yaml.safe_dump(task.get(module)) + yaml.safe_dump(task.get("loop", ""))
        if module.rsplit(".", 1)[-1] in touching_modules and ("token" in args or "vgpu_licensing_tokens" in args):
            checked += 1
            assert task.get("no_log") is True, task["name"]
    assert checked >= 4  # stat on the controller, the directory, the copy, find and remove of stale tokens


# The roles as the vgpuctl.guest collection (playbooks/galaxy.yml) and its execution environment.

GALAXY = yaml.safe_load((PLAYBOOKS / "galaxy.yml").read_text())
COLLECTION = f"{GALAXY['namespace']}.{GALAXY['name']}"
TARBALL = f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"


def build_collection(tmp_path: Path) -> Path:
    out = tmp_path / "dist"
    proc = subprocess.run(
        [BIN / "ansible-galaxy", "collection", "build", str(PLAYBOOKS), "--output-path", str(out)],
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stdout + proc.stderr  # e.g. a role directory skipped as a link outside
    return out / TARBALL


def collection_env(tmp_path: Path, collections: Path) -> dict[str, str]:
    """Roles only from the installed collection: no roles path that would resolve the plain names."""
    env = ansible_env(tmp_path)
    env.update(ANSIBLE_ROLES_PATH=str(tmp_path / "no-roles"), ANSIBLE_COLLECTIONS_PATH=str(collections))
    return env


def fqcn_playbook(tmp_path: Path) -> Path:
    play = tmp_path / "fqcn.yml"
    tasks = [{"name": f"Run {r}", "ansible.builtin.include_role": {"name": f"{COLLECTION}.{r}"}} for r in ROLES]
    play.write_text(
        yaml.safe_dump(
            [
                {"name": "roles by collection name", "hosts": "all", "roles": [f"{COLLECTION}.gpu_facts"]},
                {"name": "included by collection name", "hosts": "all", "tasks": tasks},
            ]
        )
    )
    return play


@pytest.fixture(scope="module")
def installed_collection(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("collection")
    tarball = build_collection(tmp)
    collections = tmp / "collections"
    proc = subprocess.run(
        [BIN / "ansible-galaxy", "collection", "install", "--offline", "-p", str(collections), str(tarball)],
        env=ansible_env(tmp),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return collections


def test_collection_builds_offline_with_every_role_and_real_templates(installed_collection):
    root = installed_collection / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"]
    assert sorted(p.name for p in (root / "roles").iterdir()) == ROLES
    for role, name in [
        ("vgpu_licensing", "gridd.conf.j2"),
        ("nccl", "nccl.conf.j2"),
        ("train_launcher", "hostfile.j2"),
    ]:
        template = root / "roles" / role / "templates" / name
        assert not template.is_symlink(), template  # the shared templates are copied in, not links out of it
        assert template.read_text() == (targets.templates_dir() / name).read_text()
    assert not (root / "site.yml").exists()
    module = root / "plugins" / "modules" / "vgpuctl_apply.py"
    assert module.read_text() == (PLAYBOOKS / "plugins" / "modules" / "vgpuctl_apply.py").read_text()
    deps = json.loads((root / "MANIFEST.json").read_text())["collection_info"]["dependencies"]
    assert set(deps) == {"ansible.posix", "community.crypto", "community.general"}


def test_playbook_with_collection_role_names_passes_syntax_check(installed_collection, tmp_path):
    proc = subprocess.run(
        [BIN / "ansible-playbook", "--syntax-check", "-i", "localhost,", str(fqcn_playbook(tmp_path))],
        env=collection_env(tmp_path, installed_collection),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_collection_role_names_fail_without_the_collection(tmp_path):
    proc = subprocess.run(
        [BIN / "ansible-playbook", "--syntax-check", "-i", "localhost,", str(fqcn_playbook(tmp_path))],
        env=collection_env(tmp_path, tmp_path / "empty"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0
    assert f"{COLLECTION}.gpu_facts" in proc.stdout + proc.stderr


def test_collection_role_runs_its_guards(installed_collection, tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [{"name": "t", "hosts": "localhost", "gather_facts": False, "roles": [f"{COLLECTION}.cuda_toolkit"]}]
        )
    )
    proc = subprocess.run(
        [
            BIN / "ansible-playbook",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            '{"cuda_toolkit_packages": ["cuda"]}',
            str(play),
        ],
        env=collection_env(tmp_path, installed_collection),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0
    assert "Refuse anything but cuda-toolkit-X-Y packages" in proc.stdout


def test_galaxy_metadata_matches_the_package_and_the_roles():
    project = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{GALAXY["version"]}"' in project
    for role in ROLES:
        meta = yaml.safe_load((PLAYBOOKS / "roles" / role / "meta" / "main.yml").read_text())
        assert (meta["galaxy_info"]["namespace"], meta["galaxy_info"]["role_name"]) == (GALAXY["namespace"], role)


PROJECT_VERSION = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M)[1]  # type: ignore[index]
WHEEL = f"vgpuctl-{PROJECT_VERSION}-py3-none-any.whl"


def test_execution_environment_context_installs_the_collection_and_vgpuctl(tmp_path):
    ee_file = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    assert ee_file["additional_build_files"] == [{"src": f"dist/{TARBALL}", "dest": "collections"},
                                                 {"src": f"dist/{WHEEL}", "dest": "wheels"},
                                                 {"src": "constraints.txt", "dest": "constraints"}]
    work = tmp_path / "ee"
    (work / "dist").mkdir(parents=True)
    shutil.copy(ROOT / "execution-environment.yml", work)
    shutil.copy(ROOT / "constraints.txt", work)
    shutil.copy(build_collection(tmp_path), work / "dist")
    (work / "dist" / WHEEL).write_bytes(b"the wheel pip wheel builds")  # the packaging tests build the real one
    context = work / "context"
    proc = subprocess.run(
        [BIN / "ansible-builder", "create", "-f", str(work / "execution-environment.yml"), "-c", str(context)],
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    containerfile = next(p for p in (context / "Containerfile", context / "Dockerfile") if p.exists()).read_text()
    assert "COPY _build /build" in containerfile
    assert "ansible-galaxy collection install" in containerfile
    # no Galaxy server: the `ansible` package brings the collections the roles need, the install is offline
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible>=12,<13 ' in containerfile
    assert 'ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--offline"' in containerfile
    # every pip install of the image goes through the lock the tests ran on; the finished image is left free
    pinned = containerfile.index("ENV PIP_CONSTRAINT=/etc/pip-constraints.txt")
    assert containerfile.index("COPY _build/constraints/constraints.txt /etc/pip-constraints.txt") < pinned
    assert pinned < containerfile.index("pip install --no-cache-dir $ANSIBLE_INSTALL_REFS")
    installed = containerfile.index(f"pip install --no-cache-dir /tmp/wheels/{WHEEL}")
    assert containerfile.index("'dumb-init==") < installed < containerfile.index("RUN vgpuctl --version")
    assert containerfile.index("RUN vgpuctl --version") < containerfile.index("ENV PIP_CONSTRAINT=\n")
    assert installed < containerfile.index("USER 1000")
    build = context / "_build"
    assert (build / "constraints" / "constraints.txt").read_text() == (ROOT / "constraints.txt").read_text()
    assert (build / "collections" / TARBALL).is_file()
    assert (build / "wheels" / WHEEL).read_bytes() == b"the wheel pip wheel builds"
    # what the image's galaxy stage runs in /build, here offline into a temporary path
    proc = subprocess.run(
        [
            BIN / "ansible-galaxy",
            "collection",
            "install",
            "--offline",
            "-r",
            "requirements.yml",
            "-p",
            str(tmp_path / "c"),
        ],
        cwd=build,
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "c" / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"] / "roles" / "nccl").is_dir()


# mpi_ssh_trust's hosts file: every worker's name at its real address, never its own name on loopback.

STOCK_HOSTS = "127.0.0.1\tlocalhost\n127.0.1.1\tguest1\n::1     localhost ip6-localhost ip6-loopback\n"


def run_etc_hosts(tmp_path: Path, hosts_file: Path, addresses: dict[str, str]) -> tuple[int, list[dict]]:
    """The role's hosts-file tasks on guest1 (a local connection) with workers guest1 and guest2."""
    inventory = tmp_path / "inv.yml"
    workers = {name: {"ansible_host": addr, "ansible_connection": "local"} for name, addr in addresses.items()}
    inventory.write_text(yaml.safe_dump({"trainers": {"hosts": workers}}))
    play = tmp_path / "play.yml"
    task = {"ansible.builtin.include_role": {"name": "mpi_ssh_trust", "tasks_from": "etc_hosts"}}
    play.write_text(yaml.safe_dump([{"name": "t", "hosts": "guest1", "gather_facts": False, "tasks": [task]}]))
    extra = {
        "mpi_ssh_trust_group": "trainers",
        "mpi_ssh_trust_hosts_file": str(hosts_file),
        "ansible_python_interpreter": sys.executable,
    }
    proc = subprocess.run(
        [BIN / "ansible-playbook", "-i", str(inventory), "-e", json.dumps(extra), str(play)],
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    doc = json.loads(proc.stdout)
    results = [{"task": t["task"]["name"], **t["hosts"].get("guest1", {})} for p in doc["plays"] for t in p["tasks"]]
    return proc.returncode, results


@pytest.mark.parametrize(
    ("before", "loopback_after"),
    [
        (STOCK_HOSTS, ["127.0.0.1\tlocalhost", "::1     localhost ip6-localhost ip6-loopback"]),
        # the name among others, and on the localhost line as some images have it: only the name goes
        (
            "127.0.0.1 localhost guest1\n127.0.1.1 guest1.example.com guest1 gpu-node\n",
            ["127.0.0.1 localhost", "127.0.1.1 guest1.example.com gpu-node"],
        ),
        # a name that only starts with this worker's name stays
        ("127.0.0.1 localhost\n127.0.1.1 guest10\n", ["127.0.0.1 localhost", "127.0.1.1 guest10"]),
    ],
)
def test_worker_names_resolve_to_their_addresses_not_loopback(tmp_path, before, loopback_after):
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text(before)
    addresses = {"guest1": "10.0.0.11", "guest2": "10.0.0.12"}
    rc, first = run_etc_hosts(tmp_path, hosts_file, addresses)
    assert rc == 0, first
    lines = hosts_file.read_text().splitlines()
    assert [line for line in lines if line.startswith(("127.", "::1"))] == loopback_after
    assert "10.0.0.11 guest1" in lines and "10.0.0.12 guest2" in lines
    rc, second = run_etc_hosts(tmp_path, hosts_file, addresses)
    assert rc == 0 and not any(r.get("changed") for r in second), second
    assert hosts_file.read_text().splitlines() == lines


def test_own_loopback_name_stays_when_the_worker_has_no_address_line(tmp_path):
    """A worker whose inventory name is its address (or resolves by DNS) keeps the stock line: taking the name
    off loopback would leave it resolving nowhere."""
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text(STOCK_HOSTS)
    rc, results = run_etc_hosts(tmp_path, hosts_file, {"guest1": "guest1", "guest2": "10.0.0.12"})
    assert rc == 0, results
    lines = hosts_file.read_text().splitlines()
    assert "127.0.1.1\tguest1" in lines and "10.0.0.12 guest2" in lines
    assert not any(line.endswith(" guest1") for line in lines)
