"""CHECK_CLIENT_CONFIG (46): a consumer asks, before it starts, whether this broker can
filter by its subscription (ClientManageProcessor.checkClientConfig).

A stock consumer with a SQL92 MessageSelector sends its SubscriptionData in a
CheckClientRequestBody to every broker of the topic and refuses to start on any answer but
SUCCESS. A TAG subscription (or none) is SUCCESS; any other type is SYSTEM_ERROR "The broker
does not support consumer to filter message by <type>" unless enablePropertyFilter is on;
then an expression that does not compile (brokergroup_broker.filter) is
SUBSCRIPTION_PARSE_FAILED with the reason as the remark.
"""

from __future__ import annotations

from brokergroup_broker.filter import FilterRefused, compile_filter, is_tag_type
from brokergroup_remoting import RemotingCommand, ResponseCode
from brokergroup_remoting.body import decode_json_object
from brokergroup_remoting.command import response_to
from brokergroup_remoting.fields import BadField
from brokergroup_remoting.net import Connection


class ClientConfigCheck:
    def __init__(self, *, enable_property_filter: bool) -> None:
        self._enable_property_filter = enable_property_filter

    async def check_client_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        data = decode_json_object(cmd.body, "CheckClientRequestBody") if cmd.body else {}
        sub = data.get("subscriptionData")
        if sub is None:
            return response_to(cmd, ResponseCode.SUCCESS)
        if not isinstance(sub, dict):
            raise BadField("CheckClientRequestBody's subscriptionData is not an object")
        kind, expression = sub.get("expressionType"), sub.get("subString")
        if not (kind is None or isinstance(kind, str)) or not (
            expression is None or isinstance(expression, str)
        ):
            raise BadField("a subscription's expressionType and subString must be text")
        if is_tag_type(kind):
            return response_to(cmd, ResponseCode.SUCCESS)
        if not self._enable_property_filter:
            return response_to(
                cmd,
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {kind}",
            )
        try:
            compile_filter(kind, expression)
        except FilterRefused as exc:
            return response_to(cmd, ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        return response_to(cmd, ResponseCode.SUCCESS)
