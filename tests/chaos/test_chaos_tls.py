"""`brokergroup chaos` against a runtime enforcing TLS on every port (issue 36;
docs/security.md "TLS", docs/reliability.md "Chaos").

The run goes through the CLI as a user's would: `brokergroup chaos --set
local.tls=enforcing`, a master kill and a master partition (one window each, fixed
seed). Under enforcing every plaintext connection is refused, so the run's controller
probes, its producers and consumers and the checker's read-back of every replica can
only work over TLS (chaos/client_tls.py). It must find nothing acknowledged lost,
reordered, misplaced or corrupt, every window must recover, and summary.json must name
the mode the runtime ran (`tlsMode: enforcing`, read from its status, not the setting).

The windows are real: an observer beside the run reads the controllers (over HTTPS, as
the run does) every 0.2 s and records who is master; each window in faults.jsonl, in
the order the seed gives, must name as its victim the broker that was master just
before the window began, and a different master must follow it. The run's clock is
put on the wall clock by the history's acknowledgement times.

Encrypted, not only working: during the run the observer dials the master in
plaintext and over TLS, on its client port (the workload's protocol: plaintext refused
with the broker's reason, TLS authenticated), its remoting port (plaintext closed
unanswered, TLS answered) and the controllers' API (plain HTTP unanswered, HTTPS
answered).

The stock workload too: the stock RocketMQ Java client (ChaosWorkloadMode) against the
same runtime under enforcing, given `-Dtls.enable=true` and the runtime's CA as its only
trust (its topic made by `mqadmin updateTopic` the same way), sends through a master kill
and nothing it was acknowledged is lost; a plaintext stock client would find no route.

On the code before this, `brokergroup chaos` refused `--set local.tls=…` and exited 2
("a run cannot use local.tls"): the first assertion fails there.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from brokergroup_broker.protocol.auth import AuthenticationError
from brokergroup_broker.protocol.client import BrokerConnection, ClientConfig
from brokergroup_cli.chaos import faults
from brokergroup_cli.chaos.cli import run_chaos
from brokergroup_cli.chaos.runner import Schedule
from brokergroup_cli.chaos.runtime import (
    BROKER_CLIENT_PORT,
    CONTROLLER_API_PORT,
    Addresses,
    LocalRuntimeError,
)
from brokergroup_cli.chaos.stock_run import stock_unavailable_reason
from brokergroup_cli.chaos.targets.local import LocalTarget
from brokergroup_cli.main import main
from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import RemotingClient

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(420)]

SEED = 3601
LANE = 1
REMOTING_PORT = BROKER_CLIENT_PORT + 3


@dataclass
class Observer:
    """Reads the runtime's controllers beside the run; probes its ports once, mid-run."""

    root: Path
    stop: threading.Event = field(default_factory=threading.Event)
    masters: list[tuple[float, str | None]] = field(default_factory=list)
    """(wall clock s, master host or None) of every look."""
    probes: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # reported by the test, not lost in the thread
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def _run(self) -> None:
        target = LocalTarget(self.root, Addresses(LANE))
        while not self.stop.is_set() and not (self.root / "state.json").exists():
            time.sleep(0.2)
        while not self.stop.is_set():
            try:
                info = target.replica_info()
            except LocalRuntimeError:  # config.json / state.json not written yet
                time.sleep(0.2)
                continue
            master = None
            if info is not None and info.get("masterAlive") and info.get("masterAddress"):
                master = str(info["masterAddress"]).rpartition(":")[0]
            self.masters.append((time.time(), master))
            if master is not None and not self.probes and target.healthy():
                self.probes = asyncio.run(_probe(target, master))
            time.sleep(0.2)


async def _probe(target: LocalTarget, master: str) -> dict[str, str]:
    """What plaintext and TLS clients get from the master's ports and a controller."""
    out: dict[str, str] = {}
    pair = target.client_pair()
    address = f"{master}:{BROKER_CLIENT_PORT}"
    for name, config in (("client_plain", ClientConfig()), ("client_tls", target.client_config())):
        try:
            conn = await BrokerConnection.connect(address, config, credentials=pair)
        except AuthenticationError as exc:
            out[name] = f"refused: {exc}"
        except Exception as exc:
            out[name] = f"failed: {type(exc).__name__}: {exc}"
        else:
            await conn.close()
            out[name] = "authenticated"
    for name, tls in (("remoting_plain", None), ("remoting_tls", target.tls_context())):
        out[name] = await _heartbeat(f"{master}:{REMOTING_PORT}", pair, tls)
    controller = target.addresses.controller_hosts[0]
    for name, scheme in (("api_plain", "http"), ("api_tls", "https")):
        url = f"{scheme}://{controller}:{CONTROLLER_API_PORT}/v1/raft"
        out[name] = await asyncio.to_thread(_get, url, target)
    return out


async def _heartbeat(address: str, pair: Any, tls: Any) -> str:
    try:
        client = await RemotingClient.connect(
            address, credentials=pair, tls=tls, connect_timeout_s=5
        )
    except Exception as exc:
        return f"no answer: {type(exc).__name__}"
    try:
        body = json.dumps({"clientID": "chaos-tls", "producerDataSet": [{"groupName": "p"}]})
        answer = await client.invoke(request(RequestCode.HEART_BEAT, 0, {}, body.encode()), 5)
        return f"answered {ResponseCode(answer.code).name}"
    except Exception as exc:
        return f"no answer: {type(exc).__name__}"
    finally:
        await client.close()


def _get(url: str, target: LocalTarget) -> str:
    headers = {"Authorization": f"Bearer {target.token()}"}
    context = target.tls_context() if url.startswith("https") else None
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=5, context=context
        ) as response:
            return f"answered {response.status}"
    except Exception as exc:
        return f"no answer: {type(exc).__name__}"


def _expected_order(chosen: tuple[str, ...], windows: int) -> list[str]:
    """The fault of each window, as `runner.fault_windows` draws them for SEED (the faults
    chosen here take nothing else from the generator)."""
    rng = random.Random(f"{SEED}/")
    order: list[str] = []
    out = []
    for _ in range(windows):
        if not order:
            order = list(chosen)
            rng.shuffle(order)
        out.append(order.pop())
    return out


def _victim(note: str) -> str:
    """The victim's address from a window's note ('SIGKILL master broker-1 on 127.0.1.111',
    'partition master 127.0.1.111 from …')."""
    if note.startswith("SIGKILL master "):
        return note.split(" on ")[1].split()[0]
    assert note.startswith("partition master "), note
    return note.split()[2]


def test_a_run_under_enforcing_tls_loses_nothing_and_is_encrypted(tmp_path: Path) -> None:
    chosen: tuple[str, ...] = (faults.KILL_MASTER,)
    if faults.unavailable_reason(faults.PARTITION_MASTER) is None:
        chosen += (faults.PARTITION_MASTER,)
    out, rt = tmp_path / "out", tmp_path / "rt"
    observer = Observer(rt / "phase-0")
    watching = threading.Thread(target=observer.run, name="chaos-tls-observer", daemon=True)
    watching.start()
    try:
        code = main(
            ["chaos", "--set", "local.tls=enforcing", "--faults", ",".join(chosen),
             "--windows", str(len(chosen)), "--seed", str(SEED), "--normal-s", "1.5",
             "--fault-s", "2", "--out", str(out), "--dir", str(rt), "--lane", str(LANE),
             "--json"]
        )  # fmt: skip
    finally:
        observer.stop.set()
        watching.join(30)
    assert code == 0, "the run was refused or lost data (exit 2: refused; 1: not data safe)"
    assert not observer.errors, observer.errors
    s = json.loads((out / "summary.json").read_text())
    assert (s["tlsMode"], [p["tlsMode"] for p in s["phases"]]) == ("enforcing", ["enforcing"])
    assert s["acknowledged"] > 50, s
    assert (
        s["lost"], s["order_violations"], s["misplaced"], s["unexpected"],
        s["unstable_reads"], s["corrupt"], s["replica_mismatches"],
    ) == (0, 0, 0, 0, 0, 0, 0), s  # fmt: skip
    assert s["reads"] > 0, s  # the tailing consumer read over TLS during the faults
    assert not s["not_recovered"], s  # every window recovered; every replica read back
    assert not s["skipped"], s

    # The windows ran in the seed's order, each against the master of that moment.
    windows = [json.loads(x) for x in (out / "faults.jsonl").read_text().splitlines()]
    assert [w["fault"] for w in windows] == _expected_order(chosen, len(chosen)), windows
    acks = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    offset = statistics.median(
        a["ackTimeMs"] / 1000 - a["completeTime"] for a in acks if a["outcome"] == "ok"
    )  # wall clock = run clock + offset
    looks = observer.masters
    for n, window in enumerate(windows):
        start = window["start"] + offset
        before = [m for t, m in looks if t < start and m is not None]
        assert before and before[-1] == _victim(window["note"]), (window, before[-3:])
        next_start = windows[n + 1]["start"] + offset if n + 1 < len(windows) else float("inf")
        after = [m for t, m in looks if start <= t < next_start and m is not None]
        assert any(m != before[-1] for m in after), (window, after[:5], after[-5:])

    # Encrypted: plaintext refused on every port the run used, TLS answered there.
    p = observer.probes
    assert p, "the observer never saw a healthy group to probe"
    assert p["client_tls"] == "authenticated", p
    assert p["client_plain"].startswith("refused: ") and "enforces TLS" in p["client_plain"], p
    assert p["remoting_tls"] == "answered SUCCESS", p
    assert p["remoting_plain"].startswith("no answer"), p
    assert p["api_tls"] == "answered 200", p
    assert p["api_plain"].startswith("no answer"), p


def test_the_stock_java_client_over_tls_loses_nothing_through_a_master_kill(
    tmp_path: Path,
) -> None:
    reason = stock_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    schedule = Schedule(faults=(faults.KILL_MASTER,), windows=1, seed=SEED, normal_s=2.0)
    result = run_chaos(
        schedule, tmp_path / "out", runtime_dir=tmp_path / "rt", lane=LANE,
        settings=("local.tls=enforcing",), target="local", workload="stock",
    )  # fmt: skip
    s = result.summary
    assert (s["tlsMode"], s["workload"], s["target"]) == ("enforcing", "stock", "local"), s
    # Acknowledged at all: under enforcing only a TLS client reaches the name servers and
    # the brokers (the first test shows plaintext refused on their ports).
    assert s["acknowledged"] > 50, s
    assert (s["lost"], s["order_violations"], s["misplaced"], s["corrupt"]) == (0, 0, 0, 0), s
    assert [w.fault for w in result.run.windows] == [faults.KILL_MASTER], result.run.windows
    assert not s["not_recovered"], s
