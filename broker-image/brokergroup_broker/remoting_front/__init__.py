"""The broker's RocketMQ remoting port (issue 19 item 3; docs/rocketmq-compatibility.md).

`wire` decodes headers and bodies (pure), `clients` keeps consumer groups and queue locks
(pure), `front.RemotingFront` answers each request code over the one produce/pull path
through its parts (`sends`, `pulls`, `consumers`, `topics`, `admin_queries`,
`broker_status`), `server.RemotingFrontServer` serves it on `brokergroup_remoting.net`, and
`namesrv_link.NameServerLink` registers the broker with the name servers.
"""

from brokergroup_broker.remoting_front.front import FrontSettings, RemotingFront
from brokergroup_broker.remoting_front.namesrv_link import NameServerLink, Registration
from brokergroup_broker.remoting_front.server import RemotingFrontServer

__all__ = [
    "FrontSettings",
    "NameServerLink",
    "Registration",
    "RemotingFront",
    "RemotingFrontServer",
]
