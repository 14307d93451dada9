"""The floors of the vgpuctl package (docs/floors.yaml) held against its imports, and the picture drawn from them.

    python scripts/floors.py            # what breaks the floors: arrows back up, circles, modules on no floor
    python scripts/floors.py --write    # draw the floors into docs/architecture.md (between its markers)

Every import counts: at module level, inside functions and under TYPE_CHECKING. An import inside a function is
there to keep a module off a path that does not need it (a command's start, `--help`); one of a module that the
importing module loads anyway when it is imported defers nothing, only hides the route, and is listed too.
tests/unit/test_layers.py runs the same checks and fails when the picture in docs/architecture.md is not the one
drawn from the data.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vgpuctl"
FLOORS_FILE = ROOT / "docs" / "floors.yaml"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- floors: begin (drawn by scripts/floors.py) -->", "<!-- floors: end -->"


@dataclass(frozen=True)
class Floor:
    level: int  # 1 is the ground
    name: str
    says: str
    rooms: tuple[str, ...]  # "errors" (a module), "hosts/" (a folder), "experiment/runner" (a module in a folder)


@dataclass(frozen=True)
class Arrow:
    source: str  # dotted module names without the package: "hosts.plan"
    target: str
    line: int


@dataclass
class House:
    floors: list[Floor]
    modules: dict[str, Path]  # "hosts.plan" -> its file
    arrows: list[Arrow] = field(default_factory=list)

    def room_of(self, module: str) -> str:
        """The longest room entry that holds the module ("experiment/runner" before "experiment/")."""
        path = module.replace(".", "/")
        if self.modules[module].name == "__init__.py":
            path += "/"
        best = ""
        for floor in self.floors:
            for room in floor.rooms:
                holds = path.startswith(room) if room.endswith("/") else path == room
                if holds and len(room) > len(best):
                    best = room
        return best

    def floor_of(self, module: str) -> Floor | None:
        room = self.room_of(module)
        return next((f for f in self.floors if room in f.rooms), None)


def read_floors(path: Path = FLOORS_FILE) -> list[Floor]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [
        Floor(i, str(f["name"]), str(f.get("says", "")), tuple(str(r) for r in f["rooms"]))
        for i, f in enumerate(data["floors"], start=1)
    ]


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name or "__init__"] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module an imported dotted name (without "vgpuctl.") lands in: the name itself, or its package."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return "__init__" if "__init__" in modules else None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> Iterator[Arrow]:
    """Every import of a vgpuctl module in the file, at any depth (TYPE_CHECKING blocks and functions too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for target in _targets(node, module, path, modules):
                yield Arrow(module, target, node.lineno)


def _targets(node: ast.Import | ast.ImportFrom, module: str, path: Path, modules: dict[str, Path]) -> list[str]:
    """The vgpuctl modules an import statement names (other than the importing module itself)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = ["vgpuctl", *package.split(".")] if package else ["vgpuctl"]
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        names = [f"{base}.{a.name}" for a in node.names]
    out = []
    for name in names:
        if name != "vgpuctl" and not name.startswith("vgpuctl."):
            continue
        target = _resolve(name.removeprefix("vgpuctl").lstrip("."), modules)
        if target is not None and target != module:
            out.append(target)
    return out


def read_house(package: Path = PACKAGE, floors_file: Path = FLOORS_FILE) -> House:
    modules = module_files(package)
    house = House(read_floors(floors_file), modules)
    seen: set[tuple[str, str]] = set()
    for module, path in modules.items():
        for arrow in imports_of(module, path, modules):
            if (arrow.source, arrow.target) not in seen:
                seen.add((arrow.source, arrow.target))
                house.arrows.append(arrow)
    return house


# ------------------------------------------------------------------------------------------------ checks


def unplaced(house: House) -> list[str]:
    """Modules no floor holds, and room entries that hold no module."""
    out = [f"vgpuctl/{m.replace('.', '/')}: on no floor of {FLOORS_FILE.name}" for m in house.modules
           if m != "__init__" and house.floor_of(m) is None]
    for floor in house.floors:
        for room in floor.rooms:
            if not any(house.room_of(m) == room for m in house.modules):
                out.append(f"{FLOORS_FILE.name}: floor {floor.name}: room {room} holds no module")
    return out


def arrows_up(house: House) -> list[str]:
    out = []
    for a in house.arrows:
        src, dst = house.floor_of(a.source), house.floor_of(a.target)
        if src is not None and dst is not None and dst.level > src.level:
            out.append(f"{_file(house, a.source)}:{a.line}: imports {a.target} "
                       f"(floor {src.level} {src.name} -> floor {dst.level} {dst.name})")
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    part.append(top)
                    if top == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def module_circles(house: House) -> list[list[str]]:
    graph: dict[str, set[str]] = {m: set() for m in house.modules}
    for a in house.arrows:
        graph[a.source].add(a.target)
    return circles(graph)


def room_circles(house: House) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for a in house.arrows:
        src, dst = house.room_of(a.source), house.room_of(a.target)
        if src and dst and src != dst:
            graph.setdefault(src, set()).add(dst)
    return circles(graph)


def _function_imports(node: ast.AST, in_function: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements inside functions (methods and nested functions too), each once."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            if in_function:
                yield child
        else:
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from _function_imports(child, inside)


def _parents(module: str) -> list[str]:
    """The packages Python runs before the module: "hosts.plan" -> "hosts", "__init__" (vgpuctl itself)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)] + (["__init__"] if module != "__init__" else [])


def _trees(house: House) -> dict[str, ast.Module]:
    return {m: ast.parse(p.read_text(encoding="utf-8"), filename=str(p)) for m, p in house.modules.items()}


def loaded_with(house: House, trees: dict[str, ast.Module] | None = None) -> dict[str, set[str]]:
    """Per module, the vgpuctl modules that importing it always loads: its own top-level import statements (not
    under an `if`, a `try` or TYPE_CHECKING), their packages, and so on down."""
    trees = trees if trees is not None else _trees(house)
    direct: dict[str, set[str]] = {}
    for module, path in house.modules.items():
        found = set(_parents(module))
        for node in trees[module].body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(node, module, path, house.modules):
                    found |= {target, *_parents(target)}
        direct[module] = {m for m in found if m in house.modules and m != module}
    closed: dict[str, set[str]] = {}
    for module in house.modules:
        seen: set[str] = set()
        todo = list(direct[module])
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(direct.get(current, ()))
        closed[module] = seen - {module}
    return closed


def deferring_nothing(house: House) -> list[str]:
    """Imports inside functions of a module that the importing module has loaded already when it is imported."""
    trees = _trees(house)
    loaded = loaded_with(house, trees)
    out = []
    for module, path in house.modules.items():
        for node in _function_imports(trees[module]):
            for target in _targets(node, module, path, house.modules):
                if target in loaded[module]:
                    out.append(f"{_file(house, module)}:{node.lineno}: imports {target} inside a function, but "
                               f"importing {module} loads it already: import it at the top")
    return out


def problems(house: House, deferring: list[str] | None = None) -> list[str]:
    """Everything that breaks the floors (`deferring`: deferring_nothing's lines, when already found)."""
    out = unplaced(house) + arrows_up(house) + (deferring if deferring is not None else deferring_nothing(house))
    out += [f"modules in a circle: {' -> '.join(c)}" for c in module_circles(house)]
    out += [f"rooms in a circle: {' -> '.join(c)}" for c in room_circles(house)]
    return out


def _file(house: House, module: str) -> str:
    path = house.modules[module]
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()


# ------------------------------------------------------------------------------------------------ picture


def picture(house: House) -> str:
    """The floors from the top down: each floor's rooms, and the floors below that it imports."""
    lines = ["```"]
    width = max(len(f.name) for f in house.floors)
    for floor in reversed(house.floors):
        below = sorted({dst.level for a in house.arrows
                        if house.floor_of(a.source) is floor and (dst := house.floor_of(a.target)) is not None
                        and dst.level < floor.level})
        lines.append(f"{floor.level:2d} {floor.name:<{width}}  {'  '.join(floor.rooms)}")
        lines.append(f"   {'':<{width}}  {floor.says}")
        if below:
            lines.append(f"   {'':<{width}}  imports floors {', '.join(str(b) for b in below)}")
    lines.append("```")
    return "\n".join(lines)


def drawn_section(text: str) -> str | None:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start + len(BEGIN) : end].strip("\n")


def with_picture(text: str, house: House) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{ARCHITECTURE}: the markers {BEGIN!r} and {END!r} are missing")
    return text[: start + len(BEGIN)] + "\n" + picture(house) + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="draw the floors into docs/architecture.md")
    args = parser.parse_args(argv)
    house = read_house()
    if args.write:
        ARCHITECTURE.write_text(with_picture(ARCHITECTURE.read_text(encoding="utf-8"), house), encoding="utf-8")
    deferring = deferring_nothing(house)
    found = problems(house, deferring)
    for line in found:
        print(line)
    print(f"{len(house.modules)} modules on {len(house.floors)} floors, {len(house.arrows)} imports; "
          f"{len(arrows_up(house))} back up, {len(module_circles(house))} module circles, "
          f"{len(room_circles(house))} room circles, {len(deferring)} imports in functions that defer "
          "nothing", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
