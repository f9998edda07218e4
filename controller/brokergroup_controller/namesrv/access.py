"""Who may make which name server request: the pure decision (DESIGN.md §11).

A request reaches this after its AccessKey/SecretKey signature verified, so its header
fields are the signer's own. The principal is what credentials.RocketMQKeys says the
AccessKey is:

- admin (the release's pair): everything.
- broker of (clusterName, brokerName): the reads, and REGISTER_BROKER, UNREGISTER_BROKER
  and BROKER_HEARTBEAT for its own group only (the header's clusterName and brokerName).
  A stolen broker pair cannot put its addresses into another group's routes. Also
  DELETE_TOPIC_IN_NAMESRV of its own cluster (a broker deleting a topic, or mqadmin
  deleteTopic signed with the group's pair): the server then deletes the topic from that
  group's registrations only (`server.NameServer.delete_topic`).
- client of a group: the reads (routes, cluster info, topic lists, data version). Routes
  are not secret to a client that may reach the brokers, and a stock client asks for the
  routes of the system topics too.
- anything else (DELETE_TOPIC_IN_NAMESRV for other groups, and a code added later): admin
  only.
"""

from __future__ import annotations

from collections.abc import Mapping

from brokergroup_controller.credentials import Principal, Role
from brokergroup_remoting import RequestCode

READS = frozenset(
    {
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.GET_TOPICS_BY_CLUSTER,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        RequestCode.QUERY_DATA_VERSION,
    }
)
BROKER_WRITES = frozenset(
    {RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.BROKER_HEARTBEAT}
)


def decide(principal: Principal | None, code: int, fields: Mapping[str, str]) -> str | None:
    """Why `principal` may not make request `code` with these header fields, or None."""
    if principal is None:
        return "the AccessKey names no principal"
    if principal.role is Role.ADMIN or code in READS:
        return None
    who = principal.describe()
    if principal.role is Role.BROKER and code == RequestCode.DELETE_TOPIC_IN_NAMESRV:
        return _own_group_deletion(principal, who, fields)
    if principal.role is not Role.BROKER or code not in BROKER_WRITES:
        return f"{who} may not make request {code} on the name server"
    named = (fields.get("clusterName", ""), fields.get("brokerName", ""))
    if named != principal.group:
        return (
            f"{who} may not act for {named[0]}/{named[1]}: a broker key pair registers "
            "only its own group"
        )
    return None


def _own_group_deletion(principal: Principal, who: str, fields: Mapping[str, str]) -> str | None:
    """A broker pair's DELETE_TOPIC_IN_NAMESRV: its own cluster (and brokerName, if named)."""
    assert principal.group is not None
    cluster, broker = principal.group
    if fields.get("clusterName", "") == cluster and fields.get("brokerName", broker) == broker:
        return None
    return (
        f"{who} may delete topics of its own group only (clusterName {cluster}, "
        f"brokerName {broker})"
    )
