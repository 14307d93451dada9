"""`make mutation`: run mutmut over the pure core, one module at a time, and score each without message-text mutants.

    python scripts/mutation.py [--fresh] [--report-only] [--jobs N] [MODULE ...]
    (modules: placement, scheduler, plan, kinds, layout)

mutmut reads its settings from pyproject.toml ([tool.mutmut]: the files it mutates, unit tests only) and keeps its
results under mutants/: a second run tests only the mutants not yet killed (--fresh starts over). A mutant is a
message-text mutant when every change it makes lies inside a string that reads as prose (`message_text_only`);
those are never run and left out of the score. Exits 1 when a module scores under the threshold. The rule and the
latest numbers: docs/testing.md.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "mutants"
MODULES: dict[str, tuple[str, ...]] = {
    "placement": ("vgpuctl/farm/placement.py", "vgpuctl/farm/state.py"),
    "scheduler": ("vgpuctl/esxi/rmpvmrl.py",),
    "plan": ("vgpuctl/vms/plan.py",),
    "kinds": ("vgpuctl/capacity/kinds.py",),
    "layout": ("vgpuctl/capacity/layout.py",),
}
THRESHOLD = 90.0
# A string reads as prose when two words stand side by side: messages, reasons, hints. Keys, enum values, units,
# separators and formats ("mig", "C", "Hz", ", ", " (", "0x{n:08X}") do not, and always count.
PROSE = re.compile(r"\w\s+\w")
# mutmut's exit codes (mutmut/stats.py): which outcomes count as the tests noticing the mutant.
DETECTED = {1: "killed", 3: "killed", 36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout",
            37: "type check"}
UNDETECTED = {0: "survived", 33: "no tests", 5: "no tests"}


# ------------------------------------------------------------------------------------------ message text


def is_prose(node: ast.AST) -> bool:
    """A string literal, or an f-string whose literal parts, read as prose."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and bool(PROSE.search(node.value))
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.Constant) and is_prose(v) for v in node.values)
    return False


def _differences(a: object, b: object, inside: bool) -> Iterator[bool]:
    """One item per place where the two trees differ: whether that place lies inside a prose string of `a`.
    Replacing a whole string (by None, say) is a difference at the string, not inside it."""
    if type(a) is not type(b):
        yield inside
        return
    if isinstance(a, ast.Constant) and isinstance(b, ast.Constant):
        if a.value != b.value or type(a.value) is not type(b.value):
            yield (inside or is_prose(a)) and isinstance(a.value, str) and isinstance(b.value, str)
        return
    if isinstance(a, ast.AST):
        within = inside or is_prose(a)
        for name in a._fields:
            yield from _differences(getattr(a, name), getattr(b, name), within)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield inside
            return
        for x, y in zip(a, b, strict=True):
            yield from _differences(x, y, inside)
    elif a != b:
        yield inside


def message_text_only(original: ast.FunctionDef, mutant: ast.FunctionDef) -> bool:
    """Whether every change from `original` to `mutant` lies inside a string that reads as prose: the text of a
    message literal, or anything inside a message f-string (its literal parts and its interpolations)."""
    found = [d for part in ("args", "body", "returns")
             for d in _differences(getattr(original, part), getattr(mutant, part), False)]
    return bool(found) and all(found)


def functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


# ------------------------------------------------------------------------------------------------ scores


@dataclass
class Score:
    module: str
    outcomes: Counter[str] = field(default_factory=Counter)
    excluded: Counter[str] = field(default_factory=Counter)  # message-text mutants by outcome
    missed: list[str] = field(default_factory=list)  # counted mutants the tests did not notice
    message_text: list[str] = field(default_factory=list)  # the excluded mutants, by name

    @property
    def counted(self) -> int:
        return sum(self.outcomes.values())

    @property
    def detected(self) -> int:
        return sum(n for k, n in self.outcomes.items() if k in DETECTED.values())

    @property
    def percent(self) -> float:
        return 100.0 * self.detected / self.counted if self.counted else 100.0


def outcome(code: int | None) -> str:
    if code is None:
        return "not run"
    return DETECTED.get(code) or UNDETECTED.get(code) or "suspicious"


def mutants_of(paths: tuple[str, ...], mutants: Path = MUTANTS) -> Iterator[tuple[str, str, bool]]:
    """(mutmut's name, outcome, whether it is a message-text mutant) of every mutant of the module's files."""
    for path in paths:
        meta = json.loads((mutants / (path + ".meta")).read_text())
        funcs = functions(ast.parse((mutants / path).read_text()))
        for key, code in sorted(meta["exit_code_by_key"].items()):
            name = key.rpartition(".")[2]
            original = funcs[name.rpartition("__mutmut_")[0] + "__mutmut_orig"]
            yield key, outcome(code), message_text_only(original, funcs[name])


def score(module: str, paths: tuple[str, ...], mutants: Path = MUTANTS) -> Score:
    result = Score(module)
    for key, state, message in mutants_of(paths, mutants):
        if message:
            result.excluded[state] += 1
            result.message_text.append(f"{key} ({state})")
            continue
        result.outcomes[state] += 1
        if state not in DETECTED.values():
            result.missed.append(f"{key} ({state})")
    return result


def report(scores: list[Score], excluded: bool = False) -> str:
    lines = [f"{'module':<10} {'score':>7} {'killed':>7} {'timeout':>7} {'survived':>8} {'no tests':>8} "
             f"{'other':>6} {'excluded':>8}"]
    for s in scores:
        o = s.outcomes
        other = s.counted - o["killed"] - o["timeout"] - o["survived"] - o["no tests"]
        lines.append(f"{s.module:<10} {s.percent:>6.1f}% {o['killed']:>7} {o['timeout']:>7} {o['survived']:>8} "
                     f"{o['no tests']:>8} {other:>6} {sum(s.excluded.values()):>8}")
    for s in scores:
        if s.missed:
            lines += ["", f"{s.module}: not detected (mutmut show NAME)", *(f"  {m}" for m in s.missed)]
        if excluded and s.message_text:
            lines += ["", f"{s.module}: message-text mutants (not scored)", *(f"  {m}" for m in s.message_text)]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- run


def _niced(*command: str) -> None:
    """At low priority, one test process: the machine is shared."""
    subprocess.run(["nice", "-n", "15", *command], cwd=ROOT, check=True)


def generate() -> None:
    """mutmut's first step alone (its 3.8 internals: `mutmut run` does the same before testing): the tree copied
    to mutants/ and every mutant written, so that the message-text mutants can be told apart before any runs."""
    _niced(sys.executable, "-c", "from mutmut.__main__ import create_mutants; "
           "from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir; "
           "import os; os.makedirs('mutants', exist_ok=True); copy_src_dir(); copy_also_copy_files(); "
           "create_mutants(1)")


def to_test(paths: tuple[str, ...], mutants: Path = MUTANTS) -> list[str]:
    """The module's scored mutants the tests have not yet detected (new ones, and survivors to try again)."""
    return [key for key, state, message in mutants_of(paths, mutants) if not message and state not in DETECTED.values()]


def run_mutmut(paths: tuple[str, ...], jobs: int = 1) -> None:
    """Test the module's scored mutants mutmut has not seen killed; message-text mutants are never run."""
    names = to_test(paths)
    if names:
        _niced(str(Path(sys.executable).parent / "mutmut"), "run", "--max-children", str(jobs), *names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", metavar="MODULE", help=", ".join(MODULES) + " (default: all)")
    parser.add_argument("--report-only", action="store_true", help="score mutmut's last results, run nothing")
    parser.add_argument("--show-excluded", action="store_true", help="list the message-text mutants too")
    parser.add_argument("--fresh", action="store_true", help="forget mutmut's earlier results (mutants/) first")
    parser.add_argument("--jobs", type=int, default=1, help="test processes at once (default 1: a shared machine)")
    args = parser.parse_args(argv)
    chosen = args.modules or list(MODULES)
    unknown = [m for m in chosen if m not in MODULES]
    if unknown:
        parser.error(f"unknown module {', '.join(unknown)} (modules: {', '.join(MODULES)})")
    if args.fresh:
        shutil.rmtree(MUTANTS, ignore_errors=True)
    if not args.report_only:
        generate()
        for module in chosen:
            run_mutmut(MODULES[module], max(1, args.jobs))
    scores = [score(m, MODULES[m]) for m in chosen]
    print(report(scores, args.show_excluded))
    low = [s.module for s in scores if s.percent < THRESHOLD]
    if low:
        print(f"\nunder {THRESHOLD:.0f}% without message-text mutants: {', '.join(low)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
