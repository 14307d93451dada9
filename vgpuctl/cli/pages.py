"""`--html FILE` of `status`, `show PLANFILE` and `runs show RUN`: the checks before anything runs, and the write.

A page is written whole or not at all (vgpuctl.outpaths.write_whole); a folder, a file the command reads, a file
named like an output format or in a folder that does not exist is refused in one line before anything runs.
With `-o json` the command's document still goes to stdout; in text the page replaces the text (one line on
stderr names the file).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.outpaths import write_whole

if TYPE_CHECKING:
    from vgpuctl.reports.base import Report

OPTION = "--html"


def check_html_file(path: Path | None, opts: GlobalOptions, inputs: dict[str, Path | None]) -> None:
    """Refuse, before anything runs, a page path that cannot be written or names a file the command reads."""
    if path is None:
        return
    common.check_out_file(path, OPTION, "page")
    common.refuse_overlaps({OPTION: path}, opts, inputs)


def write_page(path: Path, page: str, opts: GlobalOptions, report: Report) -> None:
    """The page into `path`; the document on stdout with -o json, else one line saying where the page went."""
    write_whole(path, page, f"{OPTION}")
    if opts.json:
        common.emit(report, opts)
    else:
        common.info(f"Wrote {path}: one page, open it in a browser (no network needed).")
