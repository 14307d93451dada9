"""`vgpuctl experiment report DIR`: tables, ratios, plots and flagged runs from a results directory.

`build_report(results)` reads the records and is otherwise pure: one table per workload (bus bandwidth and
time per message size for nccl-tests, bandwidth and latency per GPU pair for p2pBandwidthLatencyTest), each
variant's median with the spread (min-max) over repetitions and VMs, the ratio of every variant to the first
one, the configuration facts of each variant beside its numbers, and the runs whose facts contradict their
variant. `render_markdown` fills templates/experiment/report.md.j2; `write_plots` draws bandwidth against
message size, one line per variant (matplotlib, imported only here).
"""

from __future__ import annotations

import io
import statistics
from dataclasses import asdict, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgpuctl.experiment.facts import Contradiction, contradictions, summarize, transport_contradictions
from vgpuctl.experiment.store import BASE, STATUS_OK, ResultsDir, RunRecord, write_atomic
from vgpuctl.extras import require
from vgpuctl.guest.targets import render_template
from vgpuctl.lazyclass import dataclass
from vgpuctl.outpaths import inside

if TYPE_CHECKING:
    pass

NCCL = "nccl-tests"
P2P = "p2pBandwidthLatencyTest"


@dataclass
class Spread:
    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> Spread | None:
        if not values:
            return None
        return cls(statistics.median(values), min(values), max(values), len(values))

    def text(self, digits: int = 2) -> str:
        if self.n == 1 or self.low == self.high:
            return f"{self.median:.{digits}f}"
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}-{self.high:.{digits}f})"


@dataclass
class Flag:
    variant: str
    repetition: int
    kind: str  # a Contradiction kind, or workload-failed
    message: str


@dataclass
class VariantSummary:
    name: str
    description: str | None
    workload: str
    repetitions_ok: int
    repetitions_failed: int
    expect: dict[str, Any]
    facts: list[str]  # one line per fact, for the reader


@dataclass
class Table:
    key: str
    label: str
    kind: str  # nccl-tests | p2pBandwidthLatencyTest | command
    variants: list[str]
    header: list[str]
    rows: list[list[str]]
    data: list[dict[str, Any]]  # the same numbers, unformatted (JSON report, plots)
    plot: str | None = None


@dataclass
class Report:
    title: str
    results_dir: str
    applied: str | None  # the configuration the farm was last wholly brought to
    applied_note: str = ""  # what happened last: applied, restored, apply failed: ...
    partial: str | None = None  # the configuration an apply stopped part-way into (the farm is between the two)
    variants: list[VariantSummary] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------------- build


def build_report(results: ResultsDir) -> Report:
    exp = results.experiment()
    state = results.state()
    report = Report(exp.get("title", results.root.name), str(results.root), state.get("applied"),
                    applied_note=(state.get("history") or [{}])[-1].get("note", ""), partial=state.get("partial"))
    records = {v["name"]: results.records(v["name"]) for v in exp["variants"]}
    for v in exp["variants"]:
        report.flags += _flags(results, v["name"], records[v["name"]], results.expectations(v["name"]))
    bad = flagged(report)  # failed or contradicting runs stay out of the numbers
    for v in exp["variants"]:
        report.variants.append(_variant_summary(results, v, records[v["name"]], bad))
    for key in _workload_keys(exp):
        report.tables.append(_table(results, key, exp, records, bad))
    return report


def _workload_keys(exp: dict[str, Any]) -> list[str]:
    keys: list[str] = []
    for v in exp["variants"]:
        if v["workload"]["key"] not in keys:
            keys.append(v["workload"]["key"])
    return keys


def _variant_summary(results: ResultsDir, v: dict[str, Any], recs: list[RunRecord],
                     bad: set[tuple[str, int]]) -> VariantSummary:
    """The facts shown are those of the last run counted in the numbers (else of the last run at all)."""
    ok = [r for r in recs if r.status == STATUS_OK]
    counted = [r for r in ok if (r.variant, r.repetition) not in bad]
    facts_of = (counted or recs)[-1] if recs else None
    lines = _fact_lines(results.facts(v["name"], facts_of.repetition)) if facts_of else ["no run recorded"]
    if facts_of is not None and not counted:
        lines.insert(0, f"(repetition {facts_of.repetition}, flagged below)")
    return VariantSummary(v["name"], v.get("description"), v["workload"]["label"], len(ok), len(recs) - len(ok),
                          results.expectations(v["name"]), lines)


def _fact_lines(raw: dict[str, Any]) -> list[str]:
    f = summarize(raw)
    lines = []
    for host in sorted(f.host_nvlink_up):
        mig = f", MIG on {', '.join(f.host_mig[host])}" if f.host_mig.get(host) else ", no GPU in MIG mode"
        lines.append(f"host {host}: {f.host_nvlink_up[host]} NVLink link(s) up{mig}")
    for vm in sorted(set(f.gpu_names) | set(f.guest_links)):
        where = f" on {f.vm_hosts[vm]}" if vm in f.vm_hosts else ""
        gpus = ", ".join(f.gpu_names.get(vm) or []) or "GPUs not read"
        driver = f"; driver {', '.join(f.drivers[vm])}" if f.drivers.get(vm) else ""
        links = ", ".join(f"{p} {k}" for p, k in sorted(f.guest_links.get(vm, {}).items()))
        topo = f"; topology {links}" if links else ""
        nvl = f"; {f.guest_nvlink_up[vm]} NVLink link(s) up in the guest" if vm in f.guest_nvlink_up else ""
        lines.append(f"{vm}{where}: {gpus}{driver}{topo}{nvl}")
    lines += [f"unreadable: {u}" for u in f.unreadable]
    return lines or ["no facts collected"]


def _flags(results: ResultsDir, variant: str, recs: list[RunRecord], expect: dict[str, Any]) -> list[Flag]:
    out = []
    for rec in recs:
        if rec.status != STATUS_OK:
            message = "; ".join(rec.errors) or "the workload failed"
            out.append(Flag(variant, rec.repetition, "workload-failed", message))
        p2p = rec.parsed if rec.workload.get("builtin") == P2P else None
        found: list[Contradiction] = contradictions(expect, summarize(results.facts(variant, rec.repetition)), p2p)
        found += transport_contradictions(expect, rec.parsed)
        out += [Flag(variant, rec.repetition, c.kind, c.message) for c in found]
    return out


def flagged(report: Report) -> set[tuple[str, int]]:
    """(variant, repetition) of every run left out of the numbers: failed, or contradicting its variant."""
    return {(f.variant, f.repetition) for f in report.flags}


# -------------------------------------------------------------------------------------------------- tables


def _samples(recs: list[RunRecord], bad: set[tuple[str, int]]) -> list[dict[str, Any]]:
    return [parsed for r in recs if r.status == STATUS_OK and (r.variant, r.repetition) not in bad
            for parsed in r.parsed.values() if parsed]


def _hosts_per_run(results: ResultsDir, picked: dict[str, list[RunRecord]]) -> int:
    """The most ESXi hosts the VMs of one run were on (the facts' vm_hosts)."""
    counts = [len(set((results.facts(r.variant, r.repetition).get("vm_hosts") or {}).values()))
              for recs in picked.values() for r in recs]
    return max(counts, default=1)


def _table(results: ResultsDir, key: str, exp: dict[str, Any], records: dict[str, list[RunRecord]],
           bad: set[tuple[str, int]]) -> Table:
    variants = [v["name"] for v in exp["variants"] if v["workload"]["key"] == key]
    label = next(v["workload"]["label"] for v in exp["variants"] if v["workload"]["key"] == key)
    kind = key.split(".")[0]
    picked = {name: [r for r in records[name] if r.workload.get("key") == key] for name in variants}
    if kind == NCCL:
        hosts = _hosts_per_run(results, picked) if key.endswith(".across-vms") else 1
        if hosts > 1:  # the VMs ran on several ESXi hosts: the bus bandwidth is inter-host
            label += f", inter-host over {hosts} hosts"
        return _nccl_table(key, label, variants, picked, bad)
    if kind == P2P:
        return _p2p_table(key, label, variants, picked, bad)
    rows = [[name, str(sum(r.status == STATUS_OK for r in picked[name])),
             str(sum(r.status != STATUS_OK for r in picked[name]))] for name in variants]
    return Table(key, label, "command", variants, ["variant", "runs ok", "runs failed"], rows,
                 [{"variant": r[0], "ok": int(r[1]), "failed": int(r[2])} for r in rows])


def _nccl_table(key: str, label: str, variants: list[str], picked: dict[str, list[RunRecord]],
                bad: set[tuple[str, int]]) -> Table:
    per: dict[str, dict[int, dict[str, list[float]]]] = {}
    sizes: set[int] = set()
    for name in variants:
        by_size: dict[int, dict[str, list[float]]] = {}
        for parsed in _samples(picked[name], bad):
            for row in parsed.get("rows", []):
                cell = by_size.setdefault(row["size_bytes"], {"busbw": [], "time": []})
                cell["busbw"].append(row["out_of_place"]["busbw_gbs"])
                cell["time"].append(row["out_of_place"]["time_us"])
        per[name] = by_size
        sizes |= set(by_size)
    base = variants[0]
    header = ["size"] + [h for n in variants for h in (f"{n} busbw GB/s", f"{n} time us")]
    header += [f"{n} / {base} busbw" for n in variants[1:]]
    rows: list[list[str]] = []
    data: list[dict[str, Any]] = []
    for size in sorted(sizes):
        row = [human_size(size)]
        cells: dict[str, Any] = {}
        ratios: dict[str, float | None] = {}
        entry: dict[str, Any] = {"size_bytes": size, "variants": cells, "ratio": ratios}
        for name in variants:
            samples = per[name].get(size)
            bw = Spread.of(samples["busbw"]) if samples else None
            tm = Spread.of(samples["time"]) if samples else None
            row += [bw.text() if bw else "-", tm.text(1) if tm else "-"]
            cells[name] = {"busbw_gbs": asdict(bw) if bw else None, "time_us": asdict(tm) if tm else None}
        base_bw = cells[base]["busbw_gbs"]
        for name in variants[1:]:
            other = cells[name]["busbw_gbs"]
            ratio = other["median"] / base_bw["median"] if other and base_bw and base_bw["median"] else None
            ratios[name] = ratio
            row.append(f"{ratio:.2f}x" if ratio is not None else "-")
        rows.append(row)
        data.append(entry)
    return Table(key, label, NCCL, variants, header, rows, data)


def _p2p_table(key: str, label: str, variants: list[str], picked: dict[str, list[RunRecord]],
               bad: set[tuple[str, int]]) -> Table:
    per: dict[str, dict[str, dict[str, list[float]]]] = {}
    pairs: set[str] = set()
    for name in variants:
        by_pair: dict[str, dict[str, list[float]]] = {}
        for parsed in _samples(picked[name], bad):
            for p in parsed.get("pairs", []):
                cell = by_pair.setdefault(p["pair"], {"bidirectional_gbs": [], "unidirectional_gbs": [],
                                                      "latency_us": []})
                for k in cell:
                    if p.get(k) is not None:
                        cell[k].append(p[k])
        per[name] = by_pair
        pairs |= set(by_pair)
    base = variants[0]
    header = ["GPU pair"] + [h for n in variants for h in (f"{n} bidir GB/s", f"{n} unidir GB/s", f"{n} latency us")]
    header += [f"{n} / {base} bidir" for n in variants[1:]]
    rows: list[list[str]] = []
    data: list[dict[str, Any]] = []
    for pair in sorted(pairs):
        row = [pair]
        cells: dict[str, Any] = {}
        ratios: dict[str, float | None] = {}
        entry: dict[str, Any] = {"pair": pair, "variants": cells, "ratio": ratios}
        for name in variants:
            cell = per[name].get(pair) or {}
            spreads = {k: Spread.of(v) for k, v in cell.items()}
            for k, digits in (("bidirectional_gbs", 2), ("unidirectional_gbs", 2), ("latency_us", 2)):
                s = spreads.get(k)
                row.append(s.text(digits) if s else "-")
            cells[name] = {k: asdict(s) if s else None for k, s in spreads.items()}
        base_bw = cells[base].get("bidirectional_gbs")
        for name in variants[1:]:
            bw = cells[name].get("bidirectional_gbs")
            ratio = bw["median"] / base_bw["median"] if bw and base_bw and base_bw["median"] else None
            ratios[name] = ratio
            row.append(f"{ratio:.2f}x" if ratio is not None else "-")
        rows.append(row)
        data.append(entry)
    return Table(key, label, P2P, variants, header, rows, data)


def human_size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


# ------------------------------------------------------------------------------------------------- output


def render_markdown(report: Report) -> str:
    """report.md: the template's structure, and every value from the results (names, descriptions, messages,
    table cells) through `md`, so that a value never starts a heading, a table column or a link."""
    return render_template("experiment/report.md.j2", filters={"md": markdown_text}, report=report,
                           applied_text=applied_text(report.applied, report.applied_note, report.partial))


_MARKDOWN_SPECIAL = {c: "\\" + c for c in "\\`|<>[]"}


def markdown_text(value: Any) -> str:
    """`value` as one line of Markdown text: line breaks and other control characters become spaces, and the
    characters that start code, table columns, HTML or links are escaped."""
    import unicodedata

    text = "".join(" " if unicodedata.category(c)[0] == "C" else c for c in str(value))
    return "".join(_MARKDOWN_SPECIAL.get(c, c) for c in text)


def applied_text(applied: str | None, note: str = "", partial: str | None = None) -> str:
    """Where the farm is: the configuration last wholly applied, or part-way from it into another."""
    restore = "(the base inventory is not restored: `vgpuctl experiment restore FILE`)"
    if partial is not None:
        into = "the base inventory" if partial == BASE else f"variant {partial!r}"
        where = _configuration(applied)
        stopped = f": {note}" if note else ""
        return f"part-way from {where} into {into}{stopped} {restore}"
    if applied is None:
        return "nothing applied yet"
    if applied == BASE:
        return "the base inventory (restored)"
    return f"variant {applied!r} {restore}"


def _configuration(applied: str | None) -> str:
    if applied is None:
        return "the farm as it was"
    return "the base inventory" if applied == BASE else f"variant {applied!r}"


def write_plots(report: Report, directory: Path) -> list[Path]:
    """One PNG per nccl-tests or p2pBandwidthLatencyTest table; sets each table's `plot` (relative path)."""
    matplotlib = require("matplotlib")  # the `experiment` extra; its absence is one line naming it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for table in report.tables:
        if table.kind not in (NCCL, P2P) or not table.data:
            continue
        fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
        if table.kind == NCCL:
            _plot_nccl(ax, table)
        else:
            _plot_p2p(ax, table)
        ax.set_title(f"{report.title}: {table.label}")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(title="variant")
        fig.tight_layout()
        path = inside(directory, f"{table.key}.png")
        png = io.BytesIO()
        fig.savefig(png, format="png")
        plt.close(fig)
        write_atomic(path, png.getvalue())  # whole or not at all, as every file of the results
        table.plot = f"{directory.name}/{path.name}"
        written.append(path)
    return written


def _plot_nccl(ax: Any, table: Table) -> None:
    for name in table.variants:
        points = [(e["size_bytes"], e["variants"][name]["busbw_gbs"]) for e in table.data
                  if e["variants"][name]["busbw_gbs"]]
        if not points:
            continue
        xs = [p[0] for p in points]
        line = ax.plot(xs, [p[1]["median"] for p in points], marker="o", markersize=3, label=name)[0]
        ax.fill_between(xs, [p[1]["low"] for p in points], [p[1]["high"] for p in points],
                        color=line.get_color(), alpha=0.2)
    ax.set_xscale("log", base=2)
    ticks = [e["size_bytes"] for e in table.data][::max(1, len(table.data) // 8)]
    ax.set_xticks(ticks, [human_size(t) for t in ticks], rotation=30)
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth (GB/s)")


def _plot_p2p(ax: Any, table: Table) -> None:
    width = 0.8 / max(1, len(table.variants))
    for i, name in enumerate(table.variants):
        xs, ys = [], []
        for j, e in enumerate(table.data):
            bw = (e["variants"].get(name) or {}).get("bidirectional_gbs")
            if bw:
                xs.append(j + i * width)
                ys.append(bw["median"])
        ax.bar(xs, ys, width=width, label=name)
    ax.set_xticks([j + width * (len(table.variants) - 1) / 2 for j in range(len(table.data))],
                  [e["pair"] for e in table.data])
    ax.set_xlabel("GPU pair")
    ax.set_ylabel("bidirectional P2P bandwidth (GB/s)")
