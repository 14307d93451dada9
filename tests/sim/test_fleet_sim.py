"""A fleet against two gpusims in one test (two vCenters, each with its own farm, datacenter, password,
certificate and ESXi shells, and the same cluster and VM names, so that anything crossing between them would
show; host names differ only in their domain, as the ESXi host map needs): plan
and apply across both, a vCenter down or refusing its login while the other's part completes, a --vcenter
scoped run that never contacts the other, host leases, VM claims and host work records kept in their own
vCenter, each vCenter's credentials never printed nor written, saved plans refused when one vCenter moved, and
the read-only commands (status, export, preflight, capacity) with a section per vCenter."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
from gpusim import ssh_hosts, ssh_known_hosts
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim
from test_secrets_sim import session_cookies
from typer.testing import CliRunner

from vgpuctl import pipeline
from vgpuctl.cli.main import app
from vgpuctl.planfile import content_digest
from vgpuctl.records.work import WORK_FIELD
from vgpuctl.vsphere.claims import CLAIM_FOLDER, VmClaim
from vgpuctl.vsphere.session import ConnectionSettings, open_session
from vgpuctl.vsphere.workrecord import LEASE_FIELD, LEASE_FOLDER, Fields, Lease, parse_lease

pytestmark = pytest.mark.sim

H1, H2 = "esx-01.east.sim", "esx-02.east.sim"
W1, W2 = "esx-01.west.sim", "esx-02.west.sim"


def farm(datacenter: str, password: str, domain: str, vms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "datacenter": datacenter, "password": password, "reboot_seconds": 0.3, "host_domain": domain,
        "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB",
                      "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
        "vms": vms,
    }  # fmt: skip


def vm(name: str, host: str) -> dict[str, Any]:
    return {"name": name, "host": host, "cpus": 2, "memory_mb": 4096, "firmware": "efi", "memory_locked": True}


EAST = farm("DC0", "east-pw", "east.sim", [vm("train-01", H1)])
WEST = farm("DC1", "west-pw", "west.sim", [vm("train-01", W1), vm("infer-01", W2)])

INVENTORY = """\
apiVersion: vgpuctl/v1
vcenters:
  - {{name: east, url: "{east}", datacenter: DC0}}
  - {{name: west, url: "{west}", datacenter: DC1}}
default_vcenter: east
hosts:
  - cluster: GPU-Cluster
    graphics: {{assignment_policy: consolidation}}
    ssh: {{password_env: EAST_ESXI_PW, known_hosts: "{east_known}"}}
  - cluster: GPU-Cluster
    vcenter: west
    graphics: {{assignment_policy: consolidation}}
    ssh: {{password_env: WEST_ESXI_PW, known_hosts: "{west_known}"}}
vms:
  - {{name: train-01, vgpus: {{profile: grid_a100-20c}}, power: off}}
  - {{name: train-01, vcenter: west, vgpus: {{profile: grid_a100-10c}}, power: off}}
  - {{name: infer-01, vcenter: west, vgpus: {{profile: grid_a100-10c}}, power: off}}
"""


@pytest.fixture
def pair(gpusim_pair: Callable[..., Any], no_vgpuctl_env: None) -> tuple[Any, Any]:
    return gpusim_pair(EAST, WEST)


def env(east: Any, west: Any, **more: str) -> dict[str, str]:
    """Each vCenter's own credentials and pinned certificate, each one's ESXi shells; the single-vCenter
    variables hold wrong values that a fleet must never use."""
    shells = {name: {"host": t["host"], "port": t["port"]}
              for sim in (east, west) for name, t in ssh_hosts(sim).items()}
    known = east.workdir / "fleet_known_hosts"  # both farms' host keys, for files that name no known_hosts
    known.write_text(ssh_known_hosts(east).read_text() + ssh_known_hosts(west).read_text())
    return {"VGPUCTL_USERNAME": east.username, "VGPUCTL_PASSWORD_EAST": east.password,
            "VGPUCTL_PASSWORD_WEST": west.password, "VGPUCTL_THUMBPRINT_EAST": east.env["VGPUCTL_THUMBPRINT"],
            "VGPUCTL_THUMBPRINT_WEST": west.env["VGPUCTL_THUMBPRINT"], "VGPUCTL_PASSWORD": "not-this-one",
            "VGPUCTL_URL": "https://127.0.0.1:9/sdk", "VGPUCTL_ESXI_HOSTS": json.dumps(shells),
            "VGPUCTL_ESXI_KNOWN_HOSTS": str(known),
            "EAST_ESXI_PW": east.password, "WEST_ESXI_PW": west.password, **more}  # fmt: skip


def write_inventory(pair: tuple[Any, Any], path: Path) -> Path:
    east, west = pair
    path.write_text(INVENTORY.format(east=east.url, west=west.url, east_known=ssh_known_hosts(east),
                                     west_known=ssh_known_hosts(west)))
    return path


def vgpuctl(pair: tuple[Any, Any], tmp_path: Path, *args: str, **more: str) -> Any:
    """One command on the fleet; whatever it printed holds none of the passwords it was given."""
    inv = tmp_path / "fleet.yaml"
    if not inv.exists():
        write_inventory(pair, inv)
    variables = env(*pair, **more)
    result = CliRunner().invoke(app, [a.replace("INV", str(inv)) for a in args], env=variables)
    secrets = {v for k, v in variables.items() if "PASSWORD" in k or k.endswith("_PW")}
    for secret in secrets:
        assert secret not in result.stdout and secret not in result.stderr, (args, secret)
    return result


def vgpus(sim: Any, name: str) -> list[str]:
    si = sim.connect()
    try:
        return [d.backing.vgpu for d in find(si, name).config.hardware.device
                if isinstance(d, vim.vm.device.VirtualPCIPassthrough) and hasattr(d.backing, "vgpu")]
    finally:
        Disconnect(si)


def find(si: Any, name: str) -> Any:
    view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
    try:
        return next(o for o in view.view if o.name == name)
    finally:
        view.Destroy()


def policies(sim: Any) -> dict[str, str]:
    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.HostSystem], True)
        return {h.name: h.config.graphicsConfig.sharedPassthruAssignmentPolicy for h in view.view}
    finally:
        Disconnect(si)


def test_plan_and_apply_across_both_vcenters(pair: tuple[Any, Any], tmp_path: Path) -> None:
    east, west = pair
    planned = vgpuctl(pair, tmp_path, "-o", "json", "plan", "-f", "INV")
    assert planned.exit_code == 0, planned.output
    doc = json.loads(planned.stdout)
    assert doc["kind"] == "fleet-plan" and doc["failed"] == [] and [p["vcenter"] for p in doc["vcenters"]] == \
        ["east", "west"]
    by_name = {p["vcenter"]: p for p in doc["vcenters"]}
    assert by_name["east"]["url"] == east.url and by_name["west"]["url"] == west.url
    assert [v["vm"] for v in by_name["east"]["plan"]["vm_changes"]] == ["train-01"]
    assert sorted(v["vm"] for v in by_name["west"]["plan"]["vm_changes"]) == ["infer-01", "train-01"]
    assert {h["host"] for h in by_name["west"]["plan"]["host_changes"]} == {W1, W2}
    assert doc["summary"]["change"] == 3 and doc["summary"]["host_changes"] == 4

    text = vgpuctl(pair, tmp_path, "plan", "-f", "INV")
    assert f"== vCenter east ({east.url}) ==" in text.stdout and f"== vCenter west ({west.url}) ==" in text.stdout
    assert text.stdout.rstrip().splitlines()[-1].startswith("Fleet: 2 of 2 vCenters planned. Plan: 4 host changes")

    applied = vgpuctl(pair, tmp_path, "-o", "json", "apply", "-f", "INV", "--yes")
    assert applied.exit_code == 0, applied.output
    doc = json.loads(applied.stdout)
    assert doc["kind"] == "fleet-apply" and doc["failed"] == []
    assert {p["vcenter"]: p["apply"]["changed"] for p in doc["vcenters"]} == \
        {"east": ["train-01"], "west": ["infer-01", "train-01"]}
    # each vCenter got its own entries: train-01 is 20c in east, 10c in west
    assert vgpus(east, "train-01") == ["grid_a100-20c"] and vgpus(west, "train-01") == ["grid_a100-10c"]
    assert vgpus(west, "infer-01") == ["grid_a100-10c"]
    assert set(policies(east).values()) == set(policies(west).values()) == {"consolidation"}
    again = vgpuctl(pair, tmp_path, "plan", "-f", "INV", "--detailed-exitcode")
    assert again.exit_code == 0, again.output
    assert "No changes: every farm matches the inventory." in again.stdout

    # the run history keeps each vCenter's plan and what the apply did there
    runs = json.loads(vgpuctl(pair, tmp_path, "-o", "json", "runs").stdout)["runs"]
    apply_run = next(r for r in runs if r["command"] == "apply")
    assert apply_run["summary"]["change"] == 3 and apply_run["summary"]["host_changes"] == 4
    record = json.loads(vgpuctl(pair, tmp_path, "-o", "json", "runs", "show", apply_run["id"]).stdout)
    parts = {p["vcenter"]: p for p in record["vcenters"]}
    assert sorted(v["vm"] for v in parts["west"]["plan"]["vm_changes"]) == ["infer-01", "train-01"]
    assert {v["vm"]: v["status"] for v in parts["east"]["result"]["vms"]} == {"train-01": "changed"}
    shown = vgpuctl(pair, tmp_path, "runs", "show", apply_run["id"]).stdout
    assert f"vCenter east ({east.url}):" in shown and f"vCenter west ({west.url}):" in shown
    planned_run = next(r for r in runs if r["command"] == "plan")
    plan_record = json.loads(vgpuctl(pair, tmp_path, "-o", "json", "runs", "show", planned_run["id"]).stdout)
    assert [p["vcenter"] for p in plan_record["vcenters"]] == ["east", "west"]


@pytest.mark.parametrize("how", ["down", "refuses"])
def test_one_vcenter_failing_leaves_the_other_complete(pair: tuple[Any, Any], tmp_path: Path, how: str) -> None:
    east, west = pair
    more: dict[str, str] = {}
    if how == "down":
        west.stop()
    else:
        more["VGPUCTL_PASSWORD_WEST"] = "wrong-west-pw"
    planned = vgpuctl(pair, tmp_path, "plan", "-f", "INV", **more)
    assert planned.exit_code == 1  # the whole plan is shown for what could be read, then exit 1
    assert f"== vCenter east ({east.url}) ==" in planned.stdout and "+ vgpu grid_a100-20c" in planned.stdout
    west_error = [line for line in planned.stdout.splitlines() if line.startswith("error: ")]
    assert len(west_error) == 1, planned.stdout
    assert planned.stderr.strip().splitlines()[-1].startswith("error: vCenter west: ")
    if how == "refuses":
        assert "wrong user name or password" in west_error[0]
    detailed = vgpuctl(pair, tmp_path, "plan", "-f", "INV", "--detailed-exitcode", **more)
    assert detailed.exit_code == 1 and detailed.stdout == planned.stdout  # not 2: a vCenter failed
    refused = vgpuctl(pair, tmp_path, "plan", "-f", "INV", "--out", str(tmp_path / "fleet.plan"), **more)
    assert refused.exit_code == 1 and not (tmp_path / "fleet.plan").exists()

    applied = vgpuctl(pair, tmp_path, "-o", "json", "apply", "-f", "INV", "--yes", **more)
    assert applied.exit_code == 1, applied.output
    doc = json.loads(applied.stdout)
    parts = {p["vcenter"]: p for p in doc["vcenters"]}
    assert doc["failed"] == ["west"] and parts["west"]["apply"] is None and parts["west"]["error"]
    assert parts["east"]["apply"]["changed"] == ["train-01"] and parts["east"]["apply"]["failed"] == []
    assert vgpus(east, "train-01") == ["grid_a100-20c"] and set(policies(east).values()) == {"consolidation"}
    if how == "refuses":
        assert vgpus(west, "train-01") == [] and set(policies(west).values()) == {"performance"}


def test_a_vcenter_scoped_run_reads_only_that_vcenter(pair: tuple[Any, Any], tmp_path: Path) -> None:
    east, west = pair
    west.stop()  # out of scope: never contacted, so its being down fails nothing
    planned = vgpuctl(pair, tmp_path, "-o", "json", "plan", "-f", "INV", "--vcenter", "east")
    assert planned.exit_code == 0, planned.output
    doc = json.loads(planned.stdout)
    assert [p["vcenter"] for p in doc["vcenters"]] == ["east"] and doc["out_of_scope"] == ["west"]
    applied = vgpuctl(pair, tmp_path, "apply", "-f", "INV", "--vcenter", "e*", "--vm", "train-01", "--yes")
    assert applied.exit_code == 0, applied.output
    assert "out of scope (--vcenter), untouched: vCenters west" in applied.stdout
    assert vgpus(east, "train-01") == ["grid_a100-20c"]
    assert set(policies(east).values()) == {"performance"}  # the hosts' change is out of --vm's scope: untouched
    nowhere = vgpuctl(pair, tmp_path, "plan", "-f", "INV", "--vcenter", "east", "--vm", "infer-*")
    assert nowhere.exit_code == 1
    assert "error: --vm infer-*: matches nothing in the vCenters read (east)" in nowhere.stderr


def test_leases_stay_in_their_own_vcenter(pair: tuple[Any, Any], tmp_path: Path) -> None:
    """Another run holds west's esx-01 (its lease in west's vCenter); east's esx-01 is free: the fleet's apply
    changes east's hosts, leaves west's held host and its lease alone, and leaves no lease of its own behind."""
    east, west = pair
    settings = ConnectionSettings(west.url, west.username, west.password, insecure=True)
    with open_session(settings) as session:
        observed = pipeline.observe(session, "DC1")
        lease = Lease(Fields(session), W1, observed.hosts[W1].moid, "other-run-7", ttl_s=600).acquire()
        try:
            planned = vgpuctl(pair, tmp_path, "plan", "-f", "INV")
            held = [line for line in planned.stdout.splitlines() if "held by run other-run-7" in line]
            assert len(held) == 1 and held[0].startswith(f"Warning: host {W1}"), planned.stdout
            west_section = planned.stdout.index("== vCenter west")
            assert planned.stdout.index(held[0]) > west_section  # in west's section only
            applied = vgpuctl(pair, tmp_path, "-o", "json", "apply", "-f", "INV", "--yes")
            assert applied.exit_code == 1, applied.output
            parts = {p["vcenter"]: p for p in json.loads(applied.stdout)["vcenters"]}
            assert {h["host"]: h["status"] for h in parts["east"]["apply"]["hosts"]} == {H1: "changed", H2: "changed"}
            west_hosts = {h["host"]: h for h in parts["west"]["apply"]["hosts"]}
            assert west_hosts[W1]["status"] == "failed" and "other-run-7" in west_hosts[W1]["message"]
            assert policies(west)[W1] == "performance" and policies(east)[H1] == "consolidation"
            assert lease_run(west, W1) == "other-run-7"  # its holder's, untouched
            assert lease_run(east, H1) is None and lease_run(east, H2) is None  # east's run let its own go
            assert lease_run(west, W2) is None
        finally:
            lease.release()


def test_vm_claims_stay_in_their_own_vcenter(pair: tuple[Any, Any], tmp_path: Path) -> None:
    """Another run is changing west's train-01 (its claim in west's vCenter); east's train-01, of the same name,
    is no concern of it: the fleet's apply changes east's train-01 and west's infer-01, leaves west's train-01 to
    its holder, naming it, and leaves no claim of its own held in either vCenter."""
    east, west = pair
    settings = ConnectionSettings(west.url, west.username, west.password, insecure=True)
    with open_session(settings) as session:
        moid = pipeline.observe(session, "DC1").vms["train-01"].moid
        claim = VmClaim(Fields(session, "VirtualMachine"), "train-01", moid, "other-run-8", ttl_s=600).acquire()
        try:
            applied = vgpuctl(pair, tmp_path, "-o", "json", "apply", "-f", "INV", "--yes")
            assert applied.exit_code == 1, applied.output
            parts = {p["vcenter"]: p["apply"] for p in json.loads(applied.stdout)["vcenters"]}
            assert parts["east"]["changed"] == ["train-01"] and parts["east"]["failed"] == []
            assert parts["west"]["changed"] == ["infer-01"] and parts["west"]["failed"] == ["train-01"]
            held = next(v for v in parts["west"]["vms"] if v["vm"] == "train-01")
            assert "other-run-8" in held["message"] and "is changing this VM" in held["message"], held
            assert vgpus(east, "train-01") == ["grid_a100-20c"] and vgpus(west, "infer-01") == ["grid_a100-10c"]
            assert vgpus(west, "train-01") == []
            assert claim_folders(west) == {CLAIM_FOLDER.format(moid=moid)}  # its holder's, untouched
            assert claim_folders(east) == set()  # east's run let its own go
        finally:
            claim.release()


def test_work_records_stay_in_their_own_vcenter(pair: tuple[Any, Any], tmp_path: Path) -> None:
    """West's esx-01 holds an attribute that is no work record: west's plan is refused for it, in west's section
    only; east's part is planned and applied, and its hosts' records are its own (written and cleared in east)."""
    east, west = pair
    set_work(west, W1, "not json at all")
    line = f"host {W1}: its vgpuctl.work attribute is no vgpuctl work record"
    planned = vgpuctl(pair, tmp_path, "plan", "-f", "INV")
    assert planned.exit_code == 1
    assert planned.stdout.count(line) == 1 and planned.stdout.index(line) > planned.stdout.index("== vCenter west")
    assert "+ vgpu grid_a100-20c" in planned.stdout  # east's plan, whole
    applied = vgpuctl(pair, tmp_path, "-o", "json", "apply", "-f", "INV", "--yes")
    assert applied.exit_code == 1, applied.output
    doc = json.loads(applied.stdout)
    parts = {p["vcenter"]: p for p in doc["vcenters"]}
    assert doc["failed"] == ["west"] and parts["west"]["apply"] is None
    assert parts["east"]["apply"]["changed"] == ["train-01"]
    assert {h["host"]: h["status"] for h in parts["east"]["apply"]["hosts"]} == {H1: "changed", H2: "changed"}
    assert work(west, W1) == "not json at all" and work(west, W2) == ""  # west's records as they were
    assert work(east, H1) == work(east, H2) == ""  # east's, finished
    assert policies(west)[W1] == "performance" and vgpus(west, "train-01") == []


def set_work(sim: Any, host: str, text: str) -> None:
    si = sim.connect()
    try:
        cfm = si.content.customFieldsManager
        key = next((f.key for f in cfm.field or [] if f.name == WORK_FIELD), None)
        if key is None:
            key = cfm.AddCustomFieldDef(name=WORK_FIELD, moType=vim.HostSystem).key
        cfm.SetField(entity=find_host(si, host), key=key, value=text)
    finally:
        Disconnect(si)


def work(sim: Any, host: str) -> str:
    """A host's work record in this vCenter, as it holds it."""
    si = sim.connect()
    try:
        keys = {f.key: f.name for f in si.content.customFieldsManager.field or []}
        return next((v.value for v in find_host(si, host).customValue if keys.get(v.key) == WORK_FIELD), "")
    finally:
        Disconnect(si)


def find_host(si: Any, name: str) -> Any:
    view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.HostSystem], True)
    try:
        return next(h for h in view.view if h.name == name)
    finally:
        view.Destroy()


def claim_folders(sim: Any) -> set[str]:
    """The VM claims held in this vCenter (their lock folders)."""
    si = sim.connect()
    try:
        return {c.name for c in si.content.rootFolder.childEntity if c.name.startswith(CLAIM_FOLDER.split("{")[0])}
    finally:
        Disconnect(si)


def lease_run(sim: Any, host: str) -> str | None:
    """The run holding a host's lease in this vCenter (its lock folder there and its description), or None."""
    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.HostSystem], True)
        the_host = next(h for h in view.view if h.name == host)
        keys = {f.key: f.name for f in si.content.customFieldsManager.field}
        value = next((v.value for v in the_host.customValue if keys.get(v.key) == LEASE_FIELD), "")
        folders = {c.name for c in si.content.rootFolder.childEntity}
        info = parse_lease(value) if value else None
        held = LEASE_FOLDER.format(moid=the_host._moId) in folders
        return info.run if info is not None and held else None
    finally:
        Disconnect(si)


def test_a_saved_fleet_plan_applies_whole_and_is_refused_when_one_vcenter_moved(pair: tuple[Any, Any],
                                                                                 tmp_path: Path) -> None:
    east, west = pair
    plan_file = tmp_path / "fleet.plan"
    saved = vgpuctl(pair, tmp_path, "plan", "-f", "INV", "--vm", "train-01", "--out", str(plan_file))
    assert saved.exit_code == 0, saved.output
    shown = vgpuctl(pair, tmp_path, "show", str(plan_file))
    assert shown.stdout == saved.stdout and f"west ({west.url})" in shown.stderr
    si = west.connect()  # another operator powers west's train-01 on after the plan was made
    try:
        WaitForTask(find(si, "train-01").PowerOnVM_Task())
    finally:
        Disconnect(si)
    refused = vgpuctl(pair, tmp_path, "apply", str(plan_file), "--yes")
    assert refused.exit_code == 1
    assert "error: vCenter west: the farm changed since" in refused.stderr and "nothing was changed" in refused.stderr
    assert vgpus(east, "train-01") == [] and set(policies(east).values()) == {"performance"}  # east untouched too

    saved = vgpuctl(pair, tmp_path, "plan", "-f", "INV", "--vm", "train-01", "--out", str(plan_file))
    assert saved.exit_code == 0, saved.output
    applied = vgpuctl(pair, tmp_path, "apply", str(plan_file), "--yes")
    assert applied.exit_code == 0, applied.output
    assert vgpus(east, "train-01") == ["grid_a100-20c"] and vgpus(west, "train-01") == ["grid_a100-10c"]
    assert vgpus(west, "infer-01") == []  # out of the saved plan's scope


def test_read_only_commands_have_a_section_per_vcenter(pair: tuple[Any, Any], tmp_path: Path) -> None:
    east, west = pair
    status = json.loads(vgpuctl(pair, tmp_path, "-o", "json", "status", "-f", "INV", "--no-vm-classes").stdout)
    assert status["kind"] == "fleet-status" and status["failed"] == []
    vms = {p["vcenter"]: sorted(v["vm"] for v in p["status"]["vms"]) for p in status["vcenters"]}
    assert vms == {"east": ["train-01"], "west": ["infer-01", "train-01"]}
    assert {p["vcenter"]: p["status"]["datacenter"] for p in status["vcenters"]} == {"east": "DC0", "west": "DC1"}

    exported = tmp_path / "export.yaml"
    result = vgpuctl(pair, tmp_path, "export", "-f", "INV", "--out", str(exported))
    assert result.exit_code == 0, result.output
    text = exported.read_text()
    assert "vcenters:\n  - name: east\n" in text and "    vcenter: west\n" in text
    for sim, name in ((east, "east"), (west, "west")):  # the export plans no change in either vCenter (it has
        # no ssh sections: the shell's password of each in turn)
        replanned = vgpuctl(pair, tmp_path, "plan", "-f", str(exported), "--vcenter", name, "--detailed-exitcode",
                            VGPUCTL_ESXI_PASSWORD=sim.password)
        assert replanned.exit_code == 0, replanned.output

    preflight = json.loads(vgpuctl(pair, tmp_path, "-o", "json", "preflight", "-f", "INV").stdout)
    assert preflight["kind"] == "fleet-preflight" and preflight["ok"]
    assert [p["preflight"]["vcenter"] for p in preflight["vcenters"]] == [east.url, west.url]
    capacity = json.loads(vgpuctl(pair, tmp_path, "-o", "json", "capacity", "-f", "INV").stdout)
    assert capacity["kind"] == "fleet-capacity" and len(capacity["vcenters"]) == 2
    drained = vgpuctl(pair, tmp_path, "-o", "json", "capacity", "-f", "INV", "--drain", W1, "--vcenter", "west")
    assert drained.exit_code == 0, drained.output
    assert json.loads(drained.stdout)["kind"] == "capacity-drain" and W1 in drained.stdout and H1 not in drained.stdout

    west.stop()
    down = vgpuctl(pair, tmp_path, "status", "-f", "INV", "--no-vm-classes")
    assert down.exit_code == 1
    assert f"host {H1}" in down.stdout and f"host {H2}" in down.stdout  # east's section complete
    assert "Fleet: 2 vCenters; failed: west" in down.stdout
    assert down.stderr.strip().splitlines()[-1].startswith("error: vCenter west: ")


def test_ctrl_c_stops_every_vcenters_part_and_leaves_no_lock_in_either(pair: tuple[Any, Any],
                                                                        tmp_path: Path) -> None:
    """The first Ctrl-C during a fleet's apply: no new step starts in any vCenter, the steps in flight finish,
    each vCenter's summary says what was left, exit 130; no lease or VM claim of the run stays in either vCenter
    and its record says it was interrupted, with each vCenter's part."""
    east, west = pair
    for sim, names in ((east, ["train-01"]), (west, ["train-01", "infer-01"])):
        for name in names:
            sim.delay(name, "ReconfigVM_Task", 3.0)
    inv = write_inventory(pair, tmp_path / "fleet.yaml")
    state = tmp_path / "state"
    variables = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    variables |= env(east, west, XDG_STATE_HOME=str(state))
    proc = subprocess.Popen([sys.executable, "-m", "vgpuctl", "apply", "-f", str(inv), "--yes", "--parallel", "1"],
                            env=variables, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:  # progress lines, one per step change
        seen.append(line)
        if "east/train-01: reconfigure" in line:
            break
    else:
        raise AssertionError("the apply ended before east's VM was reconfigured: " + "".join(seen))
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    err = "".join(seen) + err
    assert proc.returncode == 130, out + err
    assert "interrupted: no new step starts" in err and "Apply interrupted" in out
    assert vgpus(east, "train-01") == ["grid_a100-20c"]  # its reconfigure was in flight: it finished
    assert vgpus(west, "train-01") == [] or vgpus(west, "infer-01") == []  # one at a time: one never started
    for sim, hosts in ((east, (H1, H2)), (west, (W1, W2))):
        assert claim_folders(sim) == set()
        assert [lease_run(sim, h) for h in hosts] == [None, None]
    runs = CliRunner().invoke(app, ["-o", "json", "runs"], env={"XDG_STATE_HOME": str(state)})
    (record,) = json.loads(runs.stdout)["runs"]
    assert record["state"] == "interrupted" and record["exit_code"] == 130


def test_the_fleets_status_page_in_a_browser(pair: tuple[Any, Any], tmp_path: Path) -> None:
    """status --html of a fleet: a section per vCenter drawn as one vCenter's page draws it; a vCenter that is
    down shows why in its section, and the command exits 1 after writing the page."""
    from browser import chromium_or_skip, open_page, screenshots_folder

    chromium = chromium_or_skip()
    _, west = pair
    page = tmp_path / "fleet.html"
    result = vgpuctl(pair, tmp_path, "status", "-f", "INV", "--no-vm-classes", "--usage", "--html", str(page))
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and f"Wrote {page}" in result.stderr
    shown = open_page(chromium, page, 1280, screenshots_folder(tmp_path, "fleet-status"))
    assert shown.console_errors() == []
    assert re.findall(r'data-vcenter="([^"]*)"', shown.dom) == ["east", "west"]
    assert re.findall(r'data-host="([^"]*)"', shown.dom) == [H1, H2, W1, W2]
    status = json.loads(vgpuctl(pair, tmp_path, "-o", "json", "status", "-f", "INV", "--no-vm-classes").stdout)
    gpus = sum(len(h["gpus"]) for p in status["vcenters"] for h in p["status"]["hosts"])
    assert gpus and len(re.findall(r'data-gpu="', shown.dom)) == gpus and "average utilization" in shown.dom

    west.stop()
    down = vgpuctl(pair, tmp_path, "status", "-f", "INV", "--no-vm-classes", "--html", str(page))
    assert down.exit_code == 1 and down.stderr.strip().splitlines()[-1].startswith("error: vCenter west: ")
    shown = open_page(chromium, page, 1280, screenshots_folder(tmp_path, "fleet-status-down"))
    assert re.findall(r'data-host="([^"]*)"', shown.dom) == [H1, H2]
    assert "could not be read: vCenters west" in shown.dom


@pytest.mark.parametrize("forged", ["a part", "the fleet's summary"])
def test_a_consistent_forgery_of_a_fleet_plan_is_refused(pair: tuple[Any, Any], tmp_path: Path, forged: str) -> None:
    """Someone edits the plan section of a fleet's plan file and makes the digest match again: apply makes every
    vCenter's plan again and refuses, before any change anywhere, unless it is the saved section."""
    east, west = pair
    plan_file = tmp_path / "fleet.plan"
    saved = vgpuctl(pair, tmp_path, "plan", "-f", "INV", "--vm", "train-01", "--out", str(plan_file))
    assert saved.exit_code == 0, saved.output
    doc = json.loads(plan_file.read_text())
    if forged == "a part":  # west's train-01 taken out of west's section
        west_plan = doc["plan"]["vcenters"][1]["plan"]
        west_plan["vm_changes"] = [c for c in west_plan["vm_changes"] if c["vm"] != "train-01"]
    else:
        doc["plan"]["summary"]["change"] = 0
    doc["digest"] = content_digest(doc)
    plan_file.write_text(json.dumps(doc, indent=2))
    refused = vgpuctl(pair, tmp_path, "apply", str(plan_file), "--yes")
    assert refused.exit_code == 1, refused.output
    differ = "vm_changes differ" if forged == "a part" else "summary differ"
    line = refused.stderr.strip().splitlines()[-1]
    assert "its plan section is not the plan its inventory gives" in line and differ in line, refused.stderr
    assert line.startswith("error: vCenter west: " if forged == "a part" else f"error: {plan_file}: ")
    assert vgpus(east, "train-01") == [] and vgpus(west, "train-01") == []  # nothing changed anywhere


def test_each_vcenters_credentials_are_never_written(gpusim_pair: Callable[..., Any], no_vgpuctl_env: None,
                                                     tmp_path: Path) -> None:
    """Each vCenter's password from where a fleet takes it (east's in its URL variable, percent-encoded; west's
    in its password file), runs as real processes with -vv: no password of either, nor any session cookie either
    vCenter handed out, is in what the runs print or in any file they leave (plan file, export, run folders)."""
    secret = {"east": "East:pw@51-a", "west": "West:pw@72-b"}  # a ':' and an '@': the URL must encode them
    pair = gpusim_pair(farm("DC0", secret["east"], "east.sim", [vm("train-01", H1)]),
                       farm("DC1", secret["west"], "west.sim", [vm("train-01", W1), vm("infer-01", W2)]))
    east, west = pair
    run, keep = tmp_path / "run", tmp_path / "keep"  # what the runs may write to; the password file apart
    (run / "home").mkdir(parents=True)
    keep.mkdir()
    inventory = write_inventory(pair, run / "fleet.yaml")
    password_file = keep / "west.pw"
    password_file.write_text(secret["west"] + "\n")
    password_file.chmod(0o600)
    parts = urlsplit(east.url)
    east_url = urlunsplit((parts.scheme, f"{quote(east.username, safe='')}:{quote(secret['east'], safe='')}@"
                           f"{parts.netloc}", parts.path, "", ""))
    variables = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    variables.update({k: v for k, v in env(east, west).items() if "PASSWORD" not in k})
    variables.update(HOME=str(run / "home"), XDG_STATE_HOME=str(run / "xdg"), VGPUCTL_STATE_DIR=str(run / "state"),
                     VGPUCTL_URL_EAST=east_url, VGPUCTL_PASSWORD_FILE_WEST=str(password_file),
                     EAST_ESXI_PW=secret["east"], WEST_ESXI_PW=secret["west"])
    runs = [
        ["-vv", "plan", "-f", str(inventory), "--out", str(run / "fleet.plan")],
        ["-vv", "-o", "json", "apply", "--yes", str(run / "fleet.plan")],
        ["-vv", "-o", "json", "status", "-f", str(inventory), "--no-vm-classes"],
        ["-vv", "export", "-f", str(inventory), "--out", str(run / "export.yaml")],
    ]
    outputs = [(args, subprocess.run([sys.executable, "-m", "vgpuctl", *args], capture_output=True, text=True,
                                     env=variables, stdin=subprocess.DEVNULL, check=False)) for args in runs]
    assert [done.returncode for _, done in outputs] == [0, 0, 0, 0], \
        [(a, d.returncode, d.stderr[-2000:]) for a, d in outputs]
    assert "SOAP -> " in outputs[1][1].stderr  # the -vv trace ran
    assert vgpus(east, "train-01") == ["grid_a100-20c"] and vgpus(west, "infer-01") == ["grid_a100-10c"]
    cookies = session_cookies(east) | session_cookies(west)
    secrets = {*secret.values(), *(quote(s, safe="") for s in secret.values()), *cookies}
    for args, done in outputs:
        for one in secrets:
            assert one not in done.stdout and one not in done.stderr, (args, one)
    files = [p for p in run.rglob("*") if p.is_file()]
    assert run / "fleet.plan" in files and run / "export.yaml" in files
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="replace")
        for one in secrets:
            assert one not in text, (path, one)
