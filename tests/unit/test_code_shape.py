"""The shape docs/architecture.md promises: small functions, no import cycles between vgpuctl's modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "vgpuctl"
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(path.read_text(), filename=str(path))
    return out


MODULES = _modules()


def test_no_function_is_longer_than_the_limit() -> None:
    long = [
        f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for module, tree in MODULES.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


def _is_type_checking_block(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _import_time_targets(module: str, tree: ast.Module) -> set[str]:
    """vgpuctl modules imported when `module` is imported (top level, outside `if TYPE_CHECKING:`)."""
    targets: set[str] = set()
    is_package = (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists()
    package = module if is_package else module.rpartition(".")[0]
    for node in tree.body:
        if _is_type_checking_block(node):
            continue
        for sub in ast.walk(node) if isinstance(node, ast.If | ast.Try) else [node]:
            if isinstance(sub, ast.Import):
                targets.update(a.name for a in sub.names if a.name.startswith("vgpuctl"))
            elif isinstance(sub, ast.ImportFrom):
                base = sub.module or ""
                if sub.level:
                    anchor = package.split(".")[: len(package.split(".")) - sub.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                if not base.startswith("vgpuctl"):
                    continue
                for alias in sub.names:
                    candidate = f"{base}.{alias.name}"
                    targets.add(candidate if candidate in MODULES else base)
    return {t for t in targets if t in MODULES and t != module}


def _cycles() -> list[list[str]]:
    graph = {m: _import_time_targets(m, t) for m, t in MODULES.items()}
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_no_import_cycles_between_modules() -> None:
    # a package's __init__ importing its own submodules is not a cycle worth reporting
    cycles = [c for c in _cycles() if not all(m.startswith(c[0] + ".") or m == c[0] for m in c)]
    assert cycles == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    a, b = ast.parse("from vgpuctl import errors\n"), ast.parse("import vgpuctl.model\n")
    saved = dict(MODULES)
    try:
        MODULES["vgpuctl.model"], MODULES["vgpuctl.errors"] = a, b
        assert any({"vgpuctl.model", "vgpuctl.errors"} <= set(c) for c in _cycles())
    finally:
        MODULES.clear()
        MODULES.update(saved)
