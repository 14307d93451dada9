"""vSphere Automation REST: one login per run, VM classes, supervisor namespaces and supervisor clusters.

Login is `POST /api/session` (vCenter 7.0 U2 and later), falling back to `POST /rest/com/vmware/cis/session`
when the server does not serve the first (govmomi's simulator); the token travels as `vmware-api-session-id`.
TLS follows the SOAP session's rules (vgpuctl.vsphere.session.ConnectionSettings): verified against the system
CAs or `ca_file`, or pinned by sha256 thumbprint, or off with `insecure`. An expired session is renewed once.
Failures come out as one line each: RestError for HTTP errors (401, 404, 5xx, others), TlsError and
ConnectionFailure for the transport.

requests is imported lazily: importing this module stays cheap for the CLI.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from vgpuctl import trace
from vgpuctl.errors import ConnectionFailure, RestError, TlsError, UsageError
from vgpuctl.records.classes import ClassState, NamespaceState, SupervisorState
from vgpuctl.vsphere.session import ConnectionSettings, normalize_url, sha256_colon

if TYPE_CHECKING:
    import requests

log = logging.getLogger(__name__)

SESSION_HEADER = "vmware-api-session-id"
API_SESSION = "/api/session"
LEGACY_SESSION = "/rest/com/vmware/cis/session"
VM_CLASSES = "/api/vcenter/namespace-management/virtual-machine-classes"
NAMESPACES = "/api/vcenter/namespaces/instances"
# The VM class memory field: the vSphere Automation API reference's CreateSpec and Info (v7.0 U2 to 8.0 U2) and
# govmomi's CreateSpec spell it memory_MB; govmomi's Info and other Broadcom pages memory_mb. Sent as the first,
# read back, and sent again as the second when the server did not take it (RestClient._check_memory).
MEMORY_FIELDS = ("memory_MB", "memory_mb")
SUPERVISOR_CLUSTERS = "/api/vcenter/namespace-management/clusters"


def rest_base_url(settings: ConnectionSettings) -> str:
    """`https://vc.example.com/sdk` -> `https://vc.example.com` (the REST API lives beside /sdk)."""
    parts = urlsplit(normalize_url(settings.url))
    return f"{parts.scheme}://{parts.netloc}"


class RestClient:
    """A logged-in REST session. Use as a context manager (logs out on exit): `with RestClient(s) as rest:`."""

    def __init__(self, settings: ConnectionSettings, http: requests.Session | None = None):
        import requests

        self.settings = settings
        self.base = rest_base_url(settings)
        if self.base.startswith("http:") and not settings.insecure:
            raise UsageError(f"{self.base} is plain http: the password would cross the network in clear; use https")
        self.http = http or requests.Session()
        self.http.headers["Accept"] = "application/json"
        # Passed with every request too: a session-wide `verify` loses to REQUESTS_CA_BUNDLE in requests.
        self.verify = self.http.verify = _verify(settings)
        if self.verify is False:  # the CLI warns once about --insecure; no warning per request
            import urllib3

            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        if settings.pinned_sha256 and not settings.insecure:
            self.http.mount("https://", _pinned_adapter(settings.pinned_sha256))
        self.round_trips = 0
        self.session_path = API_SESSION
        self.memory_field = MEMORY_FIELDS[0]  # the one the server took last (create_vm_class reads it back)
        self._token: str | None = None
        self._login()

    def __enter__(self) -> RestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._token is None:
            return
        try:
            self._send("DELETE", self.session_path)
        except Exception as err:  # a failed logout must not hide the run's own result
            log.debug("REST logout failed: %s", err)
        self._token = None
        self.http.close()

    # ------------------------------------------------------------------------------------------ VM classes

    def list_vm_classes(self) -> dict[str, ClassState]:
        return {c.name: c for c in (class_from_json(d) for d in self.request("GET", VM_CLASSES) or [])}

    def get_vm_class(self, name: str) -> ClassState:
        return class_from_json(self.request("GET", f"{VM_CLASSES}/{quote(name)}") or {"id": name})

    def create_vm_class(self, want: ClassState) -> None:
        self.request("POST", VM_CLASSES, class_body(want, create=True, memory_field=self.memory_field))
        self._check_memory(want, ())

    def update_vm_class(self, want: ClassState, removed_keys: Iterable[str] = ()) -> None:
        path = f"{VM_CLASSES}/{quote(want.name)}"
        self.request("PATCH", path, class_body(want, removed_keys=removed_keys, memory_field=self.memory_field))
        self._check_memory(want, removed_keys)

    def _check_memory(self, want: ClassState, removed_keys: Iterable[str]) -> None:
        """Read the class back: the API reference spells the memory `memory_MB`, govmomi's Info and some of
        Broadcom's pages `memory_mb`, and a server may ignore the spelling it does not know. When the memory
        read back is not what was sent, send the class again with the other spelling, and keep that one for
        this session; a class that still reads back wrong is an error."""
        if self.get_vm_class(want.name).memory_mb == want.memory_mb:
            return
        other = MEMORY_FIELDS[1 - MEMORY_FIELDS.index(self.memory_field)]
        log.info("VM class %s: memory not taken as %s; sending %s", want.name, self.memory_field, other)
        body = class_body(want, removed_keys=removed_keys, memory_field=other)
        self.request("PATCH", f"{VM_CLASSES}/{quote(want.name)}", body)
        have = self.get_vm_class(want.name).memory_mb
        if have != want.memory_mb:
            raise RestError(f"VM class {want.name}: memory sent as {want.memory_mb} MB reads back as {have} MB with "
                            f"either spelling of the field ({', '.join(MEMORY_FIELDS)})", 0, "PATCH",
                            f"{VM_CLASSES}/{want.name}")
        self.memory_field = other

    def delete_vm_class(self, name: str) -> None:
        self.request("DELETE", f"{VM_CLASSES}/{quote(name)}")

    # ---------------------------------------------------------------------------------------- namespaces

    def list_namespaces(self) -> list[str]:
        return sorted(str(s["namespace"]) for s in self.request("GET", NAMESPACES) or [])

    def get_namespace(self, name: str) -> NamespaceState:
        return namespace_from_json(name, self.request("GET", f"{NAMESPACES}/{quote(name)}") or {})

    def set_namespace_classes(self, ns: NamespaceState, vm_classes: list[str]) -> None:
        """Replace the namespace's VM service spec with these classes and its current content libraries."""
        body = {"vm_service_spec": {"vm_classes": list(vm_classes), "content_libraries": list(ns.content_libraries)}}
        self.request("PATCH", f"{NAMESPACES}/{quote(ns.name)}", body)

    def supervisor_clusters(self) -> dict[str, str]:
        """moid -> cluster name (the moid again when the server does not say) of every supervisor cluster."""
        out = {}
        for c in self.request("GET", SUPERVISOR_CLUSTERS) or []:
            moid = str(c.get("cluster", ""))
            out[moid] = str(c.get("cluster_name") or moid)
        return out

    def supervisor_services(self, cluster: str) -> dict[str, str]:
        """The Supervisor Services a supervisor cluster (moid) runs: service id -> its version (current, else
        desired). A vCenter before 7.0 U3 has no such list (404): none."""
        try:
            listed = self.request("GET", f"{SUPERVISOR_CLUSTERS}/{quote(cluster)}/supervisor-services") or []
        except RestError as err:
            if err.status == 404:
                return {}
            raise
        return {str(s.get("supervisor_service")): str(s.get("current_version") or s.get("desired_version") or "")
                for s in listed if s.get("supervisor_service")}

    def observe(self, namespaces: Iterable[str] | None = None) -> SupervisorState:
        """VM classes, supervisor clusters and namespaces (all, or only those named that exist)."""
        names = self.list_namespaces()
        if namespaces is not None:
            wanted = set(namespaces)
            names = [n for n in names if n in wanted]
        return SupervisorState(
            classes=self.list_vm_classes(),
            namespaces={n: self.get_namespace(n) for n in names},
            supervisor_clusters=self.supervisor_clusters(),
        )

    # --------------------------------------------------------------------------------------------- HTTP

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One call; on 401 log in again once and retry (an expired session), then fail with RestError."""
        response = self._send(method, path, body)
        if response.status_code == 401:
            log.info("REST session expired; logging in again")
            self._login()
            response = self._send(method, path, body)
        _raise_for_status(response, method, path)
        return _json(response)

    def _send(self, method: str, path: str, body: Any = None, auth: tuple[str, str] | None = None) -> Any:
        import requests

        headers = {SESSION_HEADER: self._token} if self._token and auth is None else {}
        self.round_trips += 1
        try:
            return self.http.request(method, self.base + path, json=body, headers=headers, auth=auth,
                                     verify=self.verify, timeout=self.settings.timeout_s)
        except requests.exceptions.SSLError as err:
            raise _tls_error(self.base, err) from err
        except requests.exceptions.RequestException as err:
            raise ConnectionFailure(f"cannot reach the vSphere REST API at {self.base}: {_reason(err)}") from err

    def _login(self) -> None:
        self._token = None
        auth = (self.settings.username, self.settings.password)
        response = self._send("POST", API_SESSION, auth=auth)
        self.session_path = API_SESSION
        if response.status_code in (404, 405):  # servers before 7.0 U2, and govmomi's simulator
            response = self._send("POST", LEGACY_SESSION, auth=auth)
            self.session_path = LEGACY_SESSION
        if response.status_code == 401:
            raise RestError(f"REST login to {self.base} as {self.settings.username!r} failed: wrong user name or "
                            "password (401)", 401, "POST", self.session_path)
        _raise_for_status(response, "POST", self.session_path)
        token = _json(response)
        if isinstance(token, dict):
            token = token.get("value")
        if not isinstance(token, str) or not token:
            raise RestError(f"REST login to {self.base}: the server answered no session token", response.status_code,
                            "POST", self.session_path)

        trace.add_secret(self.settings.password)
        trace.add_secret(token)  # a secret like the password: redacted from traces, kept out of guest runs
        self._token = token


# ------------------------------------------------------------------------------------------------- JSON


def class_body(want: ClassState, *, create: bool = False, removed_keys: Iterable[str] = (),
               memory_field: str = "memory_MB") -> dict[str, Any]:
    """The REST create/update spec of a class: devices.vgpu_devices, and extraConfig in config_spec. The memory
    goes under `memory_field` (MEMORY_FIELDS: the sources disagree on its spelling)."""
    body: dict[str, Any] = {
        "cpu_count": want.cpus,
        memory_field: want.memory_mb,
        "cpu_reservation": want.cpu_reservation,
        "memory_reservation": want.memory_reservation,
        "devices": {"vgpu_devices": [{"profile_name": p} for p in want.vgpus]},
    }
    if want.direct_path:
        body["devices"]["direct_path_io_devices"] = [_direct_path(d) for d in want.direct_path]
    if create:
        body = {"id": want.name, **body}
    # An option with an empty value removes the key from the VM's configuration (vSphere's extraConfig rule).
    options = {**{k: "" for k in removed_keys}, **want.extra_config}
    if options:
        body["config_spec"] = {
            "_typeName": "VirtualMachineConfigSpec",
            "extraConfig": [
                {"_typeName": "OptionValue", "key": k, "value": {"_typeName": "string", "_value": v}}
                for k, v in sorted(options.items())
            ],
        }
    return body


def class_from_json(d: dict[str, Any]) -> ClassState:
    devices = d.get("devices") or {}
    memory = next((d[k] for k in MEMORY_FIELDS if d.get(k) is not None), None)
    return ClassState(
        name=str(d.get("id", "")),
        cpus=int(d.get("cpu_count") or 0),
        memory_mb=int(memory or 0),
        cpu_reservation=int(d.get("cpu_reservation") or 0),
        memory_reservation=int(d.get("memory_reservation") or 0),
        vgpus=[str(v.get("profile_name")) for v in devices.get("vgpu_devices") or []],
        extra_config=_extra_config(d.get("config_spec")),
        direct_path=[f"{int(v.get('vendor_id') or 0):04x}:{int(v.get('device_id') or 0):04x}"
                     + (f"@{v['custom_label']}" if v.get("custom_label") else "")
                     for v in devices.get("direct_path_io_devices") or []],
    )


def _direct_path(key: str) -> dict[str, Any]:
    """`vvvv:dddd[@label]` -> a DynamicDirectPathIODevice of the class spec."""
    ids, _, label = key.partition("@")
    vendor, device = (int(x, 16) for x in ids.split(":"))
    return {"vendor_id": vendor, "device_id": device, **({"custom_label": label} if label else {})}


def _extra_config(spec: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    if not isinstance(spec, dict):
        return out
    for option in spec.get("extraConfig") or spec.get("extra_config") or []:
        value = option.get("value")
        if isinstance(value, dict):
            value = value.get("_value")
        if option.get("key") and value not in (None, ""):
            out[str(option["key"])] = str(value)
    return out


def namespace_from_json(name: str, d: dict[str, Any]) -> NamespaceState:
    vm_service = d.get("vm_service_spec") or {}
    return NamespaceState(
        name=name,
        cluster=str(d.get("cluster", "")),
        vm_classes=[str(c) for c in vm_service.get("vm_classes") or []],
        content_libraries=[str(c) for c in vm_service.get("content_libraries") or []],
    )


def _json(response: Any) -> Any:
    if not response.content or not response.content.strip():
        return None
    try:
        return response.json()
    except ValueError:
        return None


# ----------------------------------------------------------------------------------------------- errors


def _raise_for_status(response: Any, method: str, path: str) -> None:
    status = response.status_code
    if status < 400:
        return
    detail = _server_message(response)
    what = {401: "unauthorized (the session was refused)", 403: "forbidden (the user lacks a privilege)",
            404: "not found"}.get(status, "server error" if status >= 500 else "refused")
    text = f"vSphere REST {method} {path}: {status} {what}" + (f": {detail}" if detail else "")
    raise RestError(text, status, method, path)


def _server_message(response: Any) -> str:
    """The server's own explanation: `messages[].default_message` (/api), `value.messages` (/rest) or text."""
    data = _json(response)
    if isinstance(data, dict):
        value = data.get("value")
        messages = data.get("messages") or (value.get("messages") if isinstance(value, dict) else None) or []
        texts = [str(m.get("default_message", "")) for m in messages if isinstance(m, dict)]
        texts = [t for t in texts if t]
        if texts:
            return "; ".join(texts)
        return str(data.get("error_type") or data.get("type") or "")
    text = (response.text or "").strip()
    return text.splitlines()[0][:200] if text and not text.startswith("<") else ""


def _reason(err: Exception) -> str:
    text = str(err)
    if "Connection refused" in text:
        return "connection refused"
    if "timed out" in text.lower():
        return "timed out"
    return text.splitlines()[0][:200] if text else type(err).__name__


def _tls_error(base: str, err: Exception) -> TlsError:
    text = str(err)
    if "ingerprint" in text:  # urllib3: "Fingerprints did not match. Expected ..., got ..."
        return TlsError(f"TLS thumbprint mismatch for {base}: {_fingerprints(text)}")
    return TlsError(f"TLS certificate of {base} is not trusted ({_reason(err)}); give a CA file, pin its sha256 "
                    "thumbprint, or use --insecure")


def _fingerprints(text: str) -> str:
    import re

    found = re.findall(r"[0-9a-fA-F]{64}", text.replace(":", ""))
    if len(found) >= 2:
        return f"expected {sha256_colon(found[0].lower())}, server presented {sha256_colon(found[1].lower())}"
    return text.splitlines()[0][:200]


def _verify(settings: ConnectionSettings) -> bool | str:
    if settings.insecure or settings.pinned_sha256:
        return False  # pinning replaces CA verification, as in the SOAP session
    return settings.ca_file or True


def _pinned_adapter(sha256_hex: str) -> Any:
    from requests.adapters import HTTPAdapter

    class PinnedAdapter(HTTPAdapter):
        """Every new TLS connection compares the server certificate's sha256 with the pinned one (urllib3)."""

        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            kwargs["assert_fingerprint"] = sha256_hex
            super().init_poolmanager(*args, **kwargs)

    return PinnedAdapter()
