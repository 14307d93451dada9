"""The NVIDIA vGPU Manager (the host driver) a host runs, and where a new one comes from.

Inventory: `vgpu_manager: {version: 580.65.05, source: {datastore: datastore1, path: nvidia/bundle.zip} or {url:
https://...}, component: NVD-AIE-800, install: component | vib}` on a cluster or host entry. What the host has: its
installed packages (HostImageConfigManager.FetchSoftwarePackages, NVIDIA's manager VIB among them), the version its
GPUs' driver reports (`nvidia-smi --query-gpu=driver_version`), and whether its cluster is managed by a vSphere
Lifecycle Manager image (vgpuctl.vsphere.lifecycle).

A change installs the version in maintenance mode, then the host reboots, whatever esxcli's `Reboot Required` says
(it prints `false` for NVIDIA's component; NVIDIA Virtual GPU Software User Guide, "Installing the NVIDIA Virtual GPU
Manager Package for vSphere": reboot the host after the install):
- a cluster managed by an image: through vLCM over the vSphere Automation API: the depot imported into vCenter
  from `source.url`, a software draft of the cluster image with NVIDIA's component at that version, its commit,
  and an apply limited to this one host (vLCM installs and reboots it; vgpuctl has emptied it and put it in
  maintenance mode first, and takes it out again);
- hosts managed by baselines or standalone: in the ESXi shell, `esxcli software component apply -d DEPOT -n
  COMPONENT` (or `esxcli software vib install -d DEPOT`) from the bundle on a datastore (/vmfs/volumes/DS/PATH) or a
  depot URL, then vgpuctl's reboot.
Verified from the host's package list after the reboot. The depot is read at plan time (esxcli's `software sources
component list`, or what vCenter's depots hold): a depot that cannot be read, no component of NVIDIA's at the
version, or a named component that is not NVIDIA's is a plan error. Which VMs run on the host during the change,
and which guest drivers they need before and after, is the upgrade window's (vgpuctl.hosts.window).
docs/host-changes.md, "vgpu_manager".
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from pydantic import field_validator, model_validator

from vgpuctl.domain import ChangeKind, CheckStatus, Phase
from vgpuctl.errors import SshError, VgpuctlError
from vgpuctl.esxi import software as shell_software
from vgpuctl.lazyclass import dataclass
from vgpuctl.model import HostChange, ObservedHost
from vgpuctl.releases import driver_version, is_version, manager_in, manager_release
from vgpuctl.settings.base import (
    ApplyStep,
    Exported,
    Finding,
    HostPlan,
    HostSetting,
    HostWriter,
    PlanInput,
    PrivilegeNeed,
    PrivilegePlace,
    Reads,
    SettingPrivileges,
    SettingState,
    host_change,
)
from vgpuctl.settings.facts import (
    GUEST_DRIVERS,
    RUNNING_MANAGER,
    ApiFact,
    EntryShellFact,
    HostApi,
    HostFacts,
    Runner,
    running_manager,
)
from vgpuctl.strictmodel import Lax, StrictModel
from vgpuctl.vsphere.lifecycle import Component, client_for, host_software, offline_bundle
from vgpuctl.vsphere.tasks import in_flight

VGPU_MANAGER = ChangeKind("vgpu-manager")
MANAGER_STEP = ApplyStep("vgpu-manager", 90)  # last: a vLCM remediation reboots the host after every other write
NVIDIA = "NVIDIA"
NONE = "none"
DEPOT_CHECK = "host.vgpu-manager-depot"
RELEASE_CHECK = "host.vgpu-manager-release"
REMEDIATION_S = 1800.0  # a vLCM remediation may take this long beyond the host's reboot timeout


class Install(StrEnum):
    """How the ESXi shell installs the bundle: as a component (ESXi 7.0 and later) or its VIBs."""

    COMPONENT = "component"
    VIB = "vib"


class Route(StrEnum):
    """Who installs it: vLCM (the cluster's image) or esxcli in the host's shell."""

    LIFECYCLE = "vlcm"
    SHELL = "esxcli"


class ManagerSource(StrictModel):
    """Where the version comes from: an offline bundle on a datastore, or a depot URL (an online depot's
    index.xml, or an offline bundle .zip vCenter or the host can download)."""

    datastore: str | None = None
    path: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _one(self) -> ManagerSource:
        if (self.url is None) == (self.datastore is None or self.path is None) or (
                self.url is not None and (self.datastore or self.path)):
            raise ValueError("give either url, or datastore and path")
        if self.url is not None and not self.url.startswith(("https://", "http://")):
            raise ValueError(f"url {self.url!r}: expected an http(s) URL")
        if self.path is not None and (self.path.startswith("/") or ".." in self.path.split("/")
                                      or not self.path.lower().endswith(".zip")):
            raise ValueError(f"path {self.path!r}: expected an offline bundle .zip below the datastore's root")
        if self.datastore is not None and (not self.datastore or "/" in self.datastore):
            raise ValueError(f"datastore {self.datastore!r}: expected a datastore name")
        return self

    @property
    def location(self) -> str:
        """What esxcli takes: the bundle's absolute datastore path, or the URL."""
        return self.url or f"/vmfs/volumes/{self.datastore}/{self.path}"


class ManagerSpec(StrictModel):
    version: str
    source: ManagerSource | None = None  # needed only where the host must change
    component: str | None = None  # the component's name in the depot (default: NVIDIA's vGPU Manager component)
    install: Lax[Install] = Install.COMPONENT

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not is_version(v):
            raise ValueError(f"{v!r} is not a driver version (three digits, then one or two dotted numbers: "
                             "580.65.05)")
        return v


# ------------------------------------------------------------------------------------------ facts


@dataclass(frozen=True)
class Offered:
    """A component a depot holds."""

    name: str
    version: str
    vendor: str


@dataclass(frozen=True)
class Software:
    """The host's vGPU Manager package and its cluster's vLCM image: whether an image manages the cluster, the
    NVIDIA components the image names, the depots vCenter has and what they hold."""

    installed: str | None  # driver version of the installed manager VIB (None: none)
    package: str  # "NVD-AIE_ESXi_8.0.0_Driver 580.65.05-1OEM.800.1.0.20613240", "" without one
    cluster: str  # moid, "" for a standalone host
    image: bool = False
    image_components: tuple[Offered, ...] = ()
    depots: tuple[str, ...] = ()
    content: tuple[Offered, ...] = ()
    lifecycle_error: str | None = None  # why the cluster's image could not be read


def _read_software(api: HostApi) -> Software:
    packages, cluster = host_software(api.session, api.moid, api.state.name)
    found = manager_in([(n, v) for n, v, _ in packages])
    installed = driver_version(found[1]) if found is not None else None
    package = f"{found[0]} {found[1]}" if found is not None else ""
    if not cluster:
        return Software(installed, package, cluster)
    try:
        img = client_for(api.session).image(cluster)
    except VgpuctlError as err:
        return Software(installed, package, cluster, lifecycle_error=str(err))
    return Software(installed, package, cluster, img.managed,
                    tuple(Offered(c.name, c.version, c.vendor) for c in img.components), img.depots,
                    tuple(Offered(c.name, c.version, c.vendor) for c in img.content))


def _decode_software(d: dict[str, Any]) -> Software:
    offered = ("image_components", "content")
    return Software(**{**d, **{k: tuple(Offered(**o) for o in d.get(k) or ()) for k in offered},
                       "depots": tuple(d.get("depots") or ())})


SOFTWARE: ApiFact[Software] = ApiFact("vgpu_software", "the installed vGPU Manager and the cluster's image",
                                      _read_software, when_set=True, decode=_decode_software)


@dataclass(frozen=True)
class DepotRead:
    """A depot as esxcli on the host read it: its components, or why it could not be read."""

    location: str
    components: tuple[Offered, ...] = ()
    error: str | None = None


def _depot_command(spec: object) -> str | None:
    entry = SETTING.of(spec)
    if entry is None or entry.source is None:
        return None
    return shell_software.component_list(entry.source.location)


def _read_depot(run: Runner, command: str) -> DepotRead:
    location = command.rsplit(" ", 1)[-1].strip("'")
    try:
        rows = shell_software.parse_component_list(run(command))
    except SshError as err:
        if err.exit_status is None:
            raise  # the shell itself failed, not the depot
        return DepotRead(location, error=(err.stderr or err.reason).strip().splitlines()[-1])
    return DepotRead(location, tuple(Offered(r.name, r.version, r.vendor) for r in rows))


DEPOT: EntryShellFact[DepotRead] = EntryShellFact(
    "vgpu_depot", _depot_command, _read_depot,
    decode=lambda d: DepotRead(d["location"], tuple(Offered(**o) for o in d.get("components") or ()), d.get("error")),
)


# ------------------------------------------------------------------------------------------ the change


@dataclass(frozen=True)
class ManagerTarget:
    """A change's new value: the version, and how apply installs it (its text is the version)."""

    version: str
    route: Route
    location: str
    component: str = ""  # the component's name ("" for vLCM before the depot is imported: looked up then)
    component_version: str = ""
    install: Install = Install.COMPONENT
    cluster: str = ""  # vLCM: the cluster's moid
    timeout_s: float = REMEDIATION_S

    def __str__(self) -> str:
        return self.version


def _pick(offered: Sequence[Offered], spec: ManagerSpec, where: str) -> tuple[Offered | None, str]:
    """NVIDIA's component at the wanted version among what a depot holds, or why there is none."""
    named = [o for o in offered if spec.component is None or o.name == spec.component]
    if spec.component is not None and not named:
        return None, f"{where} holds no component {spec.component}"
    foreign = [o for o in named if o.vendor != NVIDIA]
    if spec.component is not None and foreign and len(foreign) == len(named):
        return None, f"component {spec.component} in {where} is {foreign[0].vendor}'s, not NVIDIA's"
    mine = [o for o in named if o.vendor == NVIDIA and driver_version(o.version)]
    match = [o for o in mine if driver_version(o.version) == spec.version]
    if match:
        return match[0], ""
    held = ", ".join(sorted({f"{o.name} {o.version}" for o in mine})) or "no NVIDIA component"
    return None, f"{where} does not hold NVIDIA's vGPU Manager {spec.version} (it holds {held})"


# What vLCM's REST operations ask, as the vSphere Automation API reference names them for each: a draft of the
# cluster's software, its components and its commit VcIntegrity.lifecycleSoftwareSpecification.Write; the apply
# VcIntegrity.lifecycleSoftwareRemediation.Write with VcIntegrity.lifecycleHealth.Read, all on the cluster; adding
# an online depot ("Esx Settings Depots Online create") VcIntegrity.lifecycleSettings.Write, an operation of
# vCenter's own. The reference names no privilege for importing an offline bundle from a URL: not checked.
IMAGE_CLUSTER_PRIVILEGES = ("VcIntegrity.lifecycleSoftwareSpecification.Write",
                            "VcIntegrity.lifecycleSoftwareRemediation.Write", "VcIntegrity.lifecycleHealth.Read")
ONLINE_DEPOT_PRIVILEGE = "VcIntegrity.lifecycleSettings.Write"
IMAGE_PRIVILEGES = SettingPrivileges(
    "the vGPU Manager of the hosts of a cluster a vLCM image manages: the image's draft, its commit and its apply, "
    "and an online depot vCenter does not have yet (`vgpu_manager`)",
    ("esx/settings/clusters/software/drafts", "commit", "software apply", "depots/online create"),
    (*IMAGE_CLUSTER_PRIVILEGES, ONLINE_DEPOT_PRIVILEGE))


class VgpuManager(HostSetting[ManagerSpec | None]):
    key = "vgpu_manager"
    schema: Any = ManagerSpec | None
    kinds = (VGPU_MANAGER,)
    reads = Reads(gpu_queries=(RUNNING_MANAGER,), shell=(GUEST_DRIVERS,), api=(SOFTWARE,), entry_shell=(DEPOT,))
    privileges = SettingPrivileges("the NVIDIA vGPU Manager of a host (`vgpu_manager`)", ("FetchSoftwarePackages",),
                                   ("Host.Config.Image",), beyond_host=IMAGE_PRIVILEGES)
    apply_step = MANAGER_STEP
    preflight_reads = True

    def privileges_beyond_host(self, change: HostChange) -> tuple[PrivilegeNeed, ...]:
        """Through vLCM: the cluster image's draft, commit and apply on the cluster; adding an online depot
        vCenter does not have yet is an operation of vCenter's own."""
        target = change.new
        if not isinstance(target, ManagerTarget) or target.route != Route.LIFECYCLE or not target.cluster:
            return ()
        on_cluster = PrivilegeNeed(PrivilegePlace.CLUSTER, target.cluster, IMAGE_CLUSTER_PRIVILEGES)
        needs: tuple[PrivilegeNeed, ...] = (on_cluster,)
        if not target.component and not offline_bundle(target.location):
            needs += (PrivilegeNeed(PrivilegePlace.VCENTER, "", (ONLINE_DEPOT_PRIVILEGE,)),)
        return needs

    def reads_shell(self, spec: object) -> bool:
        entry = self.of(spec)
        return entry is not None and entry.source is not None and entry.source.datastore is not None

    def plan(self, inp: PlanInput) -> HostPlan:
        spec, result = self.of(inp.spec), HostPlan()
        if spec is None or inp.facts is None:  # a pure plan: nothing tells what the host has
            return result
        where = f"host {inp.host.name}: vgpu_manager"
        software = inp.facts.get(SOFTWARE)
        if software is None:
            why = inp.facts.unread_what(SOFTWARE) or "not read"
            result.errors.append(f"{where}: the installed vGPU Manager could not be read ({why})")
            return result
        if software.installed == spec.version:
            return result
        if spec.source is None:
            result.errors.append(f"{where}: the host has {software.installed or NONE}; installing {spec.version} "
                                 "needs vgpu_manager.source (a datastore path or a depot URL)")
            return result
        target, problem, note = (self._lifecycle(inp, spec, software) if software.image
                                 else self._shell(inp, spec))
        if target is None:
            result.errors.append(f"{where}: {problem}")
            return result
        if note:
            result.warnings.append(f"{where}: {note}")
        result.changes.append(host_change(inp, VGPU_MANAGER, software.installed or NONE, target, Phase.REBOOT))
        return result

    def _lifecycle(self, inp: PlanInput, spec: ManagerSpec, software: Software
                   ) -> tuple[ManagerTarget | None, str, str]:
        source = spec.source
        assert source is not None
        if software.lifecycle_error is not None:
            return None, f"the cluster's vLCM image could not be read ({software.lifecycle_error})", ""
        if source.url is None:
            return None, (f"the host's cluster is managed by a vLCM image, which imports bundles from a URL: give "
                          f"vgpu_manager.source.url, not a datastore path ({source.location})"), ""
        timeout = float(getattr(getattr(inp.spec, "maintenance", None), "reboot_timeout_s", 0)) + REMEDIATION_S
        if source.url not in software.depots:
            note = (f"vCenter does not have the depot {source.url} yet: apply imports it on this host's turn and "
                    f"stops there, in maintenance mode, if it does not hold NVIDIA's vGPU Manager {spec.version}")
            return ManagerTarget(spec.version, Route.LIFECYCLE, source.url, spec.component or "", "",
                                 cluster=software.cluster, timeout_s=timeout), "", note
        found, why = _pick(software.content, spec, "the depots vCenter has")
        if found is None:
            return None, why, ""
        return ManagerTarget(spec.version, Route.LIFECYCLE, source.url, found.name, found.version,
                             cluster=software.cluster, timeout_s=timeout), "", ""

    def _shell(self, inp: PlanInput, spec: ManagerSpec) -> tuple[ManagerTarget | None, str, str]:
        source = spec.source
        assert source is not None and inp.facts is not None
        if not inp.shell:
            why = inp.facts.shell_error or "set VGPUCTL_ESXI_PASSWORD or VGPUCTL_ESXI_KEY_FILE, or ssh in the entry"
            return None, f"a host managed by baselines installs it in the ESXi shell, which is not read ({why})", ""
        depot = inp.facts.get(DEPOT)
        if depot is None or depot.error is not None:
            return None, f"the depot {source.location} cannot be read: {depot.error if depot else 'not read'}", ""
        found, why = _pick(depot.components, spec, f"the depot {source.location}")
        if found is None:
            return None, why, ""
        target = ManagerTarget(spec.version, Route.SHELL, source.location, found.name, found.version, spec.install)
        return target, "", ""

    def replaces_manager(self, change: HostChange) -> str | None:
        return str(change.new)

    def wanted_manager(self, spec: object) -> str | None:
        entry = self.of(spec)
        return entry.version if entry is not None else None

    def apply(self, step: ApplyStep, changes: Sequence[HostChange], writer: HostWriter) -> None:
        for change in changes:
            target = change.new
            if not isinstance(target, ManagerTarget):
                raise VgpuctlError(f"{writer.host}: vgpu_manager: the plan names no install for {target}")
            if target.route == Route.LIFECYCLE:
                _apply_lifecycle(target, writer)
            else:
                _apply_shell(target, writer)
            writer.done(f"vgpu-manager {target.version}")

    def verify(self, inp: PlanInput) -> list[str]:
        """After the reboot the host runs the version it has installed."""
        spec = self.of(inp.spec)
        running = running_manager(inp.facts)
        if spec is None or running is None or running == spec.version:
            return []
        return [f"vgpu_manager: the host's GPUs run vGPU Manager {running}, not {spec.version}"]

    def explain(self, key: str, host: ObservedHost, facts: HostFacts | None) -> str | None:
        software = facts.get(SOFTWARE) if facts is not None else None
        running = running_manager(facts)
        if software is None:
            return running
        how = "a vLCM image" if software.image else "baselines or standalone (esxcli)"
        return f"{software.installed or NONE} ({software.package or 'no manager VIB'}; managed by {how})"

    def export(self, host: ObservedHost, facts: HostFacts | None) -> Exported:
        software = facts.get(SOFTWARE) if facts is not None else None
        version = software.installed if software is not None else running_manager(facts)
        if version is None:
            return Exported()
        return Exported({self.key: {"version": version}},
                        notes=[f"vgpu_manager: {version} as the host has it; add a source to install another"])

    def status(self, host: ObservedHost, facts: HostFacts | None) -> list[SettingState]:
        software = facts.get(SOFTWARE) if facts is not None else None
        running = running_manager(facts)
        installed = software.installed if software is not None else None
        now = running or installed
        if now is None:
            return []
        return [SettingState(self.key, now, installed if installed and installed != now else None)]

    def preflight_facts(self, spec: object, host: ObservedHost, facts: HostFacts) -> list[Finding]:
        """The depot holds NVIDIA's component at the version (or the host has it), and the version is a release
        of vgpuctl's table (its guest drivers are known)."""
        entry = self.of(spec)
        if entry is None:
            return []
        plan = self.plan(PlanInput(spec, host, facts))
        out = [Finding(DEPOT_CHECK, CheckStatus.FAIL, e, "correct vgpu_manager (version, source, component)")
               for e in plan.errors]
        if not plan.errors:
            what = (f"the host has {entry.version}" if not plan.changes
                    else f"{entry.version} from {plan.changes[0].new.location}")  # type: ignore[union-attr]
            out.append(Finding(DEPOT_CHECK, CheckStatus.PASS, what))
        release = manager_release(entry.version)
        out.append(Finding(RELEASE_CHECK, CheckStatus.PASS, f"{entry.version} is vGPU {release.vgpu}'s manager "
                           f"(guest drivers {release.linux} Linux, {release.windows} Windows)") if release else
                   Finding(RELEASE_CHECK, CheckStatus.WARN, f"{entry.version} is not a release of vgpuctl's table: "
                           "guest drivers of its own branch count as unknown in the upgrade window",
                           "use a release the table lists (vgpuctl/data/vgpu-releases.yaml)"))
        return out


def _apply_shell(target: ManagerTarget, writer: HostWriter) -> None:
    command = (shell_software.vib_install(target.location) if target.install == Install.VIB
               else shell_software.component_apply(target.location, target.component))
    writer.progress("vgpu-manager", f"{target.component} {target.component_version} from {target.location}")
    with writer.open_shell() as shell:
        out = in_flight(f"vgpu-manager install host {writer.host}", lambda: shell.run(command).stdout)
    result = shell_software.parse_install_result(out)
    writer.reboot_pending = writer.reboot_pending or result.reboot_required


def _apply_lifecycle(target: ManagerTarget, writer: HostWriter) -> None:
    vlcm = client_for(writer.session)
    image = vlcm.image(target.cluster, fresh=True)
    if target.location not in image.depots:
        writer.progress("vgpu-manager", f"importing the depot {target.location}")
        vlcm.import_depot(target.location, target.timeout_s)
        image = vlcm.image(target.cluster, fresh=True)
    spec = ManagerSpec(version=target.version, component=target.component or None)
    found, why = _pick([Offered(c.name, c.version, c.vendor) for c in image.content], spec, "the depots vCenter has")
    if found is None:
        raise VgpuctlError(f"{writer.host}: vgpu_manager: {why}")
    if Component(found.name, found.version) not in [Component(c.name, c.version) for c in image.components]:
        writer.progress("vgpu-manager", f"the cluster image gets {found.name} {found.version}")
        vlcm.set_component(target.cluster, Component(found.name, found.version), target.timeout_s)
    writer.progress("vgpu-manager", "vLCM remediates the host")
    vlcm.remediate(target.cluster, writer.moid, target.timeout_s,
                   progress=lambda what: writer.progress("vgpu-manager", what))
    writer.rebooted = True


SETTING = VgpuManager()
