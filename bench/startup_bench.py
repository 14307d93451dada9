"""Benchmark: the `vgpuctl` process's start-up: `--help`, a usage error, and `plan` end to end against the floor.

    .venv/bin/python bench/startup_bench.py [--hosts 64] [--gpus 8] [--vms 1000] [--repeat 5] [--no-compile]
                                            [--own-cpus] [--smoke]

Starts gpusim with plan_bench.py's farm and inventory, then each round, one after the other:
  floor     gpusim's own time to answer observe's bulk reads (plan_bench.py's floor, the same function)
  help      `vgpuctl --help`, a new process
  usage     `vgpuctl plan --no-such-option`, a new process (exits 1)
  plan      `vgpuctl -o json plan -f INVENTORY`, a new process, end to end
  late      the same with VGPUCTL_EARLY_READ=0: the login and the bulk read sent once the command's modules are
            loaded and the inventory read, not from the process's start (vgpuctl.vsphere.earlyread)
  preloaded the same plan in a process forked from one that has imported every module a plan process ends with
            (bench/preloaded.py): no interpreter start and no import in its time, nothing else done beforehand;
            the bound of any way to keep imports out of a command (a resident server forking per command)
Each process's wall time and its CPU time (user + system, from the kernel's accounting of the child: what the
machine's load moves least) are reported as medians; plan's wall time also paired with the round's floor; and
gpusim's own CPU time while it answers the floor's reads (on a small machine, what it leaves the client).
--own-cpus: gpusim on the last CPU, the benchmark and every process it starts on the others, as a vCenter on its
own machine would be (by default all share every CPU, and gpusim's answer keeps more than one busy).
Once, after the rounds: the modules the plan process has imported when it first connects to vCenter (a wrapper
around the console entry point notes sys.modules at the first socket connect).

The checkout's bytecode is compiled first (compileall into __pycache__, as a wheel install does), so that no
process compiles vgpuctl's sources: with PYTHONDONTWRITEBYTECODE set and no compiled bytecode, every process
would (--no-compile measures that).
--smoke: a tiny farm (2 hosts x 2 GPUs, 10 VMs, one round), to check that the benchmark still runs.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import REPO, a100_farm, cli_env, gpusim, load_note, vgpuctl_bin, vm_names
from plan_bench import bulk_answer_time, write_inventory

# Run as the console script runs, noting sys.modules at the first connect (to vCenter: gpusim).
FIRST_CONNECT = """
import json, socket, sys
out = sys.argv.pop(1)
connect = socket.socket.connect
def noting(self, *args):
    if not getattr(noting, "done", False):
        noting.done = True
        open(out, "w").write(json.dumps(sorted(sys.modules)))
    return connect(self, *args)
socket.socket.connect = noting
sys.argv[0] = "vgpuctl"
from vgpuctl.cli.entry import run
run()
"""

# Run as the console script runs, noting sys.modules when the interpreter exits.
AT_EXIT = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "vgpuctl"
from vgpuctl.cli.entry import run
run()
"""


@dataclass
class Timing:
    wall: float
    cpu: float


def run_process(argv: list[str], env: dict[str, str], expect: int) -> Timing:
    """One process's wall time and its CPU time (user + system: the kernel's accounting of the reaped child)."""
    cpu_before = children_cpu()
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - started
    cpu = children_cpu() - cpu_before
    if proc.returncode != expect:
        sys.exit(f"{' '.join(argv[1:])} exited {proc.returncode}, not {expect}: {proc.stderr.decode()[-2000:]}")
    if "plan" in argv and expect == 0 and json.loads(proc.stdout).get("kind") != "plan":
        sys.exit(f"plan printed no plan: {proc.stdout[:400]!r}")
    return Timing(wall, cpu)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Rounds:
    floor: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)  # gpusim's CPU time during each floor
    runs: dict[str, list[Timing]] = field(
        default_factory=lambda: {"help": [], "usage": [], "plan": [], "late": [], "preloaded": []})


def process_cpu(pid: int) -> float:
    """A process's CPU time so far (user + system, all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpus(sim: Any) -> str:
    """gpusim's threads on the last CPU, this process (and so every process it starts) on the others."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        sys.exit("--own-cpus needs two CPUs at least")
    for task in Path(f"/proc/{sim.process.pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), {cpus[-1]})  # threads Go starts later inherit it
    os.sched_setaffinity(0, set(cpus[:-1]))
    return f"gpusim on CPU {cpus[-1]}, vgpuctl and the floor's reader on CPU {', '.join(map(str, cpus[:-1]))}"


def measure(sim: Any, path: Path, repeat: int) -> Rounds:
    env = cli_env(sim)
    vgpuctl = vgpuctl_bin()
    plan = [vgpuctl, "-o", "json", "plan", "-f", str(path)]
    commands = {
        "help": ([vgpuctl, "--help"], 0, env),
        "usage": ([vgpuctl, "plan", "--no-such-option"], 1, env),
        "plan": (plan, 0, env),
        "late": (plan, 0, {**env, "VGPUCTL_EARLY_READ": "0"}),
    }
    rounds = Rounds()
    with Preloaded(modules_at_exit(sim, path), env) as preloaded:
        for _ in range(repeat):
            before = process_cpu(sim.process.pid)
            rounds.floor.append(bulk_answer_time(sim).seconds)
            rounds.server_cpu.append(process_cpu(sim.process.pid) - before)
            for name, (argv, expect, its_env) in commands.items():
                rounds.runs[name].append(run_process(argv, its_env, expect))
            rounds.runs["preloaded"].append(preloaded.plan(plan[1:], env))
    return rounds


class Preloaded:
    """bench/preloaded.py, started with the plan process's modules, in a private folder with its socket."""

    def __init__(self, modules: list[str], env: dict[str, str]):
        self.modules, self.env = modules, env

    def __enter__(self) -> Preloaded:
        self.folder = tempfile.TemporaryDirectory()
        folder = Path(self.folder.name)
        self.socket = str(folder / "socket")
        (folder / "modules.json").write_text(json.dumps(self.modules))
        self.process = subprocess.Popen([sys.executable, str(REPO / "bench" / "preloaded.py"), self.socket,
                                         str(folder / "modules.json")], env=self.env, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != b"ready":
            sys.exit(f"bench/preloaded.py did not start (exit {self.process.wait()})")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._ask({"stop": True})
        finally:
            self.process.wait(timeout=30)
            self.folder.cleanup()

    def plan(self, argv: list[str], env: dict[str, str]) -> Timing:
        """One plan through the preloaded process: wall time from the request to the child's end, its CPU time."""
        folder = Path(self.folder.name)
        out, err = folder / "stdout", folder / "stderr"
        started = time.perf_counter()
        answer = self._ask({"argv": argv, "env": env, "stdout": str(out), "stderr": str(err)})
        wall = time.perf_counter() - started
        if answer["code"] != 0 or json.loads(out.read_bytes()).get("kind") != "plan":
            sys.exit(f"the preloaded plan exited {answer['code']}: {err.read_text()[-2000:]}")
        return Timing(wall, answer["cpu"])

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.socket)
            conn.sendall(json.dumps(request).encode())
            conn.shutdown(socket.SHUT_WR)
            answer = b"".join(iter(lambda: conn.recv(65536), b""))
        return json.loads(answer) if answer else {}


def imports_at_first_connect(sim: Any, path: Path) -> list[str]:
    return modules_of_plan(sim, path, FIRST_CONNECT)


def modules_at_exit(sim: Any, path: Path) -> list[str]:
    return modules_of_plan(sim, path, AT_EXIT)


def modules_of_plan(sim: Any, path: Path, wrapper: str) -> list[str]:
    """The modules a plan process has loaded when `wrapper` (run as the console script) notes them."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "modules.json"
        argv = [sys.executable, "-c", wrapper, str(out), "-o", "json", "plan", "-f", str(path)]
        subprocess.run(argv, env=cli_env(sim), capture_output=True, check=True)
        modules: list[str] = json.loads(out.read_text())
        return modules


def tops(modules: list[str]) -> dict[str, int]:
    """Modules counted by their distribution's top package (vgpuctl's by its subpackage; the standard library's
    together)."""
    counts: dict[str, int] = {}
    for name in modules:
        parts = name.split(".")
        key = ".".join(parts[:2]) if parts[0] == "vgpuctl" and len(parts) > 1 else parts[0]
        if key in sys.stdlib_module_names or key.lstrip("_") in sys.stdlib_module_names or key.startswith("_sysconfig"):
            key = "standard library"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def report(rounds: Rounds, modules: list[str], bare: list[str]) -> None:
    floor = statistics.median(rounds.floor)
    print(f"floor (gpusim's answer to the bulk reads): median {floor:.3f} s; gpusim's CPU time meanwhile: median "
          f"{statistics.median(rounds.server_cpu):.3f} s")
    for name, label in (("help", "vgpuctl --help"), ("usage", "a usage error (plan --no-such-option)"),
                        ("plan", "vgpuctl plan (CLI process, end to end)"),
                        ("late", "the same, early read off (VGPUCTL_EARLY_READ=0)"),
                        ("preloaded", "the same, every import done beforehand (bench/preloaded.py)")):
        runs = rounds.runs[name]
        wall = statistics.median(t.wall for t in runs)
        cpu = statistics.median(t.cpu for t in runs)
        print(f"{label}: median {wall:.3f} s wall, {cpu:.3f} s CPU (user + system); "
              f"runs {[round(t.wall, 2) for t in runs]} s")
    for name, label in (("plan", "plan process / floor"), ("late", "early read off / floor"),
                        ("preloaded", "imports done beforehand / floor")):
        plan = statistics.median(t.wall for t in rounds.runs[name])
        paired = sorted(t.wall / f for t, f in zip(rounds.runs[name], rounds.floor, strict=True))
        print(f"{label}: {plan / floor:.2f}x of the medians; paired median {statistics.median(paired):.2f}x, "
              f"{paired[0]:.2f}x to {paired[-1]:.2f}x")
    ours = [m for m in modules if m not in set(bare)]
    print(f"imported at plan's first connect: {len(modules)} modules ({len(ours)} beyond a bare interpreter's); "
          "by package: " + ", ".join(f"{k} {v}" for k, v in tops(ours).items()))


def bare_modules() -> list[str]:
    code = "import json, sys; print(json.dumps(sorted(sys.modules)))"
    modules: list[str] = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                   check=True).stdout)
    return modules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--vms", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true", help="leave vgpuctl's bytecode uncompiled")
    parser.add_argument("--own-cpus", action="store_true",
                        help="gpusim on the last CPU, vgpuctl on the others (as a vCenter on its own machine)")
    parser.add_argument("--smoke", action="store_true", help="2 hosts x 2 GPUs, 10 VMs, one round: does it run")
    args = parser.parse_args()
    if args.smoke:
        args.hosts, args.gpus, args.vms, args.repeat = 2, 2, 10, 1
    if not args.no_compile:
        compileall.compile_dir(REPO / "vgpuctl", quiet=1)
    with gpusim(a100_farm(args.hosts, args.gpus, args.vms)) as sim, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "inventory.yaml"
        write_inventory(vm_names(sim), path)
        bytecode = "not compiled" if args.no_compile else "compiled beforehand"
        cpus = own_cpus(sim) if args.own_cpus else "gpusim and vgpuctl share every CPU"
        print(f"farm: {args.hosts} hosts x {args.gpus} GPUs, {args.vms} VMs; vgpuctl's bytecode {bytecode}; "
              f"PYTHONDONTWRITEBYTECODE {'set' if os.environ.get('PYTHONDONTWRITEBYTECODE') else 'unset'}; {cpus}; "
              f"{load_note()}", flush=True)
        rounds = measure(sim, path, args.repeat)
        modules = imports_at_first_connect(sim, path)
    report(rounds, modules, bare_modules())
    print(f"at the end: {load_note()}")


if __name__ == "__main__":
    main()
