"""Pod networking for the process kubelet: a network namespace per pod on a bridge.

What a CNI bridge plugin and kube-proxy's routing give a real node, made with
`ip` (iproute2) as root:

- a bridge (`bgtier0`, 10.244.0.1/16) on the host; every pod *incarnation*
  gets its own network namespace with `eth0` (a veth on the bridge) and a
  fresh address 10.244.x.y that is never reused in a session, and a default
  route via the bridge, so a recreated pod comes back on a new IP and two
  pods may bind the same port (even 0.0.0.0);
- the Service CIDR (10.96.0.0/24) as a `local` route on the host, so the
  tier's Service proxy and DNS server can listen on ClusterIPs and pods reach
  them through their default route;
- per pod `/etc/netns/<ns>/{resolv.conf,hosts}`, which `ip netns exec`
  bind-mounts over /etc in the container's own mount namespace (cluster DNS,
  search path, the pod's own name), and its own hostname (UTS namespace);
- `cut`/`restore`: the pod's veth down/up (a network partition of one pod).

Everything is removed by `teardown()`; the namespaces and the bridge exist only
while the tier runs.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
import shlex
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

BRIDGE = os.environ.get("BROKERGROUP_K8S_BRIDGE", "bgtier0")
POD_CIDR = ipaddress.ip_network(os.environ.get("BROKERGROUP_K8S_POD_CIDR", "10.244.0.0/16"))
SERVICE_CIDR = ipaddress.ip_network(os.environ.get("BROKERGROUP_K8S_SERVICE_CIDR", "10.96.0.0/24"))
#: The `kubernetes` Service (first address) and cluster DNS (the tenth), as in kubeadm.
KUBERNETES_SERVICE_IP = str(SERVICE_CIDR.network_address + 1)
DNS_SERVICE_IP = str(SERVICE_CIDR.network_address + 10)
CLUSTER_DOMAIN = "cluster.local"
GATEWAY = str(POD_CIDR.network_address + 1)
_NETNS_ETC = Path("/etc/netns")


def unavailable_reason() -> str | None:
    """Why pod network namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "the cluster tier needs root (a network namespace per pod, a bridge, routes)"
    if shutil.which("ip") is None:
        return "the cluster tier needs iproute2's `ip` (a network namespace per pod)"
    return None


def _bridge_mac(gateway: str) -> str:
    """A fixed, locally administered MAC for the bridge, from the gateway address."""
    return "02:42:" + ":".join(f"{b:02x}" for b in ipaddress.ip_address(gateway).packed[-4:])


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


@dataclass
class PodAttachment:
    """One pod incarnation's network identity."""

    netns: str
    ip: str
    host_veth: str
    hostname: str


@dataclass
class PodNetwork:
    """The host side: bridge, Service route, and every pod namespace made."""

    #: Namespace names are global (/run/netns); the tier's PID keeps two tiers apart.
    prefix: str = field(default_factory=lambda: f"bgpod{os.getpid()}")
    attachments: dict[str, PodAttachment] = field(default_factory=dict)
    _hosts: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _pod_ips: itertools.islice[ipaddress.IPv4Address | ipaddress.IPv6Address] = field(
        default_factory=lambda: itertools.islice(POD_CIDR.hosts(), 9, None)
    )
    _host_ips: itertools.count[int] = field(default_factory=lambda: itertools.count(2))

    def setup(self) -> None:
        self._remove_leftovers()
        # A bridge with no address of its own takes its ports' lowest MAC, so a
        # pod joining or leaving would move the gateway's MAC under every pod
        # that had resolved it (dropped until their ARP entries go stale).
        _ip("link", "add", BRIDGE, "address", _bridge_mac(GATEWAY), "type", "bridge")
        _ip("addr", "add", f"{GATEWAY}/{POD_CIDR.prefixlen}", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        _ip("route", "add", "local", str(SERVICE_CIDR), "dev", "lo", "table", "local")

    def teardown(self) -> None:
        with self._lock:
            attachments = list(self.attachments.values())
            self.attachments.clear()
        for a in attachments:
            self._delete(a)
        _ip("route", "del", "local", str(SERVICE_CIDR), "dev", "lo", "table", "local", check=False)
        _ip("link", "del", BRIDGE, check=False)

    def _remove_leftovers(self) -> None:
        """A tier killed without teardown leaves its namespaces and bridge; remove them."""
        listed = _ip("netns", "list", check=False).stdout.split("\n")
        for line in listed:
            name = line.split(" ")[0]
            owner = re.fullmatch(r"bgpod(\d+)-\d+", name)
            if owner and not Path(f"/proc/{owner.group(1)}").exists():
                _ip("netns", "del", name, check=False)
                shutil.rmtree(_NETNS_ETC / name, ignore_errors=True)
        _ip("route", "del", "local", str(SERVICE_CIDR), "dev", "lo", "table", "local", check=False)
        _ip("link", "del", BRIDGE, check=False)

    def attach(self, key: str, hostname: str, fqdn: str | None, namespace: str) -> PodAttachment:
        """A new namespace and address for one pod incarnation (`key`: the pod UID)."""
        n = next(self._counter)
        ip = str(next(self._pod_ips))
        netns, host_veth = f"{self.prefix}-{n}", f"bgv{n}"
        _ip("netns", "add", netns)
        _ip("link", "add", host_veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("link", "set", host_veth, "master", BRIDGE, "up")
        for args in (
            ("link", "set", "lo", "up"),
            ("addr", "add", f"{ip}/{POD_CIDR.prefixlen}", "dev", "eth0"),
            ("link", "set", "eth0", "up"),
            ("route", "add", "default", "via", GATEWAY),
        ):
            _ip("-n", netns, *args)
        etc = _NETNS_ETC / netns
        etc.mkdir(parents=True, exist_ok=True)
        search = f"{namespace}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}"
        (etc / "resolv.conf").write_text(
            f"nameserver {DNS_SERVICE_IP}\nsearch {search}\noptions ndots:5\n"
        )
        names = " ".join(n for n in (fqdn, hostname) if n)
        (etc / "hosts").write_text(
            f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n{ip}\t{names}\n"
        )
        attachment = PodAttachment(netns, ip, host_veth, hostname)
        with self._lock:
            self.attachments[key] = attachment
        return attachment

    def detach(self, key: str) -> None:
        with self._lock:
            attachment = self.attachments.pop(key, None)
        if attachment is not None:
            self._delete(attachment)

    @staticmethod
    def _delete(a: PodAttachment) -> None:
        _ip("netns", "del", a.netns, check=False)  # its veth pair goes with it
        _ip("link", "del", a.host_veth, check=False)
        shutil.rmtree(_NETNS_ETC / a.netns, ignore_errors=True)

    def wrap(self, attachment: PodAttachment, argv: list[str], binds: dict[str, str]) -> list[str]:
        """argv run inside the pod's network namespace, own UTS name and bind mounts.

        `ip netns exec` gives the process a private mount namespace with the
        pod's /etc files; `binds` (host directory → path in the container,
        e.g. the service-account token at /var/run/secrets/…) are mounted in
        it. Every step execs, so the container keeps the PID the kubelet saw.
        """
        script = [f"echo {_quote(attachment.hostname)} > /proc/sys/kernel/hostname"]
        for source, target in binds.items():
            Path(target).mkdir(parents=True, exist_ok=True)  # a mount point on the host
            script.append(f"mount --bind {_quote(source)} {_quote(target)}")
        script.append('exec "$@"')
        return [
            "ip", "netns", "exec", attachment.netns,
            "unshare", "--uts", "--",
            "/bin/sh", "-ec", "; ".join(script), "pod-init", *argv,
        ]  # fmt: skip

    def exec_argv(self, attachment: PodAttachment, argv: list[str]) -> list[str]:
        """An exec probe's command inside the pod's network namespace."""
        return ["ip", "netns", "exec", attachment.netns, *argv]

    def cut(self, attachment: PodAttachment) -> None:
        _ip("link", "set", attachment.host_veth, "down")

    def restore(self, attachment: PodAttachment) -> None:
        _ip("link", "set", attachment.host_veth, "up")

    def host_address(self) -> str:
        """A further address of the host on the bridge: processes of the test that pods reach."""
        with self._lock:
            address = str(POD_CIDR.broadcast_address - 255 + next(self._host_ips))
            _ip("addr", "add", f"{address}/32", "dev", BRIDGE)
            self._hosts.append(address)
        return address


def _quote(value: str) -> str:
    return shlex.quote(value)
