"""`experiment run` against gpusim: each variant applied through plan/apply (NVLink off, MIG slices), its host
facts read over SSH, the base restored; a run whose NVLink stays up in an 'off' variant (a reboot fault armed
through gpusim's control endpoint) stops at apply verification, the report says where the farm is, and
`experiment restore` returns to the base. The guests are not reachable here (no guest IPs): every repetition is
recorded as failed with that reason, which exercises on_failure: continue."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hostfacts import gpu_states, read_shell
from pyVim.connect import Disconnect
from pyVmomi import vim

from vgpuctl.cli.common import GlobalOptions
from vgpuctl.cli.experiment import vsphere_farm
from vgpuctl.errors import VgpuctlError
from vgpuctl.experiment.report import build_report, render_markdown
from vgpuctl.experiment.runner import VsphereFarm, restore, run_experiment
from vgpuctl.experiment.schema import checked_variants, load_experiment
from vgpuctl.experiment.store import BASE, ResultsDir
from vgpuctl.experiment.workload import GuestRun
from vgpuctl.hosts.facts import open_shell, shell_runner
from vgpuctl.inventory import load_inventory
from vgpuctl.profiles import parse_profile

pytestmark = pytest.mark.sim

HOST = "esx-01.gpu.sim"
FARM = {
    "datacenter": "DC0",
    "reboot_seconds": 0.3,
    "clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "pairs",
                  "graphics_type": "sharedDirect", "assignment_policy": "performance", "vgpu_mode": "sameSize"}],
    "vms": [{"name": "train-01", "host": HOST, "cpus": 8, "memory_mb": 16384, "firmware": "efi",
             "vgpus": ["grid_a100-40c", "grid_a100-40c"], "memory_locked": True}],
}
BASE_INVENTORY = {
    "apiVersion": "vgpuctl/v1",
    "vcenter": {"datacenter": "DC0"},
    "hosts": [{"cluster": "GPU-Cluster", "nvlink": "enabled", "gpus": [{"select": "all", "mode": "time-sliced"}],
               "maintenance": {"evacuate": "power-off"}}],
    "vms": [{"name": "train-01", "memory_gb": 16, "vgpus": {"profile": "grid_a100-40c", "count": 2}, "power": "off",
             "guest": {"group": "trainers"}}],
    "guests": {"groups": {"trainers": {"roles": []}}},
}
EXPERIMENT = {
    "apiVersion": "vgpuctl/v1",
    "kind": "Experiment",
    "name": "nvlink-and-mig",
    "inventory": "inventory.yaml",
    "vms": ["train-01"],
    "repetitions": 1,
    "on_failure": "continue",
    "workload": {"builtin": "nccl-tests", "test": "all_reduce_perf", "scope": "per-vm"},
    "variants": [
        {"name": "nvlink-on"},
        {"name": "nvlink-off", "hosts": [{"cluster": "GPU-Cluster", "nvlink": "disabled"}]},
        {"name": "mig", "hosts": [{"cluster": "GPU-Cluster", "gpus": [{"select": "all", "mode": "mig"}]}],
         "vms": [{"name": "train-01", "vgpus": {"profile": "grid_a100-3-20c", "count": 1}}]},
    ],
}


@pytest.fixture
def setup(gpusim_factory: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    sim = gpusim_factory(FARM)
    monkeypatch.setenv("VGPUCTL_ESXI_HOSTS", sim.env["GPUSIM_SSH_HOSTS"])
    monkeypatch.setenv("VGPUCTL_ESXI_KNOWN_HOSTS", sim.env["GPUSIM_SSH_KNOWN_HOSTS"])
    monkeypatch.setenv("VGPUCTL_ESXI_PASSWORD", sim.password)
    monkeypatch.setenv("VGPUCTL_PASSWORD", sim.password)
    monkeypatch.setenv("VGPUCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("GPUSIM_SSH_HOSTS", raising=False)
    (tmp_path / "inventory.yaml").write_text(yaml.safe_dump(BASE_INVENTORY, sort_keys=False))
    (tmp_path / "experiment.yaml").write_text(yaml.safe_dump(EXPERIMENT, sort_keys=False))
    exp = load_experiment(tmp_path / "experiment.yaml")
    opts = GlobalOptions(url=sim.url, username=sim.username, insecure=True)
    farm = vsphere_farm(opts, yes=True, ip_timeout_s=0, ip_poll_s=0.1, state=tmp_path / "state")
    return {"sim": sim, "exp": exp, "farm": farm, "base": load_inventory(tmp_path / "inventory.yaml"),
            "results": ResultsDir(tmp_path / "results"), "tmp": tmp_path}


def vgpus_of(sim: Any, name: str) -> list[str]:
    si = sim.connect()
    try:
        view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True)
        vm = next(v for v in view.view if v.name == name)
        return [d.backing.vgpu for d in vm.config.hardware.device
                if isinstance(d, vim.vm.device.VirtualPCIPassthrough)
                and isinstance(d.backing, vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo)]
    finally:
        Disconnect(si)


def shell_facts() -> Any:
    with open_shell(HOST) as sh:
        return read_shell(HOST, shell_runner(sh))


def host_gpus(facts: dict[str, Any]) -> dict[str, Any]:
    return facts["hosts"][HOST]["gpus"]


def test_variants_applied_measured_and_base_restored(setup: dict[str, Any]) -> None:
    s = setup
    events: list[tuple[str, str]] = []
    summary = run_experiment(s["exp"], checked_variants(s["exp"]), s["base"], s["results"], s["farm"],
                             events=lambda kind, data: events.append((kind, data.get("variant", ""))))
    results: ResultsDir = s["results"]
    assert summary.restored and results.state()["applied"] == BASE
    assert [e for e in events if e[0] in ("applied", "restored")] == [
        ("applied", "nvlink-on"), ("applied", "nvlink-off"), ("applied", "mig"), ("restored", BASE)]

    # what each variant looked like, read over SSH from the host while it was applied
    on, off, mig = (results.facts(v, 1) for v in ("nvlink-on", "nvlink-off", "mig"))
    assert on["vm_hosts"] == {"train-01": HOST}
    assert all(g["nvlink_active"] > 0 for g in host_gpus(on).values())
    assert all(g["nvlink_active"] == 0 for g in host_gpus(off).values())
    assert all(g["mig_current"] for g in host_gpus(mig).values())
    assert "NVreg_NvLinkDisable=1" in off["hosts"][HOST]["options_effective"]

    # no guest answered: recorded as failed, the experiment went on
    for variant in ("nvlink-on", "nvlink-off", "mig"):
        rec = results.load(variant, 1)
        assert rec.status == "failed" and rec.errors == [
            "train-01: no guest IP address (VM powered off, or VMware Tools not running)"]

    # the base again, seen through pyVmomi and the ESXi shell
    assert vgpus_of(s["sim"], "train-01") == ["grid_a100-40c", "grid_a100-40c"]
    facts = shell_facts()
    assert all(g.nvlink_active > 0 and not g.mig_current for g in gpu_states(facts).values())

    text = render_markdown(build_report(results))
    assert "Farm now: the base inventory (restored)." in text
    assert f"host {HOST}: 0 NVLink link(s) up" in text  # the nvlink-off variant's facts

    # a rerun has nothing left but the failed repetitions; --keep-last leaves the last variant applied
    run_experiment(s["exp"], checked_variants(s["exp"]), s["base"], results, s["farm"], keep_last=True)
    assert results.state()["applied"] == "mig"
    assert vgpus_of(s["sim"], "train-01") == ["grid_a100-3-20c"]
    restore(s["base"], results, s["farm"])
    assert vgpus_of(s["sim"], "train-01") == ["grid_a100-40c", "grid_a100-40c"]


def test_nvlink_left_up_in_an_off_variant_stops_the_run_and_restore_returns(setup: dict[str, Any]) -> None:
    s = setup
    s["sim"].reboot_fault(HOST, ["modules"])  # the reboot keeps the old module options: NVLink stays up
    with pytest.raises(VgpuctlError, match="apply failed on host"):
        run_experiment(s["exp"], checked_variants(s["exp"]), s["base"], s["results"], s["farm"])
    results: ResultsDir = s["results"]
    state = results.state()
    # its apply failed part-way: never named applied, the farm is between nvlink-on and it
    assert state["applied"] == "nvlink-on" and state["partial"] == "nvlink-off"
    assert "links up, expected none" in state["history"][-1]["note"]
    assert results.load("nvlink-on", 1) is not None and results.load("nvlink-off", 1) is None
    text = render_markdown(build_report(results))
    assert "Farm now: part-way from variant 'nvlink-on' into variant 'nvlink-off': apply failed" in text
    assert "links up, expected none" in text
    assert any(g.nvlink_active for g in gpu_states(shell_facts()).values())  # the contradiction, on the host itself

    restore(s["base"], results, s["farm"])
    assert results.state()["applied"] == BASE and results.state()["partial"] is None
    facts = shell_facts()
    assert all(g.nvlink_active > 0 for g in gpu_states(facts).values())


def test_cli_run_needs_yes_without_a_terminal_then_runs_and_reports(setup: dict[str, Any]) -> None:
    import os
    import subprocess
    import sys

    s = setup
    env = {**os.environ, "VGPUCTL_URL": s["sim"].url, "VGPUCTL_USERNAME": s["sim"].username, "VGPUCTL_INSECURE": "1"}
    base_cmd = [sys.executable, "-m", "vgpuctl", "experiment", "run", str(s["tmp"] / "experiment.yaml"),
                "--ip-timeout", "0", "--results", str(s["tmp"] / "cli-results")]
    refused = subprocess.run(base_cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
                             check=False, timeout=600)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "rerun with --yes" in refused.stderr and "Traceback" not in refused.stderr
    refused_state = ResultsDir(s["tmp"] / "cli-results").state()
    assert refused_state["applied"] is None and refused_state["partial"] is None  # nothing was changed
    assert refused_state["history"][-1]["not_applied"] == "nvlink-on"

    done = subprocess.run([*base_cmd, "--yes"], capture_output=True, text=True, env=env, check=False, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr  # every repetition failed: no guest answered
    assert "3 repetition(s) failed (recorded with their output; run again to retry them)" in done.stderr
    assert "nvlink-off: 1 run, 0 already done, 1 failed" in done.stdout and "base inventory restored" in done.stdout
    assert (s["tmp"] / "cli-results" / "report.md").is_file()
    assert vgpus_of(s["sim"], "train-01") == ["grid_a100-40c", "grid_a100-40c"]


NCCL_OUTPUT = (Path(__file__).resolve().parents[1] / "fixtures" / "experiment" /
               "all_reduce_perf.h100-2vms-16gpus.txt").read_text()  # a recorded real output (fixtures README)
MIG_EXPERIMENT = {
    **EXPERIMENT,
    "name": "nvlink-and-mig-counted",
    "variants": [
        {"name": "nvlink-on"},
        {"name": "mig-3g", "hosts": [{"cluster": "GPU-Cluster", "gpus": [{"select": "all", "mode": "mig"}]}],
         "vms": [{"name": "train-01", "vgpus": {"profile": "grid_a100-3-20c", "count": 2}}]},
        {"name": "half", "vms": [{"name": "train-01", "vgpus": {"profile": "grid_a100-20c", "count": 2}}]},
    ],
}


class StandInGuests(VsphereFarm):
    """The real farm (plan and apply through vgpuctl, host facts over SSH from gpusim) with a stand-in benchmark
    in place of the guests, which gpusim does not run: each VM prints a recorded nccl-tests output, names the
    vGPUs it holds in gpusim, and shows the topology NVIDIA documents for them (NVIDIA vGPU, "Peer-to-Peer CUDA
    Transfers"): NV12 between whole-GPU time-sliced C-series vGPUs when the host's NVLink links are up, PIX
    (PCIe) between MIG-backed or fractional ones."""

    def __init__(self, sim: Any, farm: VsphereFarm):
        super().__init__(**{f.name: getattr(farm, f.name) for f in dataclasses.fields(farm)})
        self.sim = sim

    def guest_addresses(self, inventory: Any, vms: list[str]) -> dict[str, str | None]:
        return {vm: "192.0.2.10" for vm in vms}

    def run_workload(self, inventory: Any, addresses: Any, vms: list[str], workload: Any) -> Any:
        links_up = all(g.nvlink_active > 0 for g in gpu_states(shell_facts()).values())
        run = GuestRun()
        for vm in vms:
            held = vgpus_of(self.sim, vm)
            whole = all(not parse_profile(p).is_mig and parse_profile(p).fb_gb == 40 for p in held)
            link = "NV12" if whole and links_up else "PIX"
            topo = f"\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \t{link}\t0-23\nGPU1\t{link}\t X \t0-23\n"
            names = "".join(f"550.90.07, GRID {p.removeprefix('grid_').upper()}\n" for p in held)
            run.outputs[vm], run.rcs[vm] = NCCL_OUTPUT, 0
            run.facts[vm] = {"topo": topo, "nvlink": "", "gpus": names}
        return run


def test_a_mig_variant_with_nvlink_enabled_counts_its_runs(setup: dict[str, Any]) -> None:
    """Hosts keep `nvlink: enabled` in every variant. The MIG variant's and the fractional variant's guests see
    PCIe between their vGPUs, as NVIDIA documents: their runs count (not flagged p2p-not-nvlink), beside the
    whole-GPU variant's NVLink runs."""
    s = setup
    (s["tmp"] / "experiment.yaml").write_text(yaml.safe_dump(MIG_EXPERIMENT, sort_keys=False))
    exp = load_experiment(s["tmp"] / "experiment.yaml")
    farm = StandInGuests(s["sim"], s["farm"])
    results: ResultsDir = s["results"]
    summary = run_experiment(exp, checked_variants(exp), s["base"], results, farm)
    assert summary.restored and all(v["failed"] == 0 for v in summary.variants.values()), summary.variants
    assert results.expectations("mig-3g")["nvlink"] == "on"
    assert {v: results.expectations(v)["p2p"] for v in ("nvlink-on", "mig-3g", "half")} == {
        "nvlink-on": {"train-01": "nvlink"}, "mig-3g": {"train-01": "pcie"}, "half": {"train-01": "pcie"}}
    assert all(g["mig_current"] for g in host_gpus(results.facts("mig-3g", 1)).values())
    assert all(g["nvlink_active"] > 0 for g in host_gpus(results.facts("mig-3g", 1)).values())  # links still up

    report = build_report(results)
    assert report.flags == []
    assert {v.name: v.repetitions_ok for v in report.variants} == {"nvlink-on": 1, "mig-3g": 1, "half": 1}
    counted = {name for table in report.tables for row in table.data for name in row.get("variants", {})}
    assert counted == {"nvlink-on", "mig-3g", "half"}  # every variant's run is in the numbers
