"""The host driver's word on time-sliced vGPUs of different types on one GPU (nvidia-smi -q, vGPU Device
Capability, Heterogeneous Time-Slice Profiles): read from the shell with the other shared facts, kept through a
saved plan's JSON, put on the observed GPUs, and deciding placement over the vSphere version where it was read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vgpuctl.esxi import parsers
from vgpuctl.farm.placement import gpus_from_observed, place_vm
from vgpuctl.hosts.facts import adopt_vgpu_capabilities
from vgpuctl.model import Observed, ObservedGpu, ObservedHost
from vgpuctl.settings import decoders, shell_facts
from vgpuctl.settings.facts import VGPU_CAPABILITIES, HostFacts, vgpu_capabilities

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
P40 = (FIXTURES / "tesla-p40.q-vgpu-host.txt").read_text()
PCI = "0000:83:00.0"


def _said(types: str) -> str:
    """The real P40 capture with its Heterogeneous Time-Slice Profiles line saying `types`."""
    line = "        Heterogeneous Time-Slice Profiles : Supported\n"
    assert line in P40
    return P40.replace(line, f"        Heterogeneous Time-Slice Profiles : {types}\n")


def _facts(text: str) -> HostFacts:
    facts = HostFacts("h", shell=True)
    facts.values[VGPU_CAPABILITIES.name] = VGPU_CAPABILITIES.gather(lambda command: text)
    return facts


def _observed(api: str = "8.0.3.0") -> Observed:
    observed = Observed(datacenter="DC0")
    observed.hosts["h"] = ObservedHost(name="h", api_version=api, gpus=[
        ObservedGpu(pci_id=PCI, device_name="NVIDIA L40S", memory_kb=48 * 1024 * 1024, graphics_type="sharedDirect",
                    vgpu_mode="sameSize", vms=["q-1"])])
    return observed


@pytest.mark.parametrize(("value", "want"), [("Supported", True), ("Not Supported", False), ("N/A", None),
                                             ("[N/A]", None), ("", None)])
def test_supported_state(value: str, want: bool | None) -> None:
    assert parsers.supported_state(value) is want


def test_the_fact_is_read_with_the_shared_shell_facts_by_its_command() -> None:
    assert VGPU_CAPABILITIES in shell_facts() and VGPU_CAPABILITIES.command == "nvidia-smi -q"
    assert vgpu_capabilities(_facts(P40)) == {PCI: parsers.VgpuCapability("00000000:83:00.0", True, False)}
    assert vgpu_capabilities(HostFacts("h")) == {}


def test_the_fact_survives_a_saved_plans_json() -> None:
    facts = _facts(_said("Not Supported"))
    again = HostFacts.from_dict(json.loads(json.dumps(facts.to_dict())), decoders())
    assert vgpu_capabilities(again) == vgpu_capabilities(facts)
    assert vgpu_capabilities(again)[PCI].types is False


@pytest.mark.parametrize(("said", "api", "mixes"), [
    ("Supported", "8.0.3.0", True),
    ("Not Supported", "8.0.3.0", False),  # the driver's word wins over the version
    ("Supported", "8.0.1.0", False),  # and the version still bounds it
    (None, "8.0.2.0", True),  # not read: the version decides
    (None, "8.0.1.0", False),
])
def test_the_drivers_word_reaches_placement(said: str | None, api: str, mixes: bool) -> None:
    observed = _observed(api)
    if said is not None:
        adopt_vgpu_capabilities(observed, _facts(_said(said)))
    gpu = observed.hosts["h"].gpus[0]
    assert gpu.types_may_mix is (None if said is None else said == "Supported")
    gpus = gpus_from_observed(observed.hosts["h"], {"q-1": ["grid_l40s-24q"]})
    assert (place_vm(gpus, "vm", ["grid_l40s-24c"]).assign == [PCI]) is mixes
    assert place_vm(gpus, "vm", ["grid_l40s-24q"]).assign == [PCI]  # the identical type always may


def test_a_gpu_the_shell_does_not_list_and_an_unsaid_capability_keep_the_version_rule() -> None:
    observed = _observed()
    adopt_vgpu_capabilities(observed, _facts(P40.replace("00000000:83:00.0", "00000000:84:00.0")))
    assert observed.hosts["h"].gpus[0].types_may_mix is None
    adopt_vgpu_capabilities(observed, _facts(_said("N/A")))
    assert observed.hosts["h"].gpus[0].types_may_mix is None
    adopt_vgpu_capabilities(observed, HostFacts("other"))  # another host's facts: nothing to do here
