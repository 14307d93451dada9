"""Preflight's pure parts: NVIDIA's manager/guest branch rule, the vGPU Manager VIB, the privileges a plan needs
per object (and the README's role table as their source of truth), the checks from facts, the report."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import kinds
import pytest

from vgpuctl import releases
from vgpuctl.domain import CheckStatus, IdentityMethod, Phase
from vgpuctl.esxi.parsers import parse_vib_list
from vgpuctl.hosts.plan import plan_host, resolve_hosts
from vgpuctl.inventory import load_inventory_text
from vgpuctl.model import (
    CloneSpec,
    DeviceChange,
    FieldChange,
    GuestIdentity,
    HostChange,
    Observed,
    ObservedGpu,
    ObservedHost,
    ObservedVm,
    Op,
    Plan,
    VmChange,
)
from vgpuctl.preflight import branches, checks, privileges
from vgpuctl.preflight.check import PreflightCheck
from vgpuctl.preflight.checks import gpu_host_check, setting_checks, vm_network_checks
from vgpuctl.preflight.facts import About, ManagerFacts, Scope, SshOutcome, SshProbe, requirement_scope, scope_of
from vgpuctl.preflight.guests import driver_branch_checks, file_checks, guest_driver, unreadable
from vgpuctl.reports.preflight import preflight_report
from vgpuctl.settings.vgpu_manager import ManagerTarget, Route
from vgpuctl.vsphere import hostaccess
from vgpuctl.vsphere.hostaccess import HostAccess, parse_privilege_availability

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


# ------------------------------------------------------------------------------------------ branch rule

# NVIDIA, Virtual GPU Software R580 for VMware vSphere Release Notes 19.0, 1.2: same release; a later major branch
# manager with the previous branch's guest; a later LTS manager with the previous LTS's guest. Versions from the
# published release tables (vGPU 19.0: manager 580.65.05, Linux guest 580.65.06; vGPU 17.3: 550.90.05 / 550.90.07;
# vGPU 15.1: 525.85.07 / 525.85.05).
RULE = [
    ("580.65.05", "580.65.06", CheckStatus.PASS),  # one release, different last digits
    ("550.90.05", "550.90.07", CheckStatus.PASS),
    ("525.85.07", "525.85.05", CheckStatus.PASS),
    ("570.124.03", "550.90.07", CheckStatus.WARN),  # the previous branch
    ("550.90.05", "535.161.07", CheckStatus.WARN),
    ("550.90.05", "580.65.06", CheckStatus.FAIL),  # guest newer than the manager
    ("535.161.05", "550.90.07", CheckStatus.FAIL),
    ("580.65.05", "535.161.07", CheckStatus.WARN),  # R580 and R535 are both LTS: the previous LTS branch
    ("580.65.05", "550.90.07", CheckStatus.FAIL),  # two branches apart, R550 is no LTS branch
    ("550.90.05", "525.85.05", CheckStatus.FAIL),
    ("999.1.1", "550.90.07", CheckStatus.WARN),  # a branch the table does not know
]


@pytest.mark.parametrize(("manager", "guest", "status"), RULE)
def test_branch_rule(manager: str, guest: str, status: CheckStatus) -> None:
    m, g = branches.branch_of(manager), branches.branch_of(guest)
    assert m is not None and g is not None
    assert branches.compatibility(m, g).status == status


def test_r580_is_a_long_term_support_branch() -> None:
    """NVIDIA's data-center driver lifecycle page lists R580 (and R535) as Long Term Support Branches."""
    r580 = branches.known(580)
    assert r580 is not None and r580.track == branches.Track.LTS
    verdict = branches.compatibility(580, 535)
    assert verdict.status == CheckStatus.WARN and "LTS branch before" in verdict.reason


def test_the_lts_exception_needs_both_branches_lts(monkeypatch: pytest.MonkeyPatch) -> None:
    table = (branches.Branch(535, 16, branches.Track.LTS), branches.Branch(550, 17, branches.Track.PRODUCTION),
             branches.Branch(570, 18, branches.Track.PRODUCTION), branches.Branch(580, 19, branches.Track.LTS))
    monkeypatch.setattr(releases, "branches", lambda: table)  # the rule lives in vgpuctl.releases
    verdict = branches.compatibility(580, 535)
    assert verdict.status == CheckStatus.WARN and "LTS branch before" in verdict.reason
    assert branches.compatibility(570, 535).status == CheckStatus.FAIL


@pytest.mark.parametrize(("text", "version", "branch"), [
    ("550.54.10-1OEM.800.1.0.20613240", "550.54.10", 550),
    ("NVIDIA-Linux-x86_64-550.90.07-grid.run", "550.90.07", 550),
    ("nvidia-linux-grid-535_535.161.07_amd64.deb", "535.161.07", 535),
    ("NVIDIA-GRID-vSphere-8.0-535.104.06-535.104.05-537.13.zip", "535.104.06", 535),
    ("no version here", None, None),
])  # fmt: skip
def test_versions_and_branches_from_names(text: str, version: str | None, branch: int | None) -> None:
    assert branches.driver_version(text) == version
    assert branches.branch_of(text) == branch


def test_every_branch_in_the_table_has_a_source() -> None:
    import yaml

    data = yaml.safe_load((Path(branches.__file__).parents[1] / "data" / "vgpu-releases.yaml").read_text())
    assert all(row["source"] in data["sources"] for row in data["branches"])
    assert [b.branch for b in branches.branches()] == sorted(b.branch for b in branches.branches())


# ------------------------------------------------------------------------------------------ the VIB


@pytest.mark.parametrize(("name", "manager"), [
    ("NVD-AIE_ESXi_8.0.0_Driver", True), ("NVD-VMware_ESXi_8.0.0_Driver", True),
    ("NVIDIA-VMware_ESXi_7.0.2_Driver", True), ("NVIDIA-AIE_ESXi_7.0.2_Driver", True),
    ("NVIDIA-VMware_ESXi_6.7_Host_Driver", True), ("nvdgpumgmtdaemon", False), ("esx-base", False),
    ("NVD-AIE-800", False),  # a vLCM component id, not the VIB
])  # fmt: skip
def test_manager_vib_names(name: str, manager: bool) -> None:
    assert branches.is_manager_vib(name) is manager


def test_manager_from_published_and_simulated_vib_lists() -> None:
    for fixture, expected in (("esxi7.vib-list-nvidia.txt", "510.73.06"), ("gpusim.vib-list.txt", "550.90.05")):
        vibs = parse_vib_list((FIXTURES / fixture).read_text())
        found = branches.manager_in([(v.name, v.version) for v in vibs])
        assert found is not None and branches.driver_version(found[1]) == expected


# ------------------------------------------------------------------------------------------ privileges


def _readme_rows() -> dict[str, set[str]]:
    section = README.split("### What a real vCenter needs", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("what vgpuctl does", "---"):
            continue
        last, found = "", set()
        for token in re.findall(r"`([A-Za-z.]+)`", cells[2]):
            name = last.rsplit(".", 1)[0] + token if token.startswith(".") else token
            last = name
            found.add(name)
        rows[cells[0]] = found
    return rows


def test_the_readme_role_table_is_the_operations_table() -> None:
    """Each row lists its operation's privileges that no row above it lists: every privilege once."""
    rows = _readme_rows()
    assert set(rows) == {op.what for op in privileges.OPERATIONS}
    ops = {op.what: op for op in privileges.OPERATIONS}
    above: set[str] = set()
    for what, listed in rows.items():
        assert listed == set(ops[what].privileges) - above, ops[what].key
        above |= listed
    assert "Global.Settings" in rows[privileges.LOCKDOWN_EXCEPTIONS.what]  # the lockdown check reads exceptions


def test_the_readme_role_command_names_each_privilege_once() -> None:
    section = README.split("### What a real vCenter needs", 1)[1].split("\n## ", 1)[0]
    command = section.split("govc role.create vgpuctl", 1)[1].split("\ngovc permissions.set", 1)[0]
    granted = command.replace("\\", " ").split()
    assert len(granted) == len(set(granted)) and "Global.Settings" in granted


def farm() -> Observed:
    gpu = ObservedGpu("0000:3b:00.0", "NVIDIA A100-PCIE-40GB", memory_kb=40 * 1024 * 1024, graphics_type="shared")
    hosts = {"esx-01": ObservedHost("esx-01", moid="host-1", cluster="C", gpus=[gpu], resource_pool_moid="pool-1",
                                    api_version="8.0.2.0")}
    vms = {"a": ObservedVm("a", moid="vm-1", host="esx-01", cluster="C"),
           "tmpl": ObservedVm("tmpl", moid="vm-9", is_template=True, firmware="bios", hardware_version="vmx-15")}
    return Observed(datacenter="DC0", hosts=hosts, vms=vms, clusters={"C": ["esx-01"]},
                    cluster_pool_moids={"C": "pool-1"}, moids={"datacenter": "dc-1", "vm_folder": "group-v1"})


PLACES = privileges.Places(("Folder", "group-d1"), ("Datacenter", "dc-1"),
                           {"vm-9": ([("Datastore", "ds-1")], [("Network", "net-1")])})


def a_plan() -> Plan:
    return Plan(
        vm_changes=[
            VmChange("a", fields=[FieldChange("numCPUs", 2, 4)], devices=[DeviceChange(Op.ADD, "grid_a100-20c")],
                     power_off=True, power_on=True),
            VmChange("b", clone=CloneSpec("tmpl", cluster="C"), extra_config={"x": "1"}),
        ],
        host_changes=[HostChange("esx-01", kinds.NVLINK, "host", "enabled", "disabled", Phase.REBOOT)],
    )


def test_needs_name_each_object_and_only_the_privileges_its_change_uses() -> None:
    needs = privileges.needs(a_plan(), farm(), None, PLACES)
    by = {(n.operation.key, n.label): set(n.privileges) for n in needs}
    assert by[("vm-reconfigure", "vm a")] == {"VirtualMachine.Config.AddRemoveDevice", "VirtualMachine.Config.CPUCount"}
    assert by[("vm-power", "vm a")] == {"VirtualMachine.Interact.PowerOn", "VirtualMachine.Interact.PowerOff"}
    assert by[("vm-reconfigure", "folder / (new vm b)")] == {"VirtualMachine.Config.AdvancedConfig"}
    assert by[("vm-clone", "template tmpl")] == {"VirtualMachine.Provisioning.Clone",
                                                 "VirtualMachine.Provisioning.DeployTemplate"}
    assert by[("vm-clone", "datastore of tmpl")] == {"Datastore.AllocateSpace"}
    assert by[("vm-clone", "network of tmpl")] == {"Network.Assign"}
    assert by[("vm-clone", "resource pool of C")] == {"Resource.AssignVMToPool"}
    assert by[("host-maintenance", "host esx-01")] == {"Host.Config.Maintenance"}
    assert by[("host-settings", "host esx-01")] == {"Host.Config.Settings"}
    assert by[("work-records", "the root folder")] == {"Global.ManageCustomFields", "Global.SetCustomField"}
    assert by[("leases", "the root folder")] == {"Folder.Create", "Folder.Delete"}
    asked = {(e[1], p) for entities, privs in privileges.requests(needs) for e in entities for p in privs}
    assert {(n.entity[1], p) for n in needs for p in n.privileges} <= asked  # every need is asked about


def test_network_settings_and_customization_need_their_own_privileges() -> None:
    clone = CloneSpec("tmpl", cluster="C", identity=GuestIdentity(IdentityMethod.CUSTOMIZATION, "b", "lab"))
    the_plan = Plan(
        vm_changes=[VmChange("b", clone=clone)],
        host_changes=[HostChange("esx-01", kinds.SRIOV, "0000:18:00.0", 0, 8, Phase.REBOOT),
                      HostChange("esx-01", kinds.PVRDMA_FIREWALL, "host", "off", "on", Phase.ONLINE)],
    )
    by = {(n.operation.key, n.label): set(n.privileges) for n in privileges.needs(the_plan, farm(), None, PLACES)}
    assert by[("vm-customize", "template tmpl")] == {"VirtualMachine.Provisioning.Customize"}
    assert by[("host-sriov", "host esx-01")] == {"Host.Config.PciPassthru"}
    assert by[("host-pvrdma", "host esx-01")] == {"Host.Config.AdvancedConfig", "Host.Config.NetService"}
    assert ("host-settings", "host esx-01") not in by  # neither is a graphics or module-options write
    cloud = CloneSpec("tmpl", cluster="C", identity=GuestIdentity(IdentityMethod.CLOUD_INIT, "b", "lab"))
    by = {(n.operation.key, n.label) for n in privileges.needs(Plan(vm_changes=[VmChange("b", clone=cloud)]),
                                                               farm(), None, PLACES)}
    assert ("vm-customize", "template tmpl") not in by


def manager_change(route: str, location: str, component: str = "") -> HostChange:
    target = ManagerTarget("580.65.05", Route(route), location, component, cluster="domain-c7" if route == "vlcm"
                           else "")
    return HostChange("esx-01", kinds.VGPU_MANAGER, "host", "550.90.05", target, Phase.REBOOT)


IMAGE_PRIVILEGES = {"VcIntegrity.lifecycleSoftwareSpecification.Write",
                    "VcIntegrity.lifecycleSoftwareRemediation.Write", "VcIntegrity.lifecycleHealth.Read"}


@pytest.mark.parametrize(("route", "location", "component", "on_cluster", "on_vcenter"), [
    ("vlcm", "https://depot.example.com/nvd/index.xml", "", IMAGE_PRIVILEGES, {"VcIntegrity.lifecycleSettings.Write"}),
    ("vlcm", "https://depot.example.com/nvd/index.xml", "NVD-AIE-800", IMAGE_PRIVILEGES, None),  # vCenter has it
    ("vlcm", "https://depot.example.com/NVD-AIE-800_580.65.05.zip", "", IMAGE_PRIVILEGES, None),  # named by none
    ("esxcli", "/vmfs/volumes/ds1/NVD-AIE-800_580.65.05.zip", "NVD-AIE-800", None, None),
])
def test_a_manager_upgrade_through_vlcm_needs_the_image_privileges_on_its_cluster(
        route: str, location: str, component: str, on_cluster: set[str] | None, on_vcenter: set[str] | None) -> None:
    needs = privileges.needs(Plan(host_changes=[manager_change(route, location, component)]), farm(), None, PLACES)
    by = {(n.operation.key, n.entity): set(n.privileges) for n in needs}
    op = "host-vgpu_manager-beyond-host"
    assert by.get((op, ("ClusterComputeResource", "domain-c7"))) == on_cluster
    assert by.get((op, PLACES.root)) == on_vcenter
    assert by[("host-vgpu_manager", ("HostSystem", "host-1"))] == {"Host.Config.Image"}
    if on_cluster:
        granted = {(n.entity[1], p): True for n in needs for p in n.privileges}
        granted[("domain-c7", "VcIntegrity.lifecycleHealth.Read")] = False
        found = {c.id: c for c in privileges.privilege_checks(needs, granted)}
        assert found[f"privileges.{op}"].status == CheckStatus.FAIL
        assert found[f"privileges.{op}"].evidence.startswith("missing VcIntegrity.lifecycleHealth.Read on cluster C")


def test_privilege_requests_merge_while_cheap() -> None:
    vms = [privileges.Need(privileges.VM_RECONFIGURE, ("VirtualMachine", f"vm-{i}"), f"vm {i}",
                           ("VirtualMachine.Config.AddRemoveDevice",) + (("VirtualMachine.Config.CPUCount",)
                                                                         if i % 2 else ()))
           for i in range(1000)]
    read = privileges.Need(privileges.READ, ("Datacenter", "dc-1"), "datacenter", privileges.READ.privileges)
    # 1,000 VMs in two privilege lists: one call (500 more answers); the datacenter's reading a second, sent with
    # it (merged, 2,000 more answers)
    (vm_entities, vm_privs), (dc_entities, dc_privs) = sorted(privileges.requests([read, *vms]),
                                                              key=lambda r: len(r[0]), reverse=True)
    assert len(vm_entities) == 1000 and set(vm_privs) == {"VirtualMachine.Config.AddRemoveDevice",
                                                          "VirtualMachine.Config.CPUCount"}
    assert dc_entities == [("Datacenter", "dc-1")] and set(dc_privs) == {"System.View", "System.Read"}
    # a merge that would ask many more answers than it saves stays two calls
    hosts = [privileges.Need(privileges.HOST_SETTINGS, ("HostSystem", f"host-{i}"), f"host {i}",
                             tuple(f"Host.Config.P{k}" for k in range(10))) for i in range(300)]
    assert len(privileges.requests([*vms, *hosts])) == 2
    # what a plan that reconfigures 1,000 VMs asks: the VMs' three, and the bookkeeping's six on the datacenter
    # and the root folder (one call for both: 6 more answers)
    reconfigure = [privileges.Need(privileges.VM_RECONFIGURE, ("VirtualMachine", f"vm-{i}"), f"vm {i}",
                                   ("VirtualMachine.Config.AddRemoveDevice", "VirtualMachine.Config.AdvancedConfig",
                                    "VirtualMachine.Config.Resource")) for i in range(1000)]
    books = ("Folder.Create", "Folder.Delete", "Global.ManageCustomFields", "Global.SetCustomField", "System.Read",
             "System.View")
    bookkeeping = [privileges.Need(privileges.READ, entity, "bookkeeping", books)
                   for entity in (("Datacenter", "dc-1"), ("Folder", "group-d1"))]
    asked = sorted(privileges.requests([*reconfigure, *bookkeeping]), key=lambda r: len(r[0]))
    assert [(len(entities), len(privs)) for entities, privs in asked] == [(2, 6), (1000, 3)]


def test_each_operation_has_its_own_key() -> None:
    # the checks are grouped and named by key (privileges.<key>)
    keys = [op.key for op in privileges.OPERATIONS]
    assert len(keys) == len(set(keys))


def test_missing_privileges_are_named_per_object_and_optional_ones_warn() -> None:
    needs = privileges.needs(a_plan(), farm(), None, PLACES)
    needs.append(privileges.Need(privileges.HOST_PACKAGES, ("HostSystem", "host-1"), "host esx-01",
                                 privileges.HOST_PACKAGES.privileges))
    granted = {(n.entity[1], p): True for n in needs for p in n.privileges}
    granted[("vm-1", "VirtualMachine.Config.CPUCount")] = False
    granted[("host-1", "Host.Config.Image")] = False
    found = {c.id: c for c in privileges.privilege_checks(needs, granted)}
    assert found["privileges.vm-reconfigure"].status == CheckStatus.FAIL
    assert found["privileges.vm-reconfigure"].evidence.startswith(
        "missing VirtualMachine.Config.CPUCount on vm a (change a VM's")
    assert found["privileges.host-packages"].status == CheckStatus.WARN
    assert found["privileges.vm-power"].status == CheckStatus.PASS
    unread = privileges.privilege_checks(needs, None, "MethodNotFound: HasPrivilegeOnEntities")
    assert {c.status for c in unread} == {CheckStatus.WARN}


# ------------------------------------------------------------------------------------------ checks


INVENTORY = """\
apiVersion: vgpuctl/v1
hosts:
  - cluster: C
    gpus: [{select: all, vgpu_mode: mixedSize}]
vms:
  - name: a
    vgpus: {profile: grid_a100-5c, count: 8}
    nvlink: required
    guest: {group: g}
  - name: b
    template: tmpl
    cluster: C
    vgpus: {profile: grid_a100-20c, count: 1}
    guest: {group: g}
guests:
  groups:
    g: {roles: [vgpu_guest_driver, vgpu_licensing], vars: {vgpu_driver_src: NVIDIA-Linux-x86_64-550.90.07-grid.run}}
"""


def test_versions_name_what_needs_them() -> None:
    inv = load_inventory_text(INVENTORY, "inv.yaml")
    scope = scope_of(inv, farm(), env={})
    reqs = checks.requirements(inv, scope)
    old = checks.vcenter_version(About("7.0.3", "7.0.3.0", full_name="vCenter 7.0.3"), reqs)
    assert old.status == CheckStatus.FAIL
    assert "8 vGPUs per VM (vm a) needs 8.0; NVLink device groups (vm a) needs 8.0.0.1" in old.evidence
    assert checks.vcenter_version(About("8.0.3", "8.0.3.0"), reqs).status == CheckStatus.PASS
    host = {c.subject: c for c in checks.host_versions(farm(), scope, reqs)}["esx-01"]
    assert host.status == CheckStatus.FAIL and "mixed-size time-sliced vGPUs (host esx-01) needs 8.0.3" in host.evidence
    assert checks.vcenter_version(About("8.0.3", "8.0.3.0", "HostAgent"), reqs).status == CheckStatus.WARN
    assert checks.requirements(inv, requirement_scope(inv, farm())) == reqs  # plan's scope: VMs placed on demand


def test_templates_graphics_and_manager() -> None:
    inv = load_inventory_text(INVENTORY, "inv.yaml")
    plan = Plan(vm_changes=[VmChange("b", clone=CloneSpec("tmpl", cluster="C"))])
    (template,) = checks.template_checks(plan, inv, farm())
    assert template.status == CheckStatus.FAIL and "C-series vGPUs need EFI firmware" in template.evidence
    host = farm().hosts["esx-01"]
    assert checks.graphics_check(host, host, True).status == CheckStatus.FAIL
    assert checks.graphics_check(host, host, False).status == CheckStatus.WARN
    fixed = copy.deepcopy(host)
    for gpu in fixed.gpus:
        gpu.graphics_type = "sharedDirect"
    assert checks.graphics_check(host, fixed, True).status == CheckStatus.PASS  # the plan sets Shared Direct
    missing = checks.manager_check(host, ManagerFacts(installed=False, source="x"), True)
    assert missing.status == CheckStatus.FAIL and missing.fix and "vGPU Manager" in missing.fix
    unknown = checks.manager_check(host, ManagerFacts(unread=["software packages: NoPermission: denied"]), True)
    assert unknown.status == CheckStatus.FAIL and "NoPermission" in unknown.evidence
    host.offered_profiles = ["grid_a100-20c"]
    assert checks.manager_check(host, ManagerFacts(unread=["x"]), True).status == CheckStatus.WARN


def test_ssh_and_lockdown_checks_say_why_and_how() -> None:
    stopped = HostAccess("esx-01", "host-1", ssh_running=False, ssh_policy="off", lockdown="lockdownDisabled")
    check = checks.ssh_check("esx-01", True, stopped, SshProbe(SshOutcome.UNREACHABLE, "refused"))
    assert check.status == CheckStatus.FAIL and "TSM-SSH) is stopped" in check.evidence
    assert check.fix and "ssh: {service: manage}" in check.fix
    locked = HostAccess("esx-01", "host-1", ssh_running=True, lockdown="lockdownStrict")
    check = checks.ssh_check("esx-01", True, locked, SshProbe(SshOutcome.AUTH, "denied", "root"))
    assert "the host is in lockdownStrict" in check.evidence and check.fix and "never turns" in check.fix
    assert checks.lockdown_check("esx-01", True, locked, ["root"], "root").status == CheckStatus.PASS
    assert checks.lockdown_check("esx-01", True, locked, [], "root").status == CheckStatus.FAIL
    assert checks.lockdown_check("esx-01", True, locked, "NoPermission", "root").status == CheckStatus.WARN
    assert checks.lockdown_check("esx-01", False, locked, [], "root").status == CheckStatus.PASS
    assert checks.ssh_check("esx-01", False, None, None).status == CheckStatus.SKIP


def test_guest_driver_branch_against_each_hosts_manager(tmp_path: Path) -> None:
    inv = load_inventory_text(INVENTORY, str(tmp_path / "inv.yaml"))
    scope = Scope(["esx-01", "esx-02"], vm_hosts={"a": ["esx-01"], "b": ["esx-01", "esx-02"]})
    managers = {"esx-01": ManagerFacts("550.90.05", installed=True), "esx-02": ManagerFacts("535.161.05",
                                                                                           installed=True)}
    (check,) = driver_branch_checks(inv, scope, managers)
    assert check.status == CheckStatus.FAIL
    assert "same release branch R550 on esx-01" in check.evidence and "newer than" in check.evidence
    assert guest_driver({"vgpu_guest_driver_version": "550.90.07"}) == ("550.90.07", "its version variable")
    found = {c.id: c for c in file_checks(inv)}
    assert found["guest.license-token"].status == CheckStatus.FAIL
    assert "vgpu_license_token_src is not set" in found["guest.license-token"].evidence
    assert found["guest.driver-file"].evidence.endswith("no such file")


def test_report_groups_equal_checks_and_counts() -> None:
    rows = [PreflightCheck("host.ssh", CheckStatus.PASS, "ok", h) for h in ("esx-01", "esx-02")]
    rows.append(PreflightCheck("host.graphics", CheckStatus.FAIL, "shared", "esx-01", "set it"))
    report = preflight_report("https://vc/sdk", rows)
    assert not report.ok and report.counts == {"fail": 1, "warn": 0, "pass": 2, "skip": 0}
    assert report.render_text().splitlines() == [
        "FAIL  host.graphics esx-01: shared", "      fix: set it", "PASS  host.ssh esx-01, esx-02: ok",
        "https://vc/sdk: 1 fail, 0 warn, 2 pass, 0 skip: preflight failed"]
    assert rows[-1].line == "host.graphics esx-01: shared; fix: set it"


PRIVILEGE_ANSWER = b"""<?xml version="1.0" encoding="UTF-8"?>
<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body>
<HasPrivilegeOnEntitiesResponse xmlns="urn:vim25">
<returnval><entity type="VirtualMachine">vm-1</entity>
<privAvailability><privId>VirtualMachine.Config.CPUCount</privId><isGranted>true</isGranted></privAvailability>
<privAvailability><privId>System.Read</privId><isGranted>false</isGranted></privAvailability></returnval>
<returnval><entity type="Datacenter">datacenter-2</entity>
<privAvailability><privId>System.Read</privId><isGranted>1</isGranted></privAvailability></returnval>
</HasPrivilegeOnEntitiesResponse></soapenv:Body></soapenv:Envelope>"""
PRIVILEGES_READ = {("vm-1", "VirtualMachine.Config.CPUCount"): True, ("vm-1", "System.Read"): False,
                   ("datacenter-2", "System.Read"): True}


def test_privilege_answer_is_read_per_object_and_privilege() -> None:
    assert parse_privilege_availability(PRIVILEGE_ANSWER) == PRIVILEGES_READ


@pytest.mark.parametrize(("odd", "instead"), [
    ("none", ""),
    ("a comment", "<!-- <privAvailability><privId>System.Read</privId><isGranted>true</isGranted>"
                  "</privAvailability> -->"),
    ("a character reference", "System&#46;Read"),
    ("a prefixed namespace", "v:"),
    ("an attribute", '<privAvailability xsi:type="PrivilegeAvailability">'),
    ("a second default namespace", '<returnval xmlns="urn:vim25">'),
])
def test_the_privilege_answer_is_scanned_in_its_plain_form_and_parsed_in_any_other(odd: str, instead: str) -> None:
    body = PRIVILEGE_ANSWER
    if odd == "a comment":
        body = body.replace(b"</returnval>\n<returnval>", b"</returnval>" + instead.encode() + b"\n<returnval>")
    elif odd == "a character reference":
        body = body.replace(b"<privId>System.Read</privId><isGranted>false", b"<privId>" + instead.encode()
                            + b"</privId><isGranted>false")
    elif odd == "a prefixed namespace":
        body = (body.replace(b'xmlns="urn:vim25"', b'xmlns:v="urn:vim25"')
                .replace(b"<", b"<v:").replace(b"<v:/", b"</v:").replace(b"<v:?xml", b"<?xml")
                .replace(b"<v:soapenv", b"<soapenv").replace(b"</v:soapenv", b"</soapenv"))
    elif odd == "an attribute":
        body = body.replace(b"<privAvailability>", instead.encode(), 1).replace(
            b"<soapenv:Envelope ", b'<soapenv:Envelope xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" ')
    elif odd == "a second default namespace":
        body = body.replace(b"<returnval>", instead.encode(), 1)
    scanned = hostaccess._plain_privilege_availability(body)
    assert (scanned is not None) == (odd == "none")
    assert hostaccess.parse_privilege_availability(body) == PRIVILEGES_READ


def test_an_unreadable_token_file_is_named_without_its_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "client_configuration_token.tok"
    token.write_text("SECRET-TOKEN")
    assert unreadable(token) is None
    (tmp_path / "empty.tok").write_text("")
    assert unreadable(tmp_path / "empty.tok") == "empty"
    real_open = os.open

    def denied(path: object, *args: object, **kwargs: object) -> int:
        if Path(str(path)) == token:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", denied)  # tests run as root, who reads any file: deny it by hand
    assert unreadable(token) == "not readable by this user (permission denied)"


def test_a_token_path_that_is_a_fifo_or_a_device_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO with no writer would hold preflight forever on open; a device is no token file."""
    fifo = tmp_path / "token.fifo"
    os.mkfifo(fifo)
    assert unreadable(fifo) == "a named pipe (FIFO), not a regular file (vgpuctl reads this only from a file)"
    assert unreadable(Path("/dev/zero")) == "a device, not a regular file (vgpuctl reads this only from a file)"
    assert unreadable(tmp_path) == "a directory, not a regular file (vgpuctl reads this only from a file)"


def test_an_sriov_or_passthrough_adapter_needs_its_nic_on_a_host_of_the_vm() -> None:
    """vm.network: the SR-IOV adapter finds its ConnectX-7 with virtual functions on the hosts of the network farm;
    a model no host has fails, naming each host and why; the check is skipped for a VM with no host to go to."""
    import copy
    from pathlib import Path

    from ruamel.yaml import YAML

    farm_file = Path(__file__).resolve().parents[1] / "fixtures" / "network" / "_farm.yaml"
    observed = Observed.from_dict(copy.deepcopy(YAML(typ="safe").load(farm_file.read_text())))
    inventory = load_inventory_text(
        "apiVersion: vgpuctl/v1\nvms:\n"
        "  - {name: a, template: ubuntu-22.04-ml, cluster: GPU-Cluster, network: "
        "[{type: sriov, device: ConnectX-7, portgroup: roce-fabric}]}\n"
        "  - {name: b, template: ubuntu-22.04-ml, cluster: GPU-Cluster, network: "
        "[{type: sriov, device: ConnectX-9, portgroup: roce-fabric}]}\n"
        "  - {name: c, template: ubuntu-22.04-ml, cluster: GPU-Cluster, network: [{portgroup: mgmt}]}\n", "inv.yaml")
    hosts = sorted(observed.hosts)
    found = {c.subject: c for c in vm_network_checks(inventory, observed, Scope(hosts, vm_hosts={"a": hosts,
                                                                                                   "b": hosts}))}
    assert found["vm a network[0] (sriov)"].status == CheckStatus.PASS
    failed = found["vm b network[0] (sriov)"]
    assert failed.status == CheckStatus.FAIL and all(f"host {h}" in failed.evidence for h in hosts)
    assert not any(s.startswith("vm c") for s in found)  # a vmxnet3 adapter needs no NIC of the host
    skipped = vm_network_checks(inventory, observed, Scope(hosts))
    assert {c.status for c in skipped} == {CheckStatus.SKIP}


def test_a_connectx_whose_firmware_has_sriov_off_is_named_with_the_mlxconfig_step() -> None:
    """host.sriov-firmware: a NIC the host entry's `sriov` gives virtual functions but vSphere reports with
    maxVirtualFunctionSupported 0 fails with NVIDIA's firmware step (SRIOV_EN=1 NUM_OF_VFS=N); one with virtual
    functions passes; no `sriov` item: no such check. The sriov setting's plan names the same fix."""
    import copy
    from pathlib import Path

    from ruamel.yaml import YAML

    farm_file = Path(__file__).resolve().parents[1] / "fixtures" / "network" / "_farm.yaml"
    observed = Observed.from_dict(copy.deepcopy(YAML(typ="safe").load(farm_file.read_text())))
    name = sorted(observed.hosts)[0]
    inventory = load_inventory_text(
        f"apiVersion: vgpuctl/v1\nhosts:\n  - name: {name}\n    sriov: [{{device: ConnectX-7, vfs: 8}}]\n", "inv.yaml")
    specs, _ = resolve_hosts(inventory.hosts, observed)
    passed = setting_checks(observed, Scope([name], specs))
    assert [c.status for c in passed] == [CheckStatus.PASS]
    for nic in observed.hosts[name].nics:
        nic.max_vf = 0
    failed = setting_checks(observed, Scope([name], specs))
    assert failed and {c.status for c in failed} == {CheckStatus.FAIL}
    assert "maxVirtualFunctionSupported 0" in failed[0].evidence
    assert "mlxconfig" in (failed[0].fix or "") and "SRIOV_EN=1 NUM_OF_VFS=" in (failed[0].fix or "")
    errors = plan_host(specs[name], observed.hosts[name]).errors
    assert any("maxVirtualFunctionSupported 0" in e and "SRIOV_EN=1" in e for e in errors), errors
    assert setting_checks(observed, Scope([name])) == []


def test_no_gpu_host_is_a_failing_check() -> None:
    """Without an inventory, a datacenter where no host has an NVIDIA GPU or offers vGPU types fails host.gpu; a GPU
    host in scope, or an inventory that gives no VM vGPUs, needs no such check."""
    observed = Observed(datacenter="DC0", hosts={"esx-01": ObservedHost("esx-01"), "esx-02": ObservedHost("esx-02")})
    [check] = gpu_host_check(observed, None, Scope([]))
    assert check.status == CheckStatus.FAIL and check.id == "host.gpu"
    assert check.evidence.startswith("no GPU host in datacenter DC0: 2 host(s), none with an NVIDIA GPU")
    assert gpu_host_check(observed, None, Scope(["esx-01"])) == []
    plain = load_inventory_text("apiVersion: vgpuctl/v1\nvms:\n  - {name: a, template: t, cluster: c}\n", "inv.yaml")
    assert gpu_host_check(observed, plain, Scope([])) == []
    gpu = load_inventory_text("apiVersion: vgpuctl/v1\nvms:\n  - {name: a, template: t, cluster: c, "
                              "vgpus: {profile: grid_a100-40c, count: 1}}\n", "inv.yaml")
    assert [c.status for c in gpu_host_check(observed, gpu, Scope([]))] == [CheckStatus.FAIL]
