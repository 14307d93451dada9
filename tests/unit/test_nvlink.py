"""vgpuctl.vsphere.nvlink: which hosts to ask for NVLink sets, sets and their group sizes from vendor device
groups, and the device group rule as placement and plan apply it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from hostfacts import host_facts
from ruamel.yaml import YAML

from vgpuctl import pipeline
from vgpuctl.farm.placement import Gpu, gpus_from_observed, place_vm
from vgpuctl.farm.state import nvlink_hosts_for
from vgpuctl.hosts.facts import adopt_nvlink_sets
from vgpuctl.inventory import load_inventory_text
from vgpuctl.model import Observed, ObservedGpu, ObservedHost, ObservedVm
from vgpuctl.planner import make_plan
from vgpuctl.vsphere.nvlink import (
    GroupedSet,
    component_pci_id,
    device_group_sets,
    group_profile,
    sets_from_device_groups,
)
from vgpuctl.vsphere.observe import set_nvlink_sets

pytestmark = pytest.mark.unit


def _observed() -> Observed:
    observed = Observed(datacenter="DC0")
    for name, cluster in [("h1", "A"), ("h2", "A"), ("h3", "B"), ("h4", None)]:
        observed.hosts[name] = ObservedHost(name=name, cluster=cluster)
        if cluster:
            observed.clusters.setdefault(cluster, []).append(name)
    observed.vms["old"] = ObservedVm(name="old", host="h3", cluster="B")
    observed.vms["tmpl"] = ObservedVm(name="tmpl", host="h4", is_template=True)
    return observed


def _inv(*vms: dict) -> NS:
    return NS(vms=[NS(**{"host": None, "cluster": None, "nvlink": "required", **vm}) for vm in vms])


@pytest.mark.parametrize(
    ("vms", "hosts"),
    [
        ([{"name": "old", "cluster": "A"}], {"h3"}),  # an existing VM stays on its host
        ([{"name": "new", "host": "h2"}], {"h2"}),
        ([{"name": "new", "cluster": "A"}], {"h1", "h2"}),
        ([{"name": "new", "cluster": "A", "host": "h4"}], {"h4"}),  # a named host wins over the cluster
        ([{"name": "tmpl", "cluster": "B"}], {"h3"}),  # a template of that name is not the VM
        ([{"name": "new", "cluster": "A", "nvlink": "none"}], set()),
        ([{"name": "new", "host": "nope"}, {"name": "x", "cluster": "nope"}], set()),
        ([{"name": "old"}, {"name": "new", "cluster": "A"}], {"h1", "h2", "h3"}),
        ([], set()),
    ],
)
def test_nvlink_hosts_for(vms: list[dict], hosts: set[str]) -> None:
    assert nvlink_hosts_for(_inv(*vms), _observed()) == hosts


def _group(*labels: str | None) -> NS:
    comps = [NS(device=NS(deviceInfo=None if label is None else NS(label=label))) for label in labels]
    return NS(deviceGroupName=f"Nvidia:{len(labels)}@grid_a100-40c%NVLink", componentDeviceInfo=comps)


GPUS = ["0000:3b:00.0", "0000:3c:00.0", "0000:5e:00.0", "0000:5f:00.0"]


def test_sets_from_device_groups_orders_by_lowest_pci_id() -> None:
    groups = [_group("0000:5F:00.0", "0000:5e:00.0"), _group("0000:3c:00.0", "0000:3b:00.0")]
    assert sets_from_device_groups(groups, GPUS) == [["0000:3b:00.0", "0000:3c:00.0"], ["0000:5e:00.0", "0000:5f:00.0"]]


def test_sets_from_device_groups_merges_and_filters() -> None:
    groups = [
        _group("0000:3b:00.0", "0000:3c:00.0"),
        _group("0000:3c:00.0", "0000:5e:00.0"),  # shares a GPU: one set
        _group("0000:5f:00.0", "0000:99:00.0"),  # one known GPU only: no set
        _group(None, None),  # a group without physical GPUs (vCenter's cluster-wide answer)
        _group("GPU 1", "GPU 2"),
    ]
    assert sets_from_device_groups(groups, GPUS) == [["0000:3b:00.0", "0000:3c:00.0", "0000:5e:00.0"]]
    assert sets_from_device_groups([], GPUS) == []


def test_component_pci_id() -> None:
    assert component_pci_id(_group("0000:3B:00.0").componentDeviceInfo[0]) == "0000:3b:00.0"
    assert component_pci_id(_group(None).componentDeviceInfo[0]) is None
    assert component_pci_id(NS(device=None)) is None


def test_set_numbers_reach_the_gpus() -> None:
    observed = Observed(datacenter="DC0")
    observed.hosts["h"] = ObservedHost(name="h", gpus=[ObservedGpu(pci_id=p, device_name="A100") for p in GPUS])
    set_nvlink_sets(observed, "h", sets_from_device_groups([_group("0000:5e:00.0", "0000:5f:00.0")], GPUS))
    assert [g.nvlink_set for g in observed.hosts["h"].gpus] == [None, None, 0, 0]


HGX = [f"0000:{bus}:00.0" for bus in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]


def _hgx_group(n: int, gpus: list[str] = HGX) -> NS:
    """A device group as an NVSwitch host lists it: n components naming the set's first n GPUs."""
    group = _group(*gpus[:n])
    group.deviceGroupName = f"Nvidia:{n}@grid_h100xm-80c%NVLink"
    return group


@pytest.mark.parametrize("order", [(2, 4, 8), (8, 4, 2), (4, 2, 8), (2, 4)])
def test_nvswitch_groups_of_2_4_8_are_one_set(order: tuple[int, ...]) -> None:
    """Groups of 2, 4 and 8 GPUs of one NVSwitch fabric share GPUs: one set, however they are listed."""
    sets = sets_from_device_groups([_hgx_group(n) for n in order], HGX)
    assert sets == [sorted(HGX[: max(order)])]


def test_two_nvswitch_fabrics_stay_two_sets() -> None:
    second = [f"0000:{bus:02x}:00.0" for bus in range(0xe0, 0xe8)]
    groups = [_hgx_group(n, gpus) for gpus in (second, HGX) for n in (2, 4, 8)]
    assert sets_from_device_groups(groups, HGX + second) == [sorted(HGX), sorted(second)]


def _set_gpus(model_board: str, n: int) -> list:
    return [Gpu(f"0000:{10 + i:02x}:00.0", model_board, 80, nvlink_set=0) for i in range(n)]


@pytest.mark.parametrize("count", [2, 4, 8])
def test_nvswitch_set_takes_nvlink_vms_of_2_4_8(count: int) -> None:
    placed = place_vm(_set_gpus("h100xm", 8), "vm", ["grid_h100xm-80c"] * count, nvlink=True)
    assert placed.reason is None and len({p.gpu for p in placed.placed}) == count


@pytest.mark.parametrize("count", [3, 5, 6, 7])
def test_nvswitch_set_refuses_nvlink_vms_of_other_sizes(count: int) -> None:
    placed = place_vm(_set_gpus("h100xm", 8), "vm", ["grid_h100xm-80c"] * count, nvlink=True)
    assert placed.placed == [] and placed.reason is not None
    assert f"no NVLink device group of {count} GPUs" in placed.reason and "2, 4 or 8" in placed.reason
    assert "the host reported no NVLink device groups; by the board's topology (nvswitch)" in placed.reason


# ---------------------------------------------------------------------- group sizes: the host first


@pytest.mark.parametrize("order", [(2, 4, 8), (8, 2, 4)])
def test_device_group_sets_carry_the_sizes_the_host_reports(order: tuple[int, ...]) -> None:
    assert device_group_sets([_hgx_group(n) for n in order], HGX) == [
        GroupedSet(sorted(HGX), [2, 4, 8], ["grid_h100xm-80c"])]


def test_device_group_sets_keep_each_sets_own_sizes() -> None:
    quad = [f"0000:{bus:02x}:00.0" for bus in range(0xe0, 0xe4)]
    groups = [_hgx_group(2), _hgx_group(4), _group(*quad)]
    assert device_group_sets(groups, HGX + quad) == [GroupedSet(sorted(HGX[:4]), [2, 4], ["grid_h100xm-80c"]),
                                                     GroupedSet(quad, [4], ["grid_a100-40c"])]


def test_reported_group_sizes_reach_the_gpus_and_placement() -> None:
    quad = GPUS  # a bridge quad of A100 PCIe GPUs whose host offers only the whole quad
    observed = Observed(datacenter="DC0")
    observed.hosts["h"] = ObservedHost(name="h", gpus=[
        ObservedGpu(pci_id=p, device_name="NVIDIA A100-PCIE-40GB", memory_kb=40 * 1024 * 1024,
                    graphics_type="sharedDirect", vgpu_mode="sameSize") for p in quad])
    offered = device_group_sets([_group(*quad)], quad)
    set_nvlink_sets(observed, "h", [s.gpus for s in offered], [s.group_sizes for s in offered])
    assert [(g.nvlink_set, g.nvlink_groups) for g in observed.hosts["h"].gpus] == [(0, [4])] * 4
    gpus = gpus_from_observed(observed.hosts["h"], {})
    assert place_vm(gpus, "vm", ["grid_a100-40c"] * 4, nvlink=True).ok
    pair = place_vm(gpus, "vm", ["grid_a100-40c"] * 2, nvlink=True)
    assert pair.reason == "has no NVLink device group of 2 GPUs (the host offers groups of 4)"
    set_nvlink_sets(observed, "h", [])  # read from elsewhere, without sizes: none stay behind
    assert [(g.nvlink_set, g.nvlink_groups) for g in observed.hosts["h"].gpus] == [(None, [])] * 4


def test_reported_sizes_win_over_the_board_topology() -> None:
    """A PCIe board (bridge pairs in the catalogue) whose host offers NVSwitch-like groups of 2, 4 and 8."""
    gpus = _set_gpus("a100", 8)
    for g in gpus:
        g.fb_gb, g.nvlink_groups = 40, (2, 4, 8)
    assert place_vm(gpus, "vm", ["grid_a100-40c"] * 8, nvlink=True).ok
    trio = place_vm(gpus, "vm", ["grid_a100-40c"] * 3, nvlink=True)
    assert trio.reason == "has no NVLink device group of 3 GPUs (the host offers groups of 2, 4 or 8)"


def test_a_set_with_no_group_of_the_size_still_lets_another_set_take_the_vm() -> None:
    gpus = _set_gpus("a100", 6)
    for i, g in enumerate(gpus):
        g.fb_gb = 40
        g.nvlink_set, g.nvlink_groups = (0, (4,)) if i < 4 else (1, (2,))
    placed = place_vm(gpus, "vm", ["grid_a100-40c"] * 2, nvlink=True)
    assert placed.assign == [gpus[4].id, gpus[5].id]


def test_bridge_pair_takes_its_pair() -> None:
    """Without reported groups a bridge pair (the catalogue topology of A100 PCIe) is one group of 2."""
    gpus = _set_gpus("a100", 2)
    for g in gpus:
        g.fb_gb = 40
    placed = place_vm(gpus, "vm", ["grid_a100-40c"] * 2, nvlink=True)
    assert placed.reason is None and len({p.gpu for p in placed.placed}) == 2


# ------------------------------------------------------------------------------------ the plan says so

PLAN_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plan"


def _quad_farm(groups: list[int]) -> Observed:
    """gpusim's default farm (4 x A100-40GB) as one NVLink set whose host reports groups of `groups`."""
    data = YAML(typ="safe").load((PLAN_FIXTURES / "_farm1.yaml").read_text(encoding="utf-8"))
    for gpu in data["hosts"]["esx-01.gpu.sim"]["gpus"]:
        gpu.update(nvlink_set=0, nvlink_groups=groups)
    return Observed.from_dict(data)


def _nvlink_plan(count: int, observed: Observed) -> list[str]:
    inv = load_inventory_text(f"""\
apiVersion: vgpuctl/v1
vms:
  - name: linked
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    vgpus: {{profile: grid_a100-40c, count: {count}}}
    nvlink: required
""")
    return make_plan(inv, observed).errors


def test_plan_refuses_an_nvlink_vm_no_reported_group_takes_naming_the_offered_sizes() -> None:
    assert _nvlink_plan(2, _quad_farm([4])) == [
        "vm linked: cannot power on: host esx-01.gpu.sim has no NVLink device group of 2 GPUs "
        "(the host offers groups of 4)"]
    assert _nvlink_plan(4, _quad_farm([4])) == []
    assert _nvlink_plan(2, _quad_farm([2, 4])) == []


def test_group_profile_comes_from_the_group_name() -> None:
    assert group_profile(_hgx_group(2)) == "grid_h100xm-80c"
    assert group_profile(NS(deviceGroupName="NVIDIA:4@nvidia_a100-40c%NVLink")) == "nvidia_a100-40c"
    # vCenter's spelling (the BOSH vSphere CPI's device group tests: "Nvidia:2@nvidia_h100l-94c%NVLink")
    assert group_profile(NS(deviceGroupName="Nvidia:2@nvidia_h100l-94c%NVLink")) == "nvidia_h100l-94c"
    assert group_profile(NS(deviceGroupName="some other group")) is None
    assert group_profile(NS()) is None


def test_device_group_sets_merge_the_profiles_of_one_set() -> None:
    other = _group(*GPUS[:2])
    other.deviceGroupName = "NVIDIA:2@nvidia_a100-40c%NVLink"
    assert device_group_sets([_group(*GPUS[:2]), other], GPUS) == [
        GroupedSet(GPUS[:2], [2], ["grid_a100-40c", "nvidia_a100-40c"])]


def _pair_host(profiles: list[str]) -> Observed:
    """Two A100 PCIe GPUs in one set whose host reports a device group of 2 for `profiles` (none: no names)."""
    observed = Observed(datacenter="DC0")
    observed.hosts["h"] = ObservedHost(name="h", gpus=[
        ObservedGpu(pci_id=p, device_name="NVIDIA A100-PCIE-40GB", memory_kb=40 * 1024 * 1024,
                    graphics_type="sharedDirect", vgpu_mode="sameSize") for p in GPUS[:2]])
    set_nvlink_sets(observed, "h", [GPUS[:2]], [[2]], [profiles])
    return observed


def test_an_nvlink_vm_of_a_profile_the_groups_are_not_offered_for_is_refused_naming_them() -> None:
    observed = _pair_host(["grid_a100-40c"])
    assert [g.nvlink_profiles for g in observed.hosts["h"].gpus] == [["grid_a100-40c"]] * 2
    gpus = gpus_from_observed(observed.hosts["h"], {})
    assert place_vm(gpus, "vm", ["grid_a100-40c"] * 2, nvlink=True).ok
    assert place_vm(gpus, "vm", ["nvidia_a100-40c"] * 2, nvlink=True).ok  # one type, two spellings
    small = place_vm(gpus, "vm", ["grid_a100-20c"] * 2, nvlink=True)
    assert small.reason == ("has NVLink device groups only for grid_a100-40c (the host's group names), "
                            "not for grid_a100-20c")


def test_the_group_names_the_host_reports_win_over_the_catalogue() -> None:
    """A host whose groups name another type than the board's whole-GPU C type is planned by what it names."""
    gpus = gpus_from_observed(_pair_host(["grid_a100-20c"]).hosts["h"], {})
    assert place_vm(gpus, "vm", ["grid_a100-20c"] * 2, nvlink=True).ok
    assert not place_vm(gpus, "vm", ["grid_a100-40c"] * 2, nvlink=True).ok


def test_without_group_names_the_catalogue_gives_the_whole_gpu_c_type() -> None:
    gpus = gpus_from_observed(_pair_host([]).hosts["h"], {})
    assert place_vm(gpus, "vm", ["grid_a100-40c"] * 2, nvlink=True).ok
    small = place_vm(gpus, "vm", ["grid_a100-20c"] * 2, nvlink=True)
    assert small.reason == ("has NVLink device groups only for grid_a100-40c (by the catalogue: the board's "
                            "whole-GPU C-series types), not for grid_a100-20c")


def test_plan_refuses_an_nvlink_vm_whose_profile_no_group_offers() -> None:
    inv = load_inventory_text("""\
apiVersion: vgpuctl/v1
vms:
  - name: linked
    template: ubuntu-22.04-ml
    cluster: GPU-Cluster
    vgpus: {profile: grid_a100-20c, count: 2}
    nvlink: required
""")
    errors = make_plan(inv, _quad_farm([2, 4])).errors
    assert errors == ["vm linked: cannot power on: host esx-01.gpu.sim has NVLink device groups only for "
                      "grid_a100-40c (by the catalogue: the board's whole-GPU C-series types), not for grid_a100-20c"]


def test_plan_says_when_the_catalogue_gave_the_sizes() -> None:
    """No groups reported: the board's catalogue topology (A100 PCIe: bridge pairs) makes the quad one group."""
    assert _nvlink_plan(2, _quad_farm([])) == [
        "vm linked: cannot power on: host esx-01.gpu.sim has no NVLink device group of 2 GPUs "
        "(the host reported no NVLink device groups; by the board's topology (bridge-pairs): 4)"]


# --------------------------------------------------------------------------- sets from the ESXi shell


def _shell_facts(peers: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    return host_facts("h", shell=True, gpus={pci: {"nvlink_peers": peers.get(pci, [])} for pci in GPUS})


def _a100_host(observed: Observed | None = None) -> Observed:
    observed = observed or Observed(datacenter="DC0")
    observed.hosts["h"] = ObservedHost(name="h", gpus=[
        ObservedGpu(pci_id=p, device_name="NVIDIA A100-PCIE-40GB", memory_kb=40 * 1024 * 1024,
                    graphics_type="sharedDirect", vgpu_mode="sameSize") for p in GPUS])
    return observed


def test_shell_sets_reach_placement_where_vcenter_reports_no_groups() -> None:
    """nvidia-smi topo links 3b-3c and 5e-5f; vCenter reported no device groups: the sets come from the shell,
    their group sizes from the board's catalogue topology (bridge pairs), and the reason says so."""
    facts = _shell_facts({GPUS[0]: [GPUS[1]], GPUS[1]: [GPUS[0]], GPUS[2]: [GPUS[3]], GPUS[3]: [GPUS[2]]})
    observed = _a100_host()
    assert adopt_nvlink_sets(observed, facts)
    assert [(g.nvlink_set, g.nvlink_groups) for g in observed.hosts["h"].gpus] == [(0, []), (0, []), (1, []), (1, [])]
    gpus = gpus_from_observed(observed.hosts["h"], {})
    assert place_vm(gpus, "vm", ["grid_a100-40c"] * 2, nvlink=True).assign == GPUS[:2]
    quad = place_vm(gpus, "vm", ["grid_a100-40c"] * 4, nvlink=True)
    assert quad.reason == ("has no NVLink device group of 4 GPUs (the host reported no NVLink device groups; "
                           "by the board's topology (bridge-pairs): 2)")


def test_shell_sets_do_not_override_the_device_groups_vcenter_reports() -> None:
    observed = _a100_host()
    set_nvlink_sets(observed, "h", [GPUS], [[4]])
    facts = _shell_facts({GPUS[0]: [GPUS[1]], GPUS[1]: [GPUS[0]]})
    assert not adopt_nvlink_sets(observed, facts)
    assert [(g.nvlink_set, g.nvlink_groups) for g in observed.hosts["h"].gpus] == [(0, [4])] * 4


def test_no_shell_sets_leave_the_host_as_it_was() -> None:
    observed = _a100_host()
    assert not adopt_nvlink_sets(observed, _shell_facts({}))
    linked = _shell_facts({GPUS[0]: [GPUS[1]], GPUS[1]: [GPUS[0]]})
    linked.shell = False  # facts from the API only: no topology
    assert not adopt_nvlink_sets(observed, linked)
    linked.shell, linked.host = True, "other"
    assert not adopt_nvlink_sets(observed, linked)
    assert [g.nvlink_set for g in observed.hosts["h"].gpus] == [None] * 4


def test_plan_stage_host_facts_records_the_shell_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline's host facts stage hands the shell's NVLink sets to the observed model."""
    facts = _shell_facts({GPUS[0]: [GPUS[1]], GPUS[1]: [GPUS[0]]})
    monkeypatch.setattr(pipeline, "gather_facts", lambda *a, **k: {"h": facts})
    monkeypatch.setattr(pipeline, "shell_configured", lambda specs: True)
    observed = _a100_host()
    options = NS(trust_on_first_use=False, on_new_host_key=None, ssh_service=None, read_only=False, lock_waited_s=0.0)
    pipeline.host_facts(NS(), observed, {"h": NS()}, options)  # type: ignore[arg-type]
    assert [g.nvlink_set for g in observed.hosts["h"].gpus] == [0, 0, None, None]
    facts.shell = False  # no shell facts: nothing to record
    observed = _a100_host()
    pipeline.host_facts(NS(), observed, {"h": NS()}, options)  # type: ignore[arg-type]
    assert [g.nvlink_set for g in observed.hosts["h"].gpus] == [None] * 4
