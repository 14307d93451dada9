"""Work records are data, against gpusim with real `vgpuctl` processes: a `vgpuctl.work` value that is no work
record is one line for that host only (a warning for plans that leave the host alone, an error for those that
change it), naming the host, the attribute and `vgpuctl host forget-work HOST`, which clears it; a record that
names a VM deleted since is finished without it, with a warning, and plan then says nothing is left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect
from pyVim.task import WaitForTask
from pyVmomi import vim
from vimfind import find_object

from vgpuctl.cli import common
from vgpuctl.cli.main import app
from vgpuctl.vsphere.session import ConnectionSettings, open_session
from vgpuctl.vsphere.workrecord import Fields, Lease

pytestmark = pytest.mark.sim

H1, H2 = "esx-01.gpu.sim", "esx-02.gpu.sim"
FARM = {
    "datacenter": "DC0",
    "clusters": [{"name": "GPU-Cluster", "hosts": 2, "gpus_per_host": 2, "model": "A100-40GB", "nvlink": "none",
                  "graphics_type": "sharedDirect", "vgpu_mode": "sameSize"}],
    "vms": [{"name": "web-01", "host": H1, "cpus": 2, "memory_mb": 4096, "firmware": "efi"},
            {"name": "gone-01", "host": H2, "cpus": 2, "memory_mb": 4096, "firmware": "efi"}],
}  # fmt: skip

VM_ONLY = """apiVersion: vgpuctl/v1
vcenter: {datacenter: DC0}
vms:
  - name: web-01
    vgpus: {profile: grid_a100-10c, count: 1}
"""
ON_H2 = f"""apiVersion: vgpuctl/v1
vcenter: {{datacenter: DC0}}
hosts:
  - name: {H2}
    graphics: {{assignment_policy: consolidation}}
"""


@pytest.fixture
def sim(gpusim_factory: Callable[..., Any]) -> Any:
    return gpusim_factory(FARM)


@pytest.fixture
def si(sim: Any) -> Iterator[Any]:
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def _set_work(si: Any, host: str, text: str) -> None:
    cfm = si.content.customFieldsManager
    key = next((f.key for f in cfm.field or [] if f.name == "vgpuctl.work"), None)
    if key is None:
        key = cfm.AddCustomFieldDef(name="vgpuctl.work", moType=vim.HostSystem).key
    cfm.SetField(entity=find_object(si, host, vim.HostSystem), key=key, value=text)


def _work(si: Any, host: str) -> str:
    keys = {f.key: f.name for f in si.content.customFieldsManager.field or []}
    h = find_object(si, host, vim.HostSystem)
    return next((v.value for v in h.customValue if keys.get(v.key) == "vgpuctl.work"), "")


def _vgpuctl(sim: Any, tmp_path: Path, *args: str, text: str | None = None) -> tuple[int, str]:
    command = [sys.executable, "-m", "vgpuctl", *args]
    if text is not None:
        path = tmp_path / "inv.yaml"
        path.write_text(text)
        command += ["-f", str(path)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_", "GPUSIM_"))}
    env |= sim.vgpuctl_env(tmp_path / "state")
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


NOT_A_RECORD = [
    ('{"vms": 7}', "vms: Input should be a valid array"),
    ('{"vms": [{"name": "web-01"}]}', "vms.0.moid: Field required"),
    ("not json at all", "not JSON"),
]


@pytest.mark.parametrize(("value", "why"), NOT_A_RECORD)
def test_a_value_that_is_no_work_record_is_one_line_for_that_host_only(
    sim: Any, si: Any, tmp_path: Path, value: str, why: str
) -> None:
    _set_work(si, H2, value)
    line = (f"host {H2}: its vgpuctl.work attribute is no vgpuctl work record ({why}); clear it with "
            f"`vgpuctl host forget-work {H2}` once you have checked the host by hand")  # fmt: skip
    code, out = _vgpuctl(sim, tmp_path, "apply", "--yes", text=VM_ONLY)  # leaves esx-02 alone: goes on
    assert code == 0 and line in out and "Traceback" not in out and "TypeError" not in out, out
    code, out = _vgpuctl(sim, tmp_path, "plan", text=ON_H2)  # changes esx-02: refused, that one line
    assert code == 1 and line in out and "Traceback" not in out, out
    code, out = _vgpuctl(sim, tmp_path, "host", "forget-work", H2, "--yes")
    assert code == 0 and f"{H2}: work record cleared; it held no work record ({why})" in out, out
    assert _work(si, H2) == ""
    code, out = _vgpuctl(sim, tmp_path, "apply", "--yes", text=ON_H2)
    assert code == 0 and "vgpuctl.work" not in out, out


def test_forget_work_of_a_host_without_one_says_so_and_json_is_its_document(sim: Any, tmp_path: Path) -> None:
    code, out = _vgpuctl(sim, tmp_path, "-o", "json", "host", "forget-work", H1, "--yes")
    assert code == 0, out
    document = json.loads(out[: out.rindex("}") + 1])
    assert document == {"kind": "host-forget-work", "host": H1, "record": "", "problem": None, "unfinished": None,
                        "cleared": False}  # fmt: skip


def test_a_record_naming_a_vm_deleted_since_finishes_without_it(sim: Any, si: Any, tmp_path: Path) -> None:
    gone = find_object(si, "gone-01", vim.VirtualMachine)
    moid = gone._moId
    WaitForTask(gone.Destroy_Task())
    web = find_object(si, "web-01", vim.VirtualMachine)
    record = {"run": "dead0run", "phase": "power-on", "entered_maintenance": False, "steps": ["power-on"],
              "vms": [{"name": "gone-01", "moid": moid, "after": "power-on"},
                      {"name": "web-01", "moid": web._moId, "after": "power-on"}]}  # fmt: skip
    _set_work(si, H2, json.dumps(record))
    code, out = _vgpuctl(sim, tmp_path, "plan", "--detailed-exitcode", text=VM_ONLY)
    assert code == 2, out
    assert f"host {H2}: VM gone-01 ({moid}) of its unfinished work no longer exists: apply drops it" in out, out
    code, out = _vgpuctl(sim, tmp_path, "apply", "--yes", text=VM_ONLY)
    assert code == 0 and "ManagedObjectNotFound" not in out and "Traceback" not in out, out
    assert f"VM gone-01 ({moid}) of its work record no longer exists: dropped from the record" in out, out
    assert _work(si, H2) == "" and find_object(si, "web-01", vim.VirtualMachine).runtime.powerState == "poweredOn"
    code, out = _vgpuctl(sim, tmp_path, "plan", "--detailed-exitcode", text=VM_ONLY)
    assert code == 0, out


def _forget_while_another_run_acts(sim: Any, monkeypatch: pytest.MonkeyPatch, act: Callable[[Any], None]) -> Any:
    """`host forget-work H2` (asking), where another run acts on the host while the prompt waits."""
    from typer.testing import CliRunner

    for key in [k for k in os.environ if k.startswith(("VGPUCTL_", "GOVC_"))]:
        monkeypatch.delenv(key)
    for key, value in sim.vgpuctl_env(esxi=False).items():
        monkeypatch.setenv(key, value)
    settings = ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)
    with open_session(settings) as session:

        def answer_yes_late(*args: Any, **kwargs: Any) -> None:
            act(session)  # what happens while the operator reads the question

        monkeypatch.setattr(common, "confirm", answer_yes_late)
        return CliRunner().invoke(app, ["host", "forget-work", H2])


def test_forget_work_takes_the_lease_for_the_clear_not_only_before_its_prompt(
    sim: Any, si: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = json.dumps({"run": "dead0run", "phase": "reboot", "entered_maintenance": True, "steps": ["reboot"]})
    _set_work(si, H2, record)
    taken: list[Lease] = []

    def a_run_takes_the_host(session: Any) -> None:
        taken.append(Lease(Fields(session), H2, find_object(si, H2, vim.HostSystem)._moId, "late0run").acquire())

    result = _forget_while_another_run_acts(sim, monkeypatch, a_run_takes_the_host)
    try:
        assert result.exit_code == 1, result.output
        assert f"{H2}: held by run late0run of " in result.output, result.output
        assert "its work record is in use; not cleared" in result.output
        assert _work(si, H2) == record  # the live run's record stays
    finally:
        taken[0].release()


def test_forget_work_clears_only_the_record_it_showed(
    sim: Any, si: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _set_work(si, H2, json.dumps({"run": "dead0run", "phase": "reboot", "steps": ["reboot"]}))
    newer = json.dumps({"run": "late0run", "phase": "enter-maintenance", "steps": ["enter-maintenance"]})

    def a_run_writes_its_record_and_goes(session: Any) -> None:
        _set_work(si, H2, newer)

    result = _forget_while_another_run_acts(sim, monkeypatch, a_run_writes_its_record_and_goes)
    assert result.exit_code == 1, result.output
    assert f"host {H2}: its work record changed since it was shown (run late0run wrote it meanwhile); not cleared" in (
        result.output
    )
    assert _work(si, H2) == newer
