"""Handlers of `brokergroup produce` and `brokergroup consume`.

`produce` is also the load generator of the benchmarks and the chaos
checker's writer, so it is built for speed and for evidence: `--in-flight`
workers each keep one batch in flight on the producer's one pipelined
connection (no await per message), and every acknowledged message can be
appended to `--ack-log` as one JSON line (topic, queueId, queueOffset,
physicalOffset, key, bodyCrc, masterEpoch) for the audit to prove it was
not lost. `consume` prints one JSON object per message, the body as text
when it is UTF-8 and as base64 (flagged) otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import secrets
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from brokergroup_broker.protocol.client import (
    AuthenticationError,
    BrokerConnectionError,
    BrokerUnavailableError,
    ClientConfig,
    NoMasterError,
)
from brokergroup_broker.protocol.codec import ProtocolError
from brokergroup_broker.protocol.consumer import Consumer
from brokergroup_broker.protocol.messages import BrokerError, ProduceMessage, PulledMessage
from brokergroup_broker.protocol.producer import Producer
from brokergroup_broker.store.message import body_crc
from brokergroup_controller.admin import local_runtime_file, resolve_api_tls
from brokergroup_remoting.keys import read_key_file
from brokergroup_remoting.net import Credentials

#: Where --key-file is read from when the flag is not given.
KEY_FILE_ENV = "BROKERGROUP_KEY_FILE"

_FAILURES = (
    AuthenticationError,
    BrokerError,
    BrokerUnavailableError,
    BrokerConnectionError,
    NoMasterError,
    ProtocolError,
    OSError,
)


def _token(args: argparse.Namespace) -> str | None:
    """The controller credential: --controller-token-file, $BROKERGROUP_CONTROLLER_TOKEN,
    else the local runtime's client credential (reads of its group only), if any."""
    if args.controller_token_file:
        return Path(args.controller_token_file).read_text().strip() or None
    if os.environ.get("BROKERGROUP_CONTROLLER_TOKEN"):
        return os.environ["BROKERGROUP_CONTROLLER_TOKEN"]
    try:
        return Path(local_runtime_file("client-credential")).read_text().strip() or None
    except OSError:
        return None


def _key_pair(args: argparse.Namespace) -> Credentials | None:
    """The key pair every broker connection proves: --key-file, $BROKERGROUP_KEY_FILE, else
    the local runtime's client pair (client-keys.json), if there is one. A file named by
    the flag or the environment must be readable (SystemExit naming it, never the secret)."""
    named = args.key_file or os.environ.get(KEY_FILE_ENV)
    path = named or local_runtime_file("client-keys.json")
    try:
        return read_key_file(path, "key file")
    except FileNotFoundError:
        if named:
            raise SystemExit(f"--key-file {path}: no such file") from None
        return None
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{exc}") from None


def _client_config(args: argparse.Namespace) -> ClientConfig:
    deadline_ms = max(1, args.retry_deadline_ms)
    # One CA for the brokers' client ports and the controllers' API (resolve_api_tls).
    try:
        tls = resolve_api_tls(args.ca_file)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    return ClientConfig(
        retry_deadline_ms=deadline_ms,
        discovery_timeout_ms=min(ClientConfig.discovery_timeout_ms, deadline_ms),
        tls=tls,
        controller_tls=tls,
    )


def _error_code(exc: BaseException) -> str:
    if isinstance(exc, AuthenticationError):
        return "UNAUTHENTICATED"
    if isinstance(exc, BrokerError):
        return exc.code.name
    if isinstance(exc, BrokerUnavailableError | BrokerConnectionError | NoMasterError):
        return "UNAVAILABLE"
    return type(exc).__name__


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return sorted_values[index]


@dataclass
class ProduceStats:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    first_error: dict[str, str] | None = None
    latencies_s: list[float] = field(default_factory=list)

    def fail(self, count: int, exc: BaseException) -> None:
        self.failed += count
        code = _error_code(exc)
        self.errors[code] += count
        if self.first_error is None:
            message = exc.message if isinstance(exc, BrokerError) else str(exc)
            self.first_error = {"code": code, "message": message}


def _body(key: str, size: int, filler: bytes) -> bytes:
    """The key first, so a body identifies its message even without
    properties; padded to `size` (never cut below the key)."""
    raw = key.encode()
    if len(raw) >= size:
        return raw
    return raw + b" " + filler[: size - len(raw) - 1]


async def produce(args: argparse.Namespace) -> dict[str, Any]:
    if args.count < 0 or args.batch < 1 or args.in_flight < 1 or args.size < 0:
        raise SystemExit("--count >= 0, --batch >= 1, --in-flight >= 1 and --size >= 0")
    config = _client_config(args)
    prefix = args.key_prefix if args.key_prefix is not None else secrets.token_hex(4) + "-"
    filler = (b"0123456789abcdef" * (args.size // 16 + 1))[: args.size]
    stats = ProduceStats()
    ack_log: IO[str] | None = (
        open(args.ack_log, "a", buffering=1 << 20) if args.ack_log else None  # noqa: SIM115
    )
    producer = Producer(
        args.cluster_name,
        args.broker_name,
        controller_addresses=args.controller_addresses,
        token=_token(args),
        credentials=_key_pair(args),
        static_address=args.broker_address,
        config=config,
    )
    next_index = 0
    refused: AuthenticationError | None = None

    async def worker() -> None:
        nonlocal next_index, refused
        while next_index < args.count and refused is None:
            start = next_index
            n = min(args.batch, args.count - start)
            next_index += n
            keys = [f"{prefix}{i}" for i in range(start, start + n)]
            messages = [
                ProduceMessage(args.topic, _body(k, args.size, filler), key=k, tags=args.tags)
                for k in keys
            ]
            stats.sent += n
            began = time.perf_counter()
            try:
                result = await producer.send_batch(messages, args.queue_id)
            except AuthenticationError as exc:
                # The credential is refused for every batch alike: stop at once and say why.
                stats.fail(n, exc)
                refused = refused or exc
                return
            except _FAILURES as exc:
                stats.fail(n, exc)
                continue
            stats.latencies_s.append(time.perf_counter() - began)
            stats.acked += n
            if ack_log is not None:
                now_ms = int(time.time() * 1000)
                ack_log.write(
                    "".join(
                        json.dumps(
                            {
                                "topic": args.topic,
                                "queueId": sent.queue_id,
                                "queueOffset": sent.queue_offset,
                                "physicalOffset": sent.physical_offset,
                                "key": key,
                                "bodyCrc": body_crc(message.body),  # as the store keeps it
                                "masterEpoch": result.master_epoch,
                                "brokerName": args.broker_name,
                                "ackTimeMs": now_ms,
                            },
                            separators=(",", ":"),
                        )
                        + "\n"
                        for sent, key, message in zip(result.messages, keys, messages, strict=True)
                    )
                )

    began = time.perf_counter()
    try:
        workers = min(args.in_flight, max(1, -(-args.count // args.batch)))
        await asyncio.gather(*(worker() for _ in range(workers)))
    finally:
        master = producer.master_address
        await producer.close()
        if ack_log is not None:
            ack_log.close()
    elapsed_s = time.perf_counter() - began
    latencies = sorted(stats.latencies_s)
    return {
        "topic": args.topic,
        "sent": stats.sent,
        "acked": stats.acked,
        "failed": stats.failed,
        "errors": dict(stats.errors),
        "firstError": stats.first_error,
        "elapsed_s": round(elapsed_s, 3),
        "msgs_per_s": round(stats.acked / elapsed_s, 1) if elapsed_s > 0 else None,
        "mb_per_s": round(stats.acked * args.size / elapsed_s / 1e6, 2) if elapsed_s > 0 else None,
        "batch": args.batch,
        "size": args.size,
        "inFlight": args.in_flight,
        "batchLatencyMs": {
            name: None if v is None else round(v * 1000, 3)
            for name, v in (
                ("p50", _percentile(latencies, 0.50)),
                ("p99", _percentile(latencies, 0.99)),
                ("max", latencies[-1] if latencies else None),
            )
        },
        "retries": producer.retries,
        "masterAddress": master,
        "keyPrefix": prefix,
        "refused": None if refused is None else str(refused),
    }


def cmd_produce(args: argparse.Namespace) -> int:
    summary = asyncio.run(produce(args))
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"sent {summary['sent']}, acked {summary['acked']}, failed {summary['failed']} "
            f"in {summary['elapsed_s']} s ({summary['msgs_per_s']} msg/s, "
            f"{summary['mb_per_s']} MB/s) to {summary['masterAddress']}"
        )
        if summary["refused"]:
            print(f"refused: {summary['refused']}", file=sys.stderr)
        elif summary["firstError"]:
            print(f"errors {summary['errors']}; first: {summary['firstError']}", file=sys.stderr)
    return 0 if summary["failed"] == 0 else 1


def message_json(message: PulledMessage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "topic": message.topic,
        "queueId": message.queue_id,
        "queueOffset": message.queue_offset,
        "physicalOffset": message.physical_offset,
        "key": message.key,
        "tags": message.tags,
        "bodyCrc": message.body_crc,
        "storeTimestampMs": message.store_timestamp_ms,
    }
    try:
        out["body"] = message.body.decode()
        out["bodyBase64"] = False
    except UnicodeDecodeError:
        out["body"] = base64.b64encode(message.body).decode()
        out["bodyBase64"] = True
    return out


async def consume(args: argparse.Namespace, out: IO[str]) -> tuple[int, str | None]:
    """Returns (messages printed, error text or None)."""
    config = _client_config(args)
    consumer = Consumer(
        args.cluster_name,
        args.broker_name,
        group=args.group,
        controller_addresses=args.controller_addresses,
        token=_token(args),
        credentials=_key_pair(args),
        static_address=args.broker_address,
        config=config,
    )
    count = 0
    try:
        async for message in consumer.messages(
            args.topic,
            from_beginning=args.from_beginning,
            max_messages=args.max_messages,
            idle_timeout_ms=args.idle_timeout_ms,
            pull_batch=args.pull_batch,
        ):
            count += 1
            if args.json:
                out.write(json.dumps(message_json(message), separators=(",", ":")) + "\n")
            else:
                body = message.body[:80].decode(errors="replace")
                out.write(f"{message.queue_id}\t{message.queue_offset}\t{message.key}\t{body}\n")
    except BrokenPipeError:
        raise  # the reader went away: not a consumer failure (see cmd_consume)
    except _FAILURES as exc:
        return count, f"{_error_code(exc)}: {exc}"
    finally:
        await consumer.close()
        out.flush()
    return count, None


def cmd_consume(args: argparse.Namespace) -> int:
    try:
        count, error = asyncio.run(consume(args, sys.stdout))
    except BrokenPipeError:
        # `consume … | head`: stop quietly as Unix tools do; point stdout at
        # /dev/null so the interpreter's final flush does not complain.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    print(f"consumed {count} messages", file=sys.stderr)
    if error:
        print(f"stopped: {error}", file=sys.stderr)
        return 1
    return 0
