"""`vgpuctl exporter`: a Prometheus metrics endpoint (what it reads and serves: vgpuctl.cli.scrape; the metrics:
vgpuctl.reports.metrics and docs/exporter.md)."""

from __future__ import annotations

import errno
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from vgpuctl.cli import common
from vgpuctl.cli.common import GlobalOptions
from vgpuctl.errors import UsageError
from vgpuctl.extras import require

DEFAULT_LISTEN = "127.0.0.1:9733"


def register(app: typer.Typer) -> None:
    app.command("exporter")(exporter_cmd)


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[v6]:PORT` or `:PORT` (every IPv4 interface) as (address, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9733 or :9733")
    host = host.removeprefix("[").removesuffix("]")
    return host or "0.0.0.0", int(port)


def serve(address: str, port: int, registry: Any) -> Any:
    """Start prometheus_client's HTTP server; a port in use or an address this machine lacks is one line."""
    client = require("prometheus_client")
    try:
        return client.start_http_server(port, addr=address, registry=registry)
    except OSError as err:
        what = "is in use" if err.errno == errno.EADDRINUSE else f"cannot be listened on ({err.strerror or err})"
        raise UsageError(f"--listen {address}:{port}: the address {what}") from None


def exporter_cmd(
    ctx: typer.Context,
    listen: Annotated[str, typer.Option("--listen", metavar="ADDR", help="Serve /metrics on this address, "
                                        "HOST:PORT (:PORT: every IPv4 interface).")] = DEFAULT_LISTEN,
    interval: Annotated[str, typer.Option("--interval", metavar="DURATION", help="Read vCenter this often, e.g. "
                                          "30s or 2m; every scrape in between gets the last read.")] = "60s",
    usage_window: Annotated[str, typer.Option("--usage-window", metavar="DURATION", help="The window of the GPU "
                                              "utilization figures (the hosts' 20 s samples, up to 1h).")] = "5m",
    files: Annotated[list[Path] | None, typer.Option(
        "--file", "-f", dir_okay=False, metavar="FILE", help="An inventory to plan against the farm (repeatable): "
        "its plan's counts, as `plan` shows them, are metrics; the first one also gives the vCenter settings.")] = None,
    plan_interval: Annotated[str, typer.Option("--plan-interval", metavar="DURATION", help="Plan the "
                                               "inventories this often.")] = "10m",
) -> None:
    """Serve Prometheus metrics of the farm at http://ADDR/metrics: per GPU its model, mode, vGPUs, framebuffer
    allocated, free and stranded, and utilization; per host its vGPU Manager, NVLink, leases and unfinished work
    records; per inventory its plan's counts. vCenter is read once per interval, whatever the number of scrapers;
    while it cannot be read, vgpuctl_up is 0 with the reason (docs/exporter.md).

    Examples:
      vgpuctl exporter --listen :9733
      vgpuctl exporter --listen 127.0.0.1:9733 --interval 30s -f inventory.yaml
    """
    from vgpuctl import pipeline
    from vgpuctl.cli.scrape import FarmCollector, Schedule, plan_inventory, read_farm
    from vgpuctl.farm.usage import parse_since
    from vgpuctl.records.perf import REALTIME_KEEP_S

    opts: GlobalOptions = ctx.obj
    address, port = parse_listen(listen)
    schedule = Schedule(parse_since(interval, "--interval"), parse_since(usage_window, "--usage-window"),
                        parse_since(plan_interval, "--plan-interval"))
    if schedule.usage_window_s > REALTIME_KEEP_S:
        raise UsageError(f"--usage-window {usage_window}: at most 1h (the hosts keep their 20 s samples an hour)")
    inventories = [pipeline.load(f) for f in files or []]  # a bad inventory fails now, located
    first = inventories[0] if inventories else None
    settings = common.connection_settings(opts, first)  # a missing URL or user fails now; asked once
    datacenter = common.datacenter_for(opts, first)
    registry = require("prometheus_client").CollectorRegistry(auto_describe=False)
    collector = FarmCollector(lambda: read_farm(settings, datacenter, schedule.usage_window_s),
                              lambda path: plan_inventory(opts, settings, path), schedule, files or [])
    registry.register(collector)
    server = serve(address, port, registry)
    bound = server[0].server_address[1] if isinstance(server, tuple) else port
    shown = f"[{address}]" if ":" in address else address
    common.info(f"serving metrics on http://{shown}:{bound}/metrics; reading vCenter every {interval}")
    _run_until_stopped(collector)


def _run_until_stopped(collector: Any) -> None:
    """Read in the background until SIGTERM or Ctrl-C."""
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    collector.start()
    try:
        while not stopped.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    collector.stop()
