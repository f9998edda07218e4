"""An application of the official RocketMQ 5 Python SDK (rocketmq-python-client), run as a pod
of the cluster tier by tests/cluster/test_grpc_sdk_in_cluster.py and
tests/cluster/test_rocketmq_proxy_in_cluster.py.

    python grpc_sdk_app.py MODE --endpoint HOST:PORT [options]

The group's client pair comes from the environment (ROCKETMQ_ACCESS_KEY, ROCKETMQ_SECRET_KEY:
the pod maps them from the group's Secret `<bg>-rocketmq-client`), never from the command
line. The endpoint is a Service name (`<bg>.<ns>.svc:8081`), resolved by the pod's cluster
DNS as an application's would be. With GRPC_DEFAULT_SSL_ROOTS_FILE_PATH set (a CA bundle) the
SDK opens TLS (`tls_enable=True`) and grpc verifies the endpoint's certificate for its name.

Modes (one JSON line per message on stdout, then a line with "summary"):
- send: `--count` messages to `--topic` (tag, keys, two user properties); `--fifo-groups N`
  gives them message groups order-0..N-1 in turn (FIFO).
- receive: a SimpleConsumer of `--group` receives and acks until `--count` messages came or
  `--timeout-s` passed; each line carries the delivery attempt.
- redeliver: receive one message without acking it (invisible `--invisible-s`), receive it
  again after that time (attempt 2), change its invisible duration (a new receipt handle),
  ack it, and receive for `--invisible-s` more (nothing may come).
- failover: one Producer sends continuously until the file `--stop` exists; every
  acknowledged send is appended to `--acks` as `messageId<TAB>beganMs<TAB>doneMs<TAB>body`
  (flushed per line, wall-clock milliseconds, so the test can time a failover from outside).
- verify: a SimpleConsumer of `--group` receives `--topic` until every message in `--acks`
  came (matched by message id and body) or `--timeout-s` passed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)


def out(line: dict[str, Any]) -> None:
    print(json.dumps(line, sort_keys=True), flush=True)


def config(endpoint: str) -> ClientConfiguration:
    credentials = Credentials(os.environ["ROCKETMQ_ACCESS_KEY"], os.environ["ROCKETMQ_SECRET_KEY"])
    return ClientConfiguration(endpoint, credentials, request_timeout=5)


def fields(m: Any) -> dict[str, Any]:
    return {
        "messageId": m.message_id,
        "body": m.body.decode(),
        "tag": m.tag or "",
        "keys": sorted(m.keys),
        "props": dict(sorted(m.properties.items())),
        "group": m.message_group or "",
    }


def tls_enable() -> bool:
    """TLS to the endpoint when the pod names a CA bundle for grpc (its default roots)."""
    return bool(os.environ.get("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"))


def started_producer(cfg: ClientConfiguration, topic: str) -> Producer:
    producer = Producer(cfg, (topic,), tls_enable=tls_enable())
    producer.startup()
    return producer


def send(cfg: ClientConfiguration, a: argparse.Namespace) -> None:
    producer = started_producer(cfg, a.topic)
    try:
        for i in range(a.count):
            m = Message()
            m.topic = a.topic
            m.body = f"{a.run}-body-{i}".encode()
            m.tag = f"tag{i % 3}"
            key = f"key-{a.run}-{i}"
            m.keys = key
            m.add_property("seq", str(i))
            m.add_property("run", a.run)
            if a.fifo_groups:
                m.message_group = f"order-{i % a.fifo_groups}"
            message_id = producer.send(m).message_id
            out({"messageId": message_id, "body": m.body.decode(), "tag": m.tag,
                 "keys": [key], "props": {"run": a.run, "seq": str(i)},
                 "group": m.message_group or ""})  # fmt: skip
    finally:
        producer.shutdown()
    out({"summary": True, "sent": a.count})


def consumer_of(cfg: ClientConfiguration, a: argparse.Namespace) -> SimpleConsumer:
    consumer = SimpleConsumer(
        cfg, a.group, {a.topic: FilterExpression("*")}, await_duration=2, tls_enable=tls_enable()
    )
    consumer.startup()
    return consumer


def receive(cfg: ClientConfiguration, a: argparse.Namespace) -> None:
    consumer = consumer_of(cfg, a)
    got = 0
    deadline = time.monotonic() + a.timeout_s
    try:
        while got < a.count and time.monotonic() < deadline:
            try:
                batch = consumer.receive(32, a.invisible_s) or []
            except Exception as exc:  # a failover or a slow start: the next receive goes on
                print(f"receive: {exc!r}", file=sys.stderr, flush=True)
                time.sleep(0.5)
                continue
            for m in batch:
                consumer.ack(m)
                out({**fields(m), "attempt": m.delivery_attempt})
                got += 1
    finally:
        consumer.shutdown()
    out({"summary": True, "received": got})


def receive_one(consumer: SimpleConsumer, invisible_s: int, within_s: float) -> list[Any]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            batch = consumer.receive(1, invisible_s) or []
        except Exception as exc:
            print(f"receive: {exc!r}", file=sys.stderr, flush=True)
            time.sleep(0.5)
            continue
        if batch:
            return list(batch)
    return []


def progress(what: str, began: float) -> None:
    """A line on stderr (the tests read stdout) saying how far the app got and when."""
    print(f"{time.monotonic() - began:7.1f}s {what}", file=sys.stderr, flush=True)


def redeliver(cfg: ClientConfiguration, a: argparse.Namespace) -> None:
    began = time.monotonic()
    consumer = consumer_of(cfg, a)
    progress("consumer started", began)
    try:
        first = receive_one(consumer, a.invisible_s, a.timeout_s)
        progress(f"first receive: {len(first)}", began)
        for m in first:
            out({**fields(m), "attempt": m.delivery_attempt, "phase": "first"})
        # Not acked: invisible for invisible_s, then delivered again with attempt 2.
        again = receive_one(consumer, a.invisible_s, a.invisible_s * 4 + 20)
        progress(f"revived receive: {len(again)}", began)
        for m in again:
            handle = m.receipt_handle
            consumer.change_invisible_duration(m, a.invisible_s)
            out({**fields(m), "attempt": m.delivery_attempt, "phase": "again",
                 "newHandle": m.receipt_handle != handle})  # fmt: skip
            consumer.ack(m)
        # Acked: never again, even after the changed invisible time has passed.
        for m in receive_one(consumer, a.invisible_s, a.invisible_s + 5):
            out({**fields(m), "attempt": m.delivery_attempt, "phase": "afterAck"})
        progress("after-ack receive done", began)
    finally:
        consumer.shutdown()
    out({"summary": True})


def failover(cfg: ClientConfiguration, a: argparse.Namespace) -> None:
    producer = started_producer(cfg, a.topic)
    stop, sent, acked, errors = Path(a.stop), 0, 0, 0
    try:
        with open(a.acks, "a") as acks:
            while not stop.exists():
                m = Message()
                m.topic = a.topic
                m.body = f"{a.run}-{sent}".encode()
                sent += 1
                began_ms = int(time.time() * 1000)
                try:
                    message_id = producer.send(m).message_id
                except Exception as exc:  # refused or cut in the failover: not acknowledged
                    errors += 1
                    print(f"send: {exc!r}"[:300], file=sys.stderr, flush=True)
                    time.sleep(0.05)
                    continue
                acked += 1
                acks.write(f"{message_id}\t{began_ms}\t{int(time.time() * 1000)}\t"
                           f"{m.body.decode()}\n")  # fmt: skip
                acks.flush()
                time.sleep(0.01)
    finally:
        producer.shutdown()
    out({"summary": True, "sent": sent, "acked": acked, "errors": errors})


def verify(cfg: ClientConfiguration, a: argparse.Namespace) -> None:
    acked: dict[str, str] = {}
    for row in Path(a.acks).read_text().splitlines():
        parts = row.split("\t")
        if len(parts) == 4:
            acked[parts[0]] = parts[3]
    consumer = consumer_of(cfg, a)
    got: dict[str, str] = {}
    deadline = time.monotonic() + a.timeout_s
    try:
        while time.monotonic() < deadline and not set(acked) <= set(got):
            try:
                batch = consumer.receive(32, a.invisible_s) or []
            except Exception as exc:
                print(f"receive: {exc!r}", file=sys.stderr, flush=True)
                time.sleep(0.5)
                continue
            for m in batch:
                got[m.message_id] = m.body.decode()
                consumer.ack(m)
    finally:
        consumer.shutdown()
    lost = [k for k in acked if k not in got]
    bad = [k for k in acked if k in got and got[k] != acked[k]]
    out({"summary": True, "acked": len(acked), "received": len(got), "lost": len(lost),
         "badBody": len(bad), "lostSample": lost[:10]})  # fmt: skip


MODES = {
    "send": send,
    "receive": receive,
    "redeliver": redeliver,
    "failover": failover,
    "verify": verify,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="SdkGroup")
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--run", default="sdk")
    parser.add_argument("--fifo-groups", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=120)
    parser.add_argument("--invisible-s", type=int, default=15)
    parser.add_argument("--acks", default="")
    parser.add_argument("--stop", default="")
    a = parser.parse_args()
    MODES[a.mode](config(a.endpoint), a)


if __name__ == "__main__":
    main()
