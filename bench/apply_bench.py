"""Benchmark: apply 4 vGPUs to each of 200 VMs with vgpuctl vs community.vmware's vmware_guest_vgpu module.

    .venv/bin/python bench/apply_bench.py [--vms 200] [--sample 20] [--count 4] [--parallel 8] [--smoke]

Starts gpusim (16 hosts x 8 A100-40GB, VMS powered-off VMs), then in the same run:
  vgpuctl    what `vgpuctl apply --yes --parallel PARALLEL` runs, in-process (load + validate, then
             vgpuctl.pipeline.run: bulk observe, plan, apply): COUNT x grid_a100-4c per VM, one ReconfigVM
             per VM. Timed for all VMS VMs.
  ansible    `ansible-playbook` running community.vmware.vmware_guest_vgpu (bundled in the PyPI `ansible`
             package) COUNT times per VM (force: true, one profile per task, as the module allows) on a
             SAMPLE of VMs not touched by vgpuctl; the time is scaled linearly to VMS VMs.
Both results are checked by reading the VMs' devices back (exit status 1 when one is wrong). The ratio is
ansible (scaled) / vgpuctl. community.vmware imports `requests` (a dev dependency of vgpuctl). --smoke: vgpuctl
alone on 4 VMs, 1 vGPU each (ansible-playbook alone takes several seconds), to check that the benchmark still
runs (make test does).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import REPO, a100_farm, gpusim, load_note, settings, timed

from vgpuctl import pipeline
from vgpuctl.vsphere.observe import observe
from vgpuctl.vsphere.session import open_session

PROFILE = "grid_a100-4c"

PLAYBOOK = """\
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: add one vGPU per task (the module adds one profile per call)
      community.vmware.vmware_guest_vgpu:
        validate_certs: false
        datacenter: DC0
        name: "{{ item.0 }}"
        vgpu: "%(profile)s"
        force: true
        state: present
      loop: "{{ vms | product(range(%(count)d)) | list }}"
"""


def observe_vms(sim: Any) -> dict[str, Any]:
    with open_session(settings(sim)) as session:
        return {v.name: v for v in observe(session, "DC0").vms.values() if not v.is_template}


def vgpuctl_apply(sim: Any, names: list[str], count: int, parallel: int, workdir: Path) -> tuple[Any, int]:
    """What `vgpuctl apply --yes --parallel PARALLEL` runs (vgpuctl.pipeline.run), in-process."""
    path = workdir / "inventory.yaml"
    lines = ["apiVersion: vgpuctl/v1", "vcenter: {datacenter: DC0}", "vms:"]
    lines += [f"  - {{name: {n}, vgpus: {{profile: {PROFILE}, count: {count}}}, power: 'off'}}" for n in names]
    path.write_text("\n".join(lines) + "\n")
    inventory = pipeline.load(path)
    outcome = pipeline.run(settings(sim), inventory, pipeline.RunOptions(datacenter="DC0", parallel=parallel))
    failure = outcome.failure()
    if failure is not None:
        sys.exit(f"vgpuctl apply failed: {failure}")
    return outcome.vm_result, outcome.round_trips


def ansible_apply(sim: Any, names: list[str], count: int, workdir: Path) -> subprocess.CompletedProcess[str]:
    playbook = workdir / "vgpu.yml"
    playbook.write_text(PLAYBOOK % {"profile": PROFILE, "count": count})
    extra = workdir / "vars.json"
    extra.write_text(json.dumps({"vms": names}))
    host, port = sim.host_port
    bindir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "VMWARE_HOST": host,
        "VMWARE_PORT": str(port),
        "VMWARE_USER": sim.username,
        "VMWARE_PASSWORD": sim.password,  # the module reads it from the environment: not on a command line
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_LOCAL_TEMP": str(workdir / "ansible-tmp"),
    }
    command = [shutil.which("ansible-playbook", path=env["PATH"]) or "ansible-playbook", str(playbook)]
    return subprocess.run([*command, "-e", f"@{extra}"], env=env, capture_output=True, text=True, cwd=workdir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=200)
    parser.add_argument("--sample", type=int, default=20)
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="vgpuctl alone on 4 VMs, 1 vGPU each: does it run")
    args = parser.parse_args()
    if args.smoke:
        args.vms, args.sample, args.count = 4, 0, 1

    with gpusim(a100_farm(16, 8, args.vms + args.sample)) as sim, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        names = sorted(observe_vms(sim))
        ours, sample = names[: args.vms], names[args.vms : args.vms + args.sample]
        print(f"farm: 16 hosts x 8 A100-40GB; vgpuctl on {len(ours)} VMs, ansible on {len(sample)} other VMs; "
              f"{load_note()}", flush=True)

        (result, trips), t_ours = timed(lambda: vgpuctl_apply(sim, ours, args.count, args.parallel, workdir))
        t_ansible = 0.0
        if sample:
            proc, t_ansible = timed(lambda: ansible_apply(sim, sample, args.count, workdir))
            if proc.returncode != 0:
                sys.exit(f"ansible-playbook failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
        after = observe_vms(sim)
    wanted = [PROFILE] * args.count
    ok_ours = sum(1 for n in ours if [d.profile for d in after[n].vgpus] == wanted)
    ok_ansible = sum(1 for n in sample if [d.profile for d in after[n].vgpus] == wanted)
    print(
        f"vgpuctl apply:  {t_ours:.1f} s for {len(ours)} VMs x {args.count} vGPUs ({len(result.changed)} changed, "
        f"{len(result.failed)} failed, {trips} round trips, --parallel {args.parallel}); verified {ok_ours}/{len(ours)}"
    )
    if sample:
        report_peer(t_ours, t_ansible, len(ours), len(sample), args.count, ok_ansible)
    else:
        print("ansible module: not run (--smoke: ansible-playbook alone takes several seconds)")
    print(f"at the end: {load_note()}")
    if ok_ours != len(ours) or ok_ansible != len(sample):
        sys.exit("some VMs do not have the vGPUs asked for")


def report_peer(t_ours: float, t_ansible: float, ours: int, sample: int, count: int, verified: int) -> None:
    scaled = t_ansible * ours / sample
    print(
        f"ansible module: {t_ansible:.1f} s for {sample} VMs x {count} tasks; verified {verified}/{sample}; "
        f"scaled to {ours} VMs: {scaled:.1f} s"
    )
    print(f"per VM: vgpuctl {t_ours / ours * 1000:.0f} ms, ansible {t_ansible / sample * 1000:.0f} ms")
    print(f"ratio ansible (scaled) / vgpuctl: {scaled / t_ours:.1f}x")


if __name__ == "__main__":
    os.chdir(REPO)
    main()
