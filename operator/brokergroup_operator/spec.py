"""The BrokerGroup resource and its typed spec (pure).

`GroupContext` is one BrokerGroup as the builders of its objects see it: who it is
(name, namespace, uid: the owner reference and metadata every object it owns carries),
its spec read with the CRD's defaults, and the operator-wide settings the spec falls back
to (image, controller addresses, the operator's secrets). `validate` makes the checks
the CRD's CEL rules make, again, for API servers without them; `SpecError` says why a
group cannot be realised.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from brokergroup_operator import rocketmq_config as rmq
from brokergroup_operator.model import Engine, group_labels
from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.tls_spec import TlsSpec, TlsSpecError
from brokergroup_operator.volumes import QuantityError, parse_quantity
from brokergroup_remoting.codes import BROKER_CHANNEL_EXPIRED_TIME_MS

API_GROUP = "brokergroup.io"
API_VERSION = "brokergroup.io/v1alpha1"
KIND = "BrokerGroup"
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
    # Retention (docs/retention.md): RocketMQ's names; fileReservedTime in hours (> 0).
    "fileReservedTime": (float, 0),
    "deleteWhen": (str, 0),
    "diskMaxUsedSpaceRatio": (int, 1),
    "diskSpaceCleanForciblyRatio": (int, 1),
    "cleanFileForciblyEnable": (bool, 0),
    "deleteCommitLogFilesInterval": (int, 0),
    "cleanResourceInterval": (int, 1),
    # Scheduled and timer messages (docs/scheduled-messages.md): RocketMQ's names.
    "messageDelayLevel": (str, 0),
    "timerMaxDelaySec": (int, 1),
    "timerMaxPending": (int, 1),
    # Server-side filters (docs/filters.md): SQL92 subscriptions.
    "enablePropertyFilter": (bool, 0),
    # POP consumption (docs/pop.md): its bounds.
    "popMaxInFlightPerGroup": (int, 1),
    "maxPopPollingSize": (int, 1),
    # Transactional messages (docs/transactions.md): RocketMQ's names, in ms.
    "transactionTimeOut": (int, 0),
    "transactionCheckInterval": (int, 1),
    "transactionCheckMax": (int, 1),
    # Traces and request-reply (docs/rocketmq-compatibility.md): RocketMQ's names.
    "regionId": (str, 0),
    "traceOn": (bool, 0),
    "traceTopicEnable": (bool, 0),
    "msgTraceTopicName": (str, 0),
    "storeReplyMessageEnable": (bool, 0),
}
CONFIG_FIELDS = tuple(CONFIG_TYPES)
# spec.config key → the highest value the broker accepts (the CRD's `maximum` says the same).
CONFIG_HIGHEST: dict[str, int] = {
    # A broker registering less often than the name servers expire its routes drops out
    # of every route between its registrations; the broker refuses to start so.
    "registerNameServerPeriodMs": BROKER_CHANNEL_EXPIRED_TIME_MS - 1,
    # Percent of the disk; the broker also wants them below diskFullRatio.
    "diskMaxUsedSpaceRatio": 99,
    "diskSpaceCleanForciblyRatio": 99,
}
#: spec.config floats that are a fraction of the disk, in (0, 1]; other floats are > 0.
RATIO_FIELDS = frozenset({"diskFullRatio"})
#: RocketMQ's messageDelayLevel: 1..64 delays (a number and s/m/h/d), one space apart.
MESSAGE_DELAY_LEVEL_PATTERN = r"^[1-9][0-9]*[smhd]( [1-9][0-9]*[smhd]){0,63}$"
#: RocketMQ's deleteWhen: hours of the day, ";"-separated ("04", "04;05").
DELETE_WHEN_PATTERN = r"^([01]?[0-9]|2[0-3])(;([01]?[0-9]|2[0-3]))*$"
#: regionId (a message property value) and msgTraceTopicName (RocketMQ's topic rule).
STRING_PATTERNS = {
    "regionId": (r"^[A-Za-z0-9_-]{1,64}$", "1-64 letters, digits, '-' or '_'"),
    "msgTraceTopicName": (r"^[%|a-zA-Z0-9_-]{1,127}$", "a topic name (RocketMQ's topic rule)"),
}
FLUSH_DISK_TYPES = ("SYNC_FLUSH", "ASYNC_FLUSH")


def config_value_error(key: str, value: Any) -> str | None:
    """Why spec.config[key] = value cannot reach the broker, or None (pure)."""
    kind, lowest = CONFIG_TYPES[key]
    if kind is bool:
        return None if isinstance(value, bool) else f"spec.config.{key} must be true or false"
    if kind is str:
        if key in STRING_PATTERNS:
            pattern, rule = STRING_PATTERNS[key]
            if isinstance(value, str) and re.fullmatch(pattern, value):
                return None
            return f"spec.config.{key} must be {rule}, got {value!r}"
        if key == "deleteWhen":
            if isinstance(value, str) and re.fullmatch(DELETE_WHEN_PATTERN, value):
                return None
            return f"spec.config.deleteWhen must be hours 00-23 joined by ';' (\"04;05\"), got {value!r}"
        if key == "messageDelayLevel":
            if isinstance(value, str) and re.fullmatch(MESSAGE_DELAY_LEVEL_PATTERN, value):
                return None
            return (
                "spec.config.messageDelayLevel must be 1-64 delays such as '1s 5s 10m 2h' "
                f"(a number and s, m, h or d, one space apart), got {value!r}"
            )
        if value in FLUSH_DISK_TYPES:
            return None
        return f"spec.config.{key} must be one of {', '.join(FLUSH_DISK_TYPES)}, got {value!r}"
    numeric = (int, float) if kind is float else (int,)
    if isinstance(value, bool) or not isinstance(value, numeric):
        return f"spec.config.{key} must be a number, got {value!r}"
    if kind is float:
        if key not in RATIO_FIELDS:
            return (
                None if value > lowest else f"spec.config.{key} must be > {lowest:g}, got {value}"
            )
        return None if 0 < value <= 1 else f"spec.config.{key} must be in (0, 1], got {value}"
    if value < lowest:
        return f"spec.config.{key} must be ≥ {int(lowest)}, got {value}"
    highest = CONFIG_HIGHEST.get(key)
    if highest is not None and value > highest:
        why = (
            f"below the name servers' route expiry {BROKER_CHANNEL_EXPIRED_TIME_MS} ms"
            if key == "registerNameServerPeriodMs"
            else "a percentage of the disk"
        )
        return f"spec.config.{key} must be ≤ {highest} ({why}), got {value}"
    return None


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
    namesrv_tls: bool = False
    """The release's name servers serve TLS (BROKERGROUP_CONTROLLER_TLS): brokers of a
    group with spec.tls register over TLS, verifying them against the trust bundle."""
    controller_api_tls: bool = False
    """The release's controllers serve their API over HTTPS only
    (BROKERGROUP_CONTROLLER_API_TLS): brokers reach it with mutual TLS, so the group needs
    spec.tls."""
    tls_digest: str = ""
    """The digest of the group's TLS material now (tls_material.py; "" without spec.tls):
    the pod template carries it, so a renewed certificate rolls the pods."""

    @property
    def tls(self) -> TlsSpec | None:
        """spec.tls, typed (None: no TLS, the default)."""
        try:
            return TlsSpec.from_spec(self.spec)
        except TlsSpecError as exc:
            raise SpecError(str(exc)) from None

    @property
    def tls_secret(self) -> str:
        """The Secret with the brokers' tls.crt and tls.key: the user's (issuer secret) or
        `<bg>-tls` (the operator's, or cert-manager's)."""
        tls = self.tls
        return tls.secret_name if tls is not None and tls.secret_name else f"{self.name}-tls"

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

    def owner_reference(self) -> dict[str, Any]:
        """The BrokerGroup as the controller owner of an object: deleting the group
        garbage-collects it."""
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def object_meta(self, name: str) -> dict[str, Any]:
        """The metadata of an object the group owns: its name, the group's namespace and
        labels, and the owner reference."""
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": group_labels(self.name),
            "ownerReferences": [self.owner_reference()],
        }

    def validate(self) -> None:
        """The checks the CRD's CEL rules make, again, for API servers without them."""
        if self.replicas < 1:
            raise SpecError(f"spec.replicas must be ≥ 1, got {self.replicas}")
        if self.min_in_sync_replicas > self.replicas:
            raise SpecError(
                f"spec.ha.minInSyncReplicas {self.min_in_sync_replicas} must be ≤ "
                f"spec.replicas {self.replicas}"
            )
        self._validate_storage()
        config = self.spec.get("config") or {}
        unknown = sorted(set(config) - set(CONFIG_FIELDS))
        if unknown:
            raise SpecError(f"spec.config has unknown key(s) {unknown}")
        for key, value in config.items():
            problem = config_value_error(key, value)
            if problem is not None:
                raise SpecError(problem)
        tls = self.tls
        # Engine rocketmq's limits on spec.tls are the stock container's to refuse
        # (containers.rocketmq_tls_options): its remoting port needs no key pair.
        builtin = self.engine is not Engine.ROCKETMQ
        if builtin and tls is not None and tls.enabled and not self.remoting_on:
            raise SpecError(
                "spec.tls encrypts the brokers' RocketMQ remoting port, which opens only with a "
                "RocketMQ key pair: the release Secret's rocketmq-credentials or "
                "spec.controller.secretName"
            )
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

    def _validate_storage(self) -> None:
        size = (self.spec.get("storage") or {}).get("size")
        if size is None:
            return
        try:
            positive = parse_quantity(str(size)) > 0
        except QuantityError:
            positive = False
        if not positive:
            raise SpecError(
                f"spec.storage.size must be a positive quantity (e.g. 10Gi), got {size!r}"
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
