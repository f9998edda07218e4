"""Executor-side time of a Spark application from its event log (what the Spark UI's
stage pages show), summed per job description: `bench/audit.py --scale` runs the audit
with `spark.eventLog.enabled`, and run_audit names each stage's jobs "audit: <stage>".

Per description: wall seconds (first job submitted → last job ended), tasks, and the
sums over its tasks of executor run, CPU, GC, deserialization, scheduler delay (task
duration minus the executor's own parts: launch, queueing, sending the result), shuffle
fetch wait and bytes read remotely/locally, shuffle written, bytes spilled to disk,
cached-block input, task locality counts and task seconds per executor.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


def newest_event_log(directory: Path, before: set[Path]) -> Path | None:
    """The event log written since `before` was listed (a finished application's)."""
    fresh = [
        p for p in directory.iterdir() if p not in before and not p.name.endswith(".inprogress")
    ]
    return max(fresh, key=lambda p: p.stat().st_mtime) if fresh else None


def summarize(log: Path) -> dict[str, dict[str, Any]]:
    stage_job: dict[int, str] = {}
    job_span: dict[str, list[float]] = {}
    job_desc: dict[int, str] = {}
    acc: dict[str, Counter[str]] = defaultdict(Counter)
    locality: dict[str, Counter[str]] = defaultdict(Counter)
    per_executor: dict[str, Counter[str]] = defaultdict(Counter)
    # A rolling log (Spark 4's eventlog_v2_<app> directory) is its events_<n>_… files in order.
    files = (
        sorted(
            (f for f in log.iterdir() if f.name.startswith("events_")),
            key=lambda f: int(f.name.split("_")[1]),
        )
        if log.is_dir()
        else [log]
    )
    for path in files:
        for line in path.read_text().splitlines():
            e = json.loads(line)
            kind = e.get("Event")
            if kind == "SparkListenerJobStart":
                desc = (e.get("Properties") or {}).get("spark.job.description") or "(none)"
                job_desc[e["Job ID"]] = desc
                for sid in e.get("Stage IDs", []):
                    stage_job[sid] = desc
                span = job_span.setdefault(desc, [e["Submission Time"], e["Submission Time"]])
                span[0] = min(span[0], e["Submission Time"])
            elif kind == "SparkListenerJobEnd":
                desc = job_desc.get(e["Job ID"], "(none)")
                span = job_span.setdefault(desc, [e["Completion Time"], e["Completion Time"]])
                span[1] = max(span[1], e["Completion Time"])
            elif kind == "SparkListenerTaskEnd":
                desc = stage_job.get(e["Stage ID"], "(none)")
                info, m = e["Task Info"], e.get("Task Metrics") or {}
                a = acc[desc]
                duration = info["Finish Time"] - info["Launch Time"]
                own = (
                    m.get("Executor Run Time", 0)
                    + m.get("Executor Deserialize Time", 0)
                    + m.get("Result Serialization Time", 0)
                )
                a["tasks"] += 1
                a["task_ms"] += duration
                a["run_ms"] += m.get("Executor Run Time", 0)
                a["cpu_ms"] += m.get("Executor CPU Time", 0) // 1_000_000
                a["gc_ms"] += m.get("JVM GC Time", 0)
                a["deserialize_ms"] += m.get("Executor Deserialize Time", 0)
                a["scheduler_delay_ms"] += max(0, duration - own)
                sr = m.get("Shuffle Read Metrics") or {}
                a["shuffle_fetch_wait_ms"] += sr.get("Fetch Wait Time", 0)
                a["shuffle_remote_bytes"] += sr.get("Remote Bytes Read", 0)
                a["shuffle_local_bytes"] += sr.get("Local Bytes Read", 0)
                sw = m.get("Shuffle Write Metrics") or {}
                a["shuffle_written_bytes"] += sw.get("Shuffle Bytes Written", 0)
                a["shuffle_write_ms"] += sw.get("Shuffle Write Time", 0) // 1_000_000
                a["spilled_disk_bytes"] += m.get("Disk Bytes Spilled", 0)
                a["input_bytes"] += (m.get("Input Metrics") or {}).get("Bytes Read", 0)
                locality[desc][info.get("Locality", "?")] += 1
                per_executor[desc][str(info.get("Executor ID"))] += duration
    out: dict[str, dict[str, Any]] = {}
    for desc, a in sorted(acc.items()):
        first, last = job_span.get(desc, [0, 0])
        row: dict[str, Any] = {"wall_s": round((last - first) / 1000, 2)}
        for k, v in a.items():
            row[k.replace("_ms", "_s") if k.endswith("_ms") else k] = (
                round(v / 1000, 2) if k.endswith("_ms") else v
            )
        row["locality"] = dict(locality[desc])
        row["task_s_per_executor"] = {
            x: round(v / 1000, 1) for x, v in sorted(per_executor[desc].items())
        }
        out[desc] = row
    return out
