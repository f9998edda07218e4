"""The audit's outputs in --out (a local directory or a URI, `locations`):
summary.json, findings/failovers/epochs/retention deletions as Parquet, report.html."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from brokergroup_audit.locations import is_local, join, resolve, write_bytes
from brokergroup_audit.report import render_report
from brokergroup_audit.result import AuditResult

FINDINGS_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("costsData", pa.bool_()),
        ("group", pa.string()),
        ("brokerId", pa.int32()),
        ("physicalOffset", pa.int64()),
        ("detail", pa.string()),
    ]
)

#: One row per logged retention deletion (retention.log lines of every replica).
DELETIONS_SCHEMA = pa.schema(
    [
        ("group", pa.string()),
        ("brokerId", pa.int32()),
        ("atMs", pa.int64()),
        ("segment", pa.string()),
        ("fromOffset", pa.int64()),
        ("toOffset", pa.int64()),
        ("reason", pa.string()),
        ("newMinOffset", pa.int64()),
    ]
)


def _table(rows: list[dict[str, object]]) -> pa.Table:
    return pa.Table.from_pylist(rows) if rows else pa.table({"group": pa.array([], pa.string())})


def write_outputs(result: AuditResult, out: str) -> None:
    filesystem, path = resolve(out)
    if is_local(filesystem):
        # An object store has no directories to make (and a bucket is not ours to create).
        filesystem.create_dir(path, recursive=True)
    summary = dict(result.summary)
    summary["findings"] = [f.to_json() for f in result.findings]
    write_bytes(
        filesystem,
        join(path, "summary.json"),
        (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode(),
    )
    tables = {
        "findings.parquet": pa.Table.from_pylist(
            [f.to_json() for f in result.findings], schema=FINDINGS_SCHEMA
        ),
        "failovers.parquet": _table([f.to_json() for f in result.failovers]),
        "epochs.parquet": _table(result.epoch_ranges),
        "retention.parquet": pa.Table.from_pylist(result.deletions, schema=DELETIONS_SCHEMA),
    }
    for name, table in tables.items():
        pq.write_table(table, join(path, name), filesystem=filesystem)
    write_bytes(filesystem, join(path, "report.html"), render_report(result).encode("utf-8"))
