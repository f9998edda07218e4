"""The subscription-group codes of the broker's remoting port (AdminBrokerProcessor):
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (a SubscriptionGroupConfig body),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (a SubscriptionGroupWrapper body) and
DELETE_SUBSCRIPTIONGROUP (groupName), over the broker's `BrokerMetadata` (metadata/): a
change is written durably and replicated to the slaves before it is answered.

The settings this broker acts on (docs/rocketmq-compatibility.md): `consumeEnable` false
refuses the group's pulls NO_PERMISSION (`guard_pull`, PullMessageProcessor's check), and
`retryMaxTimes` sends a message to the group's DLQ when a send-back names no
maxReconsumeTimes of its own (`retry_max_times`). A group without a config is served as
before (RocketMQ's autoCreateSubscriptionGroup); the others are kept and served as given.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from brokergroup_broker.metadata import (
    BadMetadata,
    BrokerMetadata,
    MetadataError,
    MetadataFull,
    SubscriptionGroupConfig,
)
from brokergroup_broker.metadata.attributes import GROUP_ATTRIBUTES, alter
from brokergroup_remoting import RemotingCommand, ResponseCode, names
from brokergroup_remoting.body import decode_json_object, json_body
from brokergroup_remoting.command import response_to
from brokergroup_remoting.net import Connection

#: A pull handler (`pulls.Pulls.pull_message`).
PullHandler = Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupAdmin:
    """Handlers of the subscription-group codes, and the group settings other parts read."""

    def __init__(self, metadata: BrokerMetadata, *, wall_ms: Callable[[], int] = _wall_ms) -> None:
        self._metadata = metadata
        self._wall_ms = wall_ms

    def retry_max_times(self, group: str) -> int | None:
        """The group's retryMaxTimes (None: the group has no config)."""
        config = self._metadata.groups.get(group)
        return None if config is None else config.retry_max_times

    async def update_and_create(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: the body's config replaces the group's; its
        `attributes` are a modification (`+key` keys, as mqadmin's --attributes), checked
        against the keys RocketMQ knows for groups (none)."""
        data = decode_json_object(cmd.body, "SubscriptionGroupConfig")
        modification = data.get("attributes") or {}
        try:
            name = names.check_group(data.get("groupName"), "the config's groupName")
            if not isinstance(modification, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in modification.items()
            ):
                raise BadMetadata("attributes is not a map of strings")
            held = self._metadata.groups.get(name)
            attributes = alter(
                {} if held is None else held.attributes,
                modification,
                create=held is None,
                rules=GROUP_ATTRIBUTES,
            )
            config = SubscriptionGroupConfig.from_json({**data, "attributes": attributes})
            self._metadata.put_group(config, self._wall_ms())
        except BadMetadata as exc:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        except MetadataFull as exc:
            return response_to(cmd, ResponseCode.SYSTEM_BUSY, str(exc))
        except MetadataError as exc:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, f"group not saved: {exc}")
        return response_to(cmd, ResponseCode.SUCCESS)

    async def all_configs(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: every group's config and the table's version."""
        table = self._metadata.groups
        return response_to(
            cmd,
            ResponseCode.SUCCESS,
            None,
            {"totalGroupNum": str(len(table))},
            json_body(table.to_json()),
        )

    async def delete(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """DELETE_SUBSCRIPTIONGROUP: the group's config is deleted (a group without one is
        served with the defaults). Its consumer offsets are kept (`cleanOffset` is not
        applied: the offset table has no per-group removal yet)."""
        group = names.group_name(cmd.fields(), "groupName")
        try:
            self._metadata.delete_group(group, self._wall_ms())
        except MetadataError as exc:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, f"group {group} not deleted: {exc}")
        return response_to(cmd, ResponseCode.SUCCESS)

    def guard_pull(
        self,
        pull: PullHandler,
        message_model: Callable[[str], str | None] = lambda _group: None,
    ) -> PullHandler:
        """`pull` behind the group's consumeEnable: a disabled group's pull is answered
        NO_PERMISSION ("subscription group no permission, <group>") before it reads; and
        behind its consumeBroadcastEnable: a pull without its own subscription (a push
        consumer's) of a group whose heartbeat says BROADCASTING (`message_model`) is
        answered NO_PERMISSION with forbiddenType BROADCASTING_DISABLE_FORBIDDEN, as
        PullMessageProcessor does."""

        async def guarded(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
            fields = cmd.fields()
            group = fields.get("consumerGroup", "")
            config = self._metadata.groups.get(group)
            if config is not None and not config.consume_enable:
                return response_to(
                    cmd, ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}"
                )
            if (
                config is not None
                and not config.consume_broadcast_enable
                and not _has_subscription(fields)
                and message_model(group) == "BROADCASTING"
            ):
                return response_to(
                    cmd,
                    ResponseCode.NO_PERMISSION,
                    f"the consumer group[{group}] can not consume by broadcast way",
                    {"forbiddenType": str(BROADCASTING_DISABLE_FORBIDDEN)},
                )
            return await pull(cmd, conn)

        return guarded


#: PullSysFlag.FLAG_SUBSCRIPTION: the pull carries its own subscription expression.
PULL_FLAG_SUBSCRIPTION = 0x4
#: ForbiddenType.BROADCASTING_DISABLE_FORBIDDEN.
BROADCASTING_DISABLE_FORBIDDEN = 4


def _has_subscription(fields: dict[str, str]) -> bool:
    try:
        return bool(int(fields.get("sysFlag", "0")) & PULL_FLAG_SUBSCRIPTION)
    except ValueError:
        return False  # the pull's own decoding answers a bad sysFlag
