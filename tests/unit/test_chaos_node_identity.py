"""Node identity for stock processes (issue 37; docs/reliability.md "Every link of a stock
node"): a stock RocketMQ JVM dials every link from an unbound socket, so its packets leave
from 127.0.0.1 and no address-pair rule (partition, bridge, ring, lossy link) matches them.
The `rocketmq` target starts each JVM in a group of its own, and so does the local
supervisor for `local-rocketmq` (`local.nodeGidBase`: each controller and broker slot, the
same group on every start, recorded in state.json); the faults match their sockets by owner
(`netfault.owner_matches`), and refuse to run where owners cannot be matched. The
planner's rules and the groups here, then two real processes in two groups whose link an
address cut leaves whole and the owner cut stops both ways until it heals."""

from __future__ import annotations

import asyncio
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from brokergroup_cli.chaos import faults, netfault
from brokergroup_cli.chaos.netfault import Peer
from brokergroup_cli.chaos.runtime import Addresses
from brokergroup_cli.chaos.stock_run import _target_cannot
from brokergroup_cli.chaos.targets import local as local_target
from brokergroup_cli.chaos.targets.local import LocalTarget
from brokergroup_cli.chaos.targets.rocketmq import GID_BASE, RocketMQTarget
from brokergroup_cli.local.config import ConfigError, build_config
from brokergroup_cli.local.plan import Layout
from brokergroup_cli.local.procs import process_start_ticks
from brokergroup_cli.local.rocketmq_stock import RocketMQHome
from brokergroup_cli.local.state import ChildKind, ChildRecord, RuntimeState, write_state
from brokergroup_cli.local.supervisor import Supervisor, prepare_dir
from brokergroup_remoting import event_loop
from tests.unit.bench_modules import load_bench_module


def test_a_link_between_two_grouped_nodes_is_matched_both_ways_and_by_dialer() -> None:
    master, slave = Peer("127.0.72.11", 47011), Peer("127.0.72.12", 47012)
    assert netfault.owner_matches(master, slave) == [
        # The master's packets: dialed to the slave, or on a connection the slave dialed.
        ["-m", "owner", "--gid-owner", "47011", "-d", "127.0.72.12/32"],
        ["-m", "owner", "--gid-owner", "47011", "-m", "connmark", "--mark", "47012"],
        # The slave's: the same, mirrored (its HA connection to the master is the first).
        ["-m", "owner", "--gid-owner", "47012", "-d", "127.0.72.11/32"],
        ["-m", "owner", "--gid-owner", "47012", "-m", "connmark", "--mark", "47011"],
    ]
    # A node without a group (a bound process: its address says who sent it) is left to the
    # address rules; of a mixed pair only the grouped side's dials can be told.
    plain = Peer("127.0.72.1")
    assert netfault.owner_matches(plain, Peer("127.0.72.2")) == []
    assert netfault.owner_matches(plain, slave) == [
        ["-m", "owner", "--gid-owner", "47012", "-d", "127.0.72.1/32"]
    ]
    # host:port addresses are cut by host.
    assert netfault.owner_matches(Peer("127.0.72.1:9876", 1), Peer("127.0.72.2")) == [
        ["-m", "owner", "--gid-owner", "1", "-d", "127.0.72.2/32"]
    ]


def test_cut_loss_and_netem_rules_share_the_matches() -> None:
    a, b = Peer("127.0.0.5", 5), Peer("127.0.0.6", 6)
    matches = netfault.owner_matches(a, b)
    cut = netfault.owner_cut_rules(a, b, "c")
    assert cut == [["OUTPUT", *m, "-m", "comment", "--comment", "c", "-j", "DROP"] for m in matches]
    loss = netfault.owner_loss_rules(a, b, 30, "c")
    stat = ["-m", "statistic", "--mode", "random", "--probability", "0.3000"]
    assert loss == [["OUTPUT", *m, *stat, *cut[0][-6:]] for m in matches]
    marks = netfault.owner_netem_rules(a, b, "c")
    assert [r[-2:] for r in marks] == [["--set-mark", str(netfault.NETEM_MARK)]] * 4
    assert netfault.fw_filter()[netfault.fw_filter().index("handle") + 1] == str(
        netfault.NETEM_MARK
    )
    assert netfault.connmark_rules(47011, "m") == [
        ["OUTPUT", "-m", "owner", "--gid-owner", "47011", "-m", "conntrack", "--ctstate",
         "NEW", "-m", "comment", "--comment", "m", "-j", "CONNMARK", "--set-mark", "47011"]
    ]  # fmt: skip


def test_the_rocketmq_targets_nodes_have_a_group_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(netfault, "_owner_probe", [None])  # as on a machine that can
    home = RocketMQHome(tmp_path / "lib", tmp_path / "namesrv.jar")  # never started here
    target = RocketMQTarget(tmp_path / "rt", lane=1, home=home)
    hosts = target._hosts()
    assert hosts == [*(f"127.0.73.{n}" for n in (1, 2, 3)), "127.0.73.9",
                     *(f"127.0.73.{n}" for n in (11, 12, 13))]  # fmt: skip
    gids = [target.gid(h) for h in hosts]
    assert gids == [GID_BASE + 100 + int(h.rpartition(".")[2]) for h in hosts]
    assert len(set(gids)) == len(hosts)
    monkeypatch.setattr(netfault, "_owner_probe", ["no owner match here"])
    plain = RocketMQTarget(tmp_path / "rt2", lane=1, home=home)
    # No groups where owners cannot be matched, and then its link faults refuse to run: an
    # address cut alone would leave every stock link whole (each JVM dials from 127.0.0.1).
    assert plain.gid(hosts[0]) is None
    assert _target_cannot(plain, faults.PARTITION_MASTER) == "no owner match here"
    assert _target_cannot(plain, faults.KILL_MASTER) is None


def test_a_link_fault_on_grouped_nodes_says_when_owner_matching_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(netfault, "_owner_probe", ["iptables has no owner match"])
    for fault in (faults.PARTITION_MASTER, faults.PARTITION_BRIDGE, faults.PARTITION_RING,
                  faults.LOSSY_LINK, faults.LAGGING_KILL, f"{faults.PAUSE_MASTER}+kill-master"):  # fmt: skip
        assert faults.target_unavailable_reason(fault, True) == "iptables has no owner match"
        assert faults.target_unavailable_reason(fault, False) is None  # address rules only
    for fault in (faults.KILL_MASTER, faults.PAUSE_MASTER, faults.PAUSE_CONTROLLER_LEADER):
        assert faults.target_unavailable_reason(fault, True) is None
    with pytest.raises(RuntimeError, match="iptables has no owner match"):
        netfault.LinkImpairment({"127.0.0.5": 5}).impair("127.0.0.5", "127.0.0.6",
                                                          netfault.Impairment(10))  # fmt: skip


def test_local_node_gid_base_gives_each_controller_and_broker_slot_a_group(
    tmp_path: Path,
) -> None:
    config = build_config(tmp_path, 3, ["local.nodeGidBase=47600"], engine="rocketmq")
    assert [config.controller_gid(n) for n in (1, 2, 3)] == [47601, 47602, 47603]
    assert [config.broker_gid(s) for s in (0, 1, 2)] == [47604, 47605, 47606]
    off = build_config(tmp_path, 3, [], engine="rocketmq")
    assert (off.node_gid_base, off.controller_gid(1), off.broker_gid(0)) == (0, None, None)
    for bad in ("-1", str(2**32 - 5)):
        with pytest.raises(ConfigError, match="nodeGidBase"):
            build_config(tmp_path, 3, [f"local.nodeGidBase={bad}"])
    # state.json carries it only when set (the file as it always was otherwise).
    child = ChildRecord(ChildKind.BROKER, 0, "127.0.1.170", 10911, pid=7, gid=47604)
    assert ChildRecord.from_json(child.to_json()) == child
    assert "gid" not in ChildRecord(ChildKind.BROKER, 0, "127.0.1.170", 10911).to_json()


@pytest.mark.parametrize("loop", list(event_loop.LoopKind))
def test_the_supervisor_starts_a_child_in_its_group_on_every_start(
    tmp_path: Path, loop: event_loop.LoopKind
) -> None:
    """A real child of the supervisor's own spawn, on either loop it runs on (uvloop takes
    no `group=`: a first version left every slot unstarted there): its /proc status shows
    the slot's group as real, effective, saved and filesystem gid, no supplementary
    groups, the uid kept."""
    if loop is event_loop.LoopKind.UVLOOP and not event_loop.uvloop_installed():
        pytest.skip("uvloop is not installed")
    if os.geteuid() != 0:
        pytest.skip("setting a child's group needs root")
    config = build_config(
        tmp_path, 1, ["local.nodeGidBase=47900", "local.launcher=/bin/sh -c 'exec sleep 30'"]
    )
    layout = Layout(config.root_dir)
    prepare_dir(config, layout)
    supervisor = Supervisor(config, layout)

    async def start_twice() -> list[tuple[str, str, str]]:
        slot = supervisor._controllers[1]
        seen = []
        for _ in range(2):
            await supervisor._spawn(slot)
            assert slot.proc is not None
            status = Path(f"/proc/{slot.proc.pid}/status").read_text().splitlines()
            lines = {k: v.split() for k, _, v in (line.partition(":") for line in status)}
            seen.append((" ".join(lines["Uid"]), " ".join(lines["Gid"]), " ".join(lines["Groups"])))
            slot.proc.kill()
            await slot.proc.wait()
        return seen

    with asyncio.Runner(loop_factory=event_loop.loop_factory(loop)) as runner:
        seen = runner.run(start_twice())
    assert seen == [("0 0 0 0", "47902 47902 47902 47902", "")] * 2
    state = supervisor.runtime_state()
    assert [c.gid for c in state.controllers] == [47901, 47902, 47903]


def test_local_rocketmq_nodes_carry_the_group_state_json_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(netfault, "_owner_probe", [None])
    target = LocalTarget(tmp_path, Addresses(1), engine="rocketmq")
    base = local_target.GID_BASE + 100
    assert target.node_gids
    assert target.gids() == [base + 1, base + 2, base + 3, base + 4, base + 5, base + 6]
    me = os.getpid(), process_start_ticks(os.getpid())
    children = (
        ChildRecord(ChildKind.BROKER, 1, "127.0.1.171", 10911, *me, gid=base + 5),
        ChildRecord(ChildKind.BROKER, 2, "127.0.1.172", 10911, None, gid=base + 6),  # down
    )
    write_state(tmp_path / "state.json", RuntimeState(str(tmp_path), None, None, 0, 0,
                                                      brokers=children))  # fmt: skip
    assert [(n.name, n.host, n.gid) for n in target.nodes()] == [
        ("broker-1", "127.0.1.171", base + 5)
    ]
    # The built-in engine's brokers bind their own address: no groups, no refusals.
    builtin = LocalTarget(tmp_path, Addresses(1))
    assert not builtin.node_gids
    monkeypatch.setattr(netfault, "_owner_probe", ["no owner match here"])
    assert _target_cannot(builtin, faults.PARTITION_MASTER) is None
    assert _target_cannot(target, faults.PARTITION_MASTER) == "no owner match here"


def test_a_capability_probe_runs_once_and_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(netfault, "unavailable_reason", lambda: None)
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    cache: list[str | None] = []
    asked: list[str] = []

    def probe(netns: str) -> str | None:
        asked.append(netns)
        return None

    assert netfault._probed(cache, "tc", "no tc here", probe) == "no tc here"
    assert (cache, asked) == (["no tc here"], [])
    monkeypatch.setattr(netfault, "unavailable_reason", lambda: "needs root")
    assert netfault._probed(cache, "tc", "no tc here", probe) == "no tc here"  # kept
    assert netfault._probed([], "tc", "no tc here", probe) == "needs root"


def test_the_comparison_counts_what_the_owner_rules_dropped_per_target_and_fault() -> None:
    compare = load_bench_module("chaos_compare")
    row = {"fault": faults.PARTITION_MASTER, "note": "partition master 127.0.1.171 from …"}
    runs = {
        "local-rocketmq": [
            {"recovery": [row | {"note": row["note"] + "; owner rules dropped 412 packets"},
                          row | {"note": row["note"] + "; owner rules dropped 0 packets"}]},
            {"recovery": [row | {"note": row["note"] + "; owner rules dropped 8 packets"},
                          {"fault": faults.KILL_MASTER, "note": "SIGKILL master"}]},
        ],
        "local": [{"recovery": [row]}],
    }  # fmt: skip
    assert compare.owner_drops(runs) == {
        "local-rocketmq": {
            faults.PARTITION_MASTER: {"windows": 3, "noted": 3, "zero": 1, "packets": 420},
            faults.KILL_MASTER: {"windows": 1, "noted": 0, "zero": 0, "packets": 0},
        },
        "local": {faults.PARTITION_MASTER: {"windows": 1, "noted": 0, "zero": 0, "packets": 0}},
    }


#: A node: listens (A) or dials from an unbound socket (B), as a stock JVM; each line on
#: stdin goes to the peer, each byte from the peer to stdout.
_NODE = """
import socket, sys, threading
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "listen":
    server = socket.create_server((host, port))
    print("ready", flush=True)
    s, _ = server.accept()
else:
    s = socket.create_connection((host, port), timeout=5)
    s.settimeout(None)  # the connect's bound only: a held link may be quiet for seconds
print("from", s.getpeername()[0] if mode == "listen" else s.getsockname()[0], flush=True)
def pump():
    while data := s.recv(4096):
        sys.stdout.write(data.decode())
        sys.stdout.flush()
threading.Thread(target=pump, daemon=True).start()
for line in sys.stdin:
    s.sendall(line.encode())
"""


class _Node:
    def __init__(self, gid: int, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _NODE, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, group=gid, extra_groups=[],
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def heard(self, timeout_s: float) -> str | None:
        try:
            return self.lines.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def test_an_owner_cut_stops_both_ways_a_link_the_address_cut_misses() -> None:
    """Two processes in two groups, one dialing the other from an unbound socket (source
    127.0.0.1, as every stock RocketMQ link): the address-pair partition lets both
    directions through; the same partition told the groups (`owners`) holds both — the
    dialer's bytes and the acceptor's on the connection the dialer made (its conntrack
    mark) — until it heals, and so does a 100% lossy link."""
    if os.environ.get("BROKERGROUP_TEST_WORKER_NETWORK") != "own":
        pytest.skip("needs the worker's own network namespace (make test's xdist workers)")
    reason = netfault.owner_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    a, b = "127.0.78.1", "127.0.78.2"
    owners = {a: 47901, b: 47902}
    marks = netfault.ConnMarks(owners.values())  # before the link is dialed
    listener = _Node(owners[a], "listen", a, "47999")
    dialer: _Node | None = None
    try:
        assert listener.heard(10) == "ready"
        dialer = _Node(owners[b], "dial", a, "47999")
        assert (listener.heard(10), dialer.heard(10)) == ("from 127.0.0.1", "from 127.0.0.1")
        with netfault.LoopbackPartition() as by_address:
            by_address.cut([a], [b])
            dialer.say("b1")
            listener.say("a1")
            assert (listener.heard(10), dialer.heard(10)) == ("b1", "a1")

        partition = netfault.LoopbackPartition(owners=owners)
        partition.cut([a], [b])
        try:
            dialer.say("b2")
            listener.say("a2")
            assert (listener.heard(1.5), dialer.heard(1.5)) == (None, None)
        finally:
            partition.heal()
        assert partition.owner_dropped is not None and partition.owner_dropped > 0
        # TCP retransmits once the rules are gone: nothing was lost, only held.
        assert (listener.heard(15), dialer.heard(15)) == ("b2", "a2")

        link = netfault.LinkImpairment(owners)
        link.impair(a, b, netfault.Impairment(100.0))
        try:
            dialer.say("b3")
            listener.say("a3")
            assert (listener.heard(1.5), dialer.heard(1.5)) == (None, None)
        finally:
            link.heal()
        # Counted by the owner rules (their own comment; the address rules saw nothing of
        # a link from 127.0.0.1): a first version counted them under the address rules'
        # comment and noted "owner rules dropped 0 packets" for a link losing 30 %.
        assert link.owner_dropped is not None and link.owner_dropped > 0
        assert link.dropped == link.owner_dropped
        assert (listener.heard(15), dialer.heard(15)) == ("b3", "a3")
    finally:
        for node in (listener, dialer):
            if node is not None:
                node.stop()
        marks.heal()
    listed = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    assert "bgchaos" not in listed  # every rule removed
