"""Soak: a group under steady stock-client load with retention, across failovers and a full
disk (issue 33 "Must show"; docs/retention.md).

    flock /tmp/bg-heavy.lock .venv/bin/python bench/soak.py            # 30 min + 5 min
    flock /tmp/bg-heavy.lock .venv/bin/python bench/soak.py --quick    # 4 min + 2 min

Phase 1, **retention**: `brokergroup local up` (three controllers, three built-in brokers,
every setting at its default but small segments and a retention of minutes, deleting at any
hour), one stock RocketMQ 5.3.1 producer thread of sync sends (tools/rocketmq/StockClient.java
`failover` mode: every SEND_OK with its queue, offset and offsetMsgId to an acks file) and one
stock push consumer following the topic from its first offset (`follow` mode). Every
`--sample-s` seconds: each replica's bytes on disk, its commit log's min and max offsets, what
was acknowledged and what the consumer has received. At a third and two thirds of the run the
master is SIGKILLed by PID (the runtime's supervisor restarts it), timed to the first SEND_OK
after the kill. At the end: every acknowledged message must have reached the consumer (it
keeps up, so none expires first), and `brokergroup audit` over the three replicas' stores with
the acks must find no acknowledged message lost (messages older than what every replica
retains are EXPIRED, not lost).

Phase 2, **disk pressure**: a new runtime whose brokers each have a tmpfs of `--disk-mib`
(never the machine's disk), retention left at RocketMQ's 72 h so only pressure deletes; after
a warm-up a foreign file takes every broker's filesystem past 86 % (above
diskSpaceCleanForciblyRatio 85 %, below diskFullRatio 95 %). Forced cleaning must keep the
group writable: sends go on being acknowledged and no broker's usage reaches diskFullRatio.

The ceiling printed and stored: the disk's sequential write bandwidth and loopback TCP,
measured in the same run. Writes bench/results/soak.json and bench/results/soak.png (bytes on
disk per replica over time, kills marked); the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tools" / "rocketmq"))

from _common import (  # noqa: E402
    RESULTS_DIR,
    loopback_tcp_ceiling,
    print_last_line,
    summarize,
    write_result,
)
from rocketmq_client import log, wait_for  # noqa: E402
from stock_client import StockClient, missing  # noqa: E402

TOPIC = "SoakTopic"
GROUP = "soak-follower"
BODY_BYTES = 1024
BROKER_HTTP_PORT = 10913
HEALTHY_TIMEOUT_S = 240.0
FAILOVER_TIMEOUT_S = 120.0
ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))


def disk_bytes(path: Path) -> int:
    """Bytes the files under `path` take on disk (st_blocks, as du counts)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # deleted by retention meanwhile
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def used_ratio(path: Path) -> float:
    """df's Use% of the filesystem holding `path` (what the broker's diskFullRatio reads)."""
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = st.f_bavail * st.f_frsize
    return used / (used + usable) if used + usable else 0.0


def segment_range(store: Path) -> tuple[int | None, int | None, int]:
    """The commit log's first segment start, last segment end and segment count, from the
    files (what the audit and a restarted broker see)."""
    names = sorted(p for p in (store / "commitlog").glob("[0-9]" * 20))
    if not names:
        return None, None, 0
    last = names[-1]
    return int(names[0].name), int(last.name) + last.stat().st_size, len(names)


def count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


@dataclass
class Acks:
    """The producer's acks file, read as it grows (tab-separated, StockClient's ack line)."""

    path: Path
    rows: list[list[str]] = field(default_factory=list)
    _pos: int = 0

    def read(self) -> list[list[str]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return self.rows
        end = data.rfind(b"\n") + 1
        self._pos += end
        for line in data[:end].decode().splitlines():
            parts = line.split("\t")
            if len(parts) >= 7:
                self.rows.append(parts)
        return self.rows


@dataclass
class Followed:
    """The follow consumer's deliveries, read as they grow."""

    path: Path
    ids: set[str] = field(default_factory=set)
    deliveries: int = 0
    bad_bodies: int = 0
    _pos: int = 0

    def read(self) -> set[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return self.ids
        end = data.rfind(b"\n") + 1
        self._pos += end
        for line in data[:end].decode().splitlines():
            parts = line.split("\t")
            if len(parts) >= 5:
                self.deliveries += 1
                self.ids.add(parts[1])
                self.bad_bodies += parts[4] != "true"
        return self.ids


def first_ok_after(log_path: Path, since_ms: int) -> int | None:
    """The first SEND_OK of the producer's result log stamped at or after `since_ms`."""
    try:
        lines = log_path.read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0] == "ok" and parts[2] == "SEND_OK":
            stamp = int(parts[1])
            if stamp >= since_ms:
                return stamp
    return None


def body_crc(body_id: str) -> int:
    """CRC32 of StockClient's body for `body_id` (its id, '|', then 'x' up to 1 KiB)."""
    head = (body_id + "|").encode()
    return zlib.crc32(head + b"x" * max(0, BODY_BYTES - len(head)))


class Group:
    """One `local up` runtime in the benchmark lane, with its stock-client key pair."""

    def __init__(self, root: Path, settings: list[str], disk_bytes: int | None) -> None:
        from brokergroup_cli.chaos.runtime import Addresses, LocalRuntime

        self.runtime = LocalRuntime(
            root, Addresses(lane=2), settings=settings, broker_disk_bytes=disk_bytes
        )
        self.info: dict[str, Any] = {}

    def up(self) -> StockClient:
        self.runtime.up()
        keys = json.loads((self.runtime.root / "client-keys.json").read_text())
        namesrv = ";".join(f"{h}:9876" for h in self.runtime.addresses.controller_hosts)
        self.healthy()
        return StockClient(
            namesrv, self.runtime.root / "client", keys["accessKey"], keys["secretKey"]
        )

    def healthy(self) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            info = self.runtime.replica_info()
            data = info.get("data", info) if info else None
            if not isinstance(data, dict) or not data.get("masterAlive"):
                return None
            alive = [b for b in data.get("brokers", []) if b.get("alive")]
            if len(alive) < 3 or len(data.get("syncStateSet", [])) < 3:
                return None
            return data

        self.info = wait_for(check, HEALTHY_TIMEOUT_S, "a master with all three in sync")
        return self.info

    def master_host(self) -> str:
        return str(self.info["masterAddress"]).rsplit(":", 1)[0]

    def kill_master(self) -> str:
        host = self.master_host()
        self.runtime.signal(self.runtime.broker_on(host), signal.SIGKILL)
        return host

    def replicas(self) -> list[tuple[int, Path]]:
        return [(slot, self.runtime.broker_dir(slot)) for slot in range(self.runtime.brokers)]

    def down(self) -> None:
        self.runtime.down()


def store_of(broker_dir: Path) -> Path:
    """The store under a broker's directory (the one holding commitlog/)."""
    for candidate in (broker_dir / "store", broker_dir):
        if (candidate / "commitlog").is_dir():
            return candidate
    found = next(broker_dir.rglob("commitlog"), None)
    return found.parent if found is not None else broker_dir


def retention_log(store: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name in ("retention.log.1", "retention.log"):
        path = store / name
        if path.exists():
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError):  # a torn last line after a crash
                    out.append(json.loads(line))
    return out


def sample(group: Group, acks: Acks, followed: Followed, t0: float) -> dict[str, Any]:
    replicas = []
    for slot, directory in group.replicas():
        store = store_of(directory)
        first, end, count = segment_range(store)
        replicas.append(
            {
                "slot": slot,
                "bytes": disk_bytes(directory),
                "usedRatio": round(used_ratio(directory), 4),
                "minOffset": first,
                "maxOffset": end,
                "segments": count,
                "deletions": len(retention_log(store)),
            }
        )
    acked = {row[1] for row in acks.read()}
    got = followed.read()
    return {
        "t": round(time.monotonic() - t0, 1),
        "replicas": replicas,
        "acked": len(acked),
        "received": len(got),
        "consumerLag": len(acked - got),
    }


def run_producer(client: StockClient, work: Path, name: str) -> tuple[Any, Path, Path, Path]:
    acks, result_log, stop = (work / f"{name}.{x}" for x in ("acks", "log", "stop"))
    process = client.start(
        "failover", work / f"{name}.out", topic=TOPIC, acks=acks, log=result_log, stop=stop,
        seconds=24 * 3600, run=name, size=BODY_BYTES,
    )  # fmt: skip
    return process, acks, result_log, stop


def stop_process(process: Any, stop: Path) -> None:
    stop.touch()
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def audit(group: Group, acks: Acks, work: Path) -> dict[str, Any]:
    """`brokergroup audit` over the group's stores with the producer's acknowledgements."""
    ack_log = work / "acks.jsonl"
    with open(ack_log, "w") as out:
        for row in acks.read():
            msg_id, body_id, broker, queue, offset, offset_msg_id, at_ms = row[:7]
            out.write(
                json.dumps(
                    {
                        "brokerName": broker,
                        "topic": TOPIC,
                        "queueId": int(queue),
                        "queueOffset": int(offset),
                        "offsetMsgId": offset_msg_id,
                        "bodyCrc": body_crc(body_id),
                        "ackTimeMs": int(at_ms),
                        "key": body_id,
                        "msgId": msg_id,
                    }
                )
                + "\n"
            )
    out_dir = work / "audit"
    done = subprocess.run(
        [sys.executable, "-m", "brokergroup_cli.main", "audit", str(group.runtime.root), "--acks",
         str(ack_log), "--out", str(out_dir), "--quiet"],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    summary_path = out_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    kinds: dict[str, int] = {}
    for finding in summary.get("findings", []):
        kinds[finding["kind"]] = kinds.get(finding["kind"], 0) + 1
    return {
        "exitCode": done.returncode,
        "stderrTail": done.stderr[-2000:] if done.returncode not in (0, 1) else "",
        "findingsByKind": kinds,
        "summary": {k: v for k, v in summary.items() if k != "findings"},
    }


def phase_retention(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    settings = [f"mappedFileSizeCommitLog={args.segment_bytes}"]
    if args.retention_minutes > 0:  # 0: the baseline, nothing deleted (the disk only grows)
        settings += [
            f"fileReservedTime={args.retention_minutes / 60:.6f}",
            f"deleteWhen={ALL_HOURS}",
        ]
    group = Group(work / "local", settings, None)
    t0 = time.monotonic()
    samples: list[dict[str, Any]] = []
    kills: list[dict[str, Any]] = []
    try:
        client = group.up()
        log(f"phase 1: group up, master {group.master_host()}; {args.minutes} min of load")
        producer, ack_path, result_log, producer_stop = run_producer(client, work, "soak")
        follow_out, follow_stop = work / "follow.tsv", work / "follow.stop"
        follower = client.start(
            "follow", work / "follow.out", topic=TOPIC, group=GROUP, out=follow_out,
            stop=follow_stop, size=BODY_BYTES,
        )  # fmt: skip
        acks, followed = Acks(ack_path), Followed(follow_out)
        end = t0 + args.minutes * 60
        kill_at = [t0 + args.minutes * 60 * k / 3 for k in (1, 2)]
        next_sample = time.monotonic()
        while time.monotonic() < end:
            if kill_at and time.monotonic() >= kill_at[0]:
                kill_at.pop(0)
                group.healthy()
                t_kill = int(time.time() * 1000)
                victim = group.kill_master()
                first = wait_for(
                    lambda t=t_kill: first_ok_after(result_log, t), FAILOVER_TIMEOUT_S,
                    "the first SEND_OK after the kill", 0.1,
                )  # fmt: skip
                kills.append(
                    {"atS": round(time.monotonic() - t0, 1), "victim": victim,
                     "firstSendOkAfterS": (first - t_kill) / 1000}
                )  # fmt: skip
                log(f"killed master {victim}: first SEND_OK after {(first - t_kill) / 1000} s")
            if time.monotonic() >= next_sample:
                samples.append(sample(group, acks, followed, t0))
                s = samples[-1]
                log(
                    f"t={s['t']} s bytes {[r['bytes'] >> 20 for r in s['replicas']]} MiB "
                    f"min {[r['minOffset'] for r in s['replicas']]} acked {s['acked']} "
                    f"lag {s['consumerLag']}"
                )
                next_sample += args.sample_s
            time.sleep(0.5)
        stop_process(producer, producer_stop)
        acked_ids = {row[1] for row in acks.read()}
        with contextlib.suppress(TimeoutError):  # reported below as missedByConsumer
            wait_for(
                lambda: acked_ids <= followed.read(), args.drain_s, "the consumer to catch up", 1
            )
        stop_process(follower, follow_stop)
        samples.append(sample(group, acks, followed, t0))
        deletions = {
            str(slot): retention_log(store_of(directory)) for slot, directory in group.replicas()
        }
    finally:
        group.down()
    missed = sorted(acked_ids - followed.read())
    verdict = audit(group, acks, work)
    half = [s for s in samples if s["t"] >= args.minutes * 30]
    per_replica_max = (
        [max(s["replicas"][i]["bytes"] for s in half) for i in range(3)] if half else []
    )
    return {
        "settings": settings,
        "minutes": args.minutes,
        "acked": len(acked_ids),
        "received": len(followed.ids),
        "deliveries": followed.deliveries,
        "badBodies": followed.bad_bodies,
        "missedByConsumer": len(missed),
        "missedSample": missed[:10],
        "consumerLag": summarize([s["consumerLag"] for s in samples], 1),
        "kills": kills,
        "deletionsPerReplica": {slot: len(rows) for slot, rows in deletions.items()},
        "deletionReasons": sorted(
            {row.get("reason", "?") for rows in deletions.values() for row in rows}
        ),
        "bytesSecondHalfMaxPerReplica": per_replica_max,
        "bytesFinalPerReplica": [r["bytes"] for r in samples[-1]["replicas"]] if samples else [],
        "bytesIfNothingDeleted": len(acked_ids) * (BODY_BYTES + 200),
        "audit": verdict,
        "samples": samples,
    }


def phase_pressure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from brokergroup_cli.chaos.faults import fill_disk

    disk = args.disk_mib << 20
    settings = [f"mappedFileSizeCommitLog={args.segment_bytes}"]
    group = Group(work / "local-pressure", settings, disk)
    t0 = time.monotonic()
    samples: list[dict[str, Any]] = []
    try:
        client = group.up()
        producer, ack_path, result_log, producer_stop = run_producer(client, work, "pressure")
        acks, followed = Acks(ack_path), Followed(work / "none.tsv")
        wait_for(lambda: len(acks.read()) > 2000, 120, "2000 acknowledged sends before the fill")
        fillers = [
            fill_disk(d, args.fill_ratio, name="soak-foreign-file") for _, d in group.replicas()
        ]
        filled_at = time.monotonic() - t0
        log(f"phase 2: filled every broker's disk to {args.fill_ratio:.0%} at t={filled_at:.1f} s")
        acked_at_fill = len(acks.read())
        end = time.monotonic() + args.pressure_minutes * 60
        while time.monotonic() < end:
            samples.append(sample(group, acks, followed, t0))
            s = samples[-1]
            log(f"t={s['t']} s used {[r['usedRatio'] for r in s['replicas']]} acked {s['acked']}")
            time.sleep(args.sample_s / 2)
        stop_process(producer, producer_stop)
        after = [s for s in samples if s["t"] > filled_at]
        last_ok = first_ok_after(result_log, int(time.time() * 1000) - 30_000)
        deletions = {
            str(slot): retention_log(store_of(directory)) for slot, directory in group.replicas()
        }
        for filler in fillers:
            filler.unlink(missing_ok=True)
    finally:
        group.down()
    return {
        "settings": settings,
        "diskMiB": args.disk_mib,
        "fillRatio": args.fill_ratio,
        "filledAtS": round(filled_at, 1),
        "ackedBeforeFill": acked_at_fill,
        "ackedAfterFill": len(acks.rows) - acked_at_fill,
        "sendOkInLast30s": last_ok is not None,
        "maxUsedRatioAfterFill": max(
            (r["usedRatio"] for s in after for r in s["replicas"]), default=None
        ),
        "deletionReasons": sorted(
            {row.get("reason", "?") for rows in deletions.values() for row in rows}
        ),
        "deletionsPerReplica": {slot: len(rows) for slot, rows in deletions.items()},
        "writable": last_ok is not None and len(acks.rows) > acked_at_fill,
        "samples": samples,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phase = result["retention"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=False)
    ts = [s["t"] / 60 for s in phase["samples"]]
    for i in range(3):
        top.plot(
            ts, [s["replicas"][i]["bytes"] / 2**20 for s in phase["samples"]], label=f"broker {i}"
        )
    for kill in phase["kills"]:
        top.axvline(kill["atS"] / 60, color="red", linestyle="--", linewidth=1)
    top.set_title(
        f"{', '.join(phase['settings'][:2])}: bytes on disk per replica (red: master kill)"
    )
    top.set_ylabel("MiB on disk")
    top.set_xlabel("minutes")
    top.legend(loc="upper left")
    # The bytes a retention window holds follow the producer's rate: show it beside them.
    rate = top.twinx()
    pairs = list(zip(phase["samples"], phase["samples"][1:], strict=False))
    rate.plot(
        [b["t"] / 60 for _, b in pairs],
        [(b["acked"] - a["acked"]) / max(b["t"] - a["t"], 1e-3) for a, b in pairs],
        color="grey", linewidth=0.8, alpha=0.6, label="acknowledged msg/s",
    )  # fmt: skip
    rate.set_ylabel("acknowledged msg/s")
    rate.set_ylim(bottom=0)
    rate.legend(loc="lower right")
    if "pressure" in result:
        p = result["pressure"]
        pts = [s["t"] / 60 for s in p["samples"]]
        for i in range(3):
            bottom.plot(
                pts,
                [s["replicas"][i]["usedRatio"] * 100 for s in p["samples"]],
                label=f"broker {i}",
            )
        bottom.axhline(85, color="orange", linestyle=":", label="diskSpaceCleanForciblyRatio")
        bottom.axhline(95, color="red", linestyle=":", label="diskFullRatio")
        bottom.set_title(
            f"disk pressure: {p['diskMiB']} MiB tmpfs per broker, foreign file to {p['fillRatio']:.0%}"
        )
        bottom.set_ylabel("filesystem use %")
        bottom.set_xlabel("minutes")
        bottom.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 min + 2 min")
    ap.add_argument("--minutes", type=float, default=None, help="phase 1 length (default 30)")
    ap.add_argument(
        "--retention-minutes",
        type=float,
        default=3.0,
        help="fileReservedTime (0: none, a baseline)",
    )
    ap.add_argument("--segment-bytes", type=int, default=4 << 20, help="mappedFileSizeCommitLog")
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--drain-s", type=float, default=120.0)
    ap.add_argument("--pressure-minutes", type=float, default=None, help="phase 2 (default 5)")
    ap.add_argument("--disk-mib", type=int, default=256, help="phase 2's tmpfs per broker")
    ap.add_argument("--fill-ratio", type=float, default=0.86)
    ap.add_argument("--skip-pressure", action="store_true")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--replot", type=Path, default=None, help="redraw soak.png from a soak.json")
    args = ap.parse_args()
    if args.replot is not None:
        plot(json.loads(args.replot.read_text()), RESULTS_DIR / "soak.png")
        return 0
    if args.minutes is None:
        args.minutes = 4.0 if args.quick else 30.0
    if args.pressure_minutes is None:
        args.pressure_minutes = 2.0 if args.quick else 5.0
    reason = missing()
    if reason is not None:
        print(f"soak: {reason}", file=sys.stderr)
        return 2
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    from brokergroup_broker.store.ceiling import measure_disk_ceiling

    ceiling_box = {
        "loopback": asdict(loopback_tcp_ceiling()),
        "disk": measure_disk_ceiling(work, seq_total_bytes=64 << 20, small_ops=300).as_dict(),
    }
    log(f"ceiling: {ceiling_box}")
    result: dict[str, Any] = {"benchmark": "soak", "quick": args.quick, "ceiling": ceiling_box}
    try:
        result["retention"] = phase_retention(args, work)
        if not args.skip_pressure:
            if os.geteuid() != 0:
                result["pressure"] = {"skipped": "a tmpfs per broker needs root"}
            else:
                result["pressure"] = phase_pressure(args, work)
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    r = result["retention"]
    result["acked_lost"] = r["audit"]["findingsByKind"].get("ACKED_MISSING", 0)
    result["passed"] = (
        r["audit"]["exitCode"] == 0
        and r["missedByConsumer"] == 0
        and r["badBodies"] == 0
        and len(r["kills"]) == 2
        and (args.retention_minutes <= 0 or all(n > 0 for n in r["deletionsPerReplica"].values()))
        and (
            args.skip_pressure or "skipped" in result["pressure"] or result["pressure"]["writable"]
        )
    )
    if not args.no_write:
        plot(result, RESULTS_DIR / "soak.png")
        result["plot"] = "soak.png"
        write_result("soak", result)
    brief = {k: v for k, v in result.items() if k not in ("retention", "pressure")}
    for phase in ("retention", "pressure"):
        if phase in result:
            brief[phase] = {k: v for k, v in result[phase].items() if k != "samples"}
    print_last_line(brief)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
