"""The Kubernetes objects a BrokerGroup owns, built from its spec (pure).

StatefulSet `<bg>` (Parallel pod management, OnDelete updates: the
operator, not the StatefulSet controller, decides which pod restarts next;
preferred anti-affinity spreads the brokers over nodes unless the spec sets
its own affinity), headless Service `<bg>-headless`, client Service `<bg>`
(role=master), ConfigMap `<bg>-config` (broker.json), Secret
`<bg>-credentials` (the group's broker and client credentials, its RocketMQ key
pairs and the HA secret, unless spec.controller.secretName names the user's own),
Secret `<bg>-rocketmq-client` (the group's RocketMQ client pair alone, for
applications to mount), PodDisruptionBudget `<bg>` and NetworkPolicy `<bg>` (HA port only from the
group's own pods). Every object carries the group's labels and an owner
reference to the BrokerGroup, so deleting the group garbage-collects them.

`spec.engine: rocketmq` changes only what runs in the pods (stock RocketMQ 5.3
brokers, rocketmq_config.py): the ConfigMap holds broker.conf, the container runs
the JVM, which signs with the group's broker pair from the Secret. Names, labels,
the master Service, the StatefulSet's policies and the broker set's key
(cluster = namespace, brokerName = group) are the same, so the planners and the
role labels work on both engines unchanged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from brokergroup_controller.api import INCARNATION_ENV
from brokergroup_controller.credentials import Role as CredentialRole
from brokergroup_controller.credentials import derive_credential, derive_rocketmq_pair
from brokergroup_operator import rocketmq_config as rmq
from brokergroup_operator.model import (
    BROKER_CONTAINER,
    CLIENT_PORT,
    HA_PORT,
    HTTP_PORT,
    LABEL_ROLE,
    REMOTING_PORT,
    Engine,
    Role,
    group_labels,
)
from brokergroup_operator.release_secret import HA_SECRET_KEY, OperatorSecrets
from brokergroup_remoting.codes import BROKER_CHANNEL_EXPIRED_TIME_MS

API_GROUP = "brokergroup.io"
API_VERSION = "brokergroup.io/v1alpha1"
KIND = "BrokerGroup"
SECRETS_DIR = "/etc/brokergroup/secrets"
#: The client pair of the user's own Secret, an optional key: its own volume, so the broker
#: credential and the HA secret stay required.
CLIENT_PAIR_DIR = "/etc/brokergroup/client-pair"
BROKER_CREDENTIAL_KEY = "broker-credential"
CLIENT_CREDENTIAL_KEY = "client-credential"
CONFIG_DIR = "/etc/brokergroup/config"
DATA_DIR = "/data"
CONFIG_HASH_ANNOTATION = "brokergroup.io/config-hash"
# A digest of what the group's Secret holds: a rotated broker credential root changes it,
# so the pods roll (one at a time, slaves first) and pick up their new credentials.
CREDENTIALS_HASH_ANNOTATION = "brokergroup.io/credentials-hash"
#: `kubectl brokergroup restart` writes it on the BrokerGroup (the key `kubectl rollout
#: restart` uses); copied into the pod template, it makes a new revision: a safe roll.
RESTARTED_AT_ANNOTATION = "kubectl.kubernetes.io/restartedAt"

# spec.ha field → broker config name (the same camelCase names).
HA_FIELDS = (
    "allAckInSyncStateSet",
    "inSyncReplicas",
    "minInSyncReplicas",
    "haMaxTimeSlaveNotCatchUpMs",
    "slaveTimeoutMs",
    "masterLeaseMs",
    "heartbeatIntervalMs",
    "heartbeatTimeoutMs",
)
# spec.config key → the type and lowest value the broker accepts (the CRD's
# CEL rules say the same; tests/unit/test_operator_resources.py keeps them in step).
CONFIG_TYPES: dict[str, tuple[type, float]] = {
    "flushDiskType": (str, 0),
    "flushIntervalMs": (int, 1),
    "mappedFileSizeCommitLog": (int, 4096),
    "diskFullRatio": (float, 0),
    "electionPriority": (int, 0),
    "defaultTopicQueueNums": (int, 1),
    "maxTopics": (int, 1),
    "maxOpenQueueFiles": (int, 1),
    "maxPendingAcks": (int, 1),
    "syncStateSetCheckIntervalMs": (int, 1),
    "controllerRequestTimeoutMs": (int, 1),
    "controllerRetryBackoffMs": (int, 1),
    "controllerRetryBackoffMaxMs": (int, 0),
    "watchTimeoutMs": (int, 1),
    "enableSlaveActingMaster": (bool, 0),
    "maxPullMessages": (int, 1),
    "maxSendBatchMessages": (int, 1),
    "autoCreateTopicEnable": (bool, 0),
    "registerNameServerPeriodMs": (int, 1),
}
CONFIG_FIELDS = tuple(CONFIG_TYPES)
# spec.config key → the highest value the broker accepts (the CRD's `maximum` says the same).
CONFIG_HIGHEST: dict[str, int] = {
    # A broker registering less often than the name servers expire its routes drops out
    # of every route between its registrations; the broker refuses to start so.
    "registerNameServerPeriodMs": BROKER_CHANNEL_EXPIRED_TIME_MS - 1,
}
FLUSH_DISK_TYPES = ("SYNC_FLUSH", "ASYNC_FLUSH")


def config_value_error(key: str, value: Any) -> str | None:
    """Why spec.config[key] = value cannot reach the broker, or None (pure)."""
    kind, lowest = CONFIG_TYPES[key]
    if kind is bool:
        return None if isinstance(value, bool) else f"spec.config.{key} must be true or false"
    if kind is str:
        if value in FLUSH_DISK_TYPES:
            return None
        return f"spec.config.{key} must be one of {', '.join(FLUSH_DISK_TYPES)}, got {value!r}"
    numeric = (int, float) if kind is float else (int,)
    if isinstance(value, bool) or not isinstance(value, numeric):
        return f"spec.config.{key} must be a number, got {value!r}"
    if kind is float:
        return None if 0 < value <= 1 else f"spec.config.{key} must be in (0, 1], got {value}"
    if value < lowest:
        return f"spec.config.{key} must be ≥ {int(lowest)}, got {value}"
    highest = CONFIG_HIGHEST.get(key)
    if highest is not None and value > highest:
        return (
            f"spec.config.{key} must be ≤ {highest} (below the name servers' route expiry "
            f"{BROKER_CHANNEL_EXPIRED_TIME_MS} ms), got {value}"
        )
    return None


# Services earlier versions created and this one deletes. `<bg>-read` selected
# role=slave, but a slave answers NOT_MASTER to offset queries and consumer
# offsets, so a consumer could not use it (docs/kubernetes.md "Reads").
OBSOLETE_SERVICES = ("{group}-read",)


class SpecError(ValueError):
    """The BrokerGroup cannot be realised as given (the message says why)."""


@dataclass(frozen=True)
class GroupContext:
    """Who the group is and the operator-wide settings its spec falls back to."""

    name: str
    namespace: str
    uid: str
    spec: Mapping[str, Any]
    default_image: str
    controller_addresses: tuple[str, ...]
    secrets: OperatorSecrets | None = field(default=None, repr=False)
    """The operator's secrets, for the group Secret it manages (None: it manages none)."""
    restarted_at: str = ""
    """The BrokerGroup's RESTARTED_AT_ANNOTATION ("" if none)."""
    default_rocketmq_image: str = ""
    """The image of stock RocketMQ brokers when a group of engine rocketmq names none."""

    @property
    def engine(self) -> Engine:
        """spec.engine (the CRD's default: brokergroup)."""
        raw = str(self.spec.get("engine") or Engine.BROKERGROUP)
        try:
            return Engine(raw)
        except ValueError:
            raise SpecError(
                f"spec.engine must be one of {', '.join(Engine)}, got {raw!r}"
            ) from None

    @property
    def image(self) -> str:
        if self.spec.get("image"):
            return str(self.spec["image"])
        if self.engine is Engine.ROCKETMQ:
            return self.default_rocketmq_image
        return self.default_image

    @property
    def addresses(self) -> tuple[str, ...]:
        own = (self.spec.get("controller") or {}).get("addresses") or ()
        return tuple(own) or self.controller_addresses

    @property
    def own_secret(self) -> str | None:
        """spec.controller.secretName: a Secret the user manages (keys broker-credential, ha-secret)."""
        name = (self.spec.get("controller") or {}).get("secretName")
        return str(name) if name else None

    @property
    def secret(self) -> str:
        """The Secret broker pods mount: the user's, or the one the operator manages."""
        return self.own_secret or f"{self.name}-credentials"

    @property
    def client_secret(self) -> str:
        """The Secret with the group's RocketMQ client pair alone, for applications."""
        return f"{self.name}-rocketmq-client"

    @property
    def remoting_on(self) -> bool:
        """Built-in brokers open their RocketMQ remoting port and register with the name
        servers when their Secret carries a RocketMQ key pair: always for the user's own
        Secret (it must hold rocketmq-credentials), for the operator's when the release has
        its pair (then the controllers run their RocketMQ ports, which accept the group
        pairs the operator derives)."""
        return self.own_secret is not None or self.group_pairs_on

    @property
    def group_pairs_on(self) -> bool:
        """The operator writes the group's broker and client pairs (its own Secret, and
        the client Secret): it manages the group Secret and the release has its pair."""
        return (
            self.own_secret is None
            and self.secrets is not None
            and self.secrets.rocketmq_credentials is not None
        )

    @property
    def replicas(self) -> int:
        return int(self.spec.get("replicas", 3))

    @property
    def min_in_sync_replicas(self) -> int:
        return int((self.spec.get("ha") or {}).get("minInSyncReplicas", 1))

    @property
    def headless_name(self) -> str:
        return f"{self.name}-headless"

    def validate(self) -> None:
        """The checks the CRD's CEL rules make, again, for API servers without them."""
        if self.replicas < 1:
            raise SpecError(f"spec.replicas must be ≥ 1, got {self.replicas}")
        if self.min_in_sync_replicas > self.replicas:
            raise SpecError(
                f"spec.ha.minInSyncReplicas {self.min_in_sync_replicas} must be ≤ "
                f"spec.replicas {self.replicas}"
            )
        config = self.spec.get("config") or {}
        unknown = sorted(set(config) - set(CONFIG_FIELDS))
        if unknown:
            raise SpecError(f"spec.config has unknown key(s) {unknown}")
        for key, value in config.items():
            problem = config_value_error(key, value)
            if problem is not None:
                raise SpecError(problem)
        if self.engine is Engine.ROCKETMQ:
            self._validate_rocketmq()
        elif self.spec.get("rocketmq"):
            raise SpecError(
                "spec.rocketmq holds settings of stock RocketMQ brokers: set spec.engine to rocketmq"
            )
        if not self.image:
            variable = (
                "BROKERGROUP_ROCKETMQ_IMAGE"
                if self.engine is Engine.ROCKETMQ
                else "BROKERGROUP_IMAGE"
            )
            raise SpecError(f"no image: set spec.image or the operator's {variable}")
        if not self.addresses:
            raise SpecError(
                "no controller addresses: set spec.controller.addresses or the operator's "
                "BROKERGROUP_CONTROLLER_ADDRESSES"
            )
        if self.own_secret is None and (
            self.secrets is None
            or self.secrets.broker_credential_root is None
            or self.secrets.ha_secret is None
        ):
            raise SpecError(
                "no broker credential: set spec.controller.secretName (a Secret with keys "
                "broker-credential and ha-secret) or give the operator its release Secret "
                "(BROKERGROUP_RELEASE_SECRET) or BROKERGROUP_BROKER_CREDENTIAL_ROOT_FILE and "
                "BROKERGROUP_HA_SECRET_FILE"
            )

    def _validate_rocketmq(self) -> None:
        if self.spec.get("config"):
            raise SpecError(
                "spec.config holds settings of the built-in broker: stock RocketMQ brokers "
                "(spec.engine rocketmq) take theirs from spec.rocketmq"
            )
        try:
            rmq.RocketMQSettings.from_spec(self.spec)
        except rmq.RocketMQSpecError as exc:
            raise SpecError(str(exc)) from None
        if self.own_secret is None and (
            self.secrets is None or self.secrets.rocketmq_credentials is None
        ):
            raise SpecError(
                "no RocketMQ key pair for stock brokers: the release Secret lacks "
                "rocketmq-credentials (with it the operator writes the group's own pair into "
                "a Secret it manages) or set spec.controller.secretName (keys "
                "broker-credential, ha-secret and rocketmq-credentials: `brokergroup admin "
                "derive-credential --rocketmq --role broker` prints the group's pair)"
            )


def owner_reference(ctx: GroupContext) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": ctx.name,
        "uid": ctx.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _meta(ctx: GroupContext, name: str, extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ctx.namespace,
        "labels": {**group_labels(ctx.name), **(extra or {})},
        "ownerReferences": [owner_reference(ctx)],
    }


def broker_config(ctx: GroupContext) -> dict[str, Any]:
    """broker.json: spec.ha and spec.config, typed as the CRD admitted them."""
    ha = ctx.spec.get("ha") or {}
    config: dict[str, Any] = {k: ha[k] for k in HA_FIELDS if k in ha}
    config.update({str(k): v for k, v in (ctx.spec.get("config") or {}).items()})
    return config


def rocketmq_properties(ctx: GroupContext) -> dict[str, str]:
    """broker.conf of a group of stock RocketMQ brokers (the same key as the built-in
    engine's broker command: cluster = namespace, brokerName = group)."""
    return rmq.broker_properties(
        cluster_name=ctx.namespace,
        broker_name=ctx.name,
        spec=ctx.spec,
        controller_addresses=ctx.addresses,
    )


def config_data(ctx: GroupContext) -> dict[str, str]:
    """The ConfigMap's files: broker.json (built-in) or broker.conf (stock RocketMQ)."""
    if ctx.engine is Engine.ROCKETMQ:
        return {rmq.CONFIG_KEY: rmq.render(rocketmq_properties(ctx))}
    return {"broker.json": json.dumps(broker_config(ctx), sort_keys=True, indent=2) + "\n"}


def config_map(ctx: GroupContext) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(ctx, f"{ctx.name}-config"),
        "data": config_data(ctx),
    }


def broker_command(ctx: GroupContext) -> list[str]:
    """The broker's command line; $(POD_IP) is expanded by the kubelet.

    With the key pair (`ctx.remoting_on`) the broker opens its remoting port (the CLI's
    default, client port + 3 = REMOTING_PORT) on the pod IP, accepting the group's broker
    and client pairs there, and registers it (signed with the broker pair) with every
    controller node's name server: the master's registered port is the `{port}` of the name
    servers' master address template, which the master Service serves under that number."""
    remoting = (
        [
            "--remoting-key-file",
            f"{SECRETS_DIR}/{rmq.CREDENTIALS_KEY}",
            # The client pair too: the operator's, or the user's own Secret's if it has one.
            *(
                ["--remoting-client-key-file", f"{SECRETS_DIR}/{rmq.CLIENT_CREDENTIALS_KEY}"]
                if ctx.group_pairs_on
                else []
            ),
            *(
                [
                    "--remoting-client-key-file",
                    f"{CLIENT_PAIR_DIR}/{rmq.CLIENT_CREDENTIALS_KEY}",
                    "--remoting-client-key-optional",
                ]
                if ctx.own_secret is not None
                else []
            ),
            "--namesrv-addresses",
            rmq.namesrv_addr(ctx.addresses),
        ]
        if ctx.remoting_on
        else []
    )
    return [
        "brokergroup",
        "broker",
        "--cluster-name",
        ctx.namespace,
        "--broker-name",
        ctx.name,
        "--data-dir",
        DATA_DIR,
        "--controller-addresses",
        ",".join(ctx.addresses),
        "--controller-token-file",
        f"{SECRETS_DIR}/{BROKER_CREDENTIAL_KEY}",
        "--ha-secret-file",
        f"{SECRETS_DIR}/ha-secret",
        "--bind-address",
        "$(POD_IP)",
        "--advertise-address",
        "$(POD_IP)",
        "--client-port",
        str(CLIENT_PORT),
        "--config",
        f"{CONFIG_DIR}/broker.json",
        *remoting,
    ]


def stateful_set(ctx: GroupContext, replicas: int) -> dict[str, Any]:
    spec = ctx.spec
    template = spec.get("template") or {}
    storage = spec.get("storage") or {}
    # A removed replica's volume may hold the only other copy of what it
    # acknowledged: kept on scale-down unless the spec opts in (issue 17 item 1).
    when_deleted = "Delete" if storage.get("deleteClaim", True) else "Retain"
    when_scaled = "Delete" if storage.get("deleteClaimOnScaleDown", False) else "Retain"
    config_hash = hashlib.sha256(
        json.dumps(
            broker_config(ctx) if ctx.engine is Engine.BROKERGROUP else config_data(ctx),
            sort_keys=True,
        ).encode()
    ).hexdigest()[:16]
    pod_labels = {**(template.get("labels") or {}), **group_labels(ctx.name)}
    pod_annotations = {**(template.get("annotations") or {}), CONFIG_HASH_ANNOTATION: config_hash}
    derived = group_secret(ctx)
    # With the user's own Secret (None here) they roll the pods when they change it.
    if derived is not None:
        pod_annotations[CREDENTIALS_HASH_ANNOTATION] = credentials_digest(derived["stringData"])
    if ctx.restarted_at:
        pod_annotations[RESTARTED_AT_ANNOTATION] = ctx.restarted_at
    container: dict[str, Any] = {
        "name": BROKER_CONTAINER,
        "image": ctx.image,
        "imagePullPolicy": spec.get("imagePullPolicy", "IfNotPresent"),
        "command": broker_command(ctx),
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            # The broker's incarnation is its pod: the operator's reports name the
            # same uid, so the controller can drop one about an older pod.
            {"name": INCARNATION_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        ],
        "ports": [
            {"name": "client", "containerPort": CLIENT_PORT, "protocol": "TCP"},
            {"name": "ha", "containerPort": HA_PORT, "protocol": "TCP"},
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            *(
                [{"name": "remoting", "containerPort": REMOTING_PORT, "protocol": "TCP"}]
                if ctx.remoting_on
                else []
            ),
        ],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": HTTP_PORT},
            "periodSeconds": 1,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": HTTP_PORT},
            "initialDelaySeconds": 10,
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True},
            *(
                [{"name": "client-pair", "mountPath": CLIENT_PAIR_DIR, "readOnly": True}]
                if ctx.own_secret is not None
                else []
            ),
        ],
        "securityContext": {
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if spec.get("resources"):
        container["resources"] = dict(spec["resources"])
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": f"{ctx.name}-config"}},
        {
            "name": "secrets",
            "secret": {
                "secretName": ctx.secret,
                # The group's broker credential, the HA secret and the group's RocketMQ
                # key pairs of the remoting port; nothing else.
                "items": [
                    {"key": BROKER_CREDENTIAL_KEY, "path": BROKER_CREDENTIAL_KEY},
                    {"key": HA_SECRET_KEY, "path": HA_SECRET_KEY},
                    *(
                        [{"key": rmq.CREDENTIALS_KEY, "path": rmq.CREDENTIALS_KEY}]
                        if ctx.remoting_on
                        else []
                    ),
                    *(
                        [{"key": rmq.CLIENT_CREDENTIALS_KEY, "path": rmq.CLIENT_CREDENTIALS_KEY}]
                        if ctx.group_pairs_on
                        else []
                    ),
                ],
                "defaultMode": 0o400,
            },
        },
        *(
            [
                {
                    "name": "client-pair",
                    "secret": {
                        "secretName": ctx.own_secret,
                        # The operator cannot read the user's Secret: a missing key leaves
                        # the file out (optional) and the port takes the broker pair alone.
                        "items": [
                            {"key": rmq.CLIENT_CREDENTIALS_KEY, "path": rmq.CLIENT_CREDENTIALS_KEY}
                        ],
                        "optional": True,
                        "defaultMode": 0o400,
                    },
                }
            ]
            if ctx.own_secret is not None
            else []
        ),
    ]
    if ctx.engine is Engine.ROCKETMQ:
        container.update(rocketmq_container(ctx))
        volumes = rocketmq_volumes(ctx)
    pod_spec: dict[str, Any] = {
        # A broker never talks to Kubernetes: no ServiceAccount token in its pods.
        "automountServiceAccountToken": False,
        "containers": [container],
        "terminationGracePeriodSeconds": 30,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001},
        "volumes": volumes,
    }
    pod_spec["affinity"] = spread_over_nodes(ctx.name)
    for key in ("affinity", "tolerations", "nodeSelector", "priorityClassName"):
        if template.get(key):
            pod_spec[key] = template[key]
    claim: dict[str, Any] = {
        "metadata": {"name": "data", "labels": group_labels(ctx.name)},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": str(storage.get("size", "10Gi"))}},
        },
    }
    if storage.get("storageClassName"):
        claim["spec"]["storageClassName"] = storage["storageClassName"]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(ctx, ctx.name),
        "spec": {
            "replicas": replicas,
            "serviceName": ctx.headless_name,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": when_deleted,
                "whenScaled": when_scaled,
            },
            "selector": {"matchLabels": group_labels(ctx.name)},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [claim],
        },
    }


def rocketmq_container(ctx: GroupContext) -> dict[str, Any]:
    """What a stock broker's container has instead of the built-in broker's: the JVM
    (rocketmq_config.launch_script), its two ports, TCP probes (a stock broker has no
    HTTP port), its config, key pair and an emptyDir for broker.conf, logs and tmp."""
    settings = rmq.RocketMQSettings.from_spec(ctx.spec)
    return {
        "command": ["sh", "-c", rmq.launch_script(settings.heap_size)],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [
            {"name": "client", "containerPort": rmq.LISTEN_PORT, "protocol": "TCP"},
            {"name": "ha", "containerPort": rmq.HA_LISTEN_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {
            "tcpSocket": {"port": rmq.LISTEN_PORT},
            "periodSeconds": 2,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "tcpSocket": {"port": rmq.LISTEN_PORT},
            # A JVM broker recovering a large store takes a while to listen.
            "initialDelaySeconds": 60,
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "config", "mountPath": rmq.CONFIG_DIR, "readOnly": True},
            {"name": "secrets", "mountPath": rmq.SECRETS_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": rmq.TMP_DIR},
        ],
    }


def rocketmq_volumes(ctx: GroupContext) -> list[dict[str, Any]]:
    return [
        {"name": "config", "configMap": {"name": f"{ctx.name}-config"}},
        {
            "name": "secrets",
            "secret": {
                "secretName": ctx.secret,
                # The key pair the stock broker signs with; nothing else.
                "items": [{"key": rmq.CREDENTIALS_KEY, "path": rmq.CREDENTIALS_KEY}],
                "defaultMode": 0o400,
            },
        },
        {"name": "tmp", "emptyDir": {}},
    ]


def spread_over_nodes(group: str) -> dict[str, Any]:
    """Preferred (not required) pod anti-affinity by node: one node's loss takes
    one replica where there are enough nodes, and a single-node cluster still
    schedules every pod. spec.template.affinity replaces it."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": group_labels(group)},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }


def _ports(names: Sequence[str]) -> list[dict[str, Any]]:
    numbers = {"client": CLIENT_PORT, "ha": HA_PORT, "http": HTTP_PORT, "remoting": REMOTING_PORT}
    return [
        {"name": n, "port": numbers[n], "targetPort": numbers[n], "protocol": "TCP"} for n in names
    ]


def services(ctx: GroupContext) -> list[dict[str, Any]]:
    """The headless Service (stable pod names) and the master Service `<bg>`. The master
    Service is the address the name servers give stock clients as brokerId 0 (the
    controller's --namesrv-master-address-template): it serves the port the master
    registered with them under the same number, so the template's `{port}` is right: the
    built-in broker's remoting port, a stock broker's listen port (= the client port)."""
    selector = group_labels(ctx.name)
    builtin_remoting = ctx.engine is Engine.BROKERGROUP and ctx.remoting_on
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(ctx, ctx.headless_name),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": selector,
                "ports": _ports(
                    ["client", "ha"] if ctx.engine is Engine.ROCKETMQ else ["client", "ha", "http"]
                ),
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(ctx, ctx.name),
            "spec": {
                "selector": {**selector, LABEL_ROLE: str(Role.MASTER)},
                "ports": _ports(["client", "remoting"] if builtin_remoting else ["client"]),
            },
        },
    ]


def disruption_budget(ctx: GroupContext) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(ctx, ctx.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": group_labels(ctx.name)}},
    }


def network_policy(ctx: GroupContext) -> dict[str, Any]:
    selector = {"matchLabels": group_labels(ctx.name)}
    client_ports = [CLIENT_PORT, HTTP_PORT]
    if ctx.engine is Engine.BROKERGROUP and ctx.remoting_on:
        client_ports.append(REMOTING_PORT)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(ctx, ctx.name),
        "spec": {
            "podSelector": selector,
            "policyTypes": ["Ingress"],
            "ingress": [
                # HA replication: only the group's own brokers.
                {
                    "from": [{"podSelector": selector}],
                    "ports": [{"port": HA_PORT, "protocol": "TCP"}],
                },
                # Clients (the built-in broker's own protocol and its RocketMQ remoting
                # port; a stock broker's remoting port is the client port) and probes.
                {"ports": [{"port": port, "protocol": "TCP"} for port in client_ports]},
            ],
        },
    }


def group_secret(ctx: GroupContext) -> dict[str, Any] | None:
    """The group's own Secret: its derived broker and client credentials (cluster
    name = namespace, as the broker command says), its RocketMQ broker and client
    pairs derived the same way, and the HA secret. None when the user brings
    spec.controller.secretName. The release's own pair (the controllers' admin
    pair) is never copied here: a broker pod holds only what names its group."""
    if ctx.own_secret is not None:
        return None
    secrets = ctx.secrets
    assert secrets is not None and secrets.broker_credential_root and secrets.ha_secret
    root = secrets.broker_credential_root
    extra = {}
    if ctx.engine is Engine.ROCKETMQ:
        assert ctx.group_pairs_on
    if ctx.group_pairs_on:
        # Both engines: stock brokers sign with the broker pair; built-in brokers sign
        # their name server registrations with it and accept it and the client pair on
        # their remoting port.
        extra[rmq.CREDENTIALS_KEY] = derive_rocketmq_pair(
            root, CredentialRole.BROKER, ctx.namespace, ctx.name
        ).to_json()
        extra[rmq.CLIENT_CREDENTIALS_KEY] = derive_rocketmq_pair(
            root, CredentialRole.CLIENT, ctx.namespace, ctx.name
        ).to_json()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(ctx, ctx.secret),
        "type": "Opaque",
        "stringData": {
            **extra,
            BROKER_CREDENTIAL_KEY: derive_credential(
                root, CredentialRole.BROKER, ctx.namespace, ctx.name
            ),
            CLIENT_CREDENTIAL_KEY: derive_credential(
                root, CredentialRole.CLIENT, ctx.namespace, ctx.name
            ),
            HA_SECRET_KEY: secrets.ha_secret,
        },
    }


def credentials_digest(data: Mapping[str, str]) -> str:
    """16 hex digits of a keyed-by-label SHA-256 over the Secret's data: it changes with
    any value, and says nothing of them (they are 256-bit HMAC outputs and a random HA
    secret, out of reach of a search from the digest)."""
    canonical = json.dumps(dict(data), sort_keys=True).encode()
    return hashlib.sha256(b"brokergroup pod credentials v1\0" + canonical).hexdigest()[:16]


CLIENT_ACCESS_KEY = "accessKey"
CLIENT_SECRET_KEY = "secretKey"


def client_secret(ctx: GroupContext) -> dict[str, Any] | None:
    """`<bg>-rocketmq-client`: the group's RocketMQ client pair and nothing else, so an
    application's pods can mount it (and RBAC grant it) without any broker credential.
    The pair reads routes from the name servers and sends and consumes on the group's
    brokers; it cannot register a broker or act on the controllers. None when the
    operator writes no pairs for the group (the user's own Secret, or no release pair)."""
    if not ctx.group_pairs_on:
        return None
    assert ctx.secrets is not None and ctx.secrets.broker_credential_root
    pair = derive_rocketmq_pair(
        ctx.secrets.broker_credential_root, CredentialRole.CLIENT, ctx.namespace, ctx.name
    )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(ctx, ctx.client_secret),
        "type": "Opaque",
        "stringData": {
            CLIENT_ACCESS_KEY: pair.access_key,
            CLIENT_SECRET_KEY: pair.secret_key,
            rmq.CREDENTIALS_KEY: pair.to_json(),
        },
    }


def owned_objects(ctx: GroupContext, replicas: int) -> list[dict[str, Any]]:
    """Everything the group owns, in the order to apply them."""
    secret = group_secret(ctx)
    for_clients = client_secret(ctx)
    return [
        *([] if secret is None else [secret]),
        *([] if for_clients is None else [for_clients]),
        config_map(ctx),
        *services(ctx),
        disruption_budget(ctx),
        network_policy(ctx),
        stateful_set(ctx, replicas),
    ]
