"""The message-text rule of `make mutation` (scripts/mutation.py, docs/testing.md): which mutants are left out of
the score, and how the score counts mutmut's outcomes."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "mutation.py"


@pytest.fixture(scope="module")
def mutation() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _func(source: str) -> ast.FunctionDef:
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


ORIGINAL = '''
def f(gpu, n):
    if gpu.mode != "mig":
        raise ValueError(f"{gpu.id} holds {n} vGPUs, the maximum is {n - 1}")
    gpu.block("holds a vGPU no table explains")
    return ", ".join(gpu.names) + f"0x{n:08X}"
'''


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('"holds a vGPU no table explains"', '"XXholds a vGPU no table explainsXX"', True),
        ('"holds a vGPU no table explains"', '"HOLDS A VGPU NO TABLE EXPLAINS"', True),
        ("{n - 1}", "{n + 1}", True),  # inside a message f-string: only the text changes
        ("{gpu.id} holds", "{None} holds", True),
        ('"mig"', '"XXmigXX"', False),  # a value compared with: no prose
        ('", "', '"XX, XX"', False),  # a separator
        ('f"0x{n:08X}"', 'f"0x{n + 1:08X}"', False),  # a format, not prose
        ('gpu.block("holds a vGPU no table explains")', "gpu.block(None)", False),  # the whole message replaced
        ('raise ValueError(f"{gpu.id} holds {n} vGPUs, the maximum is {n - 1}")', "raise ValueError(None)", False),
        ("!=", "==", False),
    ],
)
def test_message_text_mutants_are_changes_inside_prose_only(mutation: ModuleType, old: str, new: str,
                                                            message: bool) -> None:
    assert old in ORIGINAL
    mutant = ORIGINAL.replace(old, new, 1)
    assert mutation.message_text_only(_func(ORIGINAL), _func(mutant)) is message


def test_a_mutant_with_a_prose_change_and_another_change_counts(mutation: ModuleType) -> None:
    mutant = ORIGINAL.replace('"holds a vGPU', '"XXholds a vGPU').replace('"mig"', '"MIG"')
    assert not mutation.message_text_only(_func(ORIGINAL), _func(mutant))
    assert not mutation.message_text_only(_func(ORIGINAL), _func(ORIGINAL))  # no change is no message mutant


def _expr(source: str) -> ast.expr:
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.Expr)
    return node.value


def test_prose_is_two_words_side_by_side_in_the_literal_text(mutation: ModuleType) -> None:
    prose = ['"no free MIG placement"', 'f"{a} holds {b} vGPUs at most"', 'f"{a} must be {b}"']
    plain = ['"mig"', '" ("', '"; "', "3", 'f"RmPVMRL={v}"',
             'f"{a} ms"', 'f"{n} x {name}"', 'f"{a} holds {b} vGPUs"']  # single words between values
    assert [s for s in prose if not mutation.is_prose(_expr(s))] == []
    assert [s for s in plain if mutation.is_prose(_expr(s))] == []


def test_the_score_counts_detected_mutants_of_the_counted_ones(mutation: ModuleType, tmp_path: Path) -> None:
    """Killed and timed-out mutants are detected; survivors and mutants no test reaches are not; message-text
    mutants are left out whatever their outcome."""
    source = ORIGINAL.replace("def f(", "def x_f__mutmut_orig(")
    variants = {1: '"XXmigXX"', 2: '"MIG"', 3: '"mig"', 4: '"mig"', 5: '"mig"'}
    for i, value in variants.items():
        mutant = ORIGINAL.replace("def f(", f"def x_f__mutmut_{i}(").replace('"mig"', value)
        if i >= 3:
            mutant = mutant.replace('"holds a vGPU', '"XXholds a vGPU')
        source += mutant
    path = tmp_path / "pkg" / "mod.py"
    path.parent.mkdir()
    path.write_text(source)
    codes = {1: 1, 2: 0, 3: 0, 4: 1, 5: 33}
    meta = {"exit_code_by_key": {f"pkg.mod.x_f__mutmut_{i}": c for i, c in codes.items()}}
    (tmp_path / "pkg" / "mod.py.meta").write_text(json.dumps(meta))
    score = mutation.score("mod", ("pkg/mod.py",), tmp_path)
    assert (score.detected, score.counted, score.percent) == (1, 2, 50.0)
    assert dict(score.excluded) == {"survived": 1, "killed": 1, "no tests": 1}
    assert score.missed == ["pkg.mod.x_f__mutmut_2 (survived)"]
    assert mutation.to_test(("pkg/mod.py",), tmp_path) == ["pkg.mod.x_f__mutmut_2"]  # message-text ones never run
    assert mutation.outcome(36) == "timeout" and mutation.outcome(None) == "not run" and mutation.outcome(-11) == (
        "suspicious")
