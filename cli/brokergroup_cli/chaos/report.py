"""What a chaos run reports: summary.json, a per-fault table, a latency-over-
time plot (PNG) with the fault windows shaded, and an HTML page with both."""

from __future__ import annotations

import base64
import html
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from brokergroup_cli.chaos.checker import (
    FAILED,
    INDETERMINATE,
    OK,
    Findings,
    Operation,
    percentile,
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


def summarize(
    findings: Findings,
    *,
    seeds: Sequence[int],
    windows: int,
    skipped: dict[str, str],
    not_recovered: Sequence[str],
    reads: int,
) -> dict[str, Any]:
    faults = per_fault(findings)
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
        "corrupt": len(findings.corrupt),
        "replica_mismatches": len(findings.replica_mismatches),
        "unexpected_unavailability": {
            "count": len(unexpected),
            "max_s": _r(max((u.duration_s for u in unexpected), default=0.0)),
        },
        "faults": faults,
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
              "order_violations", "unstable_reads", "corrupt", "replica_mismatches")  # fmt: skip
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
