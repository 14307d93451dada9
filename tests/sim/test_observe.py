"""observe() against gpusim, checked against the simulator's own control view and a separate pyVmomi reader."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim

from vgpuctl.errors import NotFound
from vgpuctl.farm.state import nvlink_hosts_for
from vgpuctl.vsphere import observe as observe_mod
from vgpuctl.vsphere import rawread, readlist
from vgpuctl.vsphere.observe import observe
from vgpuctl.vsphere.session import ConnectionSettings, open_session

pytestmark = pytest.mark.sim

FARM = {
    "datacenter": "DC-GPU",
    "clusters": [
        {
            "name": "A100",
            "hosts": 2,
            "gpus_per_host": 4,
            "model": "A100-40GB",
            "nvlink": "pairs",
            "graphics_type": "sharedDirect",
        },
        {
            "name": "H100-MIG",
            "hosts": 1,
            "gpus_per_host": 2,
            "model": "H100-80GB",
            "mig": True,
            "graphics_type": "sharedDirect",
        },
    ],
    "templates": [{"name": "tmpl", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
    "vms": [
        {
            "name": "busy-01",
            "host": "esx-01.gpu.sim",
            "cpus": 16,
            "memory_mb": 131072,
            "firmware": "efi",
            "vgpus": ["grid_a100-20c", "grid_a100-20c", "grid_a100-20c"],
            "memory_locked": True,
            "power_on": True,
        },
        {"name": "mig-01", "host": "esx-03.gpu.sim", "vgpus": ["grid_h100-3-40c"], "memory_locked": True},
        {"name": "plain-01", "cpus": 2, "memory_mb": 4096, "firmware": "bios"},
    ],
}


@pytest.fixture(scope="module")
def sim(gpusim_session_factory):
    return gpusim_session_factory(FARM)


def settings(sim) -> ConnectionSettings:
    return ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)


def read(sim, datacenter: str | None = None):
    with open_session(settings(sim)) as session:
        return observe(session, datacenter)


def test_hosts_and_gpus_match_the_simulator(sim) -> None:
    observed = read(sim)
    truth = sim.request("GET", "/hosts")["hosts"]
    assert observed.datacenter == "DC-GPU"
    assert observed.api_version.startswith("8.")
    assert sorted(observed.hosts) == sorted(h["name"] for h in truth)
    assert observed.clusters == {"A100": ["esx-01.gpu.sim", "esx-02.gpu.sim"], "H100-MIG": ["esx-03.gpu.sim"]}
    for h in truth:
        host = observed.hosts[h["name"]]
        assert host.cluster == h["cluster"]
        assert host.default_graphics_type == h["defaultGraphicsType"]
        assert host.assignment_policy == h["assignmentPolicy"]
        assert host.max_vgpus_per_vm == 8
        assert [g.pci_id for g in host.gpus] == sorted(g["pciId"] for g in h["gpus"])
        by_pci = {g["pciId"]: g for g in h["gpus"]}
        for gpu in host.gpus:
            t = by_pci[gpu.pci_id]
            assert gpu.vgpu_mode == t["vgpuMode"]
            assert gpu.graphics_type == t["graphicsType"]
            assert gpu.vendor_id == 0x10DE and gpu.device_id != 0
            assert gpu.memory_kb > 0
        offered = sorted({p for g in h["gpus"] for p in g["profiles"]})
        assert host.offered_profiles == offered
        assert sorted(host.profiles) == offered


def test_profiles_carry_framebuffer_and_sharing(sim) -> None:
    observed = read(sim)
    a100 = observed.hosts["esx-01.gpu.sim"].profiles
    assert a100["grid_a100-40c"].fb_gb == 40 and a100["grid_a100-40c"].sharing == "timeSliced"
    assert a100["grid_a100-4c"].fb_gb == 4
    mig = observed.hosts["esx-03.gpu.sim"].profiles
    assert mig["grid_h100-3-40c"].fb_gb == 40 and mig["grid_h100-3-40c"].sharing == "mig"
    assert all(p.sharing == "mig" for p in mig.values())


def test_vms_match_a_direct_read(sim) -> None:
    sim.request("POST", "/vms/busy-01/guest", {"ip": "10.1.2.3", "state": "running"})
    observed = read(sim)
    si = sim.connect()
    try:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        truth = {vm.name: vm for vm in view.view}
        assert set(observed.vms) == set(truth)
        for name, vm in truth.items():
            got = observed.vms[name]
            assert got.moid == vm._moId
            assert got.is_template == vm.config.template
            assert got.power_state == vm.runtime.powerState
            assert got.cpus == vm.config.hardware.numCPU and got.memory_mb == vm.config.hardware.memoryMB
            assert got.memory_reservation_locked == bool(vm.config.memoryReservationLockedToMax)
            assert got.firmware == vm.config.firmware
            assert got.host == vm.runtime.host.name
            expected = sorted(
                (d.key, d.backing.vgpu)
                for d in vm.config.hardware.device
                if isinstance(d, vim.vm.device.VirtualPCIPassthrough)
                and isinstance(d.backing, vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo)
            )
            assert [(v.key, v.profile) for v in got.vgpus] == expected
            assert got.extra_config == {o.key: str(o.value) for o in vm.config.extraConfig}
    finally:
        Disconnect(si)
    busy = observed.vms["busy-01"]
    assert [v.profile for v in busy.vgpus] == ["grid_a100-20c"] * 3
    assert busy.cluster == "A100" and busy.power_state == "poweredOn"
    assert busy.guest_ips == ["10.1.2.3"] and busy.tools_running
    assert observed.vms["tmpl"].is_template
    assert observed.vms["plain-01"].firmware == "bios" and observed.vms["plain-01"].vgpus == []


def test_gpus_name_the_vms_holding_them(sim) -> None:
    si = sim.connect()
    try:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        WaitForTask(next(v for v in view.view if v.name == "mig-01").PowerOnVM_Task())
    finally:
        Disconnect(si)
    observed = read(sim)
    truth = {(a["host"], a["gpu"], a["vmName"]) for a in sim.request("GET", "/assignments")["assignments"]}
    assert ("esx-03.gpu.sim", "0000:3b:00.0", "mig-01") in truth
    seen = {(h.name, g.pci_id, vm) for h in observed.hosts.values() for g in h.gpus for vm in g.vms}
    assert seen == truth
    assert observed.vms["mig-01"].power_state == "poweredOn"


def test_folders_are_paths_under_the_vm_folder(sim) -> None:
    si = sim.connect()
    try:
        content = si.RetrieveContent()
        dc = next(e for e in content.rootFolder.childEntity if e.name == "DC-GPU")
        ml = dc.vmFolder.CreateFolder("ml")
        train = ml.CreateFolder("train")
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        vm = next(v for v in view.view if v.name == "plain-01")
        WaitForTask(train.MoveIntoFolder_Task([vm]))
    finally:
        Disconnect(si)
    observed = read(sim)
    assert {"ml", "ml/train"} <= set(observed.folders)
    assert observed.vms["plain-01"].folder == "ml/train"
    assert observed.vms["busy-01"].folder is None
    assert observed.folder_moids["ml/train"] == train._moId


def test_unknown_datacenter(sim) -> None:
    with pytest.raises(NotFound, match=r"datacenter 'nope' not found .*DC-GPU"):
        read(sim, "nope")
    assert read(sim, "DC-GPU").datacenter == "DC-GPU"


def test_paging_is_followed(sim, monkeypatch) -> None:
    whole = read(sim)
    monkeypatch.setattr(observe_mod, "PAGE_SIZE", 3)
    monkeypatch.setattr(readlist, "LEAN_PAGE_SIZE", 3)
    paged = read(sim)
    assert paged.round_trips > whole.round_trips  # ContinueRetrievePropertiesEx was needed
    assert sorted(paged.vms) == sorted(whole.vms)
    assert sorted(paged.hosts) == sorted(whole.hosts)
    assert paged.clusters == whole.clusters


def test_lean_pages_asked_for_early_read_as_one_page(sim, monkeypatch) -> None:
    """Pages of 2 objects, each asked for as soon as the page before names its token (before that page is read
    to its end): the same farm as one page. The hosts' read and the VMs' go out together, and are read in turn."""
    whole = read(sim).to_dict()
    events: list[str] = []
    real = rawread.SentRequest

    class Recorded(real):  # type: ignore[misc, valid-type]
        def __init__(self, stub, mo, method, args):
            events.append(method)
            super().__init__(stub, mo, method, args)

        def chunks(self):
            yield from super().chunks()
            events.append("read")

    monkeypatch.setattr(rawread, "SentRequest", Recorded)
    monkeypatch.setattr(readlist, "LEAN_PAGE_SIZE", 2)
    paged = read(sim).to_dict()
    assert paged.pop("round_trips") > whole.pop("round_trips")
    assert paged == whole
    host_pages, vm_pages = (len(paged["hosts"]) + 1) // 2, (len(paged["vms"]) + 1) // 2
    assert host_pages > 1 and vm_pages > 1

    def read_in(pages: int) -> list[str]:
        return ["ContinueRetrievePropertiesEx", "read"] * (pages - 1) + ["read"]

    assert events == ["RetrievePropertiesEx", "RetrievePropertiesEx", *read_in(host_pages), *read_in(vm_pages)]


def test_round_trips_do_not_grow_with_vms(gpusim_factory) -> None:
    trips = {}
    for count in (10, 200):
        farm = {
            "clusters": [{"name": "GPU-Cluster", "hosts": 4, "gpus_per_host": 4, "model": "A100-40GB"}],
            "vm_count": count,
        }
        sim = gpusim_factory(farm)
        try:
            observed = read(sim)
        finally:
            sim.stop()  # one farm at a time on a small machine
        assert len([v for v in observed.vms.values() if not v.is_template]) == count
        trips[count] = observed.round_trips
    assert trips[10] == trips[200]
    # view + one retrieve for folders and the other small types + one for hosts + one for VMs (the three sent
    # together) + one profile read for identical hosts; the view is the session's, ended with it
    assert trips[200] == 5


def test_host_not_responding_gets_profile_sizes_from_names(sim) -> None:
    sim.request("POST", "/hosts/esx-02.gpu.sim/down", {})
    try:
        observed = read(sim)
    finally:
        sim.request("POST", "/hosts/esx-02.gpu.sim/up", {})
    host = observed.hosts["esx-02.gpu.sim"]
    assert host.connection_state != "connected"
    assert all(p.fb_gb == int(name.rsplit("-", 1)[1][:-1]) for name, p in host.profiles.items())


def test_older_vsphere_uses_its_own_namespace_and_limits(gpusim_factory) -> None:
    farm = {
        "api_version": "7.0.2.0",
        "clusters": [
            {"name": "C", "hosts": 1, "gpus_per_host": 1, "model": "A100-40GB", "graphics_type": "sharedDirect"}
        ],
    }
    sim = gpusim_factory(farm)
    with open_session(settings(sim)) as session:
        assert session.stub.version == "vim.version.v7_0_2_0"
        observed = observe(session)
    host = observed.hosts["esx-01.gpu.sim"]
    assert host.max_vgpus_per_vm == 4
    # RetrieveVgpuProfileInfo arrived in 7.0.3: sizes come from the names, with no failed call
    assert host.profiles["grid_a100-20c"].fb_gb == 20
    assert observed.round_trips == 4  # view, the three reads, no profile read


def test_the_sessions_view_is_reused_and_follows_the_farm(sim) -> None:
    """A second observe in one session reads over the view the first made (one round trip fewer) and sees what
    changed in between; a view gone behind the session's back is made again."""
    with open_session(settings(sim)) as session:
        first = observe(session)
        sim.rename_vm("busy-01", "busy-renamed")
        try:
            second = observe(session)
        finally:
            sim.rename_vm("busy-renamed", "busy-01")
        assert second.round_trips == first.round_trips - 1
        assert "busy-renamed" in second.vms and "busy-01" not in second.vms
        observe_mod._observe_view(session).DestroyView()
        third = observe(session)
        assert third.round_trips == first.round_trips + 3  # the three reads that found it gone, then all again
        assert set(third.vms) == set(first.vms)


def test_lean_vm_reader_matches_pyvmomi(sim, monkeypatch) -> None:
    sim.set_guest("busy-01", ip="10.9.8.7")
    lean = read(sim).to_dict()
    monkeypatch.setattr(observe_mod, "RAW_VMS", False)
    full = read(sim).to_dict()
    assert lean.pop("round_trips") == full.pop("round_trips") + 2  # hosts and VMs in their own requests
    assert lean == full
    assert lean["vms"]["busy-01"]["vgpus"] and lean["vms"]["busy-01"]["guest_ips"] == ["10.9.8.7"]


# ------------------------------------------------------------------------------------------ NVLink sets

A100_HOSTS = ["esx-01.gpu.sim", "esx-02.gpu.sim"]
PAIRS = {"0000:3b:00.0": 0, "0000:3c:00.0": 0, "0000:5e:00.0": 1, "0000:5f:00.0": 1}  # gpusim's nvlink: pairs


def read_nvlink(sim, hosts):
    with open_session(settings(sim)) as session:
        return observe(session, nvlink_hosts=hosts)


def expected_sets(host: dict) -> dict[str, int | None]:
    """gpusim's own view: GPUs of each NVLink set with links up (time-sliced), numbered by lowest PCI id."""
    sets: dict[int, list[str]] = {}
    for g in host["gpus"]:
        if g["nvlinkSet"] >= 0 and g["nvlinkUp"] and not g["migCurrent"]:
            sets.setdefault(g["nvlinkSet"], []).append(g["pciId"])
    ordered = sorted((sorted(s) for s in sets.values() if len(s) >= 2), key=lambda s: s[0])
    index = {pci: i for i, s in enumerate(ordered) for pci in s}
    return {g["pciId"]: index.get(g["pciId"]) for g in host["gpus"]}


def nvlink_sets_of(observed, host: str) -> dict[str, int | None]:
    return {g.pci_id: g.nvlink_set for g in observed.hosts[host].gpus}


def test_nvlink_pairs_are_observed_when_asked(sim) -> None:
    plain = read(sim)
    observed = read_nvlink(sim, A100_HOSTS)
    for name in A100_HOSTS:
        assert nvlink_sets_of(observed, name) == PAIRS
        assert nvlink_sets_of(observed, name) == expected_sets(sim.host(name))
        # the profile the device groups' names offer them for
        assert {tuple(g.nvlink_profiles) for g in observed.hosts[name].gpus} == {("grid_a100-40c",)}
    # the MIG host was not asked
    assert all(g.nvlink_set is None for g in observed.hosts["esx-03.gpu.sim"].gpus)
    assert observed.round_trips == plain.round_trips + len(A100_HOSTS)  # one QueryConfigTarget per host
    assert not observed.warnings


def test_default_farm_pairs_are_sets(gpusim) -> None:
    plain = read(gpusim)
    hosts = sorted(plain.hosts)
    assert len(hosts) == 4
    observed = read_nvlink(gpusim, hosts)
    for name in hosts:
        assert nvlink_sets_of(observed, name) == PAIRS == expected_sets(gpusim.host(name))
    assert observed.round_trips == plain.round_trips + 4


def test_nvlink_sets_are_not_queried_when_not_asked(sim) -> None:
    first = read(sim)
    for hosts in (None, [], ["no-such-host"]):
        observed = read_nvlink(sim, hosts)
        assert observed.round_trips == first.round_trips
        assert all(g.nvlink_set is None for h in observed.hosts.values() for g in h.gpus)


def test_hosts_without_nvlink_sets_get_none(sim) -> None:
    plain = read(sim)
    observed = read_nvlink(sim, ["esx-03.gpu.sim", "esx-01.gpu.sim"])
    assert all(g.nvlink_set is None for g in observed.hosts["esx-03.gpu.sim"].gpus)  # MIG: no NVLink P2P
    assert nvlink_sets_of(observed, "esx-01.gpu.sim")["0000:5f:00.0"] == 1
    assert observed.round_trips == plain.round_trips + 2


def test_a_failed_nvlink_query_is_a_warning(sim) -> None:
    sim.arm_fault("A100", "QueryConfigTarget", fault="HostCommunication", message="link lost")
    try:
        observed = read_nvlink(sim, A100_HOSTS)
    finally:
        sim.clear_faults()
    failed = [h for h in A100_HOSTS if all(g.nvlink_set is None for g in observed.hosts[h].gpus)]
    assert len(failed) == 1  # the fault fires once; the other host is read
    ok = next(h for h in A100_HOSTS if h not in failed)
    assert nvlink_sets_of(observed, ok) == expected_sets(sim.host(ok))
    assert observed.warnings == [f"host {failed[0]}: NVLink sets not read (HostCommunication: link lost)"]


def test_down_host_is_not_queried(sim) -> None:
    plain = read(sim)
    sim.host_down("esx-02.gpu.sim")
    try:
        observed = read_nvlink(sim, A100_HOSTS)
    finally:
        sim.host_up("esx-02.gpu.sim")
    assert observed.round_trips == plain.round_trips + 1
    assert all(g.nvlink_set is None for g in observed.hosts["esx-02.gpu.sim"].gpus)
    assert nvlink_sets_of(observed, "esx-01.gpu.sim")["0000:3b:00.0"] == 0


def _wait_connected(sim, host: str) -> None:
    import time

    while sim.host(host)["connectionState"] != "connected":  # bounded by gpusim's reboot_seconds
        time.sleep(0.05)


def test_nvlink_sets_disappear_when_nvlink_is_disabled(gpusim_factory) -> None:
    farm = {
        "reboot_seconds": 0.2,
        "clusters": [{"name": "C", "hosts": 2, "gpus_per_host": 4, "model": "A100-40GB", "nvlink": "pairs"}],
    }
    sim = gpusim_factory(farm)
    hosts = ["esx-01.gpu.sim", "esx-02.gpu.sim"]
    before = read_nvlink(sim, hosts)
    assert nvlink_sets_of(before, "esx-01.gpu.sim") == PAIRS
    si = sim.connect()
    try:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem], True)
        host = next(h for h in view.view if h.name == "esx-01.gpu.sim")
        host.configManager.kernelModuleSystem.UpdateModuleOptionString("nvidia", "NVreg_NvLinkDisable=1")
        # configured, not yet in effect: the links stay up until the host reboots
        assert nvlink_sets_of(read_nvlink(sim, hosts), "esx-01.gpu.sim") == nvlink_sets_of(before, "esx-01.gpu.sim")
        WaitForTask(host.EnterMaintenanceMode_Task(0))
        WaitForTask(host.RebootHost_Task(False))
        _wait_connected(sim, "esx-01.gpu.sim")
        WaitForTask(host.ExitMaintenanceMode_Task(0))
    finally:
        Disconnect(si)
    after = read_nvlink(sim, hosts)
    assert all(g.nvlink_set is None for g in after.hosts["esx-01.gpu.sim"].gpus)
    assert nvlink_sets_of(after, "esx-01.gpu.sim") == expected_sets(sim.host("esx-01.gpu.sim"))
    assert nvlink_sets_of(after, "esx-02.gpu.sim") == nvlink_sets_of(before, "esx-02.gpu.sim")
    assert after.round_trips == before.round_trips


def test_nvlink_sets_can_follow_a_plain_observe(sim) -> None:
    inventory = SimpleNamespace(vms=[SimpleNamespace(name="train-01", host=None, cluster="A100", nvlink="required")])
    with open_session(settings(sim)) as session:
        observed = observe(session)
        plain = observed.round_trips
        hosts = nvlink_hosts_for(inventory, observed)
        assert hosts == set(A100_HOSTS)
        assert observe_mod.observe_nvlink(session, observed, hosts) == A100_HOSTS
    assert observed.round_trips == plain + 2
    for name in A100_HOSTS:
        assert nvlink_sets_of(observed, name) == PAIRS
