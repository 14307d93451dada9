"""The vgpu_manager host setting (vgpuctl.settings.vgpu_manager): its entry, the facts it plans from (the installed
package, the depot read on the host or vCenter's depots, the cluster's vLCM image), the change and how apply will
install it, its errors, and what status, export and verification see."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vgpuctl.domain import Phase
from vgpuctl.errors import InventoryError, SshError
from vgpuctl.inventory import HostSpec, load_inventory_text
from vgpuctl.model import ObservedHost
from vgpuctl.settings import decoders
from vgpuctl.settings.base import PlanInput
from vgpuctl.settings.facts import GUEST_DRIVERS, RUNNING_MANAGER, HostFacts
from vgpuctl.settings.vgpu_manager import (
    DEPOT,
    SETTING,
    SOFTWARE,
    DepotRead,
    Install,
    ManagerTarget,
    Offered,
    Route,
    Software,
    _read_depot,
)

pytestmark = pytest.mark.unit

HOST = "esx-01.gpu.sim"
ZIP = "nvidia/NVD-AIE-800_580.65.05-1OEM.800.1.0.20613240.zip"
URL = "https://depot.example.com/nvidia/NVD-AIE-800_580.65.05.zip"
R580 = Offered("NVD-AIE-800", "580.65.05-1OEM.800.1.0.20613240", "NVIDIA")


def spec(**entry: Any) -> HostSpec:
    return HostSpec.model_validate({"name": HOST, "vgpu_manager": {"version": "580.65.05", **entry}})


def facts(software: Software | None, depot: DepotRead | None = None, shell: bool = True,
          running: str | None = "550.90.05") -> HostFacts:
    f = HostFacts(HOST, shell=shell)
    if software is not None:
        f.values[SOFTWARE.name] = software
    if depot is not None:
        f.values[DEPOT.name] = depot
    f.values[RUNNING_MANAGER.name] = {"0000:3b:00.0": running}
    f.values[GUEST_DRIVERS.name] = {"train-01": "550.90.07"}
    return f


BASELINES = Software("550.90.05", "NVD-AIE_ESXi_8.0.0_Driver 550.90.05-1OEM.800.1.0.20613240", "domain-c1")
IMAGE = Software("550.90.05", "NVD-AIE_ESXi_8.0.0_Driver 550.90.05-1OEM.800.1.0.20613240", "domain-c1", image=True,
                 image_components=(Offered("NVD-AIE-800", "550.90.05-1OEM.800.1.0.20613240", "NVIDIA"),),
                 depots=(URL,), content=(R580,))


def plan(s: HostSpec, f: HostFacts | None) -> Any:
    return SETTING.plan(PlanInput(s, ObservedHost(HOST), f))


def test_a_host_managed_by_baselines_installs_from_the_datastore_bundle_with_esxcli() -> None:
    depot = DepotRead(f"/vmfs/volumes/datastore1/{ZIP}", (R580,))
    result = plan(spec(source={"datastore": "datastore1", "path": ZIP}), facts(BASELINES, depot))
    assert not result.errors
    [change] = result.changes
    assert (change.old, str(change.new), change.phase) == ("550.90.05", "580.65.05", Phase.REBOOT)
    target = change.new
    assert isinstance(target, ManagerTarget)
    assert (target.route, target.location, target.component, target.install) == (
        Route.SHELL, f"/vmfs/volumes/datastore1/{ZIP}", "NVD-AIE-800", Install.COMPONENT)
    assert SETTING.replaces_manager(change) == "580.65.05"


def test_a_cluster_managed_by_an_image_goes_through_vlcm() -> None:
    result = plan(spec(source={"url": URL}), facts(IMAGE))
    [change] = result.changes
    assert change.new.route == Route.LIFECYCLE and change.new.cluster == "domain-c1"
    assert change.new.component_version == R580.version
    not_yet = Software(**{**IMAGE.__dict__, "depots": ()})
    result = plan(spec(source={"url": URL}), facts(not_yet))
    assert result.changes and result.changes[0].new.component == "" and "imports it" in result.warnings[0]


def test_the_host_has_it_already() -> None:
    has = Software("580.65.05", "NVD-AIE_ESXi_8.0.0_Driver 580.65.05-1OEM", "")
    assert plan(spec(), facts(has)).changes == []  # no source needed where nothing changes
    assert plan(spec(), None).changes == []  # a pure plan knows nothing of the host


@pytest.mark.parametrize(("entry", "software", "depot", "says"), [
    ({"source": {"datastore": "datastore1", "path": ZIP}}, BASELINES,
     DepotRead(f"/vmfs/volumes/datastore1/{ZIP}", error="[MetadataDownloadError] Could not download from depot"),
     "cannot be read: [MetadataDownloadError]"),
    ({"source": {"datastore": "datastore1", "path": ZIP}}, BASELINES,
     DepotRead(f"/vmfs/volumes/datastore1/{ZIP}", (Offered("NVD-AIE-800", "570.124.03-1OEM", "NVIDIA"),)),
     "does not hold NVIDIA's vGPU Manager 580.65.05 (it holds NVD-AIE-800 570.124.03-1OEM)"),
    ({"source": {"datastore": "datastore1", "path": ZIP}, "component": "NVD-VGPU-800"}, BASELINES,
     DepotRead(f"/vmfs/volumes/datastore1/{ZIP}", (R580,)), "holds no component NVD-VGPU-800"),
    ({"source": {"datastore": "datastore1", "path": ZIP}, "component": "Acme-gpu"}, BASELINES,
     DepotRead(f"/vmfs/volumes/datastore1/{ZIP}", (Offered("Acme-gpu", "580.65.05-1", "Acme"),)),
     "is Acme's, not NVIDIA's"),
    ({"source": {"datastore": "datastore1", "path": ZIP}}, IMAGE, None, "imports bundles from a URL"),
    ({}, BASELINES, None, "needs vgpu_manager.source"),
    ({"source": {"url": URL}}, Software(**{**IMAGE.__dict__, "content": ()}), None,
     "does not hold NVIDIA's vGPU Manager 580.65.05 (it holds no NVIDIA component)"),
    ({"source": {"url": URL}}, Software(**{**IMAGE.__dict__, "lifecycle_error": "401 unauthorized"}), None,
     "could not be read (401 unauthorized)"),
])  # fmt: skip
def test_plan_errors_name_the_depot_and_what_it_holds(entry: dict[str, Any], software: Software,
                                                     depot: DepotRead | None, says: str) -> None:
    result = plan(spec(**entry), facts(software, depot))
    assert result.changes == [] and len(result.errors) == 1, result.errors
    assert result.errors[0].startswith(f"host {HOST}: vgpu_manager: ") and says in result.errors[0]


def test_without_the_shell_a_baseline_host_cannot_be_planned() -> None:
    result = plan(spec(source={"datastore": "datastore1", "path": ZIP}), facts(BASELINES, shell=False))
    assert "ESXi shell" in result.errors[0]
    unread = HostFacts(HOST)
    result = plan(spec(source={"url": URL}), unread)
    assert "the installed vGPU Manager could not be read" in result.errors[0]


@pytest.mark.parametrize(("entry", "message"), [
    ({"version": "latest"}, "'latest' is not a driver version"),
    ({"version": "580.65.05", "source": {"datastore": "ds1", "path": "/abs.zip"}}, "below the datastore's root"),
    ({"version": "580.65.05", "source": {"datastore": "ds1", "path": "../x.zip"}}, "below the datastore's root"),
    ({"version": "580.65.05", "source": {"url": URL, "datastore": "ds1", "path": ZIP}}, "either url"),
    ({"version": "580.65.05", "source": {"url": "ftp://x/y.zip"}}, "http(s) URL"),
    ({"version": "580.65.05", "install": "rpm"}, "install"),
])  # fmt: skip
def test_bad_entries_are_refused_with_their_place_in_the_file(entry: dict[str, Any], message: str) -> None:
    text = "apiVersion: vgpuctl/v1\nhosts:\n  - cluster: GPU-Cluster\n    vgpu_manager: " + json.dumps(entry) + "\n"
    with pytest.raises(InventoryError) as err:
        load_inventory_text(text, "inv.yaml")
    assert "inv.yaml:4:" in str(err.value) and message in str(err.value)


def test_a_depot_that_cannot_be_read_is_a_fact_not_a_broken_shell() -> None:
    def failing(command: str) -> str:
        raise SshError("exited 1", "esx-01", exit_status=1,
                       stderr="Error: [MetadataDownloadError] Could not download from depot at /vmfs/x.zip\n")

    read = _read_depot(failing, "esxcli software sources component list -d /vmfs/x.zip")
    assert read.error is not None and "MetadataDownloadError" in read.error and read.location == "/vmfs/x.zip"

    def dropped(command: str) -> str:
        raise SshError("connection lost", "esx-01")

    with pytest.raises(SshError):
        _read_depot(dropped, "esxcli software sources component list -d /vmfs/x.zip")


def test_status_verify_and_export() -> None:
    pending = Software("580.65.05", "NVD-AIE_ESXi_8.0.0_Driver 580.65.05-1OEM", "")
    [state] = SETTING.status(ObservedHost(HOST), facts(pending))
    assert (state.key, state.value, state.after_reboot) == ("vgpu_manager", "550.90.05", "580.65.05")
    problems = SETTING.verify(PlanInput(spec(), ObservedHost(HOST), facts(pending)))
    assert problems == ["vgpu_manager: the host's GPUs run vGPU Manager 550.90.05, not 580.65.05"]
    assert SETTING.verify(PlanInput(spec(), ObservedHost(HOST), facts(pending, running="580.65.05"))) == []
    exported = SETTING.export(ObservedHost(HOST), facts(pending))
    assert exported.values == {"vgpu_manager": {"version": "580.65.05"}}
    assert SETTING.status(ObservedHost(HOST), None) == []


def test_facts_come_back_from_json() -> None:
    f = facts(IMAGE, DepotRead("/vmfs/x.zip", (R580,)))
    again = HostFacts.from_dict(json.loads(json.dumps(f.to_dict())), decoders())
    assert again.get(SOFTWARE) == IMAGE and again.get(DEPOT) == DepotRead("/vmfs/x.zip", (R580,))
