"""A driver upgrade window's guest driver moves (vgpuctl.hosts.window), through the guest stage `provision` uses:
the rendered inventory, ansible-runner and the `vgpu_guest_driver` role (playbooks/driver.yml: the GPU facts, then
that role alone), limited to the VMs of one driver file at a time, with that file, its sha256 and its version as
extra variables (they win over the group's vars). Relative paths are the inventory file's folder's, as the
group's own."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vgpuctl.domain import Outcome
from vgpuctl.guest import targets as tg
from vgpuctl.model import GuestDriverMove, GuestDriverOutcome

if TYPE_CHECKING:
    from vgpuctl.inventory import Inventory

PLAYBOOK = "driver.yml"


def resolved_src(inv: Inventory, src: str) -> str:
    """A driver file's controller path, relative ones from the inventory file's folder."""
    base = Path(inv.source_path).resolve().parent if inv.source_path else Path.cwd()
    return tg.resolve_path_vars({"vgpu_guest_driver_src": src}, base)["vgpu_guest_driver_src"]


def driver_vars(inv: Inventory, move: GuestDriverMove) -> dict[str, str]:
    """The role's variables for one move (extra variables: they win over the group's)."""
    return {"vgpu_guest_driver_src": resolved_src(inv, move.src), "vgpu_guest_driver_sha256": move.sha256,
            "vgpu_guest_driver_version": move.new}


def deploy_drivers(inv: Inventory, addresses: dict[str, str | None], moves: Sequence[GuestDriverMove],
                   state: Path | None = None) -> list[GuestDriverOutcome]:
    """Install each move's driver in its VM: one playbook run per driver file, over its VMs that have an address; a
    VM without one fails (the window stops)."""
    from vgpuctl.guest.runner import DEFAULT_KEEP_RUNS, HostTracker, PlaybookRun, new_ident, prune_runs, runs_dir
    from vgpuctl.guest.runner import state_dir as default_state

    out: list[GuestDriverOutcome] = []
    base = state or default_state()
    by_file: dict[tuple[str, str, str], list[GuestDriverMove]] = {}
    for m in moves:
        if not addresses.get(m.vm):
            out.append(GuestDriverOutcome(m.vm, m.stage, m.new, Outcome.FAILED, "no guest IP address (VM powered off, "
                                                                                 "or VMware Tools not running)"))
            continue
        by_file.setdefault((m.src, m.sha256, m.new), []).append(m)
    artifacts = runs_dir(base)
    artifacts.mkdir(parents=True, exist_ok=True, mode=0o700)
    targets = tg.build_targets(inv, {m.vm: addresses.get(m.vm) for ms in by_file.values() for m in ms})
    for group_moves in by_file.values():
        tracker, ident = HostTracker(), new_ident()
        run = PlaybookRun(inv, targets, base / "known_hosts", artifacts, ident, forks=20, playbook=PLAYBOOK)

        def handler(event: dict[str, object], tracker: HostTracker = tracker) -> bool:
            tracker.feed(event)
            return True  # keep writing the event to the artifacts

        try:
            result = run.execute(limit=",".join(m.vm for m in group_moves), extravars=driver_vars(inv, group_moves[0]),
                                 handler=handler)
        finally:
            prune_runs(artifacts, DEFAULT_KEEP_RUNS)
        for m in group_moves:
            done = tracker.outcome(m.vm, m.group)
            ok = done.status in ("ok", "changed") and result.rc == 0
            out.append(GuestDriverOutcome(m.vm, m.stage, m.new, Outcome.CHANGED if ok else Outcome.FAILED,
                                          "" if ok else (done.message or f"ansible-runner {result.status}")))
    return out
