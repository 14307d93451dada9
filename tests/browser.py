"""A real headless browser for the pages vgpuctl writes (`--html`): Debian's chromium through its own command line.

`chromium_or_skip()` finds chromium (Debian's package, scripts/browser-test-packages.txt, which `make test` installs
when run as root); where it is not installed the test skips and says how to install it. `open_page`
opens one page at one window width: a screenshot (a test artifact: under `VGPUCTL_TEST_ARTIFACTS/<test>/` when that
is set, else under the test's tmp path; its path printed either way), the DOM as
the browser built it (`--dump-dom`), and the browser's console log, whose errors (an uncaught script error, a
Content-Security-Policy refusal, a resource that failed to load) `console_errors` picks out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ROOT / "scripts" / "browser-test-packages.txt"
NAMES = ("chromium", "chromium-browser")
WIDTHS = (375, 1920)  # a phone and a desktop screen
# what a page that loads and runs nothing must never make the browser log
# read when the module is imported: the tests' fixtures take VGPUCTL_* out of the environment of the test itself
ARTIFACTS = os.environ.get("VGPUCTL_TEST_ARTIFACTS")
ERROR_MARKS = ("Uncaught", "Refused to", "violates the following Content Security Policy", "Failed to load",
               "ERR_FILE_NOT_FOUND", "net::ERR_")


def packages() -> list[str]:
    lines = PACKAGES.read_text().splitlines()
    return [word for line in lines if (word := line.split("#")[0].strip())]


def find_chromium() -> str | None:
    return next((path for name in NAMES if (path := shutil.which(name))), None)


def screenshots_folder(tmp_path: Path, test: str) -> Path:
    """Where a test keeps its screenshots: VGPUCTL_TEST_ARTIFACTS/<test> when set (kept after the run), else its
    tmp path."""
    return Path(ARTIFACTS) / test if ARTIFACTS else tmp_path / "screens"


def chromium_or_skip() -> str:
    """The chromium binary; when it is not installed the test skips and says how to install it."""
    found = find_chromium()
    if found is None:
        pytest.skip(f"the page tests need a headless chromium, and none is installed: apt-get install "
                    f"{' '.join(packages())} (Debian's package; `make test` installs it when run as root)")
    return found


@dataclass
class Opened:
    """One page as the browser showed it at one width."""

    width: int
    screenshot: Path
    dom: str
    log: str

    def console_errors(self) -> list[str]:
        return [line for line in self.log.splitlines() if any(mark in line for mark in ERROR_MARKS)]


def _chromium(binary: str, profile: Path, width: int, *args: str) -> subprocess.CompletedProcess[str]:
    command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               "--disable-extensions", "--disable-background-networking", "--enable-logging=stderr", "--v=0",
               f"--user-data-dir={profile}", f"--window-size={width},2000", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=None, stdin=subprocess.DEVNULL)


def open_page(binary: str, page: Path, width: int, out: Path) -> Opened:
    """The page at `width` pixels: its screenshot under `out` (path printed), its DOM and the console log."""
    out.mkdir(parents=True, exist_ok=True)
    shot = out / f"{page.stem}-{width}.png"
    shot.unlink(missing_ok=True)  # a screenshot an earlier run left proves nothing
    url = page.resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="chromium-") as profiles:  # the browser's profiles are no artifact
        taken = _chromium(binary, Path(profiles) / "shot", width, f"--screenshot={shot}", url)
        dumped = _chromium(binary, Path(profiles) / "dom", width, "--dump-dom", url)
    assert shot.is_file() and shot.stat().st_size > 0, taken.stderr[-2000:]
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    print(f"screenshot of {page.name} at {width} px: {shot}")
    return Opened(width, shot, dumped.stdout, taken.stderr + dumped.stderr)
