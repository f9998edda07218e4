"""Three real controller processes on loopback (DESIGN.md §2, §2.4, §8, §10).

Each test runs its own cluster (`controller_harness.ControllerCluster`) on
its own address block so tests never collide:

- 127.0.4.x  leader SIGKILL: a new leader serves, no committed identity lost,
             the killed node rejoins and catches up (§2, §9 "leader loss").
- 127.0.5.x  SIGKILL of all three, restart: identities and epochs intact (§2).
- 127.0.6.x  API on a follower: forwarding, 401 with nothing changed, 400 with
             a clear message, and the `admin` commands (§2.4).
- 127.0.7.x  durability: rounds of writes with all nodes SIGKILLed at random
             moments while compaction runs every few entries; every
             acknowledged event must survive and committed logs must match
             (§10). The seed is printed; rerun with CONTROLLER_DURABILITY_SEED.
- 127.0.8.1  the same property made exhaustive for one node: its data dir is
             imaged at every step of every compaction and each image must
             recover everything applied when it was taken (§10).

No timing is asserted: waits poll with generous deadlines; the failover time
is printed (bench/controller.py measures it properly).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from brokergroup_controller.client import ControllerClient, ControllerUnavailable
from brokergroup_controller.errors import ControllerError
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.raft_settings import RaftSettings
from brokergroup_controller.raft_storage import DurableJournal
from brokergroup_controller.state import ApplyBrokerId

from .controller_harness import ControllerCluster

pytestmark = pytest.mark.integration

C = "DefaultCluster"


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Any]:
    clusters: list[ControllerCluster] = []

    def make(block: int, **kw: Any) -> ControllerCluster:
        cluster = ControllerCluster(tmp_path / f"block{block}", block=block, **kw)
        clusters.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in clusters:
            cluster.stop_all()


async def wait_leader(cluster: ControllerCluster, exclude: set[int] | None = None) -> int:
    return await asyncio.to_thread(cluster.wait_for_leader, 60.0, exclude or set())


async def identities(client: ControllerClient, names: list[str]) -> dict[tuple[str, int], str]:
    found: dict[tuple[str, int], str] = {}
    for name in names:
        info = await client.replica_info(C, name)
        for broker in info.brokers:
            found[(name, broker.broker_id)] = broker.address
    return found


# ---------------------------------------------------------------- leader loss


async def test_leader_sigkill_new_leader_serves_and_nothing_committed_is_lost(
    cluster_factory: Any,
) -> None:
    """§2 / §9: leader SIGKILL → a new leader serves; every acknowledged identity survives.

    The brokers here never heartbeat: the new leader's grace (one heartbeat
    timeout) is made long, so it does not fence their masters while a loaded
    machine runs the checks (that fencing is right, and tested elsewhere)."""
    cluster: ControllerCluster = cluster_factory(4, config={"heartbeatTimeoutMs": 600_000})
    cluster.start_all()
    old_leader = await wait_leader(cluster)
    acked: dict[tuple[str, int], str] = {}
    async with ControllerClient(cluster.api_addresses, cluster.token) as client:
        for g in range(5):
            name = f"group-{g}"
            for broker_id in (1, 2, 3):
                address = f"10.4.{g}.{broker_id}:10911"
                await client.apply_broker_id(C, name, broker_id, f"rc-{g}-{broker_id}", address)
                acked[(name, broker_id)] = address
            info = await client.elect_master(C, name, requester_broker_id=1)
            assert info.master_broker_id == 1

        cluster.kill(old_leader)
        killed_at = time.monotonic()
        # Keep writing through the failover: the client rotates until a leader commits.
        address = "10.4.9.1:10911"
        for _ in range(100):
            try:
                await client.apply_broker_id(C, "after-failover", 1, "rc-after", address)
                break
            except ControllerUnavailable:
                continue
        acked[("after-failover", 1)] = address
        print(f"first committed write {time.monotonic() - killed_at:.3f}s after leader SIGKILL")

        new_leader = await wait_leader(cluster, exclude={old_leader})
        assert new_leader != old_leader
        names = sorted({name for name, _ in acked})
        assert await identities(client, names) == acked
        for g in range(5):
            info = await client.replica_info(C, f"group-{g}")
            assert info.master_epoch == 1 and info.sync_state_set == frozenset({1})

        # The killed node rejoins as a follower and catches up from its own journal.
        cluster.start(old_leader)
        await asyncio.to_thread(cluster.wait_ready, old_leader, 60.0)
        # The leader of now: a stall of the loaded machine during the restart may have
        # moved it since `new_leader` was found (CI run 50).
        leader_now = await wait_leader(cluster)
        status = await client.raft_status(cluster.api_address(old_leader))
        assert status["leader"] == cluster.nodes[leader_now].raft_address
        assert status["lastApplied"] >= status["leaderCommitIndex"] - 5


# ---------------------------------------------------------------- full restart


async def test_all_nodes_sigkilled_and_restarted_keep_identities_and_epochs(
    cluster_factory: Any,
) -> None:
    """§2: a restart of all nodes keeps every identity and epoch (journal + snapshot)."""
    cluster: ControllerCluster = cluster_factory(5, config={"logCompactionMinEntries": 10})
    cluster.start_all()
    await wait_leader(cluster)
    async with ControllerClient(cluster.api_addresses, cluster.token) as client:
        for g in range(4):
            name = f"g{g}"
            for broker_id in (1, 2, 3):
                await client.apply_broker_id(
                    C, name, broker_id, f"rc{broker_id}", f"10.5.{g}.{broker_id}:10911"
                )
            await client.elect_master(C, name, requester_broker_id=1)
            await client.alter_sync_state_set(C, name, 1, 1, [1, 2, 3], 1)
            await client.elect_master(C, name, designated_broker_id=2)
        before = {g.broker_name: g for g in await client.groups()}
    assert {g.master_epoch for g in before.values()} == {2}

    cluster.kill_all()
    cluster.start_all()
    await wait_leader(cluster)
    async with ControllerClient(cluster.api_addresses, cluster.token) as client:
        after = {g.broker_name: g for g in await client.groups()}
        for name, old in before.items():
            new = after[name]
            assert (new.master_epoch, new.sync_state_set_epoch) == (2, 3)
            assert new.sync_state_set == old.sync_state_set == frozenset({2})
            assert [(b.broker_id, b.address) for b in new.brokers] == [
                (b.broker_id, b.address) for b in old.brokers
            ]
        # The persisted nextBrokerId and registerCodes still fence intruders.
        with pytest.raises(ControllerError) as err:
            await client.apply_broker_id(C, "g0", 2, "someone-else", "10.5.9.9:10911")
        assert err.value.details["nextBrokerId"] == 4


# ---------------------------------------------------------------- API via a follower


async def test_follower_forwards_auth_and_validation(cluster_factory: Any) -> None:
    """§2.4: followers forward; 401 changes nothing; 400 explains; admin CLI works."""
    cluster: ControllerCluster = cluster_factory(6)
    cluster.start_all()
    body = {
        "clusterName": C,
        "brokerName": "fwd",
        "brokerId": 1,
        "registerCode": "rc1",
        "address": "10.6.0.1:10911",
        "requestId": "fwd-apply-1",  # as a broker sends it: its retries get the first answer
    }

    def forwarded_apply() -> tuple[int, int, Any]:
        """The apply-id sent to a follower, retried on NOT_LEADER as a broker's client
        does, until the leader stayed put around it: a stall of the loaded machine
        can start an election between two steps (CI run 50), and then the answer
        says nothing about forwarding to the leader found before."""
        for _ in range(5):
            leader = cluster.wait_for_leader(60.0)
            follower = next(i for i in cluster.nodes if i != leader)
            result = cluster.request_retrying(follower, "POST", "/v1/brokers/apply-id", body)
            if cluster.wait_for_leader(60.0) == leader:
                return leader, follower, result
        raise AssertionError("the Raft leader moved around every forwarded request")

    leader, follower, result = await asyncio.to_thread(forwarded_apply)
    assert result.status == 200 and result.body["brokerId"] == 1, result
    assert result.headers.get("X-Brokergroup-Leader") == cluster.api_address(leader)
    on_leader = await asyncio.to_thread(
        cluster.request_retrying,
        leader,
        "GET",
        "/v1/replica-info?clusterName=DefaultCluster&brokerName=fwd",
    )
    assert [b["address"] for b in on_leader.body["brokers"]] == ["10.6.0.1:10911"]

    def snapshot() -> tuple[Any, int, int]:
        """The groups, commit index and term of the leader of now (reads retried on
        NOT_LEADER). A new leader commits one no-op entry per term it wins, so the
        commit index may only grow by the terms an election started in between."""
        now = cluster.wait_for_leader(60.0)
        groups = cluster.request_retrying(now, "GET", "/v1/groups").body["groups"]
        raft = cluster.request(now, "GET", "/v1/raft").body
        return groups, raft["commitIndex"], raft["term"]

    before = await asyncio.to_thread(snapshot)
    for node_id in (follower, leader):
        for token in (None, "not-the-token"):
            bad = {**body, "brokerId": 2, "address": "10.6.6.6:1"}
            result = await asyncio.to_thread(
                cluster.request, node_id, "POST", "/v1/brokers/apply-id", bad, token=token
            )
            assert result.status == 401 and result.body["code"] == "UNAUTHORIZED"
        result = await asyncio.to_thread(
            cluster.request, node_id, "POST", "/v1/brokers/apply-id", None, raw=b"{not json"
        )
        assert result.status == 400 and "not valid JSON" in result.body["message"]
        result = await asyncio.to_thread(
            cluster.request, node_id, "POST", "/v1/elect-master", {"clusterName": C}
        )
        assert result.status == 400 and "'brokerName'" in result.body["message"]
    after = await asyncio.to_thread(snapshot)
    if after[2] == before[2]:
        assert after == before
    else:  # a new leader's liveness view (alive, heartbeat ages) starts afresh
        assert replicated(after[0]) == replicated(before[0])
        assert 0 <= after[1] - before[1] <= after[2] - before[2], (before[1:], after[1:])

    # The admin commands against every node's API.
    env = {**os.environ, "BROKERGROUP_TOKEN": cluster.token}
    base = [sys.executable, "-m", "brokergroup_controller.cli", "admin"]
    addresses = ["--controller-addresses", ",".join(cluster.api_addresses)]
    out = subprocess.run(
        [*base, "sync-state-set", "--broker-name", "fwd", "--json", *addresses],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout)[0]["brokerName"] == "fwd"
    out = subprocess.run(
        [*base, "raft", *addresses], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    assert cluster.nodes[leader].raft_address in out.stdout
    # Broker 1 proves it is alive, as a broker does: a heartbeat on a connection
    # it keeps open (a new leader's grace for a broker it never heard from ends
    # after one timeout, a closed heartbeat connection after 750 ms, and a dead
    # broker cannot be elected; on a loaded machine the CLI starts slower than that).
    heartbeat = {"clusterName": C, "brokerName": "fwd", "brokerId": 1, "address": "10.6.0.1:10911",
                 "epoch": 0, "maxOffset": 0, "confirmOffset": 0, "heartbeatTimeoutMs": 60000}  # fmt: skip
    leader = await wait_leader(cluster)  # the leader of now: a stall may have moved it
    host, port = cluster.api_address(leader).rsplit(":", 1)
    broker_link = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        for _ in range(150):  # NOT_LEADER retried, as a broker's client does (idempotent)
            broker_link.request(
                "POST", "/v1/brokers/heartbeat", json.dumps(heartbeat),
                {"Authorization": f"Bearer {cluster.token}", "Content-Type": "application/json"},
            )  # fmt: skip
            answer = broker_link.getresponse()
            reply = answer.read()
            if answer.status != 503 or b"NOT_LEADER" not in reply:
                break
            await asyncio.sleep(0.2)
        assert answer.status == 200, reply
        out = subprocess.run(
            [*base, "elect-master", "--broker-name", "fwd", "--broker-id", "1", *addresses],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
    finally:
        broker_link.close()
    assert out.returncode == 0 and "masterEpoch 1" in out.stdout, (out.stdout, out.stderr)
    failed = subprocess.run(
        [*base, "clean-broker-data", "--broker-name", "fwd", "--broker-ids", "1", *addresses],
        capture_output=True, text=True, env={**env, "BROKERGROUP_TOKEN": "wrong"}, timeout=60,
    )  # fmt: skip
    assert failed.returncode == 1 and "UNAUTHORIZED" in failed.stderr


def replicated(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The groups as the Raft log has them, without the leader's local liveness view."""
    kept = ("clusterName", "brokerName", "masterBrokerId", "masterAddress", "masterEpoch",
            "syncStateSet", "syncStateSetEpoch", "nextBrokerId")  # fmt: skip
    return [
        {
            **{k: g[k] for k in kept},
            "brokers": [(b["brokerId"], b["address"]) for b in g["brokers"]],
        }
        for g in groups
    ]


# ---------------------------------------------------------------- durability (§10)


def committed_log(data_dir: Path) -> tuple[dict[int, tuple[bytes, int]], int]:
    """(index -> (command, term), persisted commit index) of one stopped node."""
    journal = DurableJournal(str(data_dir / "raft"), fsync=False)
    try:
        entries = {entry[1]: (entry[0], entry[2]) for entry in journal[:]}
        return entries, journal.getRaftCommitIndex()
    finally:
        journal._destroy()


def decode_command(command: bytes) -> Any:
    return pickle.loads(command[1:]) if command[:1] == b"\x00" else None


async def test_acknowledged_events_survive_random_kills_of_every_node(
    cluster_factory: Any,
) -> None:
    """§10: SIGKILL all nodes at random points, compaction every few entries: no ack lost."""
    seed = int(os.environ.get("CONTROLLER_DURABILITY_SEED", random.randrange(1 << 30)))
    print(f"durability seed {seed} (rerun with CONTROLLER_DURABILITY_SEED={seed})")
    rng = random.Random(seed)
    cluster: ControllerCluster = cluster_factory(
        7, config={"logCompactionMinEntries": 16, "logCompactionMinTimeS": 0.2}
    )
    acked: dict[tuple[str, int], str] = {}
    rounds = 6
    for round_no in range(rounds):
        cluster.start_all()
        await wait_leader(cluster)
        stop = asyncio.Event()

        async def writer(
            w: int, client: ControllerClient, round_no: int = round_no, stop: asyncio.Event = stop
        ) -> None:
            name = f"r{round_no}-w{w}"
            broker_id = 1
            while not stop.is_set():
                address = f"10.7.{round_no}.{w}:{broker_id}"
                try:
                    await client.apply_broker_id(C, name, broker_id, f"rc{broker_id}", address)
                except (ControllerUnavailable, ControllerError):
                    continue  # outcome unknown: not counted, retried with the same id
                acked[(name, broker_id)] = address
                broker_id += 1

        async with ControllerClient(
            cluster.api_addresses, cluster.token, request_timeout_s=2
        ) as client:
            tasks = [asyncio.ensure_future(writer(w, client)) for w in range(8)]
            await asyncio.sleep(rng.uniform(0.3, 1.5))
            order = list(cluster.nodes)
            rng.shuffle(order)
            for node_id in order:  # all three die while writes and compactions are in flight
                cluster.kill(node_id, signal.SIGKILL)
                await asyncio.sleep(rng.uniform(0, 0.02))
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        print(f"round {round_no}: {len(acked)} acknowledged so far")

    # Committed prefixes never diverge (Raft log matching on what each node committed).
    logs = [committed_log(node.data_dir) for node in cluster.nodes.values()]
    for i, (entries_a, commit_a) in enumerate(logs):
        for entries_b, commit_b in logs[i + 1 :]:
            for index in set(entries_a) & set(entries_b):
                if index <= min(commit_a, commit_b):
                    assert entries_a[index] == entries_b[index], f"diverged at index {index}"
    assert any(decode_command(cmd) for entries, _ in logs for cmd, _ in entries.values())

    cluster.start_all()
    await wait_leader(cluster)
    async with ControllerClient(
        cluster.api_addresses, cluster.token, request_timeout_s=10
    ) as client:
        names = sorted({name for name, _ in acked})
        found = await identities(client, names)
    missing = {k: v for k, v in acked.items() if found.get(k) != v}
    assert not missing, f"seed {seed}: {len(missing)} acknowledged identities lost: {missing}"
    assert len(acked) > 50, "the test wrote too little to mean anything"
    snapshots = sum(
        len(os.listdir(node.data_dir / "raft" / "snapshots")) for node in cluster.nodes.values()
    )
    assert snapshots > 0, "compaction never ran"


# ---------------------------------------------------------------- crash points of compaction (§10)


class _CrashImagingNode(ControllerRaftNode):
    """Copies its data dir at every persistence step: each copy is what a kill -9
    at that instant would leave (every completed syscall, nothing after)."""

    images: list[tuple[str, Path, set[tuple[str, int, str]]]]
    image_dir: Path

    def _image(self, label: str) -> None:
        target = self.image_dir / f"{len(self.images):03d}-{label}"
        shutil.copytree(self.settings.data_dir, target)
        with self.state_lock:
            applied = _identities_of(self._state.to_dict())
        self.images.append((label, target, applied))

    def _serialize(self, tmp_path: str, data: Any) -> None:
        self._image("before-snapshot")
        super()._serialize(tmp_path, data)
        self._image("snapshot-saved")  # pysyncobj renames the dump and truncates later

    def _publish(self) -> None:
        if self.images and self.images[-1][0] == "snapshot-saved":
            self._image("between-dump-and-truncation")
        super()._publish()


def _identities_of(state: dict[str, Any]) -> set[tuple[str, int, str]]:
    return {
        (s["brokerName"], int(broker_id), record["address"])
        for s in state["brokerSets"]
        for broker_id, record in s["brokers"].items()
    }


async def test_every_crash_point_of_compaction_recovers_everything_applied(tmp_path: Path) -> None:
    """§10: a node killed at any step of compaction (snapshot write, dump rename,
    journal truncation) recovers every entry it had applied. pysyncobj's own
    journal + dump loses the tail at the dump/truncation step."""
    address = "127.0.8.1:9880"
    settings = RaftSettings(
        address, (address,), str(tmp_path / "data"), bind_host="127.0.8.1",
        log_compaction_min_entries=8, log_compaction_min_time_s=0.2,
    )  # fmt: skip
    original_rewrite = DurableJournal._rewrite
    node = _CrashImagingNode(settings)
    node.images, node.image_dir = [], tmp_path / "images"

    def imaging_rewrite(journal: DurableJournal, entries: list[Any]) -> None:
        node._image("before-truncation")
        original_rewrite(journal, entries)
        node._image("after-truncation")

    node._journal._rewrite = imaging_rewrite.__get__(node._journal)  # type: ignore[method-assign]
    node.start()
    try:
        while not node.status().caught_up:
            await asyncio.sleep(0.01)
        for i in range(60):
            event = ApplyBrokerId(C, f"crash-{i % 3}", i // 3 + 1, "rc", f"10.8.0.{i}:10911")
            await asyncio.gather(node.propose(event, 5.0), asyncio.sleep(0.005))
    finally:
        await asyncio.to_thread(node.stop)
    labels = {label for label, _, _ in node.images}
    assert {"snapshot-saved", "before-truncation", "after-truncation"} <= labels, labels

    for _label, image, applied in node.images:
        restarted = ControllerRaftNode(replace(settings, data_dir=str(image)))
        restarted.start()
        try:
            deadline = time.monotonic() + 20
            while not restarted.status().caught_up:
                assert time.monotonic() < deadline, f"{image.name} never recovered"
                await asyncio.sleep(0.01)
            recovered = _identities_of(restarted.read(lambda s: s.to_dict()))
        finally:
            await asyncio.to_thread(restarted.stop)
        assert applied <= recovered, f"crash at {image.name} lost {sorted(applied - recovered)}"
