"""report.html: plots (matplotlib, inlined as PNG), retention, and the findings table."""

from __future__ import annotations

import base64
import html
import io
from typing import Any

from brokergroup_audit.result import AuditResult


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _offsets_plot(
    epoch_ranges: list[dict[str, Any]], kept: list[dict[str, Any]] | None = None
) -> str | None:
    """Per group: one bar per replica, one colour per epoch, across commit log offsets;
    hatched grey where retention deleted the replica's log (summary `retention`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not epoch_ranges:
        return None
    groups = sorted({r["group"] for r in epoch_ranges})
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, 1.2 + 0.9 * len(groups)), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, g in zip(axes[:, 0], groups, strict=True):
        rows = [r for r in epoch_ranges if r["group"] == g]
        gone = [
            (k["brokerId"], d["fromOffset"], d["toOffset"])
            for group in kept or []
            if group["group"] == g
            for k in group["replicas"]
            for d in [*k["deleted"], *({"fromOffset": a, "toOffset": b} for a, b in k["unlogged"])]
        ]
        ids = sorted({r["brokerId"] for r in rows} | {b for b, _, _ in gone})
        for b, a, z in gone:
            ax.broken_barh(
                [(a, z - a)], (ids.index(b) - 0.35, 0.7), facecolor="none",
                edgecolor="grey", hatch="//", label="deleted by retention",
            )  # fmt: skip
        for r in rows:
            y = ids.index(r["brokerId"])
            epoch = r["epoch"] if r["epoch"] is not None else 0
            ax.broken_barh(
                [(r["firstOffset"], r["endOffset"] - r["firstOffset"])], (y - 0.35, 0.7),
                color=cmap(epoch % 10), label=f"epoch {epoch}",
            )  # fmt: skip
        ax.set_yticks(range(len(ids)), [f"broker {i}" for i in ids])
        ax.set_title(f"{g}: commit log offsets by epoch")
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), loc="lower right", fontsize="small")
    axes[-1, 0].set_xlabel("physical offset (bytes)")
    out = _png(fig)
    plt.close(fig)
    return out


def _timeline_plot(windows: list[dict[str, Any]], failovers: list[dict[str, Any]]) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spans = [(w["group"], w["fromMs"], w["toMs"]) for w in windows]
    spans += [
        (f["group"], f["electedAtMs"] - (f["ackGapMs"] or 0), f["electedAtMs"])
        for f in failovers
        if f.get("electedAtMs") is not None and not windows
    ]
    if not spans:
        return None
    t0 = min(s[1] for s in spans)
    groups = sorted({str(s[0]) for s in spans})
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.6 * len(groups)))
    for g, a, b in spans:
        ax.broken_barh(
            [((a - t0) / 1000, max((b - a) / 1000, 0.01))],
            (groups.index(str(g)) - 0.3, 0.6),
            color="tab:red",
        )
    ax.set_yticks(range(len(groups)), groups)
    ax.set_xlabel("seconds since the first failover (red: no master alive)")
    ax.set_title("failover timeline (controller events)")
    out = _png(fig)
    plt.close(fig)
    return out


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _retention(groups: list[dict[str, Any]]) -> list[str]:
    """Per group: what no replica holds any more and the acknowledgements that took;
    per replica: what it deleted, why and when (retention.log), and what no line explains."""
    if not any(
        k["deleted"] or k["unlogged"] or k["pending"] for g in groups for k in g["replicas"]
    ):
        return []
    rows = []
    for g in groups:
        e = g["expiredAcknowledged"]
        rows.append(
            {
                "group": g["group"],
                "expiredBelow": g["expiredBelow"],
                "expired acknowledgements": e["count"] if e else 0,
                "ack lines": "{}..{}".format(*e["ackLines"]) if e else "",
                "offsets": "{}..{}".format(*e["physicalOffsets"]) if e else "",
                "acknowledged at (ms)": "{}..{}".format(*e["ackTimeMs"]) if e else "",
            }
        )
    replicas = [
        {
            "group": g["group"],
            "brokerId": k["brokerId"],
            "minOffset": k["minOffset"],
            "deletedBytes": k["deletedBytes"],
            "deleted": "; ".join(
                f"[{d['fromOffset']}, {d['toOffset']}) {d['reason']}: {d['segments']} segments "
                f"at {d['firstAtMs']}..{d['lastAtMs']}"
                for d in k["deleted"]
            ),
            "not in retention.log": "; ".join(f"[{a}, {b})" for a, b in k["unlogged"]),
            "logged, still present": ", ".join(p["segment"] for p in k["pending"]),
            "problems": "; ".join(k["problems"]),
        }
        for g in groups
        for k in g["replicas"]
    ]
    return [
        "<h2>Retention</h2>",
        "<p>Acknowledged messages below every replica's log start were deleted by "
        "retention (EXPIRED), not lost.</p>",
        _table(rows, list(rows[0])),
        _table(replicas, list(replicas[0])),
    ]


def render_report(result: AuditResult) -> str:
    s = result.summary
    failovers = [f.to_json() for f in result.failovers]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>brokergroup audit</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}.bad{color:#b00}</style>",
        "</head><body><h1>brokergroup audit</h1>",
        f"<p>{len(s['replicas'])} replicas in {len(s['groups'])} groups, {s['logBytes']} bytes of "
        f"commit log, {s['acknowledged']} acknowledgements checked.</p>",
        f"<p class='{'bad' if s['dataCostingFindings'] else ''}'><b>{s['dataCostingFindings']} "
        "findings that cost data</b></p>",
        _table([{"kind": k, "count": v} for k, v in s["findingCounts"].items()], ["kind", "count"]),
    ]
    offsets = _offsets_plot(result.epoch_ranges, s.get("retention"))
    if offsets:
        parts.append(f"<h2>Offsets by epoch</h2><img src='data:image/png;base64,{offsets}'>")
    timeline = _timeline_plot(result.windows, failovers)
    parts.append("<h2>Failovers</h2>")
    if timeline:
        parts.append(f"<img src='data:image/png;base64,{timeline}'>")
    parts.append(
        _table(
            failovers,
            [
                "group",
                "epoch",
                "startOffset",
                "previousEpoch",
                "truncatedBytes",
                "truncatedSource",
                "previousMasterBrokerId",
                "newMasterBrokerId",
                "unavailableMs",
                "ackGapMs",
            ],
        )
    )
    parts.append("<h2>Replicas</h2>")
    parts.append(
        _table(
            s["replicas"],
            [
                "group",
                "brokerId",
                "kind",
                "reference",
                "records",
                "bytes",
                "minOffset",
                "endOffset",
                "confirmOffset",
                "epochs",
                "path",
            ],
        )
    )
    parts.extend(_retention(s.get("retention") or []))
    parts.append("<h2>Findings</h2>")
    parts.append(
        _table(
            [f.to_json() for f in result.findings[:5000]],
            ["kind", "costsData", "group", "brokerId", "physicalOffset", "detail"],
        )
    )
    parts.append("</body></html>")
    return "\n".join(parts)
