"""The RocketMQ keys a controller node checks signatures against (one loader for the name
server and the controller remoting port)."""

from __future__ import annotations

from brokergroup_controller.credentials import RocketMQKeyPair, RocketMQKeys
from brokergroup_remoting.keys import read_key_file


def load_rocketmq_keys(admin_key_file: str, what: str, root: str | None) -> RocketMQKeys:
    """The release's pair in `admin_key_file` (admin) and the root of every group's pair."""
    admin = read_key_file(admin_key_file, what)
    return RocketMQKeys(RocketMQKeyPair(admin.access_key, admin.secret_key), root)
