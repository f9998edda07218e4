"""Services for the cluster tier: cluster DNS and ClusterIP routing.

What CoreDNS's kubernetes plugin and kube-proxy give a real cluster, owned by
the tier (docs/development.md):

- `ServiceView` — a pure function of the Services and EndpointSlices: the A
  records of the Kubernetes DNS spec (`svc.ns.svc.cluster.local` → the
  ClusterIP, or a headless Service's ready endpoints; `host.svc.ns.svc…` →
  the endpoint with that hostname, as StatefulSet pods get;
  `a-b-c-d.ns.pod.cluster.local`) and each ClusterIP port's backends;
- `ServiceWatch` — list+watch of Services and EndpointSlices that keeps a
  `ServiceView` current;
- `DnsServer` — UDP on the DNS Service's ClusterIP, port 53; names outside
  the cluster domain get NXDOMAIN (the tier has no upstream);
- `ServiceProxy` — kube-proxy's old userspace mode: a TCP listener on every
  ClusterIP:port, each connection to a ready backend chosen at random.
  The `kubernetes` Service routes to the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import random
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("cluster-services")

Backend = tuple[str, int]
TTL_S = 5


@dataclass(frozen=True)
class ServiceView:
    """DNS records and ClusterIP backends from plain Service/EndpointSlice dicts."""

    records: Mapping[str, tuple[str, ...]]
    backends: Mapping[Backend, tuple[Backend, ...]]
    domain: str = "cluster.local"

    @classmethod
    def build(
        cls,
        services: list[dict[str, Any]],
        slices: list[dict[str, Any]],
        extra_backends: Mapping[Backend, tuple[Backend, ...]] | None = None,
        domain: str = "cluster.local",
    ) -> ServiceView:
        by_service: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for s in slices:
            meta = s.get("metadata") or {}
            owner = (meta.get("labels") or {}).get("kubernetes.io/service-name")
            if owner:
                by_service.setdefault((meta.get("namespace", ""), owner), []).append(s)
        records: dict[str, list[str]] = {}
        backends: dict[Backend, list[Backend]] = {}
        for svc in services:
            meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
            ns, name = meta.get("namespace", ""), meta.get("name", "")
            fqdn = f"{name}.{ns}.svc.{domain}"
            cluster_ip = spec.get("clusterIP")
            endpoints = [
                (e, s.get("ports") or [])
                for s in by_service.get((ns, name), [])
                for e in s.get("endpoints") or []
                if (e.get("conditions") or {}).get("ready") is not False
            ]
            if cluster_ip and cluster_ip != "None":
                records[fqdn] = [cluster_ip]
                for port in spec.get("ports") or []:
                    if port.get("protocol", "TCP") != "TCP":
                        continue
                    key = (cluster_ip, int(port["port"]))
                    for endpoint, slice_ports in endpoints:
                        target = _slice_port(slice_ports, port.get("name") or "")
                        if target is not None:
                            for address in endpoint.get("addresses") or []:
                                backends.setdefault(key, []).append((address, target))
            else:
                ips = [a for e, _ in endpoints for a in e.get("addresses") or []]
                if ips:
                    records[fqdn] = ips
                for endpoint, _ in endpoints:
                    host = endpoint.get("hostname")
                    if host:
                        records[f"{host}.{fqdn}"] = list(endpoint.get("addresses") or [])
        for key, extra in (extra_backends or {}).items():
            backends[key] = list(extra)
        return cls(
            {k: tuple(sorted(set(v))) for k, v in records.items()},
            {k: tuple(sorted(set(v))) for k, v in backends.items()},
            domain,
        )

    def resolve(self, name: str) -> tuple[str, ...] | None:
        """The A records of `name`, or None when the name does not exist (NXDOMAIN)."""
        name = name.rstrip(".").lower()
        found = self.records.get(name)
        if found is not None:
            return found
        pod_suffix = f".pod.{self.domain}"
        if name.endswith(pod_suffix):
            label = name[: -len(pod_suffix)].split(".")[0]
            with contextlib.suppress(ValueError):
                return (str(ipaddress.IPv4Address(label.replace("-", "."))),)
        return None


def _slice_port(ports: list[dict[str, Any]], name: str) -> int | None:
    for p in ports:
        if (p.get("name") or "") == name and p.get("port") is not None:
            return int(p["port"])
    return None


def answer(view: ServiceView, query: dns.message.Message) -> dns.message.Message:
    """The response to one DNS query (A records; other types answer with no data)."""
    response = dns.message.make_response(query)
    response.flags |= dns.flags.AA
    for question in query.question:
        found = view.resolve(question.name.to_text())
        if found is None:
            response.set_rcode(dns.rcode.NXDOMAIN)
            continue
        if question.rdtype in (dns.rdatatype.A, dns.rdatatype.ANY):
            response.answer.append(
                dns.rrset.from_text_list(question.name, TTL_S, dns.rdataclass.IN, "A", list(found))
            )
    return response


@dataclass
class ServiceWatch:
    """Keeps a `ServiceView` current from the API server (list, then watch; relist on error)."""

    api: client.ApiClient
    extra_backends: Mapping[Backend, tuple[Backend, ...]]
    on_change: Callable[[ServiceView], None]
    view: ServiceView = field(default_factory=lambda: ServiceView({}, {}))
    _services: dict[str, dict[str, Any]] = field(default_factory=dict)
    _slices: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        core, discovery = client.CoreV1Api(self.api), client.DiscoveryV1Api(self.api)
        for store, lister in (
            (self._services, core.list_service_for_all_namespaces),
            (self._slices, discovery.list_endpoint_slice_for_all_namespaces),
        ):
            threading.Thread(target=self._reflect, args=(store, lister), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _reflect(self, store: dict[str, dict[str, Any]], lister: Any) -> None:
        while not self._stop.is_set():
            try:
                listed = lister()
                with self._lock:
                    store.clear()
                    for item in listed.items:
                        store[item.metadata.uid] = self.api.sanitize_for_serialization(item)
                self._rebuild()
                for event in watch.Watch().stream(
                    lister, resource_version=listed.metadata.resource_version, timeout_seconds=60
                ):
                    if self._stop.is_set():
                        return
                    obj = event["object"]
                    with self._lock:
                        if event["type"] == "DELETED":
                            store.pop(obj.metadata.uid, None)
                        else:
                            store[obj.metadata.uid] = self.api.sanitize_for_serialization(obj)
                    self._rebuild()
            except Exception as exc:  # relist after API hiccups and expired versions
                if not self._stop.is_set() and not (
                    isinstance(exc, ApiException) and exc.status == 410
                ):
                    log.warning("service watch: %s; relisting", exc)
                self._stop.wait(0.2)

    def _rebuild(self) -> None:
        with self._lock:
            view = ServiceView.build(
                list(self._services.values()), list(self._slices.values()), self.extra_backends
            )
            changed = view != self.view
            self.view = view
        if changed:
            self.on_change(view)


class DnsServer:
    """Cluster DNS over UDP, answered from the current `ServiceView`."""

    def __init__(self, address: str, view: Callable[[], ServiceView], port: int = 53) -> None:
        self.view = view
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, port))
        self.sock.settimeout(0.5)
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._serve, name="cluster-dns", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self.sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                query = dns.message.from_wire(data)
            except Exception:  # not DNS: nothing to answer
                continue
            with contextlib.suppress(OSError):
                self.sock.sendto(answer(self.view(), query).to_wire(), peer)


class ServiceProxy:
    """A TCP listener per ClusterIP:port forwarding each connection to a ready backend."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.backends: dict[Backend, tuple[Backend, ...]] = {}
        self.servers: dict[Backend, asyncio.Server] = {}
        self._syncing: asyncio.Lock | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, name="svc-proxy", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        async def close() -> None:
            for server in self.servers.values():
                server.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def update(self, view: ServiceView) -> None:
        asyncio.run_coroutine_threadsafe(self._sync(dict(view.backends)), self.loop)

    async def _sync(self, backends: dict[Backend, tuple[Backend, ...]]) -> None:
        if self._syncing is None:
            self._syncing = asyncio.Lock()
        async with self._syncing:  # one pass at a time, in the order the views came
            await self._sync_now(backends)

    async def _sync_now(self, backends: dict[Backend, tuple[Backend, ...]]) -> None:
        self.backends = backends
        for key in [k for k in self.servers if k not in backends]:
            self.servers.pop(key).close()
        for key in backends:
            if key not in self.servers:
                try:
                    self.servers[key] = await asyncio.start_server(
                        lambda r, w, k=key: self._forward(k, r, w), key[0], key[1]
                    )
                except OSError as exc:
                    log.warning("cannot listen on %s:%s: %s", *key, exc)

    async def _forward(
        self, key: Backend, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        choices = self.backends.get(key, ())
        if not choices:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*random.choice(choices)), 3.0
            )
        except (OSError, TimeoutError):
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()


@dataclass
class ClusterServices:
    """DNS server, Service proxy and the watch that feeds both."""

    api: client.ApiClient
    dns_address: str
    kubernetes_service: Backend
    apiserver: Backend
    proxy: ServiceProxy = field(default_factory=ServiceProxy)
    watch: ServiceWatch | None = None
    dns: DnsServer | None = None

    def start(self) -> None:
        self.proxy.start()
        self.watch = ServiceWatch(
            self.api, {self.kubernetes_service: (self.apiserver,)}, self.proxy.update
        )
        self.dns = DnsServer(self.dns_address, lambda: self._view())
        self.dns.start()
        self.watch.start()

    def _view(self) -> ServiceView:
        return self.watch.view if self.watch is not None else ServiceView({}, {})

    def resolve(self, name: str) -> tuple[str, ...] | None:
        return self._view().resolve(name)

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        if self.dns is not None:
            self.dns.stop()
        self.proxy.stop()
