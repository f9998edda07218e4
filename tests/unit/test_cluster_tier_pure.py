"""The cluster tier's pure pieces: Service DNS records, ClusterIP backends, mount-path rewriting."""

from __future__ import annotations

from typing import Any

import dns.message
import dns.rcode
import dns.rdatatype
from hypothesis import given
from hypothesis import strategies as st

from tests.cluster.tier.kubelet import path_rewriter
from tests.cluster.tier.services import ServiceView, answer


def _svc(ns: str, name: str, cluster_ip: str, ports: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name},
        "spec": {"clusterIP": cluster_ip, "ports": ports},
    }


def _slice(ns: str, svc: str, endpoints: list[dict[str, Any]], ports: list[dict[str, Any]]) -> Any:
    return {
        "metadata": {
            "namespace": ns,
            "name": f"{svc}-abc",
            "labels": {"kubernetes.io/service-name": svc},
        },
        "endpoints": endpoints,
        "ports": ports,
    }


def _ep(ip: str, ready: bool | None = True, hostname: str | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"addresses": [ip], "conditions": {"ready": ready}}
    if hostname:
        e["hostname"] = hostname
    return e


VIEW = ServiceView.build(
    [
        _svc("a", "web", "10.96.0.20", [{"name": "http", "port": 80}, {"name": "m", "port": 9}]),
        _svc("a", "peers", "None", [{"port": 9880}]),
        _svc("b", "web", "10.96.0.21", [{"port": 80, "protocol": "UDP"}]),
    ],
    [
        _slice(
            "a",
            "web",
            [_ep("10.244.0.11"), _ep("10.244.0.12", ready=False), _ep("10.244.0.13", None)],
            [{"name": "http", "port": 8080}, {"name": "m", "port": 9090}],
        ),
        _slice(
            "a",
            "peers",
            [_ep("10.244.0.31", hostname="c-0"), _ep("10.244.0.32", hostname="c-1")],
            [{"port": 9880}],
        ),
        _slice("b", "other", [_ep("10.244.0.99")], [{"port": 80}]),
    ],
    {("10.96.0.1", 443): (("127.0.0.1", 16443),)},
)


def test_records_follow_the_dns_spec() -> None:
    assert VIEW.resolve("web.a.svc.cluster.local.") == ("10.96.0.20",)
    assert VIEW.resolve("WEB.A.svc.cluster.local") == ("10.96.0.20",)
    assert VIEW.resolve("peers.a.svc.cluster.local") == ("10.244.0.31", "10.244.0.32")
    assert VIEW.resolve("c-1.peers.a.svc.cluster.local") == ("10.244.0.32",)
    assert VIEW.resolve("10-244-0-7.a.pod.cluster.local") == ("10.244.0.7",)
    assert VIEW.resolve("web.b.svc.cluster.local") == ("10.96.0.21",)
    for missing in ("web.c.svc.cluster.local", "c-2.peers.a.svc.cluster.local", "example.com"):
        assert VIEW.resolve(missing) is None, missing


def test_backends_are_ready_endpoints_on_the_named_target_port() -> None:
    assert dict(VIEW.backends) == {
        ("10.96.0.20", 80): (("10.244.0.11", 8080), ("10.244.0.13", 8080)),
        ("10.96.0.20", 9): (("10.244.0.11", 9090), ("10.244.0.13", 9090)),
        ("10.96.0.1", 443): (("127.0.0.1", 16443),),
    }


def test_answers_on_the_wire() -> None:
    query = dns.message.make_query("c-0.peers.a.svc.cluster.local", dns.rdatatype.A)
    reply = dns.message.from_wire(answer(VIEW, query).to_wire())
    assert reply.rcode() == dns.rcode.NOERROR
    assert [r.address for rrset in reply.answer for r in rrset] == ["10.244.0.31"]
    aaaa = answer(VIEW, dns.message.make_query("web.a.svc.cluster.local", dns.rdatatype.AAAA))
    assert aaaa.rcode() == dns.rcode.NOERROR and aaaa.answer == []  # the name exists, no data
    nx = answer(VIEW, dns.message.make_query("nope.a.svc.cluster.local", dns.rdatatype.A))
    assert nx.rcode() == dns.rcode.NXDOMAIN


def test_mount_paths_are_rewritten_as_whole_paths_only() -> None:
    rewrite = path_rewriter(
        {"/data": "/H/d", "/etc/bg": "/H/e", "/etc/bg/secrets/": "/H/s", "/tmp": "/H/t"}
    )
    script = 'exec x --data-dir /data --token-file /etc/bg/secrets/api-token --config "/etc/bg/c"'
    assert rewrite(script) == (
        'exec x --data-dir /H/d --token-file /H/s/api-token --config "/H/e/c"'
    )
    for untouched in ("/data2", "/x/data", "./data", "/etc/bgx/y", "data"):
        assert rewrite(untouched) == untouched
    assert rewrite("A=/tmp/z:/data") == "A=/H/t/z:/H/d"
    assert path_rewriter({})("/data") == "/data"


@given(
    st.lists(st.sampled_from(["/data", "/data2", " ", "/x", "/", "a", "/data/", "="]), max_size=8)
)
def test_rewriting_touches_nothing_but_the_mount(parts: list[str]) -> None:
    text = "".join(parts)
    rewritten = path_rewriter({"/data": "/DATA"})(text)
    assert rewritten.replace("/DATA", "/data") == text


def test_wait_for_polls_through_an_api_404_instead_of_returning_it() -> None:
    """operator_env.wait_for once returned "API 404" as the probe's answer, so waiting on an
    object that did not exist passed at once (old code: returned 'API 404' on the 1st call)."""
    from kubernetes.client.exceptions import ApiException

    from tests.cluster.operator_env import wait_for

    calls: list[int] = []

    def probe() -> str | None:
        calls.append(1)
        if len(calls) < 3:
            raise ApiException(status=404)
        return "found"

    assert wait_for("the object", probe, timeout_s=5, every_s=0.01) == "found"
    assert len(calls) == 3

    def never() -> str | None:
        raise ApiException(status=404)

    try:
        wait_for("nothing", never, timeout_s=0.05, every_s=0.01)
    except AssertionError as exc:
        assert "(last: 'API 404')" in str(exc)
    else:
        raise AssertionError("waiting on an object that never came passed")
