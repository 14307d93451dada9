"""The layers docs/architecture.md states, checked on every import (module level, inside functions and under
TYPE_CHECKING): the floors of docs/floors.yaml (an import goes down or stays on its floor; no modules and no rooms
import each other in a circle; every module stands on a floor; the picture in docs/architecture.md is drawn from
the data); only cli/ imports the CLI; only vsphere/ talks to vCenter (pyVmomi), only esxi/ to the ESXi shell
(paramiko), only guest/ to Ansible (ansible_runner); reports never import the executors; no module grows past
800 lines."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from floorsmod import floors

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "vgpuctl"
MAX_MODULE_LINES = 800

# (who may import it: path prefixes under vgpuctl/, the imported top-level names)
OWNERS = {
    "pyVmomi": ("vsphere/",),
    "pyVim": ("vsphere/",),
    "paramiko": ("esxi/",),
    "ansible_runner": ("guest/",),
}
CLI_USERS = ("cli/", "__main__.py")
EXECUTORS = ("vgpuctl.vms.apply", "vgpuctl.hosts.apply", "vgpuctl.pipeline", "vgpuctl.cli")


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in the tree, at any depth, except inside `if TYPE_CHECKING:`."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if _is_type_checking(node):
            continue
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{a.name}") for a in node.names)
        stack.extend(ast.iter_child_nodes(node))


def violations(relative: str, source: str) -> list[str]:
    """What one module (its path under vgpuctl/ and its text) does against the layers."""
    out = []
    tree = ast.parse(source)
    for line, module in imports(tree):
        top = module.split(".")[0]
        owners = OWNERS.get(top)
        if owners is not None and not relative.startswith(owners):
            out.append(f"vgpuctl/{relative}:{line}: imports {top} (only {', '.join(owners)} may)")
        if (module == "vgpuctl.cli" or module.startswith("vgpuctl.cli.")) and not relative.startswith(CLI_USERS):
            out.append(f"vgpuctl/{relative}:{line}: imports the CLI ({module})")
        if relative.startswith("reports/") and module.startswith(EXECUTORS):
            out.append(f"vgpuctl/{relative}:{line}: a report imports an executor ({module})")
    lines = source.count("\n")
    if lines > MAX_MODULE_LINES:
        out.append(f"vgpuctl/{relative}: {lines} lines (at most {MAX_MODULE_LINES})")
    return out


def test_every_module_keeps_to_its_layer() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += violations(path.relative_to(PACKAGE).as_posix(), path.read_text(encoding="utf-8"))
    assert found == []


@pytest.mark.parametrize(
    ("relative", "source", "expected"),
    [
        ("vms/apply.py", "def f():\n    from pyVmomi import vim\n", "imports pyVmomi"),
        ("pipeline.py", "import paramiko\n", "imports paramiko"),
        ("experiment/runner.py", "def f():\n    if x:\n        from vgpuctl.cli.plan import run\n", "imports the CLI"),
        ("reports/plan.py", "from vgpuctl.vms.apply import apply_plan\n", "imports an executor"),
        ("capacity/x.py", "x = 1\n" * (MAX_MODULE_LINES + 1), "lines (at most"),
    ],
)
def test_the_check_finds_each_kind_of_violation(relative: str, source: str, expected: str) -> None:
    assert any(expected in v for v in violations(relative, source))


@pytest.mark.parametrize(
    ("relative", "source"),
    [
        ("vsphere/vmops.py", "from pyVmomi import vim\n"),
        ("cli/plan.py", "from vgpuctl.cli import common\n"),
        ("pipeline.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pyVmomi import vim\n"),
    ],
)
def test_what_a_layer_may_do_passes(relative: str, source: str) -> None:
    assert violations(relative, source) == []


# ------------------------------------------------------------------------------------------ the floors


def test_every_module_stands_on_a_floor() -> None:
    assert floors.unplaced(floors.read_house()) == []


def test_no_import_runs_back_up_a_floor() -> None:
    assert floors.arrows_up(floors.read_house()) == []


def test_no_modules_and_no_rooms_import_each_other_in_a_circle() -> None:
    house = floors.read_house()
    assert floors.module_circles(house) == []
    assert floors.room_circles(house) == []


def test_no_import_inside_a_function_defers_nothing() -> None:
    assert floors.deferring_nothing(floors.read_house()) == []


def test_the_architecture_picture_is_drawn_from_the_floors() -> None:
    text = floors.ARCHITECTURE.read_text(encoding="utf-8")
    assert floors.drawn_section(text) == floors.picture(floors.read_house()), (
        "run `python scripts/floors.py --write`"
    )


def test_the_floor_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """An import inside a function and one under TYPE_CHECKING count like a module-level one."""
    house = _two_floors(tmp_path, {
        "low/a.py": "def f():\n    from vgpuctl import high\n",
        "low/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import vgpuctl.high\n",
        "high.py": "from vgpuctl.low import a, b\n",
    })
    assert len(floors.arrows_up(house)) == 2
    assert floors.module_circles(house) == [["high", "low.a", "low.b"]]
    assert floors.room_circles(house) == [["high", "low/"]]


def test_an_import_inside_a_function_of_a_module_loaded_anyway_is_found(tmp_path: Path) -> None:
    """high loads low.a, which loads low.b: importing low.b (or low, their package) inside one of high's functions
    defers nothing; low.c, which nothing of high loads, and low.d, imported only under an `if`, stay deferred."""
    found = floors.deferring_nothing(_two_floors(tmp_path, {
        "low/a.py": "from vgpuctl.low import b\n",
        "low/b.py": "",
        "low/c.py": "",
        "low/d.py": "",
        "high.py": "import os\nfrom vgpuctl.low.a import x\nif os.name:\n    from vgpuctl.low import d\n\n"
                   "def f():\n    from vgpuctl.low.b import y\n    from vgpuctl.low import c\n\n"
                   "class K:\n    def g(self):\n        try:\n            pass\n        except Exception:\n"
                   "            import vgpuctl.low\n\n"
                   "def h():\n    from vgpuctl.low import d\n",
    }))
    assert [line.split(": ", 1)[1] for line in found] == [
        "imports low.b inside a function, but importing high loads it already: import it at the top",
        "imports low inside a function, but importing high loads it already: import it at the top",
    ]
    assert [line.split(": ", 1)[0].rsplit(":", 1)[1] for line in found] == ["7", "15"]


def _two_floors(tmp_path: Path, files: dict[str, str]) -> floors.House:
    """A package vgpuctl of the files given (paths under it) and the empty packages, on two floors: low/, high."""
    pkg = tmp_path / "vgpuctl"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    for name, text in files.items():
        (pkg / name).write_text(text)
    data = tmp_path / "floors.yaml"
    data.write_text("floors:\n  - {name: low, rooms: [low/]}\n  - {name: high, rooms: [high]}\n")
    return floors.read_house(pkg, data)
