"""The Kubernetes objects a BrokerGroup owns, rendered for representative specs and
compared text for text (key order included) with tests/fixtures/operator/owned_objects.json.

The fixture was rendered by the code before issue 32 item 4 split the object builder by
meaning (spec, workload, networking, secrets): the split changed no object. A deliberate
change of an object regenerates it: `BROKERGROUP_REGENERATE_GOLDEN=1 pytest <this file>`,
and the diff of the fixture shows what changed in the rendered objects.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from brokergroup_operator.objects import owned_objects
from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.spec import GroupContext

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "operator" / "owned_objects.json"
APIS = ("c-0.c:9878", "c-1.c:9878", "c-2.c:9878")
PAIR = '{"accessKey":"bg-0123456789","secretKey":"s3cr3t-s3cr3t"}'
NO_PAIR = OperatorSecrets("admin", "root-" * 8, "ha-" * 11)
WITH_PAIR = OperatorSecrets("admin", "root-" * 8, "ha-" * 11, PAIR)
FULL_TEMPLATE = {
    "labels": {"team": "payments"},
    "annotations": {"example.com/note": "kept"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "mq"}],
    "nodeSelector": {"disk": "ssd"},
    "priorityClassName": "high",
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
}
# name → (engine, operator secrets, spec, replicas rendered, restarted_at)
CASES: dict[str, tuple[str, OperatorSecrets | None, dict[str, Any], int, str]] = {
    "builtin-defaults-no-release-pair": ("brokergroup", NO_PAIR, {}, 3, ""),
    "builtin-release-pair-tuned": (
        "brokergroup",
        WITH_PAIR,
        {
            "replicas": 5,
            "image": "registry.example/brokergroup:1.2",
            "imagePullPolicy": "Always",
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
            "storage": {
                "size": "20Gi",
                "storageClassName": "fast",
                "deleteClaim": False,
                "deleteClaimOnScaleDown": True,
            },
            "ha": {"minInSyncReplicas": 2, "inSyncReplicas": 3, "allAckInSyncStateSet": True},
            "config": {
                "flushDiskType": "ASYNC_FLUSH",
                "diskFullRatio": 0.9,
                "maxTopics": 100,
                "enableSlaveActingMaster": True,
            },
            "template": FULL_TEMPLATE,
        },
        4,
        "2026-11-28T10:00:00Z",
    ),
    "builtin-own-secret-own-controllers": (
        "brokergroup",
        None,
        {
            "replicas": 1,
            "controller": {"secretName": "my-secret", "addresses": ["ctl:9878"]},
            "storage": {"size": "5Gi"},
        },
        1,
        "",
    ),
    "builtin-own-secret-with-release-pair": (
        "brokergroup",
        WITH_PAIR,
        {"controller": {"secretName": "my-secret"}, "template": {"tolerations": []}},
        2,
        "",
    ),
    "rocketmq-release-pair-defaults": ("rocketmq", WITH_PAIR, {}, 3, ""),
    "rocketmq-release-pair-tuned": (
        "rocketmq",
        WITH_PAIR,
        {
            "replicas": 2,
            "resources": {"limits": {"memory": "4Gi"}},
            "storage": {"size": "50Gi", "storageClassName": "fast"},
            "ha": {"minInSyncReplicas": 1, "heartbeatIntervalMs": 1000},
            "rocketmq": {
                "autoCreateTopicEnable": True,
                "flushDiskType": "ASYNC_FLUSH",
                "mappedFileSizeCommitLog": 1 << 28,
                "heapSize": "2g",
                "topicQueueNums": 4,
            },
            "template": FULL_TEMPLATE,
        },
        2,
        "2026-11-28T11:00:00Z",
    ),
    "rocketmq-own-secret": (
        "rocketmq",
        None,
        {"image": "rocketmq:5.3.3", "controller": {"secretName": "mine"}},
        3,
        "",
    ),
}


def render() -> str:
    rendered: dict[str, list[dict[str, Any]]] = {}
    for name, (engine, secrets, spec, replicas, restarted_at) in CASES.items():
        ctx = GroupContext(
            "orders",
            "prod",
            "uid-1",
            {"engine": engine, **spec},
            "brokergroup:dev",
            APIS,
            secrets,
            restarted_at=restarted_at,
            default_rocketmq_image="brokergroup-rocketmq:5.3.3",
        )
        ctx.validate()
        rendered[name] = owned_objects(ctx, replicas)
    return json.dumps(rendered, indent=1, ensure_ascii=False) + "\n"


def test_the_owned_objects_are_the_golden_ones() -> None:
    text = render()
    if os.environ.get("BROKERGROUP_REGENERATE_GOLDEN") == "1":
        FIXTURE.write_text(text)
    assert text == FIXTURE.read_text()
