"""Summaries and prompts on a terminal wrap at word boundaries to its width (80 columns: the terminal would
otherwise cut names and words in two); piped, lines stay whole."""

from __future__ import annotations

import io
import os
from typing import Any

import pytest

from vgpuctl.cli import common, host, plan

pytestmark = pytest.mark.unit

NAMES = ", ".join(f"infer-{i:03d}" for i in range(20))
SUMMARY = f"Apply finished: 20 changed, 0 failed, 0 skipped, 0 not started, 0 unchanged.\n  changed: {NAMES}"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize("width", [80, 61, 200])
def test_lines_fit_the_width_and_keep_every_word_whole(width: int) -> None:
    fitted = common.fit_lines(SUMMARY, width)
    assert max(len(line) for line in fitted.splitlines()) <= width
    assert _words(fitted) == _words(SUMMARY)  # nothing cut, nothing lost, the same order
    lines = fitted.splitlines()
    listed = next(i for i, line in enumerate(lines) if line.startswith("  changed: infer-000"))
    assert lines[0].startswith("Apply finished") and all(line.startswith("  ") for line in lines[1:listed])
    assert all(line.startswith("    infer-") for line in lines[listed + 1:])  # continuations under the list


def test_a_hyphenated_name_longer_than_the_line_is_kept_whole() -> None:
    name = "a-very-long-vm-name-" * 5
    assert common.fit_lines(f"  failed: {name} x", 40).splitlines() == ["  failed:", f"    {name}", "    x"]


def _show(monkeypatch: pytest.MonkeyPatch, stream: io.StringIO, columns: int) -> str:
    monkeypatch.setattr(common.sys, "stdout", stream)
    monkeypatch.setattr(os, "get_terminal_size", lambda *_a: os.terminal_size((columns, 24)))
    monkeypatch.setenv("COLUMNS", str(columns))
    common.show(SUMMARY, wrap=True)
    return stream.getvalue()


def test_a_summary_on_an_80_column_terminal_wraps_at_words(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _show(monkeypatch, Terminal(), 80)
    assert max(len(line) for line in out.splitlines()) <= 80 and _words(out) == _words(SUMMARY)
    assert len(out.splitlines()) > 2


def test_a_piped_summary_keeps_its_lines_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _show(monkeypatch, io.StringIO(), 80)
    assert out.splitlines() == SUMMARY.splitlines()


def test_yaml_and_export_lines_are_never_wrapped_even_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a user copies from the terminal (a YAML stream, `sim env`'s export line) stays as it was written."""
    stream = Terminal()
    monkeypatch.setattr(common.sys, "stdout", stream)
    monkeypatch.setattr(os, "get_terminal_size", lambda *_a: os.terminal_size((80, 24)))
    line = "export " + " ".join(f"VGPUCTL_VAR_{i}=value-{i}" for i in range(12))
    common.show(line)
    assert stream.getvalue() == line + "\n"


def test_the_apply_summary_is_shown_wrapped() -> None:
    """The apply summary (a str on a terminal too; the plan is rich text there, which wraps words itself) asks
    for wrapping."""
    import inspect

    assert "wrap=True" in inspect.getsource(plan.print_summary)


def test_what_a_host_command_will_do_is_fitted_before_its_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = Terminal()
    monkeypatch.setattr(common.sys, "stdout", stream)
    monkeypatch.setattr(os, "get_terminal_size", lambda *_a: os.terminal_size((80, 24)))
    text = f"host esx-01:\n  running VMs block maintenance mode (--evacuate refuse, nothing will change): {NAMES}"
    host._say(common.GlobalOptions(), text)
    out = stream.getvalue()
    assert max(len(line) for line in out.splitlines()) <= 80 and _words(out) == _words(text)


@pytest.mark.parametrize("word", [True, False])
def test_the_confirmation_prompt_wraps_at_words_and_leaves_room_for_the_answer(
        monkeypatch: pytest.MonkeyPatch, word: bool) -> None:
    asked: list[str] = []

    def answer(text: str, *_args: Any, **_kwargs: Any) -> Any:
        asked.append(text)
        return "yes" if word else True

    monkeypatch.setattr(common.sys, "stdin", Terminal())
    monkeypatch.setattr(common.sys, "stderr", Terminal())
    monkeypatch.setattr(os, "get_terminal_size", lambda *_a: os.terminal_size((60, 24)))
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr(common.typer, "prompt" if word else "confirm", answer)
    question = "Apply 120 change(s) to hosts esx-01.gpu.sim, esx-02.gpu.sim and esx-03.gpu.sim?"
    common.confirm(question, word=word)
    (text,) = asked
    lines = text.splitlines()
    assert len(lines) > 1 and _words(text)[: len(_words(question))] == _words(question)
    assert max(len(line) for line in lines) <= 60 and len(lines[-1]) <= 60 - (len(": yes") if word else 9)
