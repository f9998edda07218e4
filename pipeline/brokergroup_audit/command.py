"""`brokergroup audit`'s handler: read the inputs, run the job in a Spark session,
write the outputs, print the data-costing findings, exit 0/1/2 (docs/audit.md)."""

from __future__ import annotations

import argparse
import sys

from brokergroup_audit import checks
from brokergroup_audit.inputs import acknowledged, read_json_lines
from brokergroup_audit.job import run_audit
from brokergroup_audit.locations import join, resolve
from brokergroup_audit.outputs import write_outputs
from brokergroup_audit.session import spark_session
from brokergroup_audit.stores import find_replicas


def run_cli(args: argparse.Namespace) -> int:
    def progress(text: str) -> None:
        if not args.quiet:
            print(f"audit: {text}", file=sys.stderr, flush=True)

    try:
        groups = sorted({r.group for r in find_replicas(args.store_root)})
        acks = acknowledged(read_json_lines(args.acks), groups)
        events = read_json_lines(args.events)
        resolve(args.out)  # an output URI pyarrow cannot open fails before the audit
    except (OSError, ValueError) as exc:
        print(f"brokergroup audit: {exc}", file=sys.stderr)
        return 2
    spark = spark_session(args.master)
    try:
        result = run_audit(
            spark, args.store_root, acks=acks, events=events,
            split_bytes=args.split_mib << 20, progress=progress,
        )  # fmt: skip
    except ValueError as exc:
        print(f"brokergroup audit: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    write_outputs(result, args.out)
    s = result.summary
    print(
        f"audited {len(s['replicas'])} replicas ({s['logBytes']} bytes) in {s['elapsedS']} s: "
        f"{s['dataCostingFindings']} data-costing findings, {len(s['failovers'])} failovers; "
        f"report in {join(args.out.split('?', 1)[0], 'report.html')}"
    )
    for r in s["retention"]:
        if r["expiredAcknowledged"] is not None:
            print(
                f"  {r['group']}: {r['expiredAcknowledged']['count']} acknowledged messages "
                f"expired (below every replica's log start {r['expiredBelow']}: deleted by "
                "retention, not lost)"
            )
    for f in result.findings:
        if f.kind.costs_data:
            print(f"  {f.kind.value} {f.group}/{f.broker_id} @{f.physical_offset}: {f.detail}")
    return checks.exit_code(result.findings)
