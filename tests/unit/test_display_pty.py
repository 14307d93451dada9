"""The apply's live display on a real pseudo-terminal: 200 VMs finished by 8 threads while the view refreshes;
the bytes the terminal received, replayed on a small VT100 screen with a scrollback, must hold every VM's
`done` line exactly once, each host's line once, and no row of the live view (in-flight VMs, the counter).

The screen is 24 rows: far fewer than the VMs in flight, so the view must keep to the terminal's height (a
taller one scrolls out of reach of the cursor and leaves stale rows behind)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROWS, COLS = 24, 100
VMS, THREADS = 200, 8
REPO = Path(__file__).resolve().parents[2]

DRIVER = f"""
import random, sys, threading, time
from rich.console import Console
from vgpuctl.cli.display import ApplyDisplay

vms = [f"vm-{{i:04d}}" for i in range({VMS})]
display = ApplyDisplay(Console(file=sys.stdout), vms, ["esx-01.gpu.sim", "esx-02.gpu.sim"])
assert display.console.is_terminal
rng = random.Random(7)
queue = list(vms)
lock = threading.Lock()

def work():
    while True:
        with lock:
            if not queue:
                return
            vm = queue.pop(0)
        for step, pct in [("check", None), ("power-off", None), ("reconfigure", 0), ("reconfigure", 30),
                          ("reconfigure", 70), ("reconfigure", 100), ("power-on", 0), ("power-on", 100),
                          ("done", 100)]:
            display.vm_step(vm, step, pct)
            time.sleep(rng.random() * 0.004)
        display.vm_step(vm, "power-on", 100)  # a task's last percentage, reported late

with display:
    for host in ("esx-01.gpu.sim", "esx-02.gpu.sim"):
        for step in ("enter-maintenance", "mig", "reboot"):
            display.host_step(host, step, None)
            time.sleep(0.05)
        display.host_step(host, "changed", None)
    display.vms_planned(vms)
    workers = [threading.Thread(target=work) for _ in range({THREADS})]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    time.sleep(0.3)  # a refresh or two of the finished view
"""

CSI = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])")
IGNORED = {"m", "h", "l"}  # colors, cursor shown or hidden


class Screen:
    """A VT100 screen `rows` high with an unlimited scrollback: the cursor never goes above the screen's top."""

    def __init__(self, rows: int, cols: int):
        self.rows, self.cols = rows, cols
        self.lines: list[list[str]] = [[]]
        self.top = 0  # index of the screen's first line in `lines`
        self.row = self.col = 0
        self.unknown: set[str] = set()

    def feed(self, data: bytes) -> None:
        text = data.decode("utf-8")
        pos = 0
        while pos < len(text):
            m = CSI.match(text, pos)
            if m:
                self._csi(m.group(1), m.group(2))
                pos = m.end()
                continue
            self._char(text[pos])
            pos += 1

    def _line(self) -> list[str]:
        while len(self.lines) <= self.row:
            self.lines.append([])
        return self.lines[self.row]

    def _newline(self) -> None:
        self.row += 1
        self._line()
        if self.row >= self.top + self.rows:
            self.top = self.row - self.rows + 1

    def _char(self, ch: str) -> None:
        if ch == "\r":
            self.col = 0
        elif ch == "\n":
            self._newline()
        elif ch in ("\x07", "\x1b"):
            pass
        else:
            if self.col >= self.cols:
                self.col = 0
                self._newline()
            line = self._line()
            line += [" "] * (self.col + 1 - len(line))
            line[self.col] = ch
            self.col += 1

    def _csi(self, params: str, final: str) -> None:
        n = int(params) if params.isdigit() else 1
        if final == "A":
            self.row = max(self.top, self.row - n)
        elif final == "B":
            self.row = min(self.top + self.rows - 1, self.row + n)
            self._line()
        elif final == "G":
            self.col = n - 1
        elif final == "K":
            line = self._line()
            if params == "2":
                line.clear()
            elif params in ("", "0"):
                del line[self.col :]
        elif final not in IGNORED:
            self.unknown.add(params + final)

    def text(self) -> list[str]:
        return ["".join(line).rstrip() for line in self.lines]


def run_on_a_terminal(script: str) -> bytes:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    env = {**os.environ, "TERM": "xterm", "PYTHONPATH": str(REPO)}
    for name in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM_PROGRAM"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=slave, stdout=slave, stderr=slave, env=env,
                            cwd=REPO, close_fds=True)
    os.close(slave)
    out = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait() == 0, out.decode(errors="replace")[-3000:]
    return bytes(out)


def test_every_done_line_once_and_no_live_row_survives() -> None:
    screen = Screen(ROWS, COLS)
    screen.feed(run_on_a_terminal(DRIVER))
    assert screen.unknown <= {"?25"}, screen.unknown  # the replay understood every cursor movement
    lines = screen.text()
    for i in range(VMS):
        assert lines.count(f"vm-{i:04d}: done") == 1, (i, [line for line in lines if f"vm-{i:04d}" in line])
    for host in ("esx-01.gpu.sim", "esx-02.gpu.sim"):
        assert lines.count(f"host {host}: changed") == 1
    steps = "check|power-off|reconfigure|power-on|enter-maintenance|mig|reboot"
    in_flight = re.compile(rf"^(vm-\d{{4}}|host \S+)\s+({steps})")
    stale = [line for line in lines if in_flight.match(line) or "finished" in line or "more in flight" in line]
    assert stale == [], stale[:10]
    assert len([line for line in lines if line]) == VMS + 2  # nothing else was left on the screen
