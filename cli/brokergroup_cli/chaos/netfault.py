"""A real network partition between loopback addresses: packets are dropped,
no FIN or RST reaches the other side (DESIGN.md §8 "partition").

How: Linux policy routing. A `blackhole` rule per (source, destination)
pair, both ways, makes the kernel discard those packets before delivery;
established TCP connections just stop moving (the sender retransmits into
the void), new connects from a cut address fail at once. The kernel looks
up its `local` table from the rule at priority 0, before any other rule,
so that rule is moved below ours for the duration (same lookup, later
priority: nothing else changes) and put back by `heal()`.

Needs root and iproute2's `ip`; `unavailable_reason()` says why not, and
callers skip with it. Only the addresses a test names are touched.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

#: Our blackhole rules sit in [_FIRST_PREF, _LOCAL_PREF); the local table moves to _LOCAL_PREF.
_FIRST_PREF = 100
#: Where the rules of a partition made while another is active begin (a crash under a fault).
SECOND_PREF = 600
_LOCAL_PREF = 1000


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "a real partition needs root (policy-routing blackhole rules)"
    if shutil.which("ip") is None:
        return "a real partition needs iproute2's `ip`"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _host(address: str) -> str:
    return address.rpartition(":")[0] if ":" in address else address


class LoopbackPartition:
    """Cut every packet between two groups of addresses; `heal()` (or leaving
    the `with` block) removes exactly the rules this object added.

    `owners` (address -> group id) names the nodes whose processes run in a group of
    their own (`Node.gid`: a stock RocketMQ JVM, which dials every link from an unbound
    socket, so its packets leave from 127.0.0.1 and no address rule matches them): each
    pair with such a node is cut by its owner too (`OwnerRules`, iptables)."""

    def __init__(
        self, first_pref: int = _FIRST_PREF, owners: Mapping[str, int] | None = None
    ) -> None:
        """`first_pref`: where this partition's rules start (a second partition active
        at once needs its own range: the kernel refuses a rule identical to another,
        priority included)."""
        self._first_pref = first_pref
        self._rules: list[tuple[int, str, str]] = []
        self._added_local = False
        self._deleted_zero = False
        self._owners = dict(owners or {})
        self._owner_rules = OwnerRules("partition")

    def cut(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        reason = unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        self._move_local_lookup()
        pairs = [(_host(a), _host(b)) for a in side_a for b in side_b]
        for a, b in pairs:
            peers = self._peer(a), self._peer(b)
            try:
                if owner_matches(*peers):
                    reason = owner_unavailable_reason()
                    if reason is not None:
                        raise RuntimeError(reason)
                self._owner_rules.add("filter", owner_cut_rules(*peers, self._owner_rules.comment))
            except BaseException:
                self.heal()
                raise
            for source, destination in ((a, b), (b, a)):
                pref = self._first_pref + len(self._rules)
                if pref >= _LOCAL_PREF:
                    raise RuntimeError("too many partition rules")
                _ip("rule", "add", "pref", str(pref), "from", source, "to", destination,
                    "blackhole")  # fmt: skip
                self._rules.append((pref, source, destination))
        _ip("route", "flush", "cache", check=False)

    def _peer(self, host: str) -> Peer:
        return Peer(host, self._owners.get(host))

    @property
    def owner_dropped(self) -> int | None:
        """Packets the owner rules dropped, read at `heal()` (None: there were none)."""
        return self._owner_rules.dropped

    def heal(self) -> None:
        self._owner_rules.heal()
        while self._rules:
            pref, source, destination = self._rules.pop()
            _ip("rule", "del", "pref", str(pref), "from", source, "to", destination,
                "blackhole", check=False)  # fmt: skip
        if self._deleted_zero:
            _ip("rule", "add", "pref", "0", "lookup", "local", check=False)
            self._deleted_zero = False
        if self._added_local:
            _ip("rule", "del", "pref", str(_LOCAL_PREF), "lookup", "local", check=False)
            self._added_local = False
        _ip("route", "flush", "cache", check=False)

    def _move_local_lookup(self) -> None:
        lines = _ip("rule", "show").stdout.splitlines()

        def has(pref: int) -> bool:
            return any(line.startswith(f"{pref}:") and "lookup local" in line for line in lines)

        if not has(_LOCAL_PREF):
            _ip("rule", "add", "pref", str(_LOCAL_PREF), "lookup", "local")
            self._added_local = True
        if has(0):
            _ip("rule", "del", "pref", "0", "lookup", "local")
            self._deleted_zero = True

    def __enter__(self) -> LoopbackPartition:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.heal()


def sockets_unavailable_reason() -> str | None:
    """Why a dead node's sockets cannot be destroyed here (None: they can)."""
    reason = unavailable_reason()
    if reason is None and shutil.which("ss") is None:
        reason = "destroying a dead node's sockets needs iproute2's `ss`"
    return reason


def _connected(host: str) -> set[tuple[str, str]]:
    """(local, peer) address of every connected TCP socket whose local address is `host`."""
    listed = subprocess.run(
        ["ss", "-t", "-n", "-H", "src", _host(host)], capture_output=True, text=True, check=True
    )
    return {(cols[3], cols[4]) for cols in map(str.split, listed.stdout.splitlines()) if cols[4:]}


def destroy_sockets(host: str) -> int:
    """Destroy every connected TCP socket whose local address is `host` (`ss -K`: the
    kernel's SOCK_DESTROY, the send queue dropped unsent); how many there were.

    What a dead machine leaves behind: nothing. A SIGKILLed process's kernel keeps its
    sockets as orphans and goes on delivering their unsent bytes — through a lossy link
    within seconds, through a partition the moment it heals — so the replicas of a
    killed master would still receive what only it held. Raises if one of them is left
    (a kernel without CONFIG_INET_DIAG_DESTROY): a crash that silently left them would
    be no crash. Sockets opened meanwhile (a restarted process) are not looked at."""
    reason = sockets_unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    found = _connected(host)
    subprocess.run(["ss", "-K", "-t", "-n", "-H", "src", _host(host)], capture_output=True,
                   text=True, check=True)  # fmt: skip
    left = found & _connected(host)
    if left:
        raise RuntimeError(f"ss -K left {len(left)} sockets of {host}: {sorted(left)[:3]}")
    return len(found)


# --- OpenChaos's partition shapes (pure: node lists in, cut pairs out) -------------------


def bridge_sides(
    nodes: Sequence[str], bridge: str, pinned_a: Sequence[str] = (), pinned_b: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """Split `nodes` but `bridge` into two halves (OpenChaos "bridge", Jepsen's
    `bridge`): `pinned_a` go to side A, `pinned_b` to side B, the rest fill the
    smaller side in order (ties to B). The bridge sees both; A and B do not see each other."""
    if bridge not in nodes:
        raise ValueError(f"bridge {bridge} is not one of the nodes {list(nodes)}")
    overlap = set(pinned_a) & set(pinned_b)
    if overlap or bridge in (*pinned_a, *pinned_b):
        raise ValueError(f"a node pinned to both sides or the bridge pinned: {sorted(overlap)}")
    side_a, side_b = list(pinned_a), list(pinned_b)
    for node in nodes:
        if node == bridge or node in side_a or node in side_b:
            continue
        (side_a if len(side_a) < len(side_b) else side_b).append(node)
    return side_a, side_b


def bridge_pairs(side_a: Sequence[str], side_b: Sequence[str]) -> list[tuple[str, str]]:
    """The (a, b) pairs a bridge partition cuts: every A node from every B node."""
    return [(a, b) for a in side_a for b in side_b]


def ring_reach(n: int) -> int:
    """How far round the ring a node sees in a majorities ring of `n` nodes: the
    least k with 2k + 1 >= n // 2 + 1 (itself and k neighbours each way make a
    majority)."""
    return max(1, -(-(n // 2) // 2))


def ring_pairs(ring: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs a majorities ring cuts (OpenChaos "partition-majorities-ring"):
    nodes in `ring` order see those within `ring_reach` steps either way, so each
    sees a majority, and for n >= 4 no node is seen by all (no common majority)."""
    n = len(ring)
    if len(set(ring)) != n:
        raise ValueError(f"a ring lists each node once: {list(ring)}")
    k = ring_reach(n)
    cut = []
    for i in range(n):
        for j in range(i + 1, n):
            if min(j - i, n - (j - i)) > k:
                cut.append((ring[i], ring[j]))
    return cut


class PairPartition(LoopbackPartition):
    """A partition given as explicit cut pairs (bridge, ring) rather than two sides."""

    def cut_pairs(self, pairs: Iterable[tuple[str, str]]) -> None:
        for a, b in pairs:
            self.cut([a], [b])


# --- Packet loss and delay on one link -----------------------------------------------------

#: The prio qdisc's band (1-based minor) the filtered link goes to; bands 1-3 keep prio's
#: default priomap for every other packet on `lo`.
_NETEM_BAND = 4


def _tc(
    *args: str, check: bool = True, netns: str | None = None
) -> subprocess.CompletedProcess[str]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run([*prefix, "tc", *args], capture_output=True, text=True, check=check)


_netem_probe: list[str | None] = []


def _probed(
    cache: list[str | None], tool: str, missing: str, probe: Callable[[str], str | None]
) -> str | None:
    """The answer of a capability probe, run once per process (`cache` keeps it): root and
    `ip` (`unavailable_reason`), `tool` on the PATH (else `missing`), then `probe(netns)`
    in a network namespace made for it and deleted after, so the host's own `lo`, qdiscs
    and rules are never touched by a probe. `probe` returns why not, or None."""
    if cache:
        return cache[0]
    reason = unavailable_reason()
    if reason is None and shutil.which(tool) is None:
        reason = missing
    if reason is None:
        netns = f"bgchaos-probe-{tool}-{os.getpid()}"
        made = _ip("netns", "add", netns, check=False)
        try:
            reason = probe(netns) if made.returncode == 0 else _netns_failed(made)
        finally:
            _ip("netns", "del", netns, check=False)
    cache.append(reason)
    return reason


def _netns_failed(made: subprocess.CompletedProcess[str]) -> str:
    return f"cannot make a network namespace to probe in ({made.stderr.strip()})"


def _probe_netem(netns: str) -> str | None:
    done = _tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "prio", "bands",
               str(_NETEM_BAND), check=False, netns=netns)  # fmt: skip
    if done.returncode == 0:
        done = _tc("qdisc", "add", "dev", "lo", "parent", f"1:{_NETEM_BAND}", "netem",
                   "delay", "1ms", check=False, netns=netns)  # fmt: skip
    if done.returncode != 0:
        return f"this kernel has no sch_prio/sch_netem qdisc (tc: {done.stderr.strip()})"
    return None


def netem_unavailable_reason() -> str | None:
    """Why `tc netem` cannot shape a loopback link here (None: it can). Probed once, in a
    network namespace of its own (`_probed`)."""
    return _probed(_netem_probe, "tc", "packet loss and delay need iproute2's `tc`", _probe_netem)


def loss_unavailable_reason() -> str | None:
    """Why random packet loss cannot be done here: netem, or else iptables' statistic match."""
    if netem_unavailable_reason() is None:
        return None
    reason = unavailable_reason()
    if reason is None and shutil.which("iptables") is None:
        reason = f"no netem ({netem_unavailable_reason()}) and no iptables"
    return reason


@dataclass(frozen=True)
class Impairment:
    """What a link suffers: each packet lost with `loss_percent`, the rest delayed
    `delay_ms` ± `jitter_ms` (delay needs netem)."""

    loss_percent: float
    delay_ms: int = 0
    jitter_ms: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.loss_percent <= 100 or self.delay_ms < 0 or self.jitter_ms < 0:
            raise ValueError(f"bad impairment {self}")

    def netem_args(self) -> list[str]:
        args = []
        if self.delay_ms:
            args += ["delay", f"{self.delay_ms}ms"]
            if self.jitter_ms:
                args += [f"{self.jitter_ms}ms"]
        if self.loss_percent:
            args += ["loss", f"{self.loss_percent:g}%"]
        return args


def u32_filters(a: str, b: str) -> list[list[str]]:
    """The `tc filter add` argument lists that steer a<->b packets (both ways) into the
    netem band; nothing else matches."""
    return [
        ["filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
         "match", "ip", "src", f"{src}/32", "match", "ip", "dst", f"{dst}/32",
         "flowid", f"1:{_NETEM_BAND}"]
        for src, dst in ((a, b), (b, a))
    ]  # fmt: skip


def iptables_rules(
    a: str, b: str, loss_percent: float, comment: str = "bgchaos"
) -> list[list[str]]:
    """The iptables rule specs (after -A/-D OUTPUT) that drop a<->b packets at random."""
    p = f"{loss_percent / 100:.4f}"
    return [
        ["OUTPUT", "-s", f"{src}/32", "-d", f"{dst}/32", "-m", "statistic", "--mode", "random",
         "--probability", p, "-m", "comment", "--comment", comment, "-j", "DROP"]
        for src, dst in ((a, b), (b, a))
    ]  # fmt: skip


_LINKS = itertools.count(1)


class LinkImpairment:
    """Random loss (and delay) on the link between two loopback addresses. With `tc`
    netem: a prio root qdisc on `lo` (its bands 1-3 keep the default priomap, so all
    other traffic is untouched), a netem qdisc on band 4 and u32 filters on the two
    addresses. Without netem (a kernel built without it, as this project's CI VM):
    iptables' statistic match drops the same share of those packets, and delay is
    reported unavailable. `heal()` removes exactly what was added."""

    def __init__(self, owners: Mapping[str, int] | None = None) -> None:
        """`owners`: as `LoopbackPartition`'s (a stock process's link is matched by its
        process group too)."""
        self._owners = dict(owners or {})
        self._owner_rules = OwnerRules("link")
        self._qdisc = False
        self._rules: list[list[str]] = []
        self.backend = ""
        self._comment = ""
        self.dropped: int | None = None
        """Packets the iptables rules dropped, the address and owner rules together, read
        at `heal()` (None: not read; netem). `owner_dropped`: the owner rules' share."""

    def impair(self, a: str, b: str, impairment: Impairment) -> str:
        a, b = _host(a), _host(b)
        peers = Peer(a, self._owners.get(a)), Peer(b, self._owners.get(b))
        if owner_matches(*peers):
            reason = owner_unavailable_reason()
            if reason is not None:
                raise RuntimeError(reason)
        if netem_unavailable_reason() is None:
            existing = _tc("qdisc", "show", "dev", "lo").stdout
            if "noqueue" not in existing and existing.strip():
                raise RuntimeError(f"`lo` already has a root qdisc, not touching it: {existing}")
            _tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "prio", "bands",
                str(_NETEM_BAND))  # fmt: skip
            self._qdisc = True
            try:
                _tc("qdisc", "add", "dev", "lo", "parent", f"1:{_NETEM_BAND}", "handle", "40:",
                    "netem", *impairment.netem_args())  # fmt: skip
                for args in u32_filters(a, b):
                    _tc(*args)
                if owner_matches(*peers):
                    self._owner_rules.add(
                        "mangle", owner_netem_rules(*peers, self._owner_rules.comment)
                    )
                    _tc(*fw_filter())
            except BaseException:
                self.heal()
                raise
            self.backend = "tc netem"
            return self.backend
        reason = loss_unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        if impairment.delay_ms:
            raise RuntimeError(f"delay needs netem: {netem_unavailable_reason()}")
        self._comment = f"bgchaos-{os.getpid()}-{next(_LINKS)}"
        try:
            for spec in iptables_rules(a, b, impairment.loss_percent, self._comment):
                subprocess.run(["iptables", "-A", *spec], capture_output=True, text=True,
                               check=True)  # fmt: skip
                self._rules.append(spec)
            self._owner_rules.add(
                "filter",
                owner_loss_rules(*peers, impairment.loss_percent, self._owner_rules.comment),
            )
        except BaseException:
            self.heal()
            raise
        self.backend = "iptables statistic"
        return self.backend

    @property
    def owner_dropped(self) -> int | None:
        """Packets the owner rules dropped, read at `heal()` (None: none, or netem's)."""
        return self._owner_rules.dropped

    def heal(self) -> None:
        if self._qdisc:
            _tc("qdisc", "del", "dev", "lo", "root", check=False)
            self._qdisc = False
        address_dropped = _dropped(self._comment) if self._rules else None
        self._owner_rules.heal()  # counts its own rules' drops, under its own comment
        if address_dropped is not None:
            self.dropped = address_dropped + (self._owner_rules.dropped or 0)
        while self._rules:
            spec = self._rules.pop()
            subprocess.run(["iptables", "-D", *spec], capture_output=True, check=False)


def port_cut_rules(host: str, port: int, comment: str) -> list[list[str]]:
    """The iptables rule specs (after -A/-D) that drop every TCP packet to `host:port`
    and from it, whatever the other end's address."""
    tail = ["-m", "comment", "--comment", comment, "-j", "DROP"]
    return [
        ["OUTPUT", "-p", "tcp", "-d", f"{host}/32", "--dport", str(port), *tail],
        ["OUTPUT", "-p", "tcp", "-s", f"{host}/32", "--sport", str(port), *tail],
    ]


class PortCut:
    """Cut every TCP connection to one listening port (iptables), both directions, for
    peers an address-pair partition misses: a process that dials from an unbound socket
    leaves from 127.0.0.1, not its own address. `heal()` removes exactly its rules."""

    def __init__(self) -> None:
        self._rules: list[list[str]] = []
        self._comment = f"bgchaos-port-{os.getpid()}-{next(_LINKS)}"
        self.dropped: int | None = None
        """Packets dropped, read at `heal()`."""

    def cut(self, host: str, port: int) -> None:
        if shutil.which("iptables") is None:
            raise RuntimeError("cutting a port needs iptables")
        try:
            for spec in port_cut_rules(_host(host), port, self._comment):
                subprocess.run(["iptables", "-A", *spec], capture_output=True, text=True,
                               check=True)  # fmt: skip
                self._rules.append(spec)
        except BaseException:
            self.heal()
            raise

    def heal(self) -> None:
        if self._rules:
            self.dropped = _dropped(self._comment)
        while self._rules:
            spec = self._rules.pop()
            subprocess.run(["iptables", "-D", *spec], capture_output=True, check=False)


def _dropped(comment: str) -> int:
    """What the OUTPUT rules commented `comment` have dropped so far."""
    listed = subprocess.run(["iptables", "-L", "OUTPUT", "-v", "-x", "-n"], capture_output=True,
                            text=True, check=False).stdout  # fmt: skip
    return sum(
        int(cols[0])
        for cols in map(str.split, listed.splitlines())
        if cols and cols[0].isdigit() and comment in cols
    )


# --- Node identity by process group: links an address rule cannot see ----------------------
#
# A stock RocketMQ JVM (broker, DLedger controller, name server) dials every link from an
# unbound socket: its packets leave from 127.0.0.1, whichever node sent them, so an
# address-pair rule cuts none of its HA replication, broker -> controller or DLedger links.
# A target that starts each such process in a group of its own (`Node.gid`; the uid stays
# root) lets iptables tell them apart: the owner match sees the group of the process that
# made the socket, for the sockets it dialed and those it accepted alike. A link between
# X and Y is then every packet
#
#   - X sends to Y's address (X dialed Y: its SYN and everything after), or X sends on a
#     connection Y dialed (conntrack's mark, set by `connmark_rules` when Y's SYN left:
#     the connection's dialer), and the same with X and Y swapped.
#
# So both directions of both dial directions are matched: a cut drops them all (nothing
# reaches the other side, as in a real partition: a one-way drop would still let the
# acceptor's pushes through until the window filled), a lossy link drops a share of them.


@dataclass(frozen=True)
class Peer:
    """One end of a link: its address, and its process group if it has one of its own."""

    host: str
    gid: int | None = None


def connmark_rules(gid: int, comment: str) -> list[list[str]]:
    """The mangle-table rule specs (after -A/-D) that mark each connection a process of
    group `gid` dials with `gid` (its conntrack mark): who dialed a connection, which the
    acceptor's own packets on it do not say."""
    return [
        ["OUTPUT", "-m", "owner", "--gid-owner", str(gid), "-m", "conntrack", "--ctstate",
         "NEW", "-m", "comment", "--comment", comment, "-j", "CONNMARK", "--set-mark", str(gid)]
    ]  # fmt: skip


def owner_matches(a: Peer, b: Peer) -> list[list[str]]:
    """The iptables match parts that together select every packet a process with a group
    of its own sends on a link between `a` and `b` (module section above); [] when
    neither has one (the address rules see such a link whole)."""
    out: list[list[str]] = []
    for src, dst in ((a, b), (b, a)):
        if src.gid is None:
            continue
        own = ["-m", "owner", "--gid-owner", str(src.gid)]
        out.append([*own, "-d", f"{_host(dst.host)}/32"])
        if dst.gid is not None:
            out.append([*own, "-m", "connmark", "--mark", str(dst.gid)])
    return out


def owner_cut_rules(a: Peer, b: Peer, comment: str) -> list[list[str]]:
    """The filter-table OUTPUT rule specs that drop the link between `a` and `b`."""
    tail = ["-m", "comment", "--comment", comment, "-j", "DROP"]
    return [["OUTPUT", *m, *tail] for m in owner_matches(a, b)]


def owner_loss_rules(a: Peer, b: Peer, loss_percent: float, comment: str) -> list[list[str]]:
    """The filter-table OUTPUT rule specs that drop `loss_percent` of the link's packets."""
    p = f"{loss_percent / 100:.4f}"
    tail = ["-m", "statistic", "--mode", "random", "--probability", p,
            "-m", "comment", "--comment", comment, "-j", "DROP"]  # fmt: skip
    return [["OUTPUT", *m, *tail] for m in owner_matches(a, b)]


#: The packet mark (`MARK`) that steers an owner-matched link into the netem band (fw filter).
NETEM_MARK = 0xB637


def owner_netem_rules(a: Peer, b: Peer, comment: str) -> list[list[str]]:
    """The mangle-table OUTPUT rule specs that mark the link's packets `NETEM_MARK`."""
    tail = ["-m", "comment", "--comment", comment, "-j", "MARK", "--set-mark", str(NETEM_MARK)]
    return [["OUTPUT", *m, *tail] for m in owner_matches(a, b)]


def fw_filter() -> list[str]:
    """The `tc filter add` arguments that send packets marked `NETEM_MARK` to netem."""
    return ["filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "2",
            "handle", str(NETEM_MARK), "fw", "flowid", f"1:{_NETEM_BAND}"]  # fmt: skip


_owner_probe: list[str | None] = []


def _probe_owner(netns: str) -> str | None:
    probe = Peer("127.0.0.2", 1), Peer("127.0.0.3", 2)
    specs = [
        ("mangle", connmark_rules(1, "probe")[0]),
        ("filter", owner_cut_rules(*probe, "probe")[1]),
        ("filter", owner_loss_rules(*probe, 50, "probe")[0]),
    ]
    for table, spec in specs:
        done = subprocess.run(["ip", "netns", "exec", netns, "iptables", "-t", table, "-A",
                               *spec], capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode != 0:
            return (
                "iptables cannot match a socket's owner group and connection mark here "
                f"(owner/conntrack/connmark/statistic: {done.stderr.strip()})"
            )
    return None


def owner_unavailable_reason() -> str | None:
    """Why links cannot be cut by process group here (None: they can): root, iptables,
    and its owner, conntrack/connmark and statistic matches. Probed once, in a network
    namespace of its own (`_probed`)."""
    return _probed(
        _owner_probe, "iptables",
        "cutting a stock process's links needs iptables (its owner match)", _probe_owner,
    )  # fmt: skip


class OwnerRules:
    """iptables rules added under one comment; `heal()` removes exactly them and keeps
    what the filter-table ones dropped (`dropped`)."""

    def __init__(self, what: str) -> None:
        self.comment = f"bgchaos-{what}-{os.getpid()}-{next(_LINKS)}"
        self._rules: list[tuple[str, list[str]]] = []
        self.dropped: int | None = None

    def add(self, table: str, specs: Iterable[list[str]]) -> None:
        specs = list(specs)
        if specs and shutil.which("iptables") is None:
            raise RuntimeError("cutting a stock process's links needs iptables")
        for spec in specs:
            subprocess.run(["iptables", "-t", table, "-A", *spec], capture_output=True,
                           text=True, check=True)  # fmt: skip
            self._rules.append((table, spec))

    def heal(self) -> None:
        if any(table == "filter" for table, _ in self._rules):
            self.dropped = _dropped(self.comment)
        while self._rules:
            table, spec = self._rules.pop()
            subprocess.run(["iptables", "-t", table, "-D", *spec], capture_output=True,
                           check=False)  # fmt: skip


class ConnMarks(OwnerRules):
    """The connection marks of a target's process groups (`connmark_rules`), in place
    from before its first process starts until it stops: a link's dialer is known only
    from its first packet."""

    def __init__(self, gids: Iterable[int]) -> None:
        super().__init__("connmark")
        self.add("mangle", (spec for gid in gids for spec in connmark_rules(gid, self.comment)))


class NodeGroups:
    """A target's nodes told apart by process group (module section above): what the
    `rocketmq` and `local-rocketmq` targets share. `enabled` says whether this machine can
    match owners (`owner_unavailable_reason`): only then do their processes get groups of
    their own, and without it their link faults refuse to run rather than cut nothing
    (`faults.target_unavailable_reason`). `mark(gids)` puts the connection marks in place
    before the first process starts; `unmark()` removes them once the target is down."""

    def __init__(self) -> None:
        self.enabled = owner_unavailable_reason() is None
        self._marks: ConnMarks | None = None

    def mark(self, gids: Iterable[int]) -> None:
        if self.enabled and self._marks is None:
            self._marks = ConnMarks(gids)

    def unmark(self) -> None:
        if self._marks is not None:
            self._marks.heal()
            self._marks = None
