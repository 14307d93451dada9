"""Host software through vCenter: a host's installed packages (SOAP), and vSphere Lifecycle Manager's cluster image
over the vSphere Automation REST API (https://developer.broadcom.com/xapis/vsphere-automation-api/latest/esx/):

- is the cluster managed by an image: `GET /api/esx/settings/clusters/{cluster}/enablement/software` (`enabled`);
- the image: `GET .../clusters/{cluster}/software` (SoftwareInfo: `base_image`, `components`);
- depots: `GET /api/esx/settings/depots/offline` and `.../depots/online`; `POST .../depots/offline?vmw-task=true`
  (CreateSpec `source_type` PULL, `location`: an offline bundle imported from a URL), or `POST .../depots/online`
  and `POST /api/esx/settings/depots?action=sync&vmw-task=true` (an online depot's index.xml);
- their content: `GET /api/esx/settings/depot-content/components` (Summary: `name`, `display_name`, `vendor`,
  `versions`);
- a draft with the component: `POST .../clusters/{cluster}/software/drafts`, `PATCH
  .../drafts/{draft}/software/components` (Components.UpdateSpec `components_to_set`), `POST
  .../drafts/{draft}?action=commit&vmw-task=true`;
- compliance: `POST .../software?action=scan&vmw-task=true`, then `GET .../software/compliance`
  (ClusterCompliance: `hosts`);
- remediation of one host: `POST .../clusters/{cluster}/software?action=apply&vmw-task=true` (Software.ApplySpec:
  `hosts` limited to that HostSystem, `accept_eula`);
- a task: `GET /api/cis/tasks/{task}` (`status` PENDING, RUNNING, BLOCKED, SUCCEEDED, FAILED, CANCELED; `result`;
  `error`).

One REST login per vCenter session (`client_for`), logged out with it. Failures are RestError (HTTP) or LifecycleError
(a task that failed, with vCenter's message).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from vgpuctl.errors import VgpuctlError
from vgpuctl.lazyclass import dataclass
from vgpuctl.vsphere.host import object_props
from vgpuctl.vsphere.hostaccess import software_packages

if TYPE_CHECKING:
    from vgpuctl.vsphere.rest import RestClient
    from vgpuctl.vsphere.session import Session

log = logging.getLogger(__name__)

SETTINGS = "/api/esx/settings"
TASKS = "/api/cis/tasks"
POLL_S = 0.5
_CLIENTS_LOCK = threading.Lock()


class LifecycleError(VgpuctlError):
    """A vSphere Lifecycle Manager task failed (its message is vCenter's)."""


@dataclass(frozen=True)
class Component:
    """A component a depot holds, or an image names."""

    name: str
    version: str
    vendor: str = ""
    display_name: str = ""


@dataclass(frozen=True)
class ClusterImage:
    """A cluster's image state: whether an image manages it, its components, the depots vCenter has and what
    they hold."""

    managed: bool
    components: tuple[Component, ...] = ()
    depots: tuple[str, ...] = ()  # locations of the offline and online depots vCenter has
    content: tuple[Component, ...] = ()  # every version of every component those depots hold


# ------------------------------------------------------------------------------------------ SOAP


def host_software(session: Session, moid: str, host: str) -> tuple[list[tuple[str, str, str]], str]:
    """The host's installed packages as (name, version, vendor), and the moid of its cluster ("" standalone): one
    property read and HostImageConfigManager.FetchSoftwarePackages (privilege Host.Config.Image)."""
    props = object_props(session, moid, "HostSystem", ["configManager.imageConfigManager", "parent"])
    manager, parent = props.get("configManager.imageConfigManager"), props.get("parent")
    packages = software_packages(session, host, str(manager._moId) if manager is not None else "")
    cluster = str(parent._moId) if parent is not None and "ClusterComputeResource" in type(parent).__name__ else ""
    return [(p.name, p.version, p.vendor) for p in packages], cluster


# ------------------------------------------------------------------------------------------ REST


def offline_bundle(location: str) -> bool:
    """A depot URL that names an offline bundle (imported into vCenter), not an online depot's index.xml."""
    return location.lower().endswith(".zip")


def client_for(session: Session) -> Lifecycle:
    """The session's Lifecycle client: one REST login, logged out when the session closes."""
    def make() -> Lifecycle:
        client = Lifecycle(_rest(session))
        session.at_close(client.close)
        return client

    with _CLIENTS_LOCK:  # hosts are read in parallel: one login for all of them
        return session.kept("lifecycle", make)


def _rest(session: Session) -> RestClient:
    from vgpuctl.vsphere.rest import RestClient

    return RestClient(session.settings)


class Lifecycle:
    """vSphere Lifecycle Manager's image of clusters, over one REST session (thread-safe: hosts are read in
    parallel; a cluster's image state is read once and kept)."""

    def __init__(self, rest: RestClient):
        self.rest = rest
        self._lock = threading.Lock()
        self._images: dict[str, ClusterImage] = {}

    def close(self) -> None:
        self.rest.close()

    def _get(self, path: str) -> Any:
        with self._lock:
            return self.rest.request("GET", path)

    def _send(self, method: str, path: str, body: Any = None) -> Any:
        with self._lock:
            return self.rest.request(method, path, body)

    # ------------------------------------------------------------------ reading

    def image(self, cluster: str, fresh: bool = False) -> ClusterImage:
        """The cluster's image state (kept after the first read unless `fresh`)."""
        with self._lock:
            found = self._images.get(cluster)
        if found is not None and not fresh:
            return found
        state = self._read_image(cluster)
        with self._lock:
            self._images[cluster] = state
        return state

    def _read_image(self, cluster: str) -> ClusterImage:
        base = f"{SETTINGS}/clusters/{quote(cluster)}"
        enabled = self._get(f"{base}/enablement/software") or {}
        if not (isinstance(enabled, dict) and enabled.get("enabled")):
            return ClusterImage(False)
        info = self._get(f"{base}/software") or {}
        components = tuple(_component(str(name), c or {}) for name, c in sorted((info.get("components") or {}).items()))
        return ClusterImage(True, components, self.depots(), self.content())

    def depots(self) -> tuple[str, ...]:
        """Locations of the offline and online depots vCenter has."""
        out = []
        for kind in ("offline", "online"):
            found = self._get(f"{SETTINGS}/depots/{kind}") or {}
            out += [str(d.get("location", "")) for d in found.values() if isinstance(d, dict)]
        return tuple(sorted(set(out)))

    def content(self) -> tuple[Component, ...]:
        """Every version of every component the depots vCenter has hold."""
        out = []
        for s in self._get(f"{SETTINGS}/depot-content/components") or []:
            for v in s.get("versions") or []:
                out.append(Component(str(s.get("name", "")), str(v.get("version", "")), str(s.get("vendor", "")),
                                     str(s.get("display_name", ""))))
        return tuple(out)

    def compliance(self, cluster: str, timeout_s: float) -> dict[str, str]:
        """Host moid -> COMPLIANT / NON_COMPLIANT / ..., after a scan."""
        base = f"{SETTINGS}/clusters/{quote(cluster)}/software"
        self.wait(self._send("POST", f"{base}?action=scan&vmw-task=true"), timeout_s, "scan")
        hosts = (self._get(f"{base}/compliance") or {}).get("hosts") or {}
        return {str(k): str((v or {}).get("status", "")) for k, v in hosts.items()}

    # ------------------------------------------------------------------ changing

    def import_depot(self, location: str, timeout_s: float) -> None:
        """Import an offline bundle from a URL (a PULL), or add an online depot and sync it (an index.xml URL)."""
        if offline_bundle(location):
            body = {"source_type": "PULL", "location": location, "description": "vgpuctl: NVIDIA vGPU Manager"}
            self.wait(self._send("POST", f"{SETTINGS}/depots/offline?vmw-task=true", body), timeout_s, "depot import")
        else:
            online = {"location": location, "enabled": True, "description": "vgpuctl: NVIDIA vGPU Manager"}
            self._send("POST", f"{SETTINGS}/depots/online", online)
            self.wait(self._send("POST", f"{SETTINGS}/depots?action=sync&vmw-task=true"), timeout_s, "depot sync")
        with self._lock:
            self._images.clear()

    def set_component(self, cluster: str, component: Component, timeout_s: float) -> None:
        """The cluster's image with the component at its version: a draft, the component set, the commit."""
        base = f"{SETTINGS}/clusters/{quote(cluster)}/software/drafts"
        draft = str(self._send("POST", base))
        try:
            self._send("PATCH", f"{base}/{quote(draft)}/software/components",
                       {"components_to_set": {component.name: component.version}})
            commit = f"{base}/{quote(draft)}?action=commit&vmw-task=true"
            self.wait(self._send("POST", commit, {"message": f"vgpuctl: {component.name} {component.version}"}),
                      timeout_s, "commit")
        except VgpuctlError:
            self._discard(f"{base}/{quote(draft)}")
            raise
        with self._lock:
            self._images.pop(cluster, None)

    def _discard(self, draft: str) -> None:
        try:
            self._send("DELETE", draft)
        except VgpuctlError as err:  # the draft's own failure is the one that matters
            log.debug("could not delete draft %s: %s", draft, err)

    def remediate(self, cluster: str, host: str, timeout_s: float,
                  progress: Callable[[str], None] | None = None) -> None:
        """Apply the cluster's image to one host (Software.ApplySpec `hosts`: that host only) and wait."""
        body = {"hosts": [host], "accept_eula": True}
        task = self._send("POST", f"{SETTINGS}/clusters/{quote(cluster)}/software?action=apply&vmw-task=true", body)
        self.wait(task, timeout_s, "remediation", progress)

    def wait(self, task: Any, timeout_s: float, what: str, progress: Callable[[str], None] | None = None) -> Any:
        """Poll a task until it ends; its result, or LifecycleError with vCenter's message."""
        task_id = str(task)
        deadline = time.monotonic() + timeout_s
        while True:
            info = self._get(f"{TASKS}/{quote(task_id, safe=':')}") or {}
            status = str(info.get("status", ""))
            if status == "SUCCEEDED":
                return info.get("result")
            if status in ("FAILED", "CANCELED"):
                raise LifecycleError(f"the {what} task failed: {task_message(info)}")
            if time.monotonic() >= deadline:
                raise LifecycleError(f"the {what} task did not end within {timeout_s:.0f} s (task {task_id})")
            if progress is not None:
                progress(f"{what}: {status.lower() or 'waiting'}")
            time.sleep(POLL_S)


def _component(name: str, info: dict[str, Any]) -> Component:
    """A component of SoftwareInfo.components: its version and its details' vendor and display name."""
    details = info.get("details") or {}
    return Component(name, str(info.get("version", "")), str(details.get("vendor", "")),
                     str(details.get("display_name", "")))


def task_message(info: dict[str, Any]) -> str:
    """A failed task's message: its error's messages, else its status."""
    error = info.get("error") or {}
    messages = error.get("messages") if isinstance(error, dict) else None
    texts = [str(m.get("default_message", "")) for m in messages or [] if isinstance(m, dict)]
    return "; ".join(t for t in texts if t) or str(info.get("status", "unknown"))
