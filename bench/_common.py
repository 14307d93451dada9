"""Shared by the benchmarks: start gpusim for one run, connect, name the VMs, time things.

Not a test: the benchmarks print figures; bench/README.md records them with the command that produced them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from vgpuctl.vsphere.observe import observe
from vgpuctl.vsphere.session import ConnectionSettings, open_session

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # `tests.gpusim` when the checkout is not on sys.path

T = TypeVar("T")


Sim = Any  # tests/gpusim.py's Gpusim: url, username, password, env, control


@contextmanager
def gpusim(farm: dict[str, Any]) -> Iterator[Sim]:
    """gpusim with this farm (built if needed) through tests/gpusim.py, the launcher the tests use."""
    from tests.gpusim import Gpusim

    started = time.monotonic()
    with Gpusim.start(farm=farm, args=["-no-ssh"], timeout=300) as sim:
        print(f"gpusim up in {time.monotonic() - started:.1f} s", file=sys.stderr)
        yield sim


def a100_farm(hosts: int, gpus: int, vms: int) -> dict[str, Any]:
    """One cluster of HOSTS x GPUS A100-40GB (sameSize, shared direct) and VMS powered-off VMs."""
    return {
        "datacenter": "DC0",
        "clusters": [
            {
                "name": "GPU-Cluster",
                "hosts": hosts,
                "gpus_per_host": gpus,
                "model": "A100-40GB",
                "nvlink": "none",
                "graphics_type": "sharedDirect",
                "assignment_policy": "performance",
                "vgpu_mode": "sameSize",
            }
        ],
        "templates": [{"name": "ubuntu-22.04-ml", "cpus": 8, "memory_mb": 65536, "firmware": "efi"}],
        "vm_count": vms,
    }


def settings(sim: Sim) -> Any:
    return ConnectionSettings(url=sim.url, username=sim.username, password=sim.password, insecure=True)


def vm_names(sim: Sim) -> list[str]:
    """Names of the farm's VMs (not templates), read in bulk; not part of any timing."""
    with open_session(settings(sim)) as session:
        observed = observe(session)
    return sorted(v.name for v in observed.vms.values() if not v.is_template)


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def cli_env(sim: Sim) -> dict[str, str]:
    """The environment of a `vgpuctl` process against this gpusim, running this checkout's code (also when the
    virtual environment's vgpuctl was installed from another one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUCTL_", "GOVC_"))}
    path = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return {**env, **sim.env, "PYTHONPATH": path}


def load_note() -> str:
    """How busy the machine is: its load averages over 1 and 5 minutes against its CPU count."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def vgpuctl_bin() -> str:
    here = Path(sys.executable).parent / "vgpuctl"
    return str(here) if here.exists() else "vgpuctl"


def farm_size_args(description: str) -> argparse.Namespace:
    """--hosts, --gpus and --repeat of a bench over one gpusim farm; --smoke: 2 hosts x 2 GPUs, one repeat."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="2 hosts x 2 GPUs, one repeat: does it run")
    args = parser.parse_args()
    if args.smoke:
        args.hosts, args.gpus, args.repeat = 2, 2, 1
    return args
