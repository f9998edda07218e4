"""The Spark side of `brokergroup audit`: read and check (docs/audit.md).

Per-record work runs in Spark over the `commitlog` source (divergence by offset,
acknowledgement matching, duplicates, per-epoch ranges); what comes back is small
and goes through the pure `checks` module. The result (`result.AuditResult`) is
written by `outputs`; `command` wires the CLI to both.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from brokergroup_audit import checks, retention
from brokergroup_audit.checks import Finding, FindingKind, ReplicaFacts
from brokergroup_audit.inputs import ACK_SCHEMA
from brokergroup_audit.locations import on_driver, resolve
from brokergroup_audit.result import AuditResult, Progress, Stages
from brokergroup_audit.source import DEFAULT_SPLIT_BYTES
from brokergroup_audit.stores import blank_end, find_replicas

#: The source's columns the checks read.
CHECKED_COLUMNS = (
    "group", "brokerId", "physicalOffset", "size", "bodyCRC", "topic", "queueId",
    "queueOffset", "keys", "epoch", "recordCrc", "problem", "detail", "realTopic",
    "realQueueId", "uniqKey",
)  # fmt: skip
#: A message stored twice (a producer's retry): same topic, key and body.
DUPLICATE_KEY = ["group", "topic", "keys", "bodyCRC"]
#: One queue slot: two records on it break every consumer's offsets.
QUEUE_SLOT = ["group", "topic", "queueId", "queueOffset"]


def run_audit(
    spark: SparkSession,
    store_root: str,
    *,
    acks: Sequence[dict[str, Any]] = (),
    events: Sequence[dict[str, Any]] = (),
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: Progress = lambda _: None,
) -> AuditResult:
    began = time.monotonic()
    # Absolute before Spark sees it: executors would resolve a relative root (and so
    # every segment path listed from it) in their own working directories.
    store_root = on_driver(store_root, Path.cwd())
    replicas = find_replicas(store_root)
    if not replicas:
        raise ValueError(f"no replica store (a directory with commitlog/) under {store_root}")
    progress(f"found {len(replicas)} replicas in {len({r.group for r in replicas})} groups")
    # Each stage's Spark jobs carry its name as their description (the Spark UI's and the
    # event log's "audit: scan", …), so executor-side time can be put on the stage.
    stages = Stages(progress, on_start=lambda name: spark.sparkContext.setJobDescription(
        f"audit: {name}"))  # fmt: skip
    # Cached once, without the columns no check reads (storeTimestamp), and with the
    # 64-bit hashes the duplicate checks count by (a long per record is cheaper to
    # cache, read and shuffle than the strings it stands for).
    df = (
        spark.read.format("commitlog")
        .option("splitBytes", str(split_bytes))
        .load(store_root)
        .select(
            *CHECKED_COLUMNS,
            F.when(F.col("keys").isNotNull(), F.xxhash64(*DUPLICATE_KEY)).alias("keyHash"),
            F.xxhash64(*QUEUE_SLOT).alias("slotHash"),
        )
        .cache()
    )
    findings: list[Finding] = []

    # Per replica and epoch: first/last offset, records, bytes (one aggregation; the
    # per-replica totals and where its valid records end are sums over its epochs).
    stages.start("scan", "scanning commit logs")
    ok = df.filter(F.col("problem").isNull() | (F.col("problem") == "BAD_CRC"))
    epoch_ranges = [
        {
            "group": r["group"],
            "brokerId": r["brokerId"],
            "epoch": r["epoch"],
            "firstOffset": r["first"],
            "endOffset": r["end"],
            "records": r["records"],
            "bytes": r["bytes"],
        }
        for r in ok.groupBy("group", "brokerId", "epoch")
        .agg(
            F.min("physicalOffset").alias("first"),
            F.max(F.col("physicalOffset") + F.col("size")).alias("end"),
            F.count("*").alias("records"),
            F.sum("size").alias("bytes"),
        )
        .orderBy("group", "brokerId", "epoch")
        .collect()
    ]
    ends: dict[tuple[str, int], tuple[int, int, int]] = {}
    for e in epoch_ranges:
        key = (e["group"], e["brokerId"])
        records, size, end = ends.get(key, (0, 0, 0))
        ends[key] = (records + e["records"], size + e["bytes"], max(end, e["endOffset"]))
    facts: dict[str, list[ReplicaFacts]] = {}
    filesystem, _ = resolve(store_root)
    for r in replicas:
        records, size, end = ends.get((r.group, r.broker_id), (0, 0, r.min_offset))
        end = blank_end(filesystem, r, int(end))
        ends[(r.group, r.broker_id)] = (records, size, end)
        facts.setdefault(r.group, []).append(
            ReplicaFacts(r.group, r.broker_id, r.epochs, r.min_offset, int(end), r.confirm_offset,
                         r.recover_offset)
        )  # fmt: skip
    refs = {g: checks.reference_replica(fs) for g, fs in facts.items()}
    confirm = {(f.group, f.broker_id): f.durable_end for fs in facts.values() for f in fs}
    # Retention: what each replica deleted, what no replica holds any more, and which
    # replica's log answers for an acknowledgement below the reference's first segment.
    kept = {
        g: [
            retention.replica_retention(r.group, r.broker_id, r.min_offset, r.deletions,
                                        r.retention_problems)
            for r in replicas if r.group == g
        ]
        for g in facts
    }  # fmt: skip
    below = {g: retention.expired_below(fs) for g, fs in facts.items()}
    holders = {g: retention.holders(fs, refs[g]) for g, fs in facts.items()}

    # Damaged regions and records; a replica whose valid records end below its
    # confirmOffset (a zeroed tail reads as no records at all).
    stages.start("damage", "damaged records")
    damaged_at: dict[tuple[str, int], list[int]] = {}
    for row in (
        df.filter(F.col("problem").isNotNull())
        .orderBy("group", "brokerId", "physicalOffset")
        .collect()
    ):
        key = (row["group"], row["brokerId"])
        damaged_at.setdefault(key, []).append(row["physicalOffset"])
        findings.append(
            checks.damage(row["group"], row["brokerId"], row["physicalOffset"], row["problem"],
                          row["detail"], confirm.get(key))
        )  # fmt: skip
    for fs in facts.values():
        for fact in fs:
            short = checks.short_of_checkpoint(
                fact, damaged_at.get((fact.group, fact.broker_id), ())
            )
            if short is not None:
                findings.append(short)

    # Divergence: two replicas that both confirmed an offset must hold the same record
    # there (each pair up to the smaller of their confirmed ends). Spark keeps the
    # offsets where fewer copies than confirming replicas exist or copies differ;
    # checks.divergence decides on each.
    stages.start("divergence", "comparing replicas")
    spans = [checks.agreement_span(r) for fs in facts.values() if len(fs) > 1 for r in fs]
    if spans:
        span_df = spark.createDataFrame(
            [(s.group, s.broker_id, s.low, s.high) for s in spans],
            "group STRING, brokerId INT, low BIGINT, high BIGINT",
        )
        group_spans = span_df.groupBy("group").agg(
            F.collect_list(F.struct("low", "high")).alias("spans")
        )
        at = F.col("physicalOffset")
        diverged = (
            df.join(F.broadcast(span_df), ["group", "brokerId"])
            .filter((at >= F.col("low")) & (at < F.col("high")))
            .groupBy("group", "physicalOffset")
            .agg(
                F.count("*").alias("copies"),
                F.countDistinct("recordCrc", "size").alias("distinct"),
                F.collect_list(F.struct("brokerId", "recordCrc", "size", "problem")).alias("held"),
            )
            .join(F.broadcast(group_spans), "group")
            .withColumn(
                "confirmed",
                F.size(F.filter("spans", lambda s: (s["low"] <= at) & (at < s["high"]))),
            )
            .filter((F.col("copies") != F.col("confirmed")) | (F.col("distinct") > 1))
            .orderBy("group", "physicalOffset")
        )
        for row in diverged.collect():
            copies = [
                checks.Copy(x["brokerId"], x["recordCrc"], x["size"], x["problem"])
                for x in row["held"]
            ]
            found = checks.divergence(row["group"], row["physicalOffset"], copies, spans)
            if found is not None:
                findings.append(found)

    # Everything below reads the reference replica of each group (the lineage a
    # controller would elect).
    ref_df = spark.createDataFrame(
        [(g, r.broker_id) for g, r in refs.items()], "group STRING, brokerId INT"
    )
    ref_rows = df.join(F.broadcast(ref_df), ["group", "brokerId"])
    stages.start("duplicates")
    live = ref_rows.filter(F.col("problem").isNull())
    dups = repeated(live.filter(F.col("keys").isNotNull()), DUPLICATE_KEY, F.col("keyHash"))
    for row in dups:
        found = checks.duplicate(row["group"], refs[row["group"]].broker_id, row["topic"],
                                 row["keys"], row["at"])  # fmt: skip
        if found is not None:
            findings.append(found)
    stages.start("queue offsets", "duplicate queue offsets")
    qdups = repeated(live, QUEUE_SLOT, F.col("slotHash"))
    for row in qdups:
        found = checks.duplicate_queue_offset(
            row["group"], refs[row["group"]].broker_id, row["topic"], row["queueId"],
            row["queueOffset"], row["at"],
        )  # fmt: skip
        if found is not None:
            findings.append(found)

    # Acknowledged but missing; below every replica's log start, expired.
    acked = list(acks)
    expired: dict[str, retention.ExpiredAcks] = {}
    if acked:
        stages.start("acknowledgements", f"matching {len(acked)} acknowledgements")
        gone, live_acks = retention.split_expired(
            pa.Table.from_pylist(acked, schema=ACK_SCHEMA), below
        )
        expired = retention.expired_by_group(gone)
        if live_acks.num_rows:
            findings.extend(_acked_missing(spark, df, live_acks, holders, refs))
        for g, gone_acks in sorted(expired.items()):
            findings.append(retention.expired_finding(g, below[g], gone_acks, kept[g]))

    # Epoch lineage, failovers, unavailability.
    stages.start("failovers", "epochs and failovers")
    all_failovers: list[checks.Failover] = []
    windows = checks.unavailability_windows(events)
    for g, fs in sorted(facts.items()):
        findings.extend(checks.epoch_conflicts(fs))
        findings.extend(checks.uncommitted_tails(fs, refs[g]))
        group_events = [e for e in events if e.get("brokerName") in (g, None)]
        ack_epochs: dict[int, tuple[int, int]] = {}
        for a in acked:
            if a["group"] == g and a["masterEpoch"] is not None:
                first, last = ack_epochs.get(a["masterEpoch"], (a["ackTimeMs"], a["ackTimeMs"]))
                ack_epochs[a["masterEpoch"]] = (
                    min(first, a["ackTimeMs"]),
                    max(last, a["ackTimeMs"]),
                )
        all_failovers.extend(checks.failovers(fs, group_events, ack_epochs))
    df.unpersist()
    spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]

    counts: dict[str, int] = {k.value: 0 for k in FindingKind}
    for f in findings:
        counts[f.kind.value] += 1
    summary = {
        "storeRoot": str(store_root),
        "groups": sorted(facts),
        "replicas": [
            {
                "group": r.group,
                "brokerId": r.broker_id,
                "path": r.path,
                "kind": r.kind,
                "segments": len(r.segments),
                "segmentBytes": r.segment_bytes,
                "epochs": [list(e) for e in r.epochs],
                "confirmOffset": r.confirm_offset,
                "minOffset": r.min_offset,
                "records": ends.get((r.group, r.broker_id), (0, 0, 0))[0],
                "bytes": ends.get((r.group, r.broker_id), (0, 0, 0))[1] or 0,
                "endOffset": ends.get((r.group, r.broker_id), (0, 0, r.min_offset))[2],
                "reference": refs[r.group].broker_id == r.broker_id,
            }
            for r in replicas
        ],
        "acknowledged": len(acked),
        "expiredAcknowledged": sum(e.count for e in expired.values()),
        "retention": [
            {
                "group": g,
                "expiredBelow": below[g],
                "expiredAcknowledged": expired[g].to_json() if g in expired else None,
                "holders": [
                    {
                        "brokerId": h.broker_id,
                        "fromOffset": h.low,
                        "toOffset": None if h.high == retention.OPEN_END else h.high,
                    }
                    for h in holders[g]
                ],
                "replicas": [k.to_json() for k in kept[g]],
            }
            for g in sorted(facts)
        ],
        "findingCounts": counts,
        "dataCostingFindings": sum(1 for f in findings if f.kind.costs_data),
        "failovers": [f.to_json() for f in all_failovers],
        "unavailability": windows,
        "logBytes": sum(s.length for r in replicas for s in r.segments),
        "elapsedS": round(time.monotonic() - began, 3),
        "stageSeconds": stages.finish(),
    }
    deletions = [
        {"group": r.group, "brokerId": r.broker_id, **d.to_json()}
        for r in replicas
        for d in r.deletions
    ]
    return AuditResult(summary, findings, all_failovers, epoch_ranges, windows, deletions)


def _acked_missing(
    spark: SparkSession,
    df: DataFrame,
    live_acks: pa.Table,
    holders: dict[str, list[retention.Holder]],
    refs: dict[str, ReplicaFacts],
) -> list[Finding]:
    """ACKED_MISSING: acknowledgements (not expired) whose holder's log does not hold
    the acknowledged message at its physicalOffset."""
    out: list[Finding] = []
    # Through Arrow: a million acknowledgements as Python rows took 10 s, 2 s this way.
    ack_df = spark.createDataFrame(live_acks)
    # Each offset is answered by one replica (`retention.holders`: the reference,
    # or below its first segment a replica that still holds it).
    holder_df = spark.createDataFrame(
        [(g, h.broker_id, h.low, h.high) for g, hs in holders.items() for h in hs],
        "group STRING, brokerId INT, low BIGINT, high BIGINT",
    )
    at = F.col("physicalOffset")
    stored = (
        df.filter(F.col("problem").isNull())
        .join(F.broadcast(holder_df), ["group", "brokerId"])
        .filter((at >= F.col("low")) & (at < F.col("high")))
    ).select(
        "group", "physicalOffset", F.col("brokerId").alias("sBrokerId"),
        F.col("topic").alias("sTopic"), F.col("queueId").alias("sQueueId"),
        F.col("queueOffset").alias("sQueueOffset"), F.col("keys").alias("sKeys"),
        F.col("bodyCRC").alias("sBodyCrc"), F.col("realTopic").alias("sRealTopic"),
        F.col("realQueueId").alias("sRealQueueId"), F.col("uniqKey").alias("sUniqKey"),
    )  # fmt: skip
    missing = (
        ack_df.join(stored, ["group", "physicalOffset"], "left")
        .filter(
            F.col("sTopic").isNull()
            # checks.holds_acknowledged: the stored queue, or the one a delay or timer
            # message is parked for (REAL_TOPIC/REAL_QID), and the client's id if named.
            | ~(
                ((F.col("sTopic") == F.col("topic")) & (F.col("sQueueId") == F.col("queueId")))
                | F.coalesce(
                    (F.col("sRealTopic") == F.col("topic"))
                    & (F.col("sRealQueueId") == F.col("queueId")),
                    F.lit(False),
                )
            )
            | (
                F.col("msgId").isNotNull()
                & F.col("sUniqKey").isNotNull()
                & (F.col("sUniqKey") != F.col("msgId"))
            )
            | (F.col("sQueueOffset") != F.col("queueOffset"))
            | (
                F.col("sBodyCrc").bitwiseAND(F.lit(checks.CRC_BITS))
                != F.col("bodyCrc").bitwiseAND(F.lit(checks.CRC_BITS))
            )
            | (F.col("key").isNotNull() & ~F.coalesce(F.col("sKeys") == F.col("key"), F.lit(False)))
        )
        .orderBy("group", "physicalOffset")
    )
    for row in missing.collect():
        held = (
            None
            if row["sTopic"] is None
            else checks.StoredRecord(row["sTopic"], row["sQueueId"], row["sQueueOffset"],
                                     row["sKeys"], row["sBodyCrc"], row["sRealTopic"],
                                     row["sRealQueueId"], row["sUniqKey"])
        )  # fmt: skip
        holder = row["sBrokerId"]
        if holder is None:
            holder = retention.holder_of(holders.get(row["group"], []), row["physicalOffset"])
        found = checks.acked_missing(
            row["group"], refs[row["group"]].broker_id if holder is None else holder,
            row.asDict(), held,
        )  # fmt: skip
        if found is not None:
            out.append(found)
    return out


def repeated(rows: DataFrame, key: list[str], key_hash: Column) -> list[Row]:
    """The keys held by more than one of `rows`, in key order: `key` columns, n, at
    (sorted physical offsets).

    Counted by `key_hash` (a 64-bit hash of `key`) first: one long per record goes
    through the shuffle instead of its strings, and what comes back is the few
    repeated hashes (usually none: then that is all). Only their records are grouped
    by the key itself, so a hash collision costs a candidate, never a finding.
    """
    hashed = rows.withColumn("_keyHash", key_hash)
    repeats = [
        r[0] for r in hashed.groupBy("_keyHash").count().filter(F.col("count") > 1).collect()
    ]
    if not repeats:
        return []
    candidates = rows.sparkSession.createDataFrame([(h,) for h in repeats], "_keyHash BIGINT")
    return (
        hashed.join(F.broadcast(candidates), "_keyHash", "left_semi")
        .groupBy(*key)
        .agg(
            F.count("*").alias("n"),
            F.sort_array(F.collect_list("physicalOffset")).alias("at"),
        )
        .filter(F.col("n") > 1)
        .orderBy(*key)
        .collect()
    )
