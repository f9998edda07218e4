"""Real broker processes (plus their controllers) on loopback, for integration tests.

    with BrokerGroupHarness(tmp_path, block=10, replicas=3) as group:
        group.start_all()
        master = group.wait_for_master()
        group.kill(master)                 # SIGKILL by PID
        group.start(master, new_address=True)

Each test takes one loopback block 127.0.<block>.0/24 (block ≥ 10, so the
broker suite never collides with the controller suite's 2..9 or the local
runtime): its 3 controllers on .1-.3 (the controller harness, re-homed into
the block), brokers from .10 upward; a broker restarted with
`new_address=True` takes the next unused address, like a rescheduled pod.
Brokers run `python -m brokergroup_broker.core.cli_broker broker …` with
small segments and short timeouts (`FAST_SETTINGS`, overridable per test).
Only processes this harness started are signalled, by PID.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from brokergroup_controller.credentials import (
    RocketMQKeyPair,
    Role,
    derive_credential,
    derive_rocketmq_pair,
)
from brokergroup_remoting.net import Credentials
from tests.integration.controller_harness import ControllerCluster, terminate_all, wait_or_kill

CLIENT_PORT = 10911
CLUSTER = "itest"
BROKER_NAME = "broker-a"
T = TypeVar("T")

#: Short timeouts and tiny segments: failovers in about a second, several segments per test.
FAST_SETTINGS: dict[str, str] = {
    "heartbeatIntervalMs": "200",
    "heartbeatTimeoutMs": "1000",
    "masterLeaseMs": "700",
    "haMaxTimeSlaveNotCatchUpMs": "1500",
    "slaveTimeoutMs": "3000",
    "syncStateSetCheckIntervalMs": "200",
    "mappedFileSizeCommitLog": "65536",
    "controllerRequestTimeoutMs": "800",
    "watchTimeoutMs": "3000",
    "flushIntervalMs": "200",
}


class Controllers(ControllerCluster):
    """The controller harness, moved into the test's own block."""

    def __init__(self, base_dir: Path, *, block: int, **kwargs: Any) -> None:
        super().__init__(base_dir, block=2, **kwargs)
        self.block = block
        for node_id, node in self.nodes.items():
            node.host = f"127.0.{block}.{node_id}"


@dataclass
class BrokerProcess:
    slot: int
    host: str
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    paused: bool = False
    signalled: bool = False  # we stopped it: any exit status is expected

    @property
    def address(self) -> str:
        return f"{self.host}:{CLIENT_PORT}"

    @property
    def http(self) -> str:
        return f"http://{self.host}:{CLIENT_PORT + 2}"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class BrokerGroupHarness:
    def __init__(
        self,
        base_dir: Path,
        *,
        block: int,
        replicas: int = 3,
        settings: Mapping[str, str] | None = None,
        controller_config: Mapping[str, Any] | None = None,
        client_auth: bool = False,
    ) -> None:
        """`client_auth`: brokers get the group's RocketMQ pairs (`--remoting-key-file`,
        `--remoting-client-key-file`) and their client port authenticates; otherwise it is
        open (`--insecure-no-client-auth`) and tests connect without a pair."""
        if not 10 <= block <= 250:
            raise ValueError("broker tests use loopback blocks 127.0.10.0/24 and above")
        self.base_dir = Path(base_dir)
        self.block = block
        self.settings = {**FAST_SETTINGS, **(settings or {})}
        self.controllers = Controllers(
            self.base_dir / "controllers", block=block, config=controller_config
        )
        self.ha_secret_file = self.base_dir / "ha-secret"
        self.ha_secret_file.parent.mkdir(parents=True, exist_ok=True)
        self.ha_secret_file.write_text(f"ha-secret-of-block-{block}-for-tests\n")
        # Brokers hold their group's credential only, never the admin token (§11).
        self.broker_credential_file = self.base_dir / "broker-credential"
        self.broker_credential_file.write_text(
            derive_credential(
                self.controllers.broker_credential_root, Role.BROKER, CLUSTER, BROKER_NAME
            )
            + "\n"
        )
        self.client_auth = client_auth
        root = self.controllers.broker_credential_root
        self.broker_pair = _pair(derive_rocketmq_pair(root, Role.BROKER, CLUSTER, BROKER_NAME))
        self.client_pair = _pair(derive_rocketmq_pair(root, Role.CLIENT, CLUSTER, BROKER_NAME))
        self.broker_key_file = self.base_dir / "broker-keys.json"
        self.client_key_file = self.base_dir / "client-keys.json"
        for path, key_pair in ((self.broker_key_file, self.broker_pair),
                               (self.client_key_file, self.client_pair)):  # fmt: skip
            path.write_text(
                json.dumps({"accessKey": key_pair.access_key, "secretKey": key_pair.secret_key})
            )
            path.chmod(0o600)
        self._next_host = 10
        self.brokers: dict[int, BrokerProcess] = {}
        for slot in range(replicas):
            self.brokers[slot] = BrokerProcess(
                slot=slot,
                host=self._take_host(),
                data_dir=self.base_dir / f"broker{slot}",
                log_path=self.base_dir / f"broker{slot}.log",
            )

    def _take_host(self) -> str:
        host = f"127.0.{self.block}.{self._next_host}"
        self._next_host += 1
        return host

    # -------------------------------------------------------------- processes

    def command(self, slot: int, extra_settings: Mapping[str, str] | None = None) -> list[str]:
        broker = self.brokers[slot]
        cmd = [
            sys.executable,
            "-m",
            "brokergroup_broker.core.cli_broker",
            "broker",
            "--cluster-name",
            CLUSTER,
            "--broker-name",
            BROKER_NAME,
            "--data-dir",
            str(broker.data_dir),
            "--controller-addresses",
            ",".join(self.controllers.api_addresses),
            "--controller-token-file",
            str(self.broker_credential_file),
            "--ha-secret-file",
            str(self.ha_secret_file),
            "--bind-address",
            broker.host,
            "--advertise-address",
            broker.host,
            "--client-port",
            str(CLIENT_PORT),
            *(
                ["--remoting-key-file", str(self.broker_key_file),
                 "--remoting-client-key-file", str(self.client_key_file)]
                if self.client_auth
                else ["--insecure-no-client-auth"]
            ),
        ]  # fmt: skip
        for key, value in {**self.settings, **(extra_settings or {})}.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def start_controllers(self) -> None:
        self.controllers.start_all()
        self.controllers.wait_for_leader()

    def start(
        self,
        slot: int,
        *,
        new_address: bool = False,
        extra_settings: Mapping[str, str] | None = None,
    ) -> BrokerProcess:
        broker = self.brokers[slot]
        if broker.running():
            return broker
        if new_address:
            broker.host = self._take_host()
        with open(broker.log_path, "ab") as log:
            log.write(f"--- start #{broker.starts + 1} on {broker.host}\n".encode())
            log.flush()
            broker.process = subprocess.Popen(
                self.command(slot, extra_settings),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        broker.starts += 1
        broker.paused = False
        broker.signalled = False
        return broker

    def start_all(self) -> None:
        self.start_controllers()
        for slot in self.brokers:
            self.start(slot)

    def kill(self, slot: int, sig: int = signal.SIGKILL) -> None:
        broker = self.brokers[slot]
        if broker.process is None or broker.process.poll() is not None:
            return
        if broker.paused and sig != signal.SIGCONT:
            os.kill(broker.process.pid, signal.SIGCONT)
            broker.paused = False
        os.kill(broker.process.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            broker.signalled = True
            wait_or_kill(broker.process, 15)

    def pause(self, slot: int) -> None:
        broker = self.brokers[slot]
        assert broker.process is not None and broker.running()
        os.kill(broker.process.pid, signal.SIGSTOP)
        broker.paused = True

    def resume(self, slot: int) -> None:
        broker = self.brokers[slot]
        assert broker.process is not None
        os.kill(broker.process.pid, signal.SIGCONT)
        broker.paused = False

    def stop_all(self) -> None:
        terminate_all((b.process for b in self.brokers.values() if b.process is not None), 10)
        for broker in self.brokers.values():
            broker.paused = False
        self.controllers.stop_all()

    def __enter__(self) -> BrokerGroupHarness:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()

    def logs(self, tail_lines: int = 60) -> str:
        parts = []
        for broker in self.brokers.values():
            text = broker.log_path.read_text(errors="replace") if broker.log_path.exists() else ""
            lines = text.splitlines()[-tail_lines:]
            parts.append(
                f"==== broker slot {broker.slot} ({broker.host}) ====\n" + "\n".join(lines)
            )
        return "\n".join(parts) + "\n" + self.controllers.logs(tail_lines=20)

    # -------------------------------------------------------------- observation

    def status(self, slot: int, timeout_s: float = 1.0) -> dict[str, Any] | None:
        broker = self.brokers[slot]
        if not broker.running() or broker.paused:
            return None
        return _get_json(f"{broker.http}/v1/status", timeout_s, self.broker_credential)

    @property
    def broker_credential(self) -> str:
        """The group's broker credential: the bearer token of the brokers' HTTP port."""
        return self.broker_credential_file.read_text().strip()

    def ready(self, slot: int) -> bool:
        broker = self.brokers[slot]
        try:
            with urllib.request.urlopen(f"{broker.http}/readyz", timeout=1.0) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def replica_info(self) -> dict[str, Any] | None:
        for node_id, node in self.controllers.nodes.items():
            if not node.running():
                continue
            try:
                result = self.controllers.request(
                    node_id,
                    "GET",
                    f"/v1/replica-info?clusterName={CLUSTER}&brokerName={BROKER_NAME}",
                    timeout_s=2.0,
                )
            except OSError:
                continue
            if result.status == 200:
                return result.body
        return None

    def wait_for(self, probe: Callable[[], T | None], what: str, timeout_s: float = 30.0) -> T:
        """Poll `probe` until it returns something truthy (generous deadline, no timing asserts)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for broker in self.brokers.values():
                if (
                    broker.process is not None
                    and not broker.signalled
                    and broker.process.poll() is not None
                ):
                    raise RuntimeError(
                        f"broker slot {broker.slot} exited with {broker.process.returncode}\n"
                        + self.logs()
                    )
            value = probe()
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}\n" + self.logs())

    def slot_of_broker_id(self, broker_id: int) -> int | None:
        for slot in self.brokers:
            status = self.status(slot)
            if status is not None and status.get("brokerId") == broker_id:
                return slot
        return None

    def master_slot(self) -> int | None:
        """The slot every live broker and the controller agree is master, lease held."""
        info = self.replica_info()
        if info is None or info.get("masterBrokerId") is None or not info.get("masterAlive", True):
            return None
        for slot in self.brokers:
            status = self.status(slot)
            if (
                status is not None
                and status.get("role") == "MASTER"
                and status.get("brokerId") == info["masterBrokerId"]
                and status.get("masterEpoch") == info["masterEpoch"]
                and (status.get("leaseRemainingMs") or 0) > 0
            ):
                return slot
        return None

    def wait_for_master(self, timeout_s: float = 30.0, exclude: set[int] | None = None) -> int:
        excluded = exclude or set()

        def probe() -> int | None:
            slot = self.master_slot()
            return None if slot is None or slot in excluded else slot + 1  # 0 is falsy

        return self.wait_for(probe, "a master", timeout_s) - 1

    def sync_state_set_size(self) -> int:
        info = self.replica_info()
        return 0 if info is None else len(info.get("syncStateSet", []))

    def wait_for_sync_state_set(self, size: int, timeout_s: float = 30.0) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            info = self.replica_info()
            if info is not None and len(info.get("syncStateSet", [])) == size:
                return info
            return None

        return self.wait_for(probe, f"a SyncStateSet of {size}", timeout_s)


def _pair(pair: RocketMQKeyPair) -> Credentials:
    return Credentials(pair.access_key, pair.secret_key)


def _get_json(url: str, timeout_s: float, token: str | None = None) -> dict[str, Any] | None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=timeout_s
        ) as response:
            value = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


# ------------------------------------------------------------------ client side


@dataclass
class Ledger:
    """What a careful producer knows: acknowledged keys (with where they
    landed) and keys whose outcome is unknown (error after sending)."""

    acked: dict[str, tuple[int, int]]  # key -> (queue_id, queue_offset)
    uncertain: set[str]  # sent, outcome unknown: readable at most once
    errors: dict[str, str]  # key -> ResponseCode name (or NO_MASTER: never sent)
    bodies: dict[str, bytes] = field(default_factory=dict)  # key -> body sent


class CarefulProducer:
    """Sends one message per request, never retrying a message: an error
    marks its key uncertain and the next message gets a new key. So an
    acknowledged key must be readable exactly once, whatever happened."""

    def __init__(self, group: BrokerGroupHarness, topic: str, prefix: str = "m") -> None:
        self.group = group
        self.topic = topic
        self.prefix = prefix
        self.ledger = Ledger({}, set(), {})
        self._n = 0
        self._conn: Any = None
        self.masters_seen: set[str] = set()
        #: Send only here instead of asking the controller for the master.
        self.pinned_address: str | None = None

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _connection(self) -> Any:
        from brokergroup_broker.protocol.client import BrokerConnection, ClientConfig

        if self._conn is not None and not self._conn.closed:
            return self._conn
        address = self.pinned_address
        if address is None:
            info = await _to_thread(self.group.replica_info)
            live = info is not None and info.get("masterAlive", True)
            address = info.get("masterAddress") if info is not None and live else None
        if not address:
            return None
        try:
            self._conn = await BrokerConnection.connect(
                address,
                ClientConfig(request_timeout_ms=8000, connect_timeout_ms=1000),
                credentials=self.group.client_pair if self.group.client_auth else None,
            )
        except OSError:
            return None
        self.masters_seen.add(address)
        return self._conn

    async def send_one(self, body: bytes | None = None) -> str:
        """Send one new message; returns its key. Never raises for broker errors."""
        import asyncio

        from brokergroup_broker.protocol.messages import BrokerError, ProduceMessage, ResponseCode

        key = f"{self.prefix}{self._n}"
        self._n += 1
        conn = await self._connection()
        if conn is None:
            self.ledger.errors[key] = "NO_MASTER"
            await asyncio.sleep(0.1)
            return key
        message = ProduceMessage(self.topic, body or key.encode(), key=key)
        self.ledger.bodies[key] = message.body
        try:
            result = await conn.send(self.topic, [message])
        except BrokerError as exc:
            self.ledger.errors[key] = exc.code.name
            # Only admission refusals are certainly not stored; NOT_MASTER or
            # FENCED may come after the append (role change, lost lease).
            if exc.code is not ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH:
                self.ledger.uncertain.add(key)
                await self.close()
            await asyncio.sleep(0.05)
            return key
        except (OSError, TimeoutError) as exc:
            self.ledger.errors[key] = type(exc).__name__
            self.ledger.uncertain.add(key)
            await self.close()
            await asyncio.sleep(0.05)
            return key
        sent = result.messages[0]
        self.ledger.acked[key] = (sent.queue_id, sent.queue_offset)
        return key


async def read_topic(
    address: str, topic: str, queue_count: int = 4, credentials: Credentials | None = None
) -> dict[int, list[Any]]:
    """Every readable message of every queue of `topic` on one broker."""
    from brokergroup_broker.protocol.client import BrokerConnection

    conn = await BrokerConnection.connect(address, credentials=credentials)
    try:
        out: dict[int, list[Any]] = {}
        for queue_id in range(queue_count):
            messages: list[Any] = []
            offset = 0
            while True:
                result = await conn.pull(topic, queue_id, offset, 64)
                if not result.messages:
                    break
                messages.extend(result.messages)
                offset = result.next_queue_offset
            out[queue_id] = messages
        return out
    finally:
        await conn.close()


async def _to_thread(fn: Callable[[], T]) -> T:
    import asyncio

    return await asyncio.to_thread(fn)
