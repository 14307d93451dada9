"""A plan process with nothing left to import: what start-up would cost if no process paid for its imports.

    python bench/preloaded.py SOCKET MODULES.json

Imports every module listed in MODULES.json (the modules a `vgpuctl plan` process has loaded when it exits), then
answers each connection on the Unix socket SOCKET: it forks, the child runs the console entry point exactly as the
`vgpuctl` script does (sys.argv and the environment as received, its output to the files named), and the answer is
the child's exit status and CPU time once it has ended. The child starts with every import done and nothing else
(no command has run in this process: pyVmomi's types, vgpuctl's caches and the collector's state are as a new
process would have them after its imports). bench/startup_bench.py times a plan through it: the lower bound of any
way to keep the interpreter and the imports out of a command's time (a resident server forking per command).
A benchmark tool only: it trusts whoever can reach its socket, which startup_bench.py creates in a private
temporary folder.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import socket
import sys
from typing import Any

MESSAGE_LIMIT = 1 << 20


def preload(modules: list[str]) -> None:
    for name in modules:
        if name not in sys.modules and not name.startswith("__"):
            try:
                importlib.import_module(name)
            except Exception:  # a module some other module registered under a name of its own: it is there anyway
                continue
    gc.collect()
    gc.freeze()


def serve(path: str) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        with conn:
            request = json.loads(_read_all(conn))
            if request.get("stop"):
                return
            conn.sendall(json.dumps(run_forked(request)).encode())


def _read_all(conn: socket.socket) -> bytes:
    parts, size = [], 0
    while part := conn.recv(65536):
        size += len(part)
        if size > MESSAGE_LIMIT:
            raise ValueError(f"a request over {MESSAGE_LIMIT} bytes")
        parts.append(part)
    return b"".join(parts)


def run_forked(request: dict[str, Any]) -> dict[str, Any]:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        _child(request)
    _, status, usage = os.wait4(pid, 0)
    return {"code": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime}


def _child(request: dict[str, Any]) -> None:
    code = 1
    try:
        for fd, name in ((1, request["stdout"]), (2, request["stderr"])):
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, fd)
            os.close(out)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["vgpuctl", *request["argv"]]
        from vgpuctl.cli.entry import run

        try:
            run()
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    path, modules = sys.argv[1], sys.argv[2]
    with open(modules) as listed:
        preload(json.load(listed))
    serve(path)


if __name__ == "__main__":
    main()
