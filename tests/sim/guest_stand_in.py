"""`vgpuctl` with a stand-in for the guest stage of a driver upgrade window, for sim tests: gpusim's VMs are no
machines Ansible could reach, so the driver role's effect is made where gpusim keeps it. Each guest driver move
sets the version the VM reports (POST /gpusim/vms/{name}/guest-driver, what a driver install in a real guest leaves
for `nvidia-smi vgpu -q` on its host) and appends one JSON line to $GUEST_STAND_IN_LOG: the moves and gpusim's vGPU
Managers at that moment. Everything else is the real `vgpuctl`.

    python tests/sim/guest_stand_in.py apply --yes -f inventory.yaml     (GPUSIM_CONTROL set)
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.request
from typing import Any

from vgpuctl.domain import Outcome
from vgpuctl.model import GuestDriverOutcome


def _control(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # gpusim's own certificate
    req = urllib.request.Request(os.environ["GPUSIM_CONTROL"] + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=context, timeout=30) as resp:
        return json.loads(resp.read() or b"null")


def deploy_drivers(inv: Any, addresses: dict[str, str | None], moves: Any, state: Any = None) -> list[Any]:
    managers = {h: s["running"] for h, s in _control("GET", "/software")["hosts"].items()}
    out = []
    for m in moves:
        if not addresses.get(m.vm):
            out.append(GuestDriverOutcome(m.vm, m.stage, m.new, Outcome.FAILED, "no guest IP address"))
            continue
        _control("POST", f"/vms/{m.vm}/guest-driver", {"version": m.new})
        out.append(GuestDriverOutcome(m.vm, m.stage, m.new, Outcome.CHANGED))
    with open(os.environ["GUEST_STAND_IN_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"moves": [[m.vm, str(m.stage), m.old, m.new] for m in moves],
                              "managers": managers}) + "\n")
    return out


if __name__ == "__main__":
    import vgpuctl.guest.drivers

    vgpuctl.guest.drivers.deploy_drivers = deploy_drivers  # type: ignore[assignment]
    sys.argv[0] = "vgpuctl"
    from vgpuctl.cli.main import run

    run()
