"""One rule for text from outside shown to people: control and invisible characters written as escapes."""

from __future__ import annotations

import pytest

from vgpuctl import yamlout
from vgpuctl.domain import ChangeKind, EvacuationKind
from vgpuctl.model import EvacuationAction, HostChange, Plan
from vgpuctl.reports.plan import render_plan_text, styled
from vgpuctl.visible import lines_text, visible

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("raw", "shown"), [
    ("cr-evil\rok-vm", "cr-evil\\rok-vm"),  # a carriage return would hide what came before
    ("c1\u009b31mCSI", "c1\\x9b31mCSI"),  # the 8-bit control sequence introducer
    ("nel\u0085x", "nel\\x85x"),
    ("rtl\u202eevil.exe", "rtl\\u202eevil.exe"),  # a bidi override reorders the rest of the line
    ("tab\tname", "tab\\tname"),
    ("nb\u00a0sp", "nb\\xa0sp"),  # looks like a space
    ("zero\u200bwidth", "zero\\u200bwidth"),
    ("esc\x1b[31mred", "esc\\x1b[31mred"),
])
def test_control_and_invisible_characters_are_escaped(raw: str, shown: str) -> None:
    assert visible(raw) == shown


@pytest.mark.parametrize("text", ["vm-0001", "ü é 中文 Ωμέγα", "a b  c", "", "grid_a100-4c (2/7)"])
def test_printable_text_is_left_as_it_is(text: str) -> None:
    assert visible(text) is text or visible(text) == text


def test_line_breaks_are_kept_unless_asked() -> None:
    assert visible("host a\n  vm b\rc\n") == "host a\n  vm b\\rc\n"
    assert visible("one\ntwo", keep_line_breaks=False) == "one\\ntwo"


def test_yaml_comments_use_the_same_rule() -> None:
    assert yamlout.comment("left out: vm\nx\u202e", indent=2) == "  # left out: vm\\nx\\u202e\n"


def test_the_terminals_colored_plan_escapes_them_too() -> None:
    """On a terminal the plan is rich Text, not the plain lines: the same rule holds there."""
    text = styled(["+ vm cr-evil\rok", "~ host rtl\u202eevil"])
    assert text.plain == "+ vm cr-evil\\rok\n~ host rtl\\u202eevil"


def test_a_line_break_inside_a_name_starts_no_line_of_its_own() -> None:
    """A report made of lines keeps its own line breaks only: a VM vCenter names `web\\n+ vm x` is one line."""
    assert lines_text(["~ host esx-01", "  evacuate web\n+ vm x", ""]) == "~ host esx-01\n  evacuate web\\n+ vm x\n"
    evacuation = HostChange("esx-01", ChangeKind.EVACUATE, "web\nWarning: nothing to see", old=None,
                            new=EvacuationAction(EvacuationKind.RESTORE_AFTER))  # fmt: skip
    text = render_plan_text(Plan(host_changes=[evacuation]))
    assert "web\\nWarning: nothing to see" in text
    assert not [line for line in text.splitlines() if line.startswith("Warning: nothing")]
