"""Every module vgpuctl imports is a declared dependency: each import of vgpuctl/ (module level, inside functions,
under TYPE_CHECKING) is read from the source and looked up, through the installed distributions' metadata, in
pyproject's `dependencies` or one of its extras (never `dev`, which a user does not install). A module that only
an extra installs is imported where the extra guards it: inside a function, after `require()` of
vgpuctl.extras, which turns its absence into the one line naming the extra."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from vgpuctl import extras

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "vgpuctl"
NOT_FOR_USERS = {"dev"}  # extras of the developers' tools


@dataclass(frozen=True)
class Import:
    where: str  # vgpuctl/path.py:LINE
    module: str  # dotted name, as imported
    guarded: bool  # inside a function, after require() of the module's top-level package there

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


def _normal(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert found, requirement
    return _normal(found[1])


@cache
def declared() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """(the dependencies, {extra: its distributions}) of pyproject.toml, names normalised."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = frozenset(_requirement_name(r) for r in project["dependencies"])
    optional = {extra: frozenset(_requirement_name(r) for r in reqs)
                for extra, reqs in project.get("optional-dependencies", {}).items() if extra not in NOT_FOR_USERS}
    return base, optional


def _required_module(node: ast.AST) -> str | None:
    """The module of `require("x")` / `extras.require("x")` / `importlib.import_module("x")`, else None."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return None
    value = node.args[0].value
    return value if _name_of(node) in ("require", "import_module") and isinstance(value, str) else None


def _requires(function: ast.AST) -> dict[str, int]:
    """Top-level module -> the first line of the function (not its nested ones) that calls require() of it."""
    out: dict[str, int] = {}
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        module = _required_module(node)
        if module is not None and isinstance(node, ast.Call) and _name_of(node) == "require":
            top = module.split(".")[0]
            out[top] = min(out.get(top, node.lineno), node.lineno)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _name_of(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def imports_of(relative: str, source: str) -> Iterator[Import]:
    """Every absolute import of one module, and the modules it names to require() or import_module()."""
    tree = ast.parse(source)

    def walk(node: ast.AST, requires: dict[str, int]) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            inner = requires
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = _requires(child)
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module]
            elif (module := _required_module(child)) is not None:
                names = [module]
            for name in names:
                line = getattr(child, "lineno", 0)
                guard = requires.get(name.split(".")[0])
                guarded = guard is not None and guard <= line
                yield Import(f"vgpuctl/{relative}:{line}", name, guarded)
            yield from walk(child, inner)

    yield from walk(tree, {})


def all_imports() -> list[Import]:
    return [imp for path in sorted(PACKAGE.rglob("*.py"))
            for imp in imports_of(path.relative_to(PACKAGE).as_posix(), path.read_text(encoding="utf-8"))]


def _third_party(imp: Import) -> bool:
    return imp.top not in sys.stdlib_module_names and imp.top not in ("__future__", "vgpuctl")


def problems(found: list[Import], providers: dict[str, list[str]]) -> list[str]:
    """What the imports do against the declared dependencies; `providers` maps a top-level module to the
    distributions that install it (importlib.metadata.packages_distributions)."""
    base, optional = declared()
    out = []
    for imp in filter(_third_party, found):
        dists = {_normal(d) for d in providers.get(imp.top, [])}
        if not dists:
            out.append(f"{imp.where}: imports {imp.module}, which no installed distribution provides")
        elif dists & base:
            continue
        elif not (extra := sorted(e for e, names in optional.items() if dists & names)):
            out.append(f"{imp.where}: imports {imp.module} ({', '.join(sorted(dists))}), which is not a "
                       "dependency of vgpuctl (pyproject.toml: dependencies or an extra)")
        elif not imp.guarded:
            out.append(f"{imp.where}: imports {imp.module}, which only the extra {extra[0]!r} installs, without "
                       f"require({imp.top!r}) of vgpuctl.extras before it in the same function")
    return out


def test_every_import_of_vgpuctl_is_a_declared_dependency() -> None:
    found = all_imports()
    assert len({imp.top for imp in filter(_third_party, found)}) >= 10  # the walk sees imports inside functions
    assert problems(found, importlib.metadata.packages_distributions()) == []


def test_the_extras_module_names_the_extras_pyproject_declares() -> None:
    """vgpuctl.extras names, for each optional module, the extra whose distributions install it."""
    _base, optional = declared()
    providers = importlib.metadata.packages_distributions()
    assert set(optional) == {extra for extra, _what in extras.EXTRAS.values()}
    for module, (extra, _what) in extras.EXTRAS.items():
        assert {_normal(d) for d in providers[module]} & optional[extra], (module, extra)


PROVIDERS = {"typer": ["typer"], "click": ["click"], "ortools": ["ortools"], "urllib3": ["urllib3"],
             "requests": ["requests"], "ruamel": ["ruamel.yaml"]}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import click\n", "imports click (click), which is not a dependency"),
        ("def f():\n    import click\n", "imports click (click), which is not a dependency"),
        ("if TYPE_CHECKING:\n    import urllib3\n", None),
        ("import nosuchthing\n", "which no installed distribution provides"),
        ("def f():\n    from ortools.sat.python import cp_model\n", "without require('ortools')"),
        ("import ortools\n", "without require('ortools')"),
        ("def f():\n    require('ortools')\n    from ortools.sat.python import cp_model\n", None),
        ("def f():\n    from ortools.sat.python import cp_model\n    require('ortools')\n", "without require"),
        ("def f():\n    require('ortools')\n    def g():\n        import ortools\n", "without require"),
        ("def f():\n    extras.require('ortools.sat.python.cp_model')\n", None),
        ("import importlib\nimportlib.import_module('ortools')\n", "without require('ortools')"),
        ("import typer\nfrom ruamel.yaml import YAML\nfrom . import x\n", None),
    ],
)
def test_the_check_reads_every_form_of_import(source: str, expected: str | None) -> None:
    found = problems(list(imports_of("x.py", source)), PROVIDERS)
    if expected is None:
        assert found == []
    else:
        (line,) = found
        assert line.startswith("vgpuctl/x.py:") and expected in line, line


def test_the_lock_pins_every_declared_distribution_within_its_range() -> None:
    """constraints.txt (what make venv, CI and the execution environment install) pins each distribution
    pyproject.toml names, dev tools included, at a version its range allows."""
    from packaging.requirements import Requirement

    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in lines if line and not line.startswith("#"))
    pinned = {_normal(name): version for name, version in pins.items()}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *(r for reqs in project["optional-dependencies"].values() for r in reqs)]
    for text in wanted:
        req = Requirement(text)
        version = pinned.get(_normal(req.name))
        assert version is not None and req.specifier.contains(version, prereleases=True), (text, version)
    makefile = (ROOT / "Makefile").read_text()
    assert "PIN    ?= -c $(CONSTRAINTS) --build-constraint $(CONSTRAINTS)" in makefile
    assert "pip install -q $(PIN) -e '.[dev]'" in makefile
