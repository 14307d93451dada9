"""One exception hierarchy for everything vgpuctl reports to a user.

The CLI catches VgpuctlError, prints `str(error)` as one line and exits with `exit_code`; anything else
is a bug and shows a traceback. Callers match on types, never on message text.
"""

from __future__ import annotations


class VgpuctlError(Exception):
    """Base of every error the CLI reports as one clear line."""

    exit_code = 1


class UsageError(VgpuctlError):
    """A wrong option, a missing file, an argument that makes no sense."""


class OutputError(VgpuctlError):
    """A file vgpuctl writes could not be written (a full disk, a read-only file or folder); a file written whole
    or not at all is left as it was."""


class InventoryError(VgpuctlError):
    """A problem in the inventory file, located at FILE:LINE:COL when known."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None, col: int | None = None):
        self.message = message
        self.file = file
        self.line = line
        self.col = col
        super().__init__(self.located())

    def located(self) -> str:
        if self.file is None:
            return self.message
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.col is not None:
                where += f":{self.col}"
        return f"{where}: {self.message}"


class InventoryErrors(InventoryError):
    """Several inventory problems found in one pass; printed one per line."""

    def __init__(self, errors: list[InventoryError]):
        self.errors = errors
        super().__init__("\n".join(e.located() for e in errors))

    def located(self) -> str:
        return "\n".join(e.located() for e in self.errors)


class PlanError(VgpuctlError):
    """The desired state cannot be reached from the observed one (reasons listed per object)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems) if len(problems) == 1 else "\n".join(problems))


class PlanRefused(PlanError):
    """A plan with problems that was shown with them: refused in one line, nothing changed (`problems` keeps
    each, for the JSON error document)."""

    def __init__(self, problems: list[str], what: str = "nothing was changed"):
        super().__init__(problems)
        n = len(problems)
        self.args = (f"the plan has {n} problem{'s' if n != 1 else ''} (shown with it): {what}",)


class PreflightFailed(PlanError):
    """A preflight check failed; one line per failing check, as preflight prints it."""
class CustomizationError(VgpuctlError):
    """vCenter reported that a clone's guest customization failed (the event's text), or it never reported."""


class ConnectionFailure(VgpuctlError):
    """vCenter cannot be reached, or the login failed."""


class TlsError(ConnectionFailure):
    """The server certificate failed verification or its thumbprint does not match the pinned one."""


class AuthenticationError(ConnectionFailure):
    """Wrong user name or password, or a session that could not be renewed."""


class VsphereFault(VgpuctlError):
    """A vCenter fault, keeping its vim type name and message."""

    def __init__(self, fault_type: str, message: str, obj: str | None = None, privilege: str | None = None,
                 *, lacks_resources: bool = False):
        self.fault_type = fault_type
        self.fault_message = message
        self.obj = obj
        self.privilege = privilege  # NoPermission: the privilege id vCenter named
        self.lacks_resources = lacks_resources  # an InsufficientResourcesFault (GPU, memory, host capacity...)
        prefix = f"{obj}: " if obj else ""
        super().__init__(f"{prefix}{fault_type}: {message}")

    def about(self, obj: str) -> VsphereFault:
        """The same fault naming the object it was about (a task's fault names none)."""
        return VsphereFault(self.fault_type, self.fault_message, obj, self.privilege,
                            lacks_resources=self.lacks_resources)


class NotFound(VgpuctlError):
    """A named object (host, VM, template, GPU) does not exist."""


class DriftError(VgpuctlError):
    """An object changed between plan and apply; that object is not touched."""


class ChangedMeanwhile(DriftError):
    """Something else changed a VM between two steps of this run on it (its changeVersion moved since this run's
    last step): its next step (power-on, removal) is not taken."""


class SshError(VgpuctlError):
    """An ESXi shell command failed: connection, authentication, timeout or non-zero exit."""

    def __init__(self, message: str, host: str | None = None, exit_status: int | None = None, stderr: str = ""):
        self.host = host
        self.reason = message  # without the host's name
        self.exit_status = exit_status
        self.stderr = stderr
        super().__init__(f"{host}: {message}" if host else message)


class OutputFormatError(VgpuctlError):
    """A command's output does not look like the tool's documented format."""


class SshHostKeyError(SshError):
    """The host's SSH key is unknown or does not match known_hosts."""


class SshAuthError(SshError):
    """The SSH server refused the login (user, key or password; lockdown mode on ESXi)."""


class SshUnreachable(SshError):
    """No SSH connection: refused (the SSH service stopped), timed out, no route."""


class GuestError(VgpuctlError):
    """The guest playbooks failed on at least one host."""


class Interrupted(VgpuctlError):
    """Ctrl-C: the run stopped starting new work."""

    exit_code = 130


class RestError(VgpuctlError):
    """A vSphere Automation REST call failed: 401 (login or session), 404 (no such object), 5xx (server)."""

    def __init__(self, message: str, status: int | None = None, method: str = "", path: str = ""):
        self.status = status
        self.method = method
        self.path = path
        super().__init__(message)
