"""`vgpuctl preflight`: what a first run against a real vCenter trips over, checked before anything changes.

Each check is a small typed unit (vgpuctl.reports.preflight.PreflightCheck): an id, pass / warn / fail / skip,
the evidence and the fix. `run` reads what it needs (vgpuctl.preflight.gather) and runs every check;
`cheap_checks` is the part `plan` and `apply` run on the farm they already read (vCenter's version and the
privileges the plan needs: no per-host call), refusing with the same lines. docs/preflight.md lists the
checks and their sources.
"""

from vgpuctl.preflight.run import cheap_checks, refuse_by_preflight, run_checks

__all__ = ["cheap_checks", "refuse_by_preflight", "run_checks"]
