"""Record golden remoting frames from a stock RocketMQ client (docs/rocketmq-compatibility.md).

    .venv/bin/python tools/rocketmq/record_golden.py [--out tests/fixtures/rocketmq]

Runs tools/rocketmq/fetch.sh (jars + the compiled GoldenClient, cached outside the repo),
listens on 127.0.0.1 as name server and broker at once, and runs GoldenClient once per
serialize type (JSON, ROCKETMQ). Every frame the client sends is kept byte for byte as it
arrived; the recorder answers just enough (a route to itself, SEND_OK, PULL_NOT_FOUND) for
the client to go on, in the request's own serialization. One frame per kind (below) goes to
OUT/<serializeType>-<kind>.bin, and OUT/manifest.json says what each is, which client wrote
it, and how the stock Java RemotingCommand.decode reads it (GoldenClient decode): the oracle
the unit tests hold the Python codec to.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from brokergroup_remoting import (
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    decode,
    encode,
    response_to,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ACCESS_KEY = "goldenAccessKey"
SECRET_KEY = "goldenSecretKey-1234"
TOPIC = "GoldenTopic"
BROKER_NAME = "golden-broker"


def _unsigned(cmd: RemotingCommand) -> bool:
    return "AccessKey" not in cmd.fields()


def _topic(cmd: RemotingCommand) -> str | None:
    fields = cmd.fields()
    return fields.get("topic", fields.get("b"))  # SendMessageRequestHeaderV2 names it "b"


#: kind -> (what it is, how to recognise it among everything the client sent)
KINDS: dict[str, tuple[str, Callable[[RemotingCommand], bool]]] = {
    "route": (
        "GET_ROUTEINFO_BY_TOPIC for GoldenTopic from DefaultMQProducer.send",
        lambda c: (
            c.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and _topic(c) == TOPIC and _unsigned(c)
        ),
    ),
    "send": (
        "SEND_MESSAGE_V2 (sync) with tags TagA, keys 'KEY-1 KEY-2', user properties color/note",
        lambda c: c.code == RequestCode.SEND_MESSAGE_V2 and not c.is_oneway and _unsigned(c),
    ),
    "batch": (
        "SEND_BATCH_MESSAGE of 3 messages (TagB, keys BATCH-0..2, property index)",
        lambda c: c.code == RequestCode.SEND_BATCH_MESSAGE,
    ),
    "oneway": (
        "SEND_MESSAGE_V2 from sendOneway (flag bit 1 set)",
        lambda c: c.code == RequestCode.SEND_MESSAGE_V2 and c.is_oneway,
    ),
    "heartbeat": (
        "HEART_BEAT from sendHeartbeatToAllBrokerWithLock (producer data in the JSON body)",
        lambda c: c.code == RequestCode.HEART_BEAT and _unsigned(c),
    ),
    "pull": (
        "PULL_MESSAGE via MQClientAPIImpl.pullMessage (queue 0, offset 5, 'TagA || TagB')",
        lambda c: c.code == RequestCode.PULL_MESSAGE,
    ),
    "signed-route": (
        "GET_ROUTEINFO_BY_TOPIC signed by AclClientRPCHook (AccessKey goldenAccessKey)",
        lambda c: (
            c.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and _topic(c) == TOPIC and not _unsigned(c)
        ),
    ),
    "signed-send": (
        "SEND_MESSAGE_V2 signed by AclClientRPCHook (TagS, key SIGNED-1)",
        lambda c: c.code == RequestCode.SEND_MESSAGE_V2 and not _unsigned(c),
    ),
}


def _answer(req: RemotingCommand, address: str) -> RemotingCommand:
    """Just enough of a name server and broker for the stock client to carry on."""
    if req.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
        route = {
            "brokerDatas": [
                {"brokerAddrs": {"0": address}, "brokerName": BROKER_NAME, "cluster": "golden"}
            ],
            "filterServerTable": {},
            "queueDatas": [
                {
                    "brokerName": BROKER_NAME,
                    "perm": 6,
                    "readQueueNums": 1,
                    "topicSysFlag": 0,
                    "writeQueueNums": 1,
                }
            ],
        }
        return response_to(req, body=json.dumps(route).encode())
    if req.code in (
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
    ):
        return response_to(
            req,
            fields={
                "msgId": "7F00000100002A9F0000000000000000",
                "queueId": "0",
                "queueOffset": "0",
            },
        )
    if req.code == RequestCode.PULL_MESSAGE:
        fields = {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": "5",
            "minOffset": "0",
            "maxOffset": "5",
        }
        return response_to(req, ResponseCode.PULL_NOT_FOUND, "no new message", fields)
    return response_to(req)


async def _record_one(home: Path, serialize_type: SerializeType, log: list[str]) -> list[bytes]:
    frames: list[bytes] = []
    address = ""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                prefix = await reader.readexactly(4)
                (length,) = struct.unpack(">i", prefix)
                frame = prefix + await reader.readexactly(length)
                frames.append(frame)
                req = decode(frame)
                if not req.is_oneway:
                    writer.write(encode(_answer(req, address)))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    address = f"127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="golden-home-") as user_home:
        proc = await asyncio.create_subprocess_exec(
            "java",
            f"-Duser.home={user_home}",
            f"-Drocketmq.serialize.type={serialize_type.name}",
            "-cp",
            f"{home / 'lib'}/*{os.pathsep}{home / 'classes'}",
            "GoldenClient",
            "send",
            address,
            ACCESS_KEY,
            SECRET_KEY,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    server.close()
    await server.wait_closed()
    log.append(out.decode(errors="replace"))
    if proc.returncode != 0:
        raise RuntimeError(
            f"GoldenClient exited {proc.returncode}:\n{out.decode(errors='replace')}"
        )
    return frames


def fetch() -> Path:
    """The cache directory tools/rocketmq/fetch.sh fills (jars + compiled GoldenClient)."""
    done = subprocess.run([str(HERE / "fetch.sh")], check=True, capture_output=True, text=True)
    return Path(done.stdout.strip().splitlines()[-1])


def java_decode(home: Path, files: list[Path]) -> list[dict[str, object]]:
    """The stock RemotingCommand.decode of each file (GoldenClient decode)."""
    done = subprocess.run(
        [
            "java",
            "-cp",
            f"{home / 'lib'}/*{os.pathsep}{home / 'classes'}",
            "GoldenClient",
            "decode",
            *map(str, files),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def record(out: Path) -> dict[str, object]:
    """Record every kind in both serializations into `out`; returns the manifest."""
    home = fetch()
    version = home.name
    out.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    written: list[tuple[Path, str, str]] = []
    for serialize_type in SerializeType:
        frames = asyncio.run(_record_one(home, serialize_type, log))
        commands = [(frame, decode(frame)) for frame in frames]
        for kind, (what, matches) in KINDS.items():
            found = next((frame for frame, cmd in commands if matches(cmd)), None)
            if found is None:
                raise RuntimeError(
                    f"no {kind} frame among {[c.code for _, c in commands]} ({serialize_type.name})\n{log[-1]}"
                )
            path = out / f"{serialize_type.name.lower()}-{kind}.bin"
            path.write_bytes(found)
            written.append((path, kind, what))
    oracle = java_decode(home, [path for path, _, _ in written])
    manifest: dict[str, object] = {
        "writtenBy": f"org.apache.rocketmq:rocketmq-client:{version} (tools/rocketmq/GoldenClient.java, JDK {_java_version()})",
        "reRecord": ".venv/bin/python tools/rocketmq/record_golden.py",
        "accessKey": ACCESS_KEY,
        "secretKey": SECRET_KEY,
        "frames": [
            {"file": path.name, "kind": kind, "what": what, "java": java}
            for (path, kind, what), java in zip(written, oracle, strict=True)
        ],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    return manifest


def _java_version() -> str:
    done = subprocess.run(["java", "-version"], capture_output=True, text=True)
    first = (done.stderr or done.stdout).splitlines()[0]
    return first.split('"')[1] if '"' in first else first


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "rocketmq")
    args = parser.parse_args()
    manifest = record(args.out)
    frames = manifest["frames"]
    assert isinstance(frames, list)
    for frame in frames:
        print(frame["file"], frame["what"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
