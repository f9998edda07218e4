"""Node identity for stock processes (issue 37; docs/reliability.md "Every link of a stock
node"): a stock RocketMQ JVM dials every link from an unbound socket, so its packets leave
from 127.0.0.1 and no address-pair rule (partition, bridge, ring, lossy link) matches them.
The `rocketmq` target starts each JVM in a group of its own and the faults match its
sockets by owner (`netfault.owner_matches`): the planner's rules here, then two real
processes in two groups whose link an address cut leaves whole and the owner cut stops
both ways until it heals."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from brokergroup_cli.chaos import faults, netfault
from brokergroup_cli.chaos.netfault import Peer
from brokergroup_cli.chaos.targets.rocketmq import GID_BASE, RocketMQTarget
from brokergroup_cli.local.rocketmq_stock import RocketMQHome


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
    assert not plain.node_gids and plain.gid(hosts[0]) is None


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
        assert (listener.heard(15), dialer.heard(15)) == ("b3", "a3")
    finally:
        for node in (listener, dialer):
            if node is not None:
                node.stop()
        marks.heal()
    listed = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    assert "bgchaos" not in listed  # every rule removed
