"""RocketMQ 5.3's ACL admin codes on a built-in broker's remoting port: refused, with the way
that works (docs/security.md "Where users are checked").

`mqadmin createUser / updateUser / deleteUser / getUser / listUser / createAcl / updateAcl /
deleteAcl / getAcl / listAcl` send AUTH_CREATE_USER 3001 … AUTH_LIST_ACL 3010 to each
broker (`-b`, or every broker of `-c`), and a stock 5.3 broker keeps the user in its own
RocksDB. Here a cluster's users live in one place, the controllers' replicated state, for
every group at once, and only the release's admin credential may change them (the
controllers' users API). A broker does not forward these codes because it could not do so
safely:

- it cannot tell who is asking with admin rights: the admin pair never reaches a broker pod
  (DESIGN.md §11), so the only pairs a broker verifies are its group's and the cluster's
  users; the client pair is in every application of the group;
- forwarding with the broker's own credential would need that credential to write users
  for the whole cluster: a user made through one group's broker has rights on every group,
  so one compromised broker pod (or one application holding the group's pair) could mint a
  user with rights everywhere. The broker credential is bound to its (clusterName,
  brokerName) and may only read the users (users-snapshot), on purpose;
- the read codes would answer SecretKeys (RocketMQ's listUser/getUser carry the password) to
  whoever holds a group pair.

So each code is answered REQUEST_CODE_NOT_SUPPORTED (RocketMQ's answer to a code a broker
does not serve; mqadmin prints the remark) with a remark naming the command that does the
same thing. A request with a valid signature reaches this handler (the one auth step runs
first), an unsigned or badly signed one is refused before, as every request is.
"""

from __future__ import annotations

from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import response_to
from brokergroup_remoting.net import Connection, Handler

#: code → (mqadmin's subcommand, what does it here).
ACL_ADMIN: dict[int, tuple[str, str]] = {
    RequestCode.AUTH_CREATE_USER: ("createUser", "brokergroup admin user create"),
    RequestCode.AUTH_UPDATE_USER: ("updateUser", "brokergroup admin user update"),
    RequestCode.AUTH_DELETE_USER: ("deleteUser", "brokergroup admin user delete"),
    RequestCode.AUTH_GET_USER: ("getUser", "brokergroup admin user get"),
    RequestCode.AUTH_LIST_USER: ("listUser", "brokergroup admin user list"),
    RequestCode.AUTH_CREATE_ACL: ("createAcl", "brokergroup admin user update --allow/--deny"),
    RequestCode.AUTH_UPDATE_ACL: ("updateAcl", "brokergroup admin user update --allow/--deny"),
    RequestCode.AUTH_DELETE_ACL: ("deleteAcl", "brokergroup admin user update --allow/--deny"),
    RequestCode.AUTH_GET_ACL: ("getAcl", "brokergroup admin user get"),
    RequestCode.AUTH_LIST_ACL: ("listAcl", "brokergroup admin user list"),
}


def refusal_remark(code: int) -> str:
    """What mqadmin prints for an ACL admin code sent to a brokergroup broker."""
    subcommand, instead = ACL_ADMIN[code]
    return (
        f"mqadmin {subcommand} (request code {code}) is not served by a brokergroup broker: a "
        f"cluster's users are kept by its controllers for every group at once and only the "
        f"release's admin credential changes them; use `{instead}` (local runtime), a "
        f"BrokerGroupUser resource (Kubernetes) or the controllers' users API "
        f"(/v1/clusters/<cluster>/users, admin credential)"
    )


async def refuse(cmd: RemotingCommand, _conn: Connection) -> RemotingCommand:
    return response_to(cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, refusal_remark(cmd.code))


def table() -> dict[int, Handler]:
    """The ten codes, each refused with its remark."""
    return {int(code): refuse for code in ACL_ADMIN}
