"""Host changes checked against what the ESXi shell says before anything is written (vgpuctl.hosts.plan,
pure): module options the nvidia module does not declare are refused with the parameter and the host, and
MIG, NVLink and scheduler changes without the shell are refused with a line saying SSH is needed.
"""

from __future__ import annotations

import pytest
from hostfacts import host_facts

from vgpuctl.hosts import plan as hostplan
from vgpuctl.inventory import HostSpec
from vgpuctl.model import ObservedGpu, ObservedHost
from vgpuctl.settings.facts import HostFacts

pytestmark = pytest.mark.unit

DECLARED = ["NVreg_EnableMSI", "NVreg_NvLinkDisable", "NVreg_RegistryDwords"]


def _host() -> ObservedHost:
    gpu = ObservedGpu(
        "0000:3b:00.0", "NVIDIA A100-PCIE-40GB", device_id=0x20F1, memory_kb=40 << 20, vgpu_mode="sameSize"
    )
    return ObservedHost("esx-01", default_graphics_type="sharedDirect", gpus=[gpu], module_options="NVreg_EnableMSI=1")


def _facts(declared: list[str] | None, shell: bool = True) -> HostFacts:
    return host_facts("esx-01", options_configured="NVreg_EnableMSI=1", shell=shell, declared_params=declared)


def _plan(spec: dict[str, object], facts: HostFacts | None) -> hostplan.HostPlan:
    return hostplan.plan_host(HostSpec.model_validate({"name": "esx-01", **spec}), _host(), facts)


@pytest.mark.parametrize(
    ("spec", "param"),
    [
        ({"nvlink": "disabled"}, "NVreg_NvLinkDisable"),
        ({"scheduler": {"policy": "equal-share", "timeslice_ms": 3}}, "NVreg_RegistryDwords"),
    ],
)
def test_an_undeclared_parameter_is_refused_naming_it_and_the_host(spec: dict[str, object], param: str) -> None:
    declared = [p for p in DECLARED if p != param]
    result = _plan(spec, _facts(declared))
    assert len(result.errors) == 1, result.errors
    assert result.errors[0].startswith(f"host esx-01: the nvidia module does not declare {param} (declared: ")
    assert _plan(spec, _facts(DECLARED)).errors == []


def test_removing_a_parameter_needs_no_declaration() -> None:
    host = _host()
    host.module_options = "NVreg_EnableMSI=1 NVreg_NvLinkDisable=1"
    facts = host_facts("esx-01", options_configured=host.module_options, shell=True,
                       declared_params=["NVreg_EnableMSI"])
    result = hostplan.plan_host(HostSpec(name="esx-01", nvlink="enabled"), host, facts)
    assert [c.kind for c in result.changes] == ["nvlink"] and result.errors == []


@pytest.mark.parametrize(
    ("spec", "kind"),
    [({"nvlink": "disabled"}, "nvlink"), ({"scheduler": "fixed-share"}, "scheduler"),
     ({"gpus": [{"select": "all", "mode": "mig"}]}, "mig")],
)  # fmt: skip
def test_shell_changes_without_ssh_say_ssh_is_needed(spec: dict[str, object], kind: str) -> None:
    result = _plan(spec, _facts(None, shell=False))
    assert result.errors == [
        f"host esx-01: {kind} changes need ESXi SSH (nvidia-smi and esxcli on the host): set VGPUCTL_ESXI_PASSWORD "
        "or VGPUCTL_ESXI_KEY_FILE, or ssh.key_file in the host entry"
    ]


def test_graphics_changes_need_no_shell() -> None:
    result = _plan({"graphics": {"assignment_policy": "consolidation"}}, _facts(None, shell=False))
    assert [c.kind for c in result.changes] == ["graphics.assignment_policy"] and result.errors == []
