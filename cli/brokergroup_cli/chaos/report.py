"""What a chaos run reports: summary.json, a per-fault table, a latency-over-
time plot (PNG) with the fault windows shaded, and an HTML page with both.

Per window (issue 37): its unavailability (the checker's), its recovery time —
fault end → the first acknowledged write, and fault end → the group seen healthy
again with a full SyncStateSet — and what was lost, duplicated or reordered there.
A lost or duplicated key belongs to the first window that ends after its send
began (the fault that could have taken it); an order violation to the window of its
later key. `compare` puts several targets' summaries side by side per fault type
(`write_compare_html`: one page, inline SVG plots, the seeds that replay a window).
"""

from __future__ import annotations

import base64
import html
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from brokergroup_cli.chaos.checker import (
    FAILED,
    INDETERMINATE,
    OK,
    FaultWindow,
    Findings,
    Operation,
    percentile,
    reused_offsets,
)

#: Unavailability targets per fault type (issue "Chaos"; DESIGN.md §9).
TARGETS_P99_S = {
    "kill-master": 1.0,
    "partition-master": 3.0,
    "pause-master": 3.0,
    "kill-controller-leader": 1.0,
}


def per_fault(findings: Findings) -> dict[str, dict[str, Any]]:
    durations: dict[str, list[float]] = defaultdict(list)
    for result in findings.faults:
        durations[result.window.fault].append(result.unavailable_s)
    out: dict[str, dict[str, Any]] = {}
    for fault, values in sorted(durations.items()):
        p99 = percentile(values, 99)
        target = TARGETS_P99_S.get(fault)
        out[fault] = {
            "windows": len(values),
            "p50_s": _r(percentile(values, 50)),
            "p99_s": _r(p99),
            "max_s": _r(max(values)),
            "target_p99_s": target,
            "target_met": None if target is None or p99 is None else p99 <= target,
        }
    return out


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _owner(windows: Sequence[FaultWindow], at_s: float) -> int | None:
    """The first window that ends at or after `at_s` (None: after the last one)."""
    return next((i for i, w in enumerate(windows) if w.end_s >= at_s), None)


def window_rows(
    findings: Findings,
    operations: Sequence[Operation],
    windows: Sequence[FaultWindow],
    healthy_s: Sequence[float | None],
) -> list[dict[str, Any]]:
    """One row per fault window: unavailability, recovery times, and the lost,
    duplicated and reordered keys attributed to it (module docstring)."""
    unavailable = {(r.window.start_s, r.window.fault): r.unavailable_s for r in findings.faults}
    by_key = {o.key: o for o in operations}
    rows: list[dict[str, Any]] = []
    for i, w in enumerate(windows):
        first_ack = min(
            (o.complete_s for o in operations if o.outcome == OK and o.complete_s >= w.end_s),
            default=None,
        )
        healthy = healthy_s[i] if i < len(healthy_s) else None
        rows.append(
            {
                "window": i + 1, "fault": w.fault, "start_s": _r(w.start_s), "end_s": _r(w.end_s),
                "note": w.note, "unavailable_s": _r(unavailable.get((w.start_s, w.fault), 0.0)),
                "first_ack_s": _r(None if first_ack is None else first_ack - w.end_s),
                "sss_full_s": _r(None if healthy is None else max(0.0, healthy - w.end_s)),
                "lost": [], "duplicated": [], "reordered": [], "reused": [],
            }
        )  # fmt: skip

    def attribute(kind: str, key: str) -> None:
        op = by_key.get(key)
        at = _owner(windows, op.invoke_s) if op is not None else None
        if at is not None:
            rows[at][kind].append(key)

    for key in findings.lost:
        attribute("lost", key)
    for key in dict.fromkeys(findings.duplicated):
        attribute("duplicated", key)
    for _queue, _first, later in findings.order_violations:
        attribute("reordered", later)
    for _queue, _offset, _first, later in findings.reused_offsets:
        attribute("reused", later)
    return rows


def with_reused_offsets(
    summary: dict[str, Any], operations: Sequence[Operation], windows: Sequence[FaultWindow]
) -> dict[str, Any]:
    """A summary written before the checker named reused offsets, with them: the count,
    the samples, each window row's keys (as `window_rows` attributes them) and the
    scenario outcome's count, from the run's own history (`runner.read_history`)."""
    if "reused_offsets" in summary:
        return summary
    found = reused_offsets(operations)
    invoked = {o.key: o.invoke_s for o in operations}
    rows = [dict(row, reused=[]) for row in summary.get("recovery", [])]
    for _queue, _offset, _first, later in found:
        at = _owner(windows, invoked[later])
        if at is not None and at < len(rows):
            rows[at]["reused"].append(later)
    out = summary | {
        "reused_offsets": len(found),
        "recovery": rows,
        "samples": summary.get("samples", {}) | {"reused_offsets": [list(v) for v in found[:20]]},
        "data_safe": bool(summary.get("data_safe")) and not found,
        "targets_met": bool(summary.get("targets_met")) and not found,
    }
    if isinstance(summary.get("scenario"), dict):
        out["scenario"] = summary["scenario"] | {"reused_offsets": len(found)}
    return out


def _per_fault_rows(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Counts and p50/p99 of one target's window rows, per fault type."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[row["fault"]].append(row)
    out: dict[str, dict[str, Any]] = {}
    for fault, chosen in sorted(grouped.items()):
        unavailable = [r["unavailable_s"] for r in chosen if r["unavailable_s"] is not None]
        first_ack = [r["first_ack_s"] for r in chosen if r["first_ack_s"] is not None]
        healthy = [r["sss_full_s"] for r in chosen if r["sss_full_s"] is not None]
        out[fault] = {
            "windows": len(chosen),
            "lost": sum(len(r["lost"]) for r in chosen),
            "duplicated": sum(len(r["duplicated"]) for r in chosen),
            "reordered": sum(len(r["reordered"]) for r in chosen),
            # None: a run checked before reused offsets were (its rows do not say).
            "reused_offsets": (
                sum(len(r["reused"]) for r in chosen)
                if all("reused" in r for r in chosen)
                else None
            ),
            "unavailable_p50_s": _r(percentile(unavailable, 50)),
            "unavailable_p99_s": _r(percentile(unavailable, 99)),
            "first_ack_p50_s": _r(percentile(first_ack, 50)),
            "first_ack_p99_s": _r(percentile(first_ack, 99)),
            "sss_full_p50_s": _r(percentile(healthy, 50)),
            "sss_full_p99_s": _r(percentile(healthy, 99)),
            "never_healthy": sum(1 for r in chosen if r["sss_full_s"] is None),
        }
    return out


def summarize(
    findings: Findings,
    *,
    seeds: Sequence[int],
    windows: int,
    skipped: dict[str, str],
    not_recovered: Sequence[str],
    reads: int,
    operations: Sequence[Operation] = (),
    windows_run: Sequence[FaultWindow] = (),
    healthy_s: Sequence[float | None] = (),
) -> dict[str, Any]:
    faults = per_fault(findings)
    rows = window_rows(findings, operations, windows_run, healthy_s)
    for fault, extra in _per_fault_rows(rows).items():
        if fault in faults:
            faults[fault] |= {k: v for k, v in extra.items() if k != "windows"}
    unexpected = findings.unexpected_unavailability
    return {
        "windows": windows,
        "seeds": list(seeds),
        "operations": findings.operations,
        "acknowledged": findings.acknowledged,
        "failed": findings.failed,
        "indeterminate": findings.indeterminate,
        "reads": reads,
        "lost": len(findings.lost),
        "duplicated": len(findings.duplicated),
        "unexpected": len(findings.unexpected),
        "misplaced": len(findings.misplaced),
        "order_violations": len(findings.order_violations),
        "unstable_reads": len(findings.unstable_reads),
        "reused_offsets": len(findings.reused_offsets),
        "corrupt": len(findings.corrupt),
        "replica_mismatches": len(findings.replica_mismatches),
        "unexpected_unavailability": {
            "count": len(unexpected),
            "max_s": _r(max((u.duration_s for u in unexpected), default=0.0)),
        },
        "faults": faults,
        "recovery": rows,
        "skipped": skipped,
        "not_recovered": list(not_recovered),
        "data_safe": findings.data_safe,
        "targets_met": findings.data_safe
        and all(f["target_met"] is not False for f in faults.values()),
        "samples": {
            "lost": findings.lost[:20],
            "duplicated": findings.duplicated[:20],
            "unexpected": findings.unexpected[:20],
            "order_violations": [list(v) for v in findings.order_violations[:20]],
            "unstable_reads": [list(v) for v in findings.unstable_reads[:20]],
            "reused_offsets": [list(v) for v in findings.reused_offsets[:20]],
            "corrupt": [list(v) for v in findings.corrupt[:20]],
            "replica_mismatches": [list(v) for v in findings.replica_mismatches[:20]],
        },
    }


def table(summary: dict[str, Any]) -> str:
    rows = [("fault", "windows", "p50 s", "p99 s", "max s", "target p99")]
    for fault, f in summary["faults"].items():
        rows.append(
            (fault, str(f["windows"]), str(f["p50_s"]), str(f["p99_s"]), str(f["max_s"]),
             "-" if f["target_p99_s"] is None else f"≤ {f['target_p99_s']}"
             + ("" if f["target_met"] else " MISSED"))
        )  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.append(
        f"acknowledged {summary['acknowledged']} · lost {summary['lost']} · duplicated "
        f"{summary['duplicated']} · unexpected {summary['unexpected']} · order violations "
        f"{summary['order_violations']} · unstable reads {summary['unstable_reads']} · "
        f"reused offsets {summary['reused_offsets']} · "
        f"corrupt {summary['corrupt']} · replica mismatches {summary['replica_mismatches']} · "
        f"unexpected unavailability "
        f"{summary['unexpected_unavailability']['count']}"
    )
    return "\n".join(lines)


def plot(operations: Sequence[Operation], findings: Findings, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(14, 5), dpi=100)
    kinds = sorted({r.window.fault for r in findings.faults})
    palette = plt.get_cmap("Set3")  # pastel: the points stay readable on top
    colour = {kind: palette(i % 12) for i, kind in enumerate(kinds)}
    for result in findings.faults:
        w = result.window
        ax.axvspan(w.start_s, w.end_s, color=colour[w.fault], alpha=0.6, lw=0)
    for kind in kinds:  # one legend entry per fault type
        ax.axvspan(0, 0, color=colour[kind], alpha=0.6, lw=0, label=kind)
    for outcome, color, label in ((OK, "tab:blue", "acknowledged"),
                                  (FAILED, "tab:red", "failed"),
                                  (INDETERMINATE, "black", "indeterminate")):  # fmt: skip
        chosen = [o for o in operations if o.outcome == outcome]
        if chosen:
            ax.scatter([o.invoke_s for o in chosen], [max(o.latency_s, 1e-4) for o in chosen],
                       s=3, color=color, label=label)  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("seconds since the start of the run")
    ax.set_ylabel("send latency (s)")
    ax.set_title("Chaos run: send latency over time, fault windows shaded")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_html(summary: dict[str, Any], png: Path, path: Path) -> None:
    image = base64.b64encode(png.read_bytes()).decode() if png.exists() else ""
    head = ("fault", "windows", "p50 s", "p99 s", "max s", "target p99 s", "met")
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (fault, f["windows"], f["p50_s"], f["p99_s"], f["max_s"],
                      "-" if f["target_p99_s"] is None else f["target_p99_s"],
                      {True: "yes", False: "MISSED", None: "-"}[f["target_met"]])
        )
        + "</tr>"
        for fault, f in summary["faults"].items()
    )  # fmt: skip
    counts = ("acknowledged", "lost", "duplicated", "unexpected", "misplaced",
              "order_violations", "unstable_reads", "reused_offsets", "corrupt",
              "replica_mismatches")  # fmt: skip
    verdict = "no acknowledged message lost or reordered" if summary["data_safe"] else "DATA LOST"
    body = (
        "<!doctype html><meta charset=utf-8><title>brokergroup chaos run</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 10px;"
        "text-align:right}td:first-child{text-align:left}table{border-collapse:collapse}"
        "tr:nth-child(even){background:#f3f3f3}</style>"
        f"<h1>Chaos run: {html.escape(verdict)}</h1>"
        "<p>"
        + " · ".join(f"{c.replace('_', ' ')} <b>{summary[c]}</b>" for c in counts)
        + f" · windows <b>{summary['windows']}</b> · seeds {summary['seeds']}</p>"
        "<h2>Unavailability per fault type</h2><table><tr>"
        + "".join(f"<th>{h}</th>" for h in head)
        + f"</tr>{rows}</table>"
        f'<h2>Send latency over time</h2><img alt="latency over time" '
        f'src="data:image/png;base64,{image}" style="max-width:100%">'
        f"<h2>summary.json</h2><pre>{html.escape(json.dumps(summary, indent=2))}</pre>"
    )
    path.write_text(body)


def write_all(
    out_dir: Path, summary: dict[str, Any], operations: Sequence[Operation], findings: Findings
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    png = out_dir / "latency.png"
    plot(operations, findings, png)
    write_html(summary, png, out_dir / "report.html")


# --- Several targets side by side (issue 37 item 4) -----------------------------------------

COMPARE_COLUMNS = (
    ("windows", "windows"),
    ("lost", "lost"),
    ("duplicated", "duplicated"),
    ("reordered", "reordered"),
    ("reused_offsets", "reused offsets"),
    ("unavailable_p50_s", "unavail. p50 s"),
    ("unavailable_p99_s", "unavail. p99 s"),
    ("first_ack_p50_s", "→ 1st ack p50 s"),
    ("first_ack_p99_s", "→ 1st ack p99 s"),
    ("sss_full_p50_s", "→ SSS full p50 s"),
    ("sss_full_p99_s", "→ SSS full p99 s"),
)


def compare(runs: Mapping[str, Sequence[dict[str, Any]]]) -> dict[str, Any]:
    """Per fault type, per target: counts and percentiles over every window of every
    run (seed) of that target, plus every window that lost or duplicated something
    with the target, seed and window number that replay it."""
    table: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    bad_windows: list[dict[str, Any]] = []
    seeds: dict[str, list[int | None]] = {}
    for target, summaries in runs.items():
        rows = []
        seeds[target] = []
        for summary in summaries:
            seed = summary["seeds"][0] if summary.get("seeds") else None
            seeds[target].append(seed)
            for row in summary.get("recovery", []):
                rows.append(row | {"seed": seed})
                reused = row.get("reused")
                if row["lost"] or row["duplicated"] or row["reordered"] or reused:
                    bad_windows.append(
                        {"target": target, "seed": seed, "window": row["window"],
                         "fault": row["fault"], "lost": len(row["lost"]),
                         "duplicated": len(row["duplicated"]),
                         "reordered": len(row["reordered"]),
                         "reused_offsets": None if reused is None else len(reused),
                         "note": row["note"]}
                    )  # fmt: skip
        for fault, cells in _per_fault_rows(rows).items():
            table[fault][target] = cells
    return {
        "targets": list(runs),
        "seeds": seeds,
        "faults": {f: table[f] for f in sorted(table)},
        "bad_windows": bad_windows,
        "totals": {
            t: {
                "windows": sum(
                    c["windows"] for f in table.values() for tt, c in f.items() if tt == t
                ),
                "lost": sum(c["lost"] for f in table.values() for tt, c in f.items() if tt == t),
            }
            for t in runs
        },
    }


def compare_markdown(doc: dict[str, Any]) -> str:
    """The README table: one row per fault type and target."""
    head = ["fault", "target", *(label for _, label in COMPARE_COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for fault, cells in doc["faults"].items():
        for target in doc["targets"]:
            c = cells.get(target)
            values = ["-"] * len(COMPARE_COLUMNS) if c is None else [
                "-" if c[k] is None else str(c[k]) for k, _ in COMPARE_COLUMNS
            ]  # fmt: skip
            lines.append("| " + " | ".join([fault, target, *values]) + " |")
    return "\n".join(lines)


_COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2")


def svg_bars(doc: dict[str, Any], key_p50: str, key_p99: str, title: str, width: int = 900) -> str:
    """A grouped bar chart (inline SVG): per fault type one bar per target at p50, a
    whisker up to p99. No scripts, no external files."""
    faults = list(doc["faults"])
    targets = list(doc["targets"])
    values = [
        v
        for cells in doc["faults"].values()
        for c in cells.values()
        for v in (c.get(key_p50), c.get(key_p99))
        if v is not None
    ]
    top = max(values, default=1.0) or 1.0
    left, bottom, row_h = 260, 30, 14 * max(1, len(targets)) + 10
    height = bottom + row_h * max(1, len(faults)) + 30
    scale = (width - left - 60) / top
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11"><text x="4" y="16" font-size="13">'
        f"{html.escape(title)} (bar p50, whisker p99, seconds)</text>"
    ]
    for fi, fault in enumerate(faults):
        y0 = bottom + fi * row_h
        out.append(f'<text x="4" y="{y0 + row_h / 2 + 4}">{html.escape(fault)}</text>')
        for ti, target in enumerate(targets):
            c = doc["faults"][fault].get(target)
            y = y0 + 4 + ti * 14
            colour = _COLOURS[ti % len(_COLOURS)]
            if c is None or c.get(key_p50) is None:
                out.append(f'<text x="{left}" y="{y + 10}" fill="#999">n/a</text>')
                continue
            w50 = c[key_p50] * scale
            out.append(f'<rect x="{left}" y="{y}" width="{w50:.1f}" height="11" fill="{colour}"/>')
            if c.get(key_p99) is not None:
                x99 = left + c[key_p99] * scale
                out.append(
                    f'<line x1="{left + w50:.1f}" x2="{x99:.1f}" y1="{y + 5.5}" y2="{y + 5.5}" '
                    f'stroke="#333"/><line x1="{x99:.1f}" x2="{x99:.1f}" y1="{y + 1}" '
                    f'y2="{y + 10}" stroke="#333"/>'
                )
                out.append(f'<text x="{x99 + 4:.1f}" y="{y + 10}">{c[key_p99]}</text>')
    for ti, target in enumerate(targets):
        x = left + ti * 140
        out.append(
            f'<rect x="{x}" y="{height - 18}" width="10" height="10" '
            f'fill="{_COLOURS[ti % len(_COLOURS)]}"/><text x="{x + 14}" y="{height - 9}">'
            f"{html.escape(target)}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def write_compare_html(doc: dict[str, Any], path: Path, note: str = "") -> None:
    """One page: the targets side by side per fault type, the plots, the windows that
    lost or duplicated something (target, seed, window: what replays it), the seeds."""
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in COMPARE_COLUMNS)
    body_rows = []
    for fault, cells in doc["faults"].items():
        for n, target in enumerate(doc["targets"]):
            c = cells.get(target)
            first = (
                f'<td rowspan="{len(doc["targets"])}">{html.escape(fault)}</td>' if n == 0 else ""
            )
            tds = "".join(
                f"<td>{'-' if c is None or c[k] is None else html.escape(str(c[k]))}</td>"
                for k, _ in COMPARE_COLUMNS
            )
            lost = c is not None and c["lost"] > 0
            style = ' style="background:#fdd"' if lost else ""
            body_rows.append(f"<tr{style}>{first}<td>{html.escape(target)}</td>{tds}</tr>")
    bad = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(b.get(k, '-')))}</td>"
            for k in (
                "target",
                "seed",
                "window",
                "fault",
                "lost",
                "duplicated",
                "reordered",
                "reused_offsets",
                "note",
            )
        )
        + "</tr>"
        for b in doc["bad_windows"]
    )
    seeds = "".join(
        f"<li>{html.escape(t)}: seeds {html.escape(str(s))}</li>" for t, s in doc["seeds"].items()
    )
    scenario_rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (
                name, ", ".join(o.get("issues", [])), target, o.get("seed"), o.get("lost"),
                o.get("duplicated"), o.get("reordered"), o.get("reused_offsets", "-"),
                o.get("unstable_reads"),
                o.get("replica_mismatches"), o.get("failed_sends"), o.get("unavailable_max_s"),
                o.get("unavailable_total_s"), len(o.get("not_recovered") or []),
                o.get("blind_spot", ""),
            )
        )
        + "</tr>"
        for name, per_target in sorted(doc.get("scenarios", {}).items())
        for target, outcomes in per_target.items()
        for o in outcomes
    )  # fmt: skip
    scenario_head = "".join(
        f"<th>{h}</th>"
        for h in ("scenario", "apache/rocketmq", "target", "seed", "lost", "duplicated",
                  "reordered", "reused offsets", "unstable reads", "replica mismatches",
                  "failed sends",
                  "unavail. max s", "unavail. total s", "windows not recovered", "blind spot")
    )  # fmt: skip
    page = (
        "<!doctype html><meta charset=utf-8><title>brokergroup chaos: targets side by side"
        "</title><style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;"
        "text-align:right;border-bottom:1px solid #ddd}td:first-child{text-align:left}"
        "table{border-collapse:collapse}</style>"
        "<h1>Chaos: the same faults against each target</h1>"
        f"<p>{html.escape(note)}</p>"
        "<h2>Per fault type</h2><table><tr><th>fault</th><th>target</th>"
        f"{head}</tr>{''.join(body_rows)}</table>"
        "<h2>Unavailability</h2>"
        + svg_bars(doc, "unavailable_p50_s", "unavailable_p99_s", "Unavailability per window")
        + "<h2>Recovery: fault end → first acknowledged write</h2>"
        + svg_bars(doc, "first_ack_p50_s", "first_ack_p99_s", "Fault end to first ack")
        + "<h2>Recovery: fault end → SyncStateSet full again</h2>"
        + svg_bars(doc, "sss_full_p50_s", "sss_full_p99_s", "Fault end to SyncStateSet full")
        + "<h2>Windows that lost, duplicated or reordered</h2>"
        + (
            "<table><tr><th>target</th><th>seed</th><th>window</th><th>fault</th><th>lost</th>"
            f"<th>duplicated</th><th>reordered</th><th>reused offsets</th><th>note</th></tr>"
            f"{bad}</table>"
            if bad
            else "<p>none</p>"
        )
        + "<h2>RocketMQ's controller-mode defects as scenarios</h2>"
        + (
            f"<table><tr>{scenario_head}</tr>{scenario_rows}</table>"
            if scenario_rows
            else "<p>no scenario ran</p>"
        )
        + "<h2>Replay</h2><p>A window replays with its target, seed and schedule: "
        "<code>brokergroup chaos --target T --seed S --faults F --windows N</code> "
        "(or <code>--scenario NAME --seed S</code>); the seed fixes the fault order and "
        "every random choice of the faults (victims, sides, ring order).</p>"
        f"<ul>{seeds}</ul>"
        f"<h2>compare.json</h2><pre>{html.escape(json.dumps(doc, indent=1))}</pre>"
    )
    path.write_text(page)
