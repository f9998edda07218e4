"""The metadata codes on the broker's remoting port, in RocketMQ 5.3.1's formats, over real
sockets against a confirmed master with a real store and its `BrokerMetadata` in a temp
dir (issue 33 item 3):

- UPDATE_AND_CREATE_TOPIC (17) with CreateTopicRequestHeader as mqadmin updateTopic sends
  it keeps perm, order, topicFilterType and attributes; GET_ALL_TOPIC_CONFIG (21) answers
  TopicConfigAndMappingSerializeWrapper with the table's DataVersion and totalTopicNum; both
  are on disk before the answer (a reopened table has them);
- UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) takes fastjson's SubscriptionGroupConfig,
  GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) answers SubscriptionGroupWrapper,
  DELETE_SUBSCRIPTIONGROUP (207) deletes; DELETE_TOPIC_IN_BROKER (215) deletes a topic;
- a group's settings act: consumeEnable false refuses its pulls NO_PERMISSION, retryMaxTimes
  sends a send-back without maxReconsumeTimes to the DLQ;
- the metadata writes are admin rights (the client pair is refused);
- the name server lets a broker pair delete topics of its own group only (216).

On the old code (08e4c59) 200, 201, 207 and 215 answer REQUEST_CODE_NOT_SUPPORTED, 17
drops perm/order/attributes and keeps nothing on disk, and a broker pair's 216 is refused.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from brokergroup_broker.core.broker import Broker
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.remoting_keys import admin_refusal
from brokergroup_broker.metadata import BrokerMetadata
from brokergroup_broker.protocol.messages import BrokerError, ProduceMessage
from brokergroup_broker.remoting_front import FrontSettings, RemotingFront, RemotingFrontServer
from brokergroup_controller.credentials import RocketMQKeyPair, RocketMQKeys, Role
from brokergroup_controller.namesrv.serve import broker_group_of, name_server_auth
from brokergroup_controller.namesrv.server import NameServer
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient, ServerAuth
from tests.unit.confirmed_master import confirmed_master
from tests.unit.test_namesrv_server import GOOD, ROOT, Groups, _pair, json_body, register_fields

ACCESS_KEY, SECRET_KEY = "brokerAK01", "brokerSecret-0123"


@dataclass
class Port:
    broker: Broker
    server: RemotingFrontServer
    client: RemotingClient
    root: Path

    async def ask(self, cmd: RemotingCommand) -> RemotingCommand:
        return await self.client.invoke(cmd, 5.0)


@pytest.fixture
async def port(tmp_path: Path) -> AsyncIterator[Port]:
    """Broker 1, confirmed master of {1}, its remoting port over its own metadata."""
    config = BrokerConfig()
    async with confirmed_master(tmp_path, config) as m:
        broker, parts = m.broker, m.parts
        front = RemotingFront(
            parts.produce,
            FrontSettings("C", "broker-a", ("127.0.0.1", 10911), False),
            metadata=broker.metadata,
        )
        server = RemotingFrontServer(front, ServerAuth({ACCESS_KEY: SECRET_KEY}.get))
        await server.start("127.0.0.1", 0)
        client = await RemotingClient.connect(
            f"127.0.0.1:{server.port}", credentials=Credentials(ACCESS_KEY, SECRET_KEY)
        )
        yield Port(broker, server, client, tmp_path)
        await client.close()
        await server.close()


#: CreateTopicRequestHeader as mqadmin updateTopic -r 3 -w 3 -p 4 -o true sends it.
CREATE = {
    "topic": "Orders", "defaultTopic": "TBW102", "readQueueNums": "3", "writeQueueNums": "3",
    "perm": "4", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "true",
    "attributes": "+message.type=FIFO",
}  # fmt: skip
#: SubscriptionGroupConfig as mqadmin updateSubGroup -g billing -r 0 -s true writes it.
GROUP = {
    "attributes": {}, "brokerId": 0, "consumeBroadcastEnable": False, "consumeEnable": True,
    "consumeFromMinEnable": False, "consumeMessageOrderly": False, "consumeTimeoutMinute": 15,
    "groupName": "billing", "groupRetryPolicy": {"type": "CUSTOMIZED"}, "groupSysFlag": 0,
    "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 0, "retryQueueNums": 1,
    "whichBrokerWhenConsumeSlowly": 1,
}  # fmt: skip


REPLY_TOPIC = {
    "attributes": {}, "order": False, "perm": 6, "readQueueNums": 1,
    "topicFilterType": "SINGLE_TAG", "topicName": "C_REPLY_TOPIC", "topicSysFlag": 0,
    "writeQueueNums": 1,
}  # fmt: skip


async def test_topic_admin_codes_keep_rocketmqs_fields_durably(port: Port) -> None:
    answer = await port.ask(request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, CREATE))
    assert answer.code == ResponseCode.SUCCESS, answer
    answer = await port.ask(request(RequestCode.GET_ALL_TOPIC_CONFIG, 0, None))
    # With the cluster's reply topic every broker serves from its start (replies.py).
    assert answer.code == ResponseCode.SUCCESS and answer.fields()["totalTopicNum"] == "2"
    body = json.loads(answer.body)
    expected = {
        "attributes": {"message.type": "FIFO"}, "order": True, "perm": 4, "readQueueNums": 3,
        "topicFilterType": "SINGLE_TAG", "topicName": "Orders", "topicSysFlag": 0,
        "writeQueueNums": 3,
    }  # fmt: skip
    assert body["topicConfigTable"] == {"C_REPLY_TOPIC": REPLY_TOPIC, "Orders": expected}
    assert body["dataVersion"]["counter"] == 1 and body["topicQueueMappingDetailMap"] == {}
    # The same request again changes nothing (RocketMQ's idempotent update).
    await port.ask(request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, CREATE))
    assert port.broker.metadata is not None
    assert port.broker.metadata.topics.version.counter == 1
    # On disk before the answer.
    assert BrokerMetadata(port.root).topics.entries["Orders"].to_json() == expected
    # A changed attribute that may not change is refused, nothing changes.
    bad = {**CREATE, "attributes": "+queue.type=BatchCQ"}
    answer = await port.ask(request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, bad))
    assert answer.code == ResponseCode.SYSTEM_ERROR and "unchangeable" in (answer.remark or "")
    answer = await port.ask(request(RequestCode.DELETE_TOPIC_IN_BROKER, 0, {"topic": "Orders"}))
    assert answer.code == ResponseCode.SUCCESS, answer
    answer = await port.ask(request(RequestCode.GET_ALL_TOPIC_CONFIG, 0, None))
    assert json.loads(answer.body)["topicConfigTable"] == {"C_REPLY_TOPIC": REPLY_TOPIC}
    assert "Orders" not in BrokerMetadata(port.root).topics


async def test_subscription_group_codes_in_rocketmqs_bodies(port: Port) -> None:
    body = json.dumps(GROUP).encode()
    answer = await port.ask(request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 0, {}, body))
    assert answer.code == ResponseCode.SUCCESS, answer
    answer = await port.ask(request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 0, {}))
    assert answer.code == ResponseCode.SUCCESS and answer.fields()["totalGroupNum"] == "1"
    wrapper = json.loads(answer.body)
    assert wrapper["subscriptionGroupTable"] == {"billing": GROUP}
    assert wrapper["forbiddenTable"] == {} and wrapper["dataVersion"]["counter"] == 1
    assert BrokerMetadata(port.root).groups.entries["billing"].to_json() == GROUP
    for bad in ({**GROUP, "groupName": "a b"}, {**GROUP, "attributes": {"+x": "1"}},
                {**GROUP, "retryQueueNums": "many"}):  # fmt: skip
        cmd = request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 0, {},
                      json.dumps(bad).encode())  # fmt: skip
        assert (await port.ask(cmd)).code == ResponseCode.SYSTEM_ERROR
    delete = request(RequestCode.DELETE_SUBSCRIPTIONGROUP, 0, {"groupName": "billing"})
    assert (await port.ask(delete)).code == ResponseCode.SUCCESS
    answer = await port.ask(request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 0, {}))
    assert json.loads(answer.body)["subscriptionGroupTable"] == {}
    assert json.loads(answer.body)["dataVersion"]["counter"] == 2


async def test_a_groups_settings_act_on_pulls_and_send_backs(port: Port) -> None:
    produce = port.broker.parts.produce if port.broker.parts else None
    assert produce is not None
    await port.ask(request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, CREATE | {"perm": "6"}))
    sent = await produce.send_messages("Orders", 0, [ProduceMessage("Orders", b"m")])
    pull = {
        "consumerGroup": "billing", "topic": "Orders", "queueId": "0", "queueOffset": "0",
        "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
        "subVersion": "0",
    }  # fmt: skip
    answer = await port.ask(request(RequestCode.PULL_MESSAGE, 0, pull))
    assert answer.code == ResponseCode.SUCCESS, answer  # no config: served as before
    disabled = {**GROUP, "consumeEnable": False}
    await port.ask(request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 0, {},
                           json.dumps(disabled).encode()))  # fmt: skip
    answer = await port.ask(request(RequestCode.PULL_MESSAGE, 0, pull))
    assert (answer.code, answer.remark) == (
        ResponseCode.NO_PERMISSION,
        "subscription group no permission, billing",
    )
    # retryMaxTimes 0: the first send-back (no maxReconsumeTimes) goes to the DLQ.
    back = {"offset": str(sent.messages[0].physical_offset), "group": "billing", "delayLevel": "0"}
    answer = await port.ask(request(RequestCode.CONSUMER_SEND_MSG_BACK, 0, back))
    assert answer.code == ResponseCode.SUCCESS, answer
    served = port.server.front.topics()
    assert ("%DLQ%billing" in served, "%RETRY%billing" in served) == (True, False)
    # The DLQ topic's config was written with it (a failover keeps it routable).
    assert "%DLQ%billing" in BrokerMetadata(port.root).topics


def test_metadata_writes_are_admin_rights() -> None:
    for code in (RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER,
                 RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                 RequestCode.DELETE_SUBSCRIPTIONGROUP):  # fmt: skip
        assert admin_refusal(Role.CLIENT, code) is not None
        assert admin_refusal(Role.BROKER, code) is None
    assert admin_refusal(Role.CLIENT, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG) is None


async def test_a_broker_pair_deletes_its_own_groups_topic_from_the_name_server() -> None:
    """DELETE_TOPIC_IN_NAMESRV signed with broker-a's pair (mqadmin deleteTopic -c, or the
    broker after DELETE_TOPIC_IN_BROKER) takes the topic out of broker-a's routes only."""
    keys = RocketMQKeys(RocketMQKeyPair(GOOD.access_key, GOOD.secret_key), ROOT)
    server = NameServer(Groups(), auth=name_server_auth(keys),
                        broker_group_of=lambda key: broker_group_of(keys, key))  # fmt: skip
    await server.start("127.0.0.1", 0)
    address = f"127.0.0.1:{server.port}"
    clients: list[RemotingClient] = []
    try:
        for name in ("broker-a", "broker-b"):
            fields = {**register_fields(f"127.0.0.1:{10911 if name == 'broker-a' else 10921}", 0),
                      "brokerName": name}  # fmt: skip
            client = await RemotingClient.connect(address, credentials=_pair(Role.BROKER, name))
            clients.append(client)
            reg = request(RequestCode.REGISTER_BROKER, 0, fields, json_body("orders", "x"))
            assert (await client.invoke(reg, 5)).code == ResponseCode.SUCCESS
        delete = {"topic": "orders", "clusterName": "DefaultCluster"}
        answer = await clients[0].invoke(request(RequestCode.DELETE_TOPIC_IN_NAMESRV, 0, delete), 5)
        assert answer.code == ResponseCode.SUCCESS, answer
        held = sorted((r.broker_name, sorted(r.topics)) for r in server.registry)
        assert held == [("broker-a", ["x"]), ("broker-b", ["orders", "x"])]
        other = {**delete, "brokerName": "broker-b"}
        answer = await clients[0].invoke(request(RequestCode.DELETE_TOPIC_IN_NAMESRV, 0, other), 5)
        assert answer.code == ResponseCode.NO_PERMISSION
    finally:
        for client in clients:
            await client.close()
        await server.close()


async def test_sends_spread_over_the_topics_configured_write_queues(port: Port) -> None:
    # defaultTopicQueueNums is 4; mqadmin updateTopic -r 8 -w 6 asks for more and fewer.
    wide = {**CREATE, "readQueueNums": "8", "writeQueueNums": "6", "perm": "6", "order": "false"}
    answer = await port.ask(request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, wide))
    assert answer.code == ResponseCode.SUCCESS, answer
    answer = await port.ask(request(RequestCode.GET_ALL_TOPIC_CONFIG, 0, None))
    config = json.loads(answer.body)["topicConfigTable"]["Orders"]
    assert (config["readQueueNums"], config["writeQueueNums"]) == (8, 6)
    assert port.broker.parts is not None
    produce = port.broker.parts.produce
    queues = [
        (await produce.send_messages("Orders", None, [ProduceMessage("Orders", b"m")]))
        .messages[0]
        .queue_id
        for _ in range(12)
    ]
    assert queues == [0, 1, 2, 3, 4, 5] * 2
    # A queue past writeQueueNums is refused, not written.
    with pytest.raises(BrokerError, match="has 6 queues"):
        await produce.send_messages("Orders", 6, [ProduceMessage("Orders", b"m")])
