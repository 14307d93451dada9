"""The vGPU type catalogue end to end: `vgpuctl plan` and `apply` over real SOAP against gpusim farms of the
catalogue's boards, checked with pyVmomi and gpusim's assignments, never with vgpuctl's own reader.

An HGX NVSwitch host takes NVLink VMs of 2, 4 and 8 vGPUs into device groups of that size; a mixed-size A100
farm fills to NVIDIA's mixed-size maxima and refuses one VM more at plan time; an equal-size GPU is shared
by two types of one size only from vSphere API 8.0.2; a vGPU no table explains is shown and worked around;
a host that spells its profiles `nvidia_` is the authority over the inventory's spelling.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpusim import Gpusim
from planout import refused
from pyVim.connect import Disconnect
from pyVmomi import vim
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim

HOST, HOST2 = "esx-01.gpu.sim", "esx-02.gpu.sim"
TEMPLATE = {"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}
HGX_PROFILE = "grid_h100xm-80c"


def farm(model: str, *, hosts: int = 1, gpus: int = 1, vms: list[dict[str, Any]] | None = None, **extra: Any) -> dict:
    """One cluster `C` of `hosts` hosts with `gpus` GPUs of `model` each, sharedDirect, and the EFI template."""
    cluster = {"name": "C", "hosts": hosts, "gpus_per_host": gpus, "model": model, "graphics_type": "sharedDirect"}
    top = {k: extra.pop(k) for k in ("api_version",) if k in extra}
    return {**top, "clusters": [{**cluster, **extra}], "templates": [TEMPLATE], "vms": vms or []}


def vm(name: str, profile: str, count: int = 1, host: str = HOST, nvlink: bool = False) -> str:
    """One inventory VM cloned from the template onto `host` with `count` x `profile`."""
    text = f"""\
        - name: {name}
          template: ubuntu-22.04-ml
          host: {host}
          cpus: 2
          memory_gb: 8
          vgpus: {{profile: {profile}, count: {count}}}
        """
    return textwrap.dedent(text) + ("  nvlink: required\n" if nvlink else "")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """env(sim): the environment a user exports to point vgpuctl at this gpusim."""
    for name in list(os.environ):
        if name.startswith(("VGPUCTL_", "GOVC_")):
            monkeypatch.delenv(name)

    def _env(sim: Gpusim) -> dict[str, str]:
        return {"VGPUCTL_URL": sim.url, "VGPUCTL_USERNAME": sim.username, "VGPUCTL_PASSWORD": sim.password,
                "VGPUCTL_INSECURE": "1"}

    yield _env


def vgpuctl(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def inventory(tmp_path: Path, *vms: str, name: str = "inv.yaml") -> str:
    path = tmp_path / name
    path.write_text("apiVersion: vgpuctl/v1\nvcenter: {datacenter: DC0}\nvms:\n" + "".join(vms))
    return str(path)


def plan_error(result: Any) -> str:
    """The one problem of a refused plan or apply (exit 1, no traceback): shown with the plan, refused in one line."""
    (line,) = refused(result)
    return line


def applied(env: dict[str, str], path: str) -> None:
    """apply --yes succeeds, and a plan afterwards has nothing left to do."""
    result = vgpuctl(env, "apply", "-f", path, "--yes")
    assert result.exit_code == 0, result.output
    after = vgpuctl(env, "plan", "-f", path, "--detailed-exitcode")
    if after.exit_code != 0:  # fails either way; a second plan says whether what the first one read lasts
        again = vgpuctl(env, "plan", "-f", path, "--detailed-exitcode")
        raise AssertionError(f"{after.output}\n-- planned again: exit {again.exit_code}\n{again.output}")


def direct_vms(sim: Gpusim) -> dict[str, dict[str, Any]]:
    """Every VM as pyVmomi reads it: power state, vGPU profiles, the device group name of each vGPU."""
    si = sim.connect()
    try:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        try:
            return {v.name: _direct_vm(v) for v in view.view}
        finally:
            view.DestroyView()
    finally:
        Disconnect(si)


def _direct_vm(v: Any) -> dict[str, Any]:
    declared = v.config.deviceGroups.deviceGroup if v.config.deviceGroups else []
    groups = {g.groupInstanceKey: g.deviceGroupName for g in declared or []}
    vgpus = [d for d in v.config.hardware.device
             if isinstance(getattr(d, "backing", None), vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo)]
    return {
        "power": str(v.runtime.powerState),
        "profiles": sorted(d.backing.vgpu for d in vgpus),
        "groups": sorted((groups.get(d.deviceGroupInfo.groupInstanceKey, "?") if d.deviceGroupInfo else "")
                         for d in vgpus),
    }


def gpus_by_vm(sim: Gpusim) -> dict[str, list[tuple[str, str]]]:
    """gpusim's admitted vGPUs: VM name -> sorted (host, GPU PCI id)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for a in sim.assignments():
        out.setdefault(a["vmName"], []).append((a["host"], a["gpu"]))
    return {name: sorted(gpus) for name, gpus in out.items()}


# ------------------------------------------------------------------------------- NVLink on NVSwitch


def test_nvlink_vms_of_2_4_8_land_in_nvswitch_groups_of_their_size(gpusim_factory: Any, env: Any,
                                                                   tmp_path: Path) -> None:
    sim = gpusim_factory(farm("H100-SXM5-80GB", hosts=2, gpus=8), args=["-no-ssh"])
    e = env(sim)
    path = inventory(
        tmp_path,
        vm("pair", HGX_PROFILE, 2, nvlink=True),
        vm("quad", HGX_PROFILE, 4, nvlink=True),
        vm("pair-2", HGX_PROFILE, 2, nvlink=True),
        vm("all-8", HGX_PROFILE, 8, host=HOST2, nvlink=True),
    )
    applied(e, path)

    seen = direct_vms(sim)
    placed = gpus_by_vm(sim)
    for name, n, host in (("pair", 2, HOST), ("quad", 4, HOST), ("pair-2", 2, HOST), ("all-8", 8, HOST2)):
        assert seen[name]["power"] == "poweredOn", name
        assert seen[name]["profiles"] == [HGX_PROFILE] * n
        assert seen[name]["groups"] == [f"Nvidia:{n}@{HGX_PROFILE}%NVLink"] * n, name  # one group of its size
        assert len(placed[name]) == n and {h for h, _ in placed[name]} == {host}, name
    first_host = [gpu for name in ("pair", "quad", "pair-2") for _, gpu in placed[name]]
    assert len(set(first_host)) == 8  # one GPU per vGPU: the three VMs fill the host's eight

    # status: each host's eight GPUs are one NVLink set (the groups of 2, 4 and 8 are one set, not three)
    doc = json.loads(vgpuctl(e, "-o", "json", "status").stdout)
    for host in doc["hosts"]:
        assert {g["nvlink_group"] for g in host["gpus"]} == {0}, host["host"]


def test_nvlink_vm_of_3_on_an_nvswitch_host_is_refused_at_plan_time(gpusim_factory: Any, env: Any,
                                                                     tmp_path: Path) -> None:
    """NVSwitch hosts offer device groups of 2, 4 and 8 GPUs only: a 3-vGPU NVLink VM has no group to join."""
    sim = gpusim_factory(farm("H100-SXM5-80GB", gpus=8), args=["-no-ssh"])
    e = env(sim)
    path = inventory(tmp_path, vm("trio", HGX_PROFILE, 3, nvlink=True))
    line = plan_error(vgpuctl(e, "plan", "-f", path))
    assert "trio" in line and "3" in line and "2, 4 or 8" in line, line
    assert plan_error(vgpuctl(e, "apply", "-f", path, "--yes")) == line
    assert "trio" not in direct_vms(sim) and sim.assignments() == []  # refused before vCenter was touched


def test_bridge_quads_take_only_nvlink_vms_of_the_whole_quad(gpusim_factory: Any, env: Any, tmp_path: Path) -> None:
    """NVLink bridge quads: the host offers one device group per quad, of all four GPUs. vSphere attaches a
    group whole, so a 2-vGPU NVLink VM is refused at plan time naming the size the host offers; a 4-vGPU one
    is attached as one group and powered on."""
    sim = gpusim_factory(farm("A100-40GB", gpus=4, nvlink="quads"), args=["-no-ssh"])
    e = env(sim)
    pair = inventory(tmp_path, vm("pair", "grid_a100-40c", 2, nvlink=True), name="pair.yaml")
    line = plan_error(vgpuctl(e, "plan", "-f", pair))
    assert "pair" in line and "no NVLink device group of 2 GPUs (the host offers groups of 4)" in line, line
    assert "pair" not in direct_vms(sim)

    applied(e, inventory(tmp_path, vm("quad", "grid_a100-40c", 4, nvlink=True), name="quad.yaml"))
    seen = direct_vms(sim)["quad"]
    assert seen["power"] == "poweredOn"
    assert seen["groups"] == ["Nvidia:4@grid_a100-40c%NVLink"] * 4
    assert len(gpus_by_vm(sim)["quad"]) == 4


def test_nvswitch_forced_on_a_pcie_board_is_planned_by_the_groups_the_host_reports(
    gpusim_factory: Any, env: Any, tmp_path: Path
) -> None:
    """The catalogue says bridge pairs for A100 PCIe; this farm's host reports NVSwitch groups of 2, 4 and 8
    instead, and the host wins: 8 vGPUs go into one group, 3 are refused naming the sizes it offers."""
    sim = gpusim_factory(farm("A100-40GB", gpus=8, nvlink="nvswitch"), args=["-no-ssh"])
    e = env(sim)
    trio = inventory(tmp_path, vm("trio", "grid_a100-40c", 3, nvlink=True), name="trio.yaml")
    line = plan_error(vgpuctl(e, "plan", "-f", trio))
    assert "trio" in line and "no NVLink device group of 3 GPUs (the host offers groups of 2, 4 or 8)" in line, line

    applied(e, inventory(tmp_path, vm("all-8", "grid_a100-40c", 8, nvlink=True), name="all.yaml"))
    seen = direct_vms(sim)["all-8"]
    assert seen["power"] == "poweredOn" and seen["groups"] == ["Nvidia:8@grid_a100-40c%NVLink"] * 8


# ------------------------------------------------------------------------------- mixed-size maxima


def test_mixed_size_a100_farm_fills_to_nvidias_maxima_and_refuses_one_more_at_plan_time(
    gpusim_factory: Any, env: Any, tmp_path: Path
) -> None:
    """Mixed-size A100-40GB (vGPU guide, "Maximum vGPUs per GPU in mixed-size mode"): A100-8C 4 and A100-4C 8
    per GPU, below framebuffer / size (5 and 10). One GPU per host: 4 x 8C, and 8 x 4C."""
    sim = gpusim_factory(farm("A100-40GB", hosts=2, vgpu_mode="mixedSize"), args=["-no-ssh"])
    e = env(sim)
    full = [vm(f"e8-{i}", "grid_a100-8c") for i in range(1, 5)]
    full += [vm(f"f4-{i}", "grid_a100-4c", host=HOST2) for i in range(1, 9)]
    applied(e, inventory(tmp_path, *full))

    placed = gpus_by_vm(sim)
    assert len(placed) == 12 and all(v["power"] == "poweredOn" for v in direct_vms(sim).values() if v["profiles"])
    on_host = {h: sorted(a["profile"] for a in sim.assignments() if a["host"] == h) for h in (HOST, HOST2)}
    assert on_host == {HOST: ["grid_a100-8c"] * 4, HOST2: ["grid_a100-4c"] * 8}

    before = (direct_vms(sim), sim.assignments())
    for extra, host, maximum in ((vm("e8-5", "grid_a100-8c"), HOST, "A100-8C (4)"),
                                 (vm("f4-9", "grid_a100-4c", host=HOST2), HOST2, "A100-4C (8)")):
        path = inventory(tmp_path, *full, extra, name="more.yaml")
        line = plan_error(vgpuctl(e, "plan", "-f", path))
        # refused for NVIDIA's maximum though the framebuffer has room (32 of 40 GB used)
        assert f"cannot power on: host {host}" in line and f"mixed-size maximum of {maximum}" in line, line
        assert plan_error(vgpuctl(e, "apply", "-f", path, "--yes")) == line
    assert (direct_vms(sim), sim.assignments()) == before  # nothing changed in vCenter


# ------------------------------------------------------------------------------- equal-size sharing


@pytest.mark.parametrize("api_version", ["8.0.2.0", "8.0.3.0"])
def test_equal_size_gpu_shared_by_two_types_of_one_size_from_api_802(
    gpusim_factory: Any, env: Any, tmp_path: Path, api_version: str
) -> None:
    """Equal-size mode from vSphere 8.0 U2: A40-8C and A40-8Q (8 GB each) share one A40."""
    sim = gpusim_factory(farm("A40", api_version=api_version), args=["-no-ssh"])
    e = env(sim)
    applied(e, inventory(tmp_path, vm("c8", "grid_a40-8c"), vm("q8", "grid_a40-8q")))
    assert sorted((a["vmName"], a["profile"], a["gpu"]) for a in sim.assignments()) == [
        ("c8", "grid_a40-8c", "0000:3b:00.0"), ("q8", "grid_a40-8q", "0000:3b:00.0")]


@pytest.mark.parametrize("how", ["farm", "flag"])
def test_equal_size_gpu_takes_one_type_before_api_802(gpusim_factory: Any, env: Any, tmp_path: Path,
                                                      how: str) -> None:
    """Before 8.0 U2 (8.0 U1 here) an equal-size GPU holds one type: the second type is refused at plan time."""
    if how == "farm":
        sim = gpusim_factory(farm("A40", api_version="8.0.1.0"), args=["-no-ssh"])
    else:
        sim = gpusim_factory(farm("A40"), args=["-no-ssh", "-api-version", "8.0.1.0"])
    e = env(sim)
    path = inventory(tmp_path, vm("c8", "grid_a40-8c"), vm("q8", "grid_a40-8q"))
    line = plan_error(vgpuctl(e, "plan", "-f", path))
    assert "vm q8: cannot power on" in line and "before vSphere API 8.0.2 only the identical type" in line, line
    assert plan_error(vgpuctl(e, "apply", "-f", path, "--yes")) == line
    assert sim.assignments() == [] and not {"c8", "q8"} & set(direct_vms(sim))

    applied(e, inventory(tmp_path, vm("c8", "grid_a40-8c"), vm("c8-2", "grid_a40-8c"), name="same.yaml"))
    assert sorted(a["vmName"] for a in sim.assignments()) == ["c8", "c8-2"]  # the identical type still shares


# ------------------------------------------------------------------------------- a name no table knows

UNKNOWN = "nvidia_a100-1-5cme2"  # offered by the host (a newer driver's type, say), in no table


def test_host_running_a_vgpu_no_table_knows(gpusim_factory: Any, env: Any, tmp_path: Path) -> None:
    odd = {"name": "odd", "host": HOST, "memory_mb": 4096, "memory_locked": True, "vgpus": [UNKNOWN],
           "power_on": True}
    sim = gpusim_factory(farm("A100-40GB", gpus=2, extra_profiles=[UNKNOWN], vms=[odd]), args=["-no-ssh"])
    e = env(sim)
    odd_gpu = gpus_by_vm(sim)["odd"][0][1]

    # status shows it, on the GPU that holds it
    text = vgpuctl(e, "status")
    assert text.exit_code == 0, text.output
    assert f"odd ({UNKNOWN})" in text.stdout
    doc = json.loads(vgpuctl(e, "-o", "json", "status").stdout)
    gpus = {g["gpu"]: g for g in doc["hosts"][0]["gpus"]}
    assert [v["vm"] for v in gpus[odd_gpu]["vms"]] == ["odd"]
    assert UNKNOWN in json.dumps(gpus[odd_gpu])

    # plan: that GPU takes no new vGPU, and the refusal says why
    two = inventory(tmp_path, vm("whole-1", "grid_a100-40c"), vm("whole-2", "grid_a100-40c"), name="two.yaml")
    line = plan_error(vgpuctl(e, "plan", "-f", two))
    assert "vm whole-2: cannot power on" in line and f"'{UNKNOWN}', which no vGPU type table explains" in line
    applied(e, inventory(tmp_path, vm("whole-1", "grid_a100-40c"), name="one.yaml"))
    assert gpus_by_vm(sim)["whole-1"] == [(HOST, next(g for g in gpus if g != odd_gpu))]

    # a VM asking for that name: a plan error naming the profiles the host offers that vgpuctl can place
    asks = inventory(tmp_path, vm("wants-odd", UNKNOWN), name="asks.yaml")
    assert vgpuctl(e, "validate", "-f", asks).exit_code == 0  # only the host can say whether it exists
    line = plan_error(vgpuctl(e, "plan", "-f", asks))
    assert f"vm wants-odd: asks for {UNKNOWN}, which the host offers but no vGPU type table explains" in line
    offered = line.split("offered there: ")[1].split(", ")
    assert offered and UNKNOWN not in offered and all(p.startswith("grid_a100-") for p in offered), line
    assert plan_error(vgpuctl(e, "apply", "-f", asks, "--yes")) == line
    assert "wants-odd" not in direct_vms(sim)

    # a name the host does not offer either: the same plan error, with the alternatives
    typo = inventory(tmp_path, vm("typo", "grid_a100-40x"), name="typo.yaml")
    line = plan_error(vgpuctl(e, "plan", "-f", typo))
    assert "vm typo: not a vGPU profile name: 'grid_a100-40x'" in line and "offered there: grid_a100-" in line


# ------------------------------------------------------------------------------- the host's spelling


@pytest.mark.parametrize(("host_prefix", "inventory_prefix"), [("nvidia_", "grid_"), ("grid_", "nvidia_")])
def test_the_host_spelling_wins_over_the_inventorys(gpusim_factory: Any, env: Any, tmp_path: Path,
                                                    host_prefix: str, inventory_prefix: str) -> None:
    """Both prefixes name one type; the host refuses the spelling it does not use, so the plan uses the host's."""
    sim = gpusim_factory(farm("A100-40GB", gpus=4, profile_prefix=host_prefix), args=["-no-ssh"])
    e = env(sim)
    path = inventory(tmp_path, vm("split", f"{inventory_prefix}a100-20c", 2),
                     vm("linked", f"{inventory_prefix}a100-40c", 2, nvlink=True))
    plan = vgpuctl(e, "plan", "-f", path)
    assert plan.exit_code == 0, plan.output
    assert f"+ vgpu {host_prefix}a100-20c" in plan.stdout and f"{inventory_prefix}a100" not in plan.stdout
    applied(e, path)  # and a plan afterwards is empty: the VMs hold what the inventory asks for

    seen = direct_vms(sim)
    assert seen["split"]["profiles"] == [f"{host_prefix}a100-20c"] * 2 and seen["split"]["power"] == "poweredOn"
    assert seen["linked"]["groups"] == [f"Nvidia:2@{host_prefix}a100-40c%NVLink"] * 2
    assert seen["linked"]["power"] == "poweredOn"
    same = inventory(tmp_path, vm("split", f"{host_prefix}a100-20c", 2), name="same.yaml")
    assert vgpuctl(e, "plan", "-f", same, "--detailed-exitcode").exit_code == 0
