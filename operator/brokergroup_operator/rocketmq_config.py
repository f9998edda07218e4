"""The configuration of stock RocketMQ 5.3 brokers for `spec.engine: rocketmq` (pure).

Theory of operation
-------------------
A stock broker reads one Java properties file (`BrokerStartup -c <file>`) and nothing from
its environment, so the operator splits its config in two:

- `broker_properties` (in the group's ConfigMap): everything the spec decides, the same for
  every pod: cluster and broker name (the controller's broker set is keyed by them, so the
  operator's replica-info lookups, role labels, switchover and scale-down planners work
  unchanged), `enableControllerMode=true` with `brokerId=-1` (a 5.3 broker in controller
  mode ignores the configured id: ReplicasManager applies for one from the controller and
  persists it in `<storePathRootDir>/brokerIdentity`, which lives on the PVC, so a
  rescheduled pod keeps its BrokerId), `controllerAddr` (every controller node's remoting
  port under its StatefulSet's stable DNS name, never a pod IP), `namesrvAddr` (the name
  server embedded in every controller node: a broker registers with each one, as with
  RocketMQ name servers), the HA settings from spec.ha, the timer wheel
  (`timerWheelEnable`, on) and the delay, timer and transaction-check settings of
  spec.rocketmq by RocketMQ's names;
- `per_pod_lines` (appended by `launch_script` when the container starts): the pod's own
  IP as `brokerIP1`/`brokerIP2` (what the controller records and the master Service's
  endpoint is), the signing credentials from the group's Secret, which must not sit in
  a ConfigMap, and the paths of the pod's volumes (the store on the PVC, the auth store on
  the emptyDir), which the container's command names (so a runtime that places volumes
  elsewhere, as the cluster tier's process kubelet does, rewrites them there), and the
  group's client pair as the broker's one extra user (`initAuthenticationUser`), against
  which the group's stock proxy (rocketmq_proxy.py) checks the RocketMQ 5 SDKs' signatures.

`launch_script` is the whole launcher: four shell lines that write that file to the
emptyDir and `exec` the JVM (`java_command`); no RocketMQ script runs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from brokergroup_controller.config import DEFAULT_REMOTING_PORT
from brokergroup_remoting import stock_tls
from brokergroup_remoting.stock_users import ACL_PROPERTIES

#: The name server port of every controller node (brokergroup_controller.namesrv).
NAMESRV_PORT = 9876
#: The broker's remoting port (clients, the master Service) and its HA port.
LISTEN_PORT = 10911
HA_LISTEN_PORT = 10912
#: Mount points in the RocketMQ image's pods.
ROCKETMQ_HOME = "/opt/rocketmq"
STORE_DIR = "/data/rocketmq"
CONFIG_DIR = "/etc/rocketmq/config"
SECRETS_DIR = "/etc/rocketmq/secrets"
#: The group's client pair (an optional volume: a user's own Secret may lack it).
CLIENT_DIR = "/etc/rocketmq/client"
TMP_DIR = "/tmp"
CONFIG_KEY = "broker.conf"
#: spec.tls: the group's certificate (tls.crt, tls.key: PKCS#8, as Netty reads it) and the
#: CAs trusted (ca.crt), mounted as the built-in engine mounts them.
TLS_DIR = "/etc/rocketmq/tls"
TLS_TRUST_DIR = "/etc/rocketmq/tls-trust"
#: TlsSystemConfig's file (`tls.config.file`), in the group's ConfigMap: paths only.
TLS_CONFIG_KEY = "tls.properties"
#: The group Secret's key holding `{"accessKey": …, "secretKey": …}` (one line of JSON): the
#: group's broker pair (credentials.derive_rocketmq_pair, role broker).
CREDENTIALS_KEY = "rocketmq-credentials"
#: The group Secret's key holding the group's client pair (role client), same format.
CLIENT_CREDENTIALS_KEY = "rocketmq-client-credentials"
MAIN_CLASS = "org.apache.rocketmq.broker.BrokerStartup"
#: LocalAuthenticationMetadataProvider: a 5.3 broker given innerClientAuthenticationCredentials
#: stores them as a local user and exits at start-up without a metadata provider.
AUTH_PROVIDER = (
    "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider"
)

# spec.ha field → the stock broker's property of the same meaning. masterLeaseMs and
# slaveTimeoutMs have none (a stock master has no lease: docs/rocketmq-compatibility.md).
HA_PROPERTIES = {
    "allAckInSyncStateSet": "allAckInSyncStateSet",
    "inSyncReplicas": "inSyncReplicas",
    "minInSyncReplicas": "minInSyncReplicas",
    "haMaxTimeSlaveNotCatchUpMs": "haMaxTimeSlaveNotCatchup",
    "heartbeatIntervalMs": "brokerHeartbeatInterval",
    "heartbeatTimeoutMs": "controllerHeartBeatTimeoutMills",
}
FLUSH_DISK_TYPES = ("SYNC_FLUSH", "ASYNC_FLUSH")
#: RocketMQ's messageDelayLevel: 1..64 delays (a number and s/m/h/d), one space apart (the
#: CRD's pattern; the built-in engine's spec.config takes the same).
MESSAGE_DELAY_LEVEL_PATTERN = re.compile(r"[1-9][0-9]*[smhd]( [1-9][0-9]*[smhd]){0,63}")
#: spec.rocketmq's optional positive integers → the stock broker's property (same names).
POSITIVE_SETTINGS = (
    "timerMaxDelaySec",
    "transactionCheckInterval",
    "transactionCheckMax",
    "transactionTimeOut",
)


class RocketMQSpecError(ValueError):
    """spec.rocketmq cannot be turned into a broker config (the message names the field)."""


@dataclass(frozen=True)
class RocketMQSettings:
    """spec.rocketmq with the CRD's defaults (applied again here for API servers without
    defaulting, and for unit tests that build specs by hand)."""

    auto_create_topic_enable: bool = False
    flush_disk_type: str = "SYNC_FLUSH"
    mapped_file_size_commit_log: int = 1 << 30
    heap_size: str = "1g"
    topic_queue_nums: int = 8
    timer_wheel_enable: bool = True
    message_delay_level: str | None = None
    """None: RocketMQ's 18 levels (1s … 2h)."""
    positive: tuple[tuple[str, int], ...] = ()
    """The POSITIVE_SETTINGS the spec sets, by RocketMQ's names, in that order."""
    proxy: ProxySettings = field(default_factory=lambda: ProxySettings())
    acl_enabled: bool = False
    """ACL 2.0 on the stock brokers (docs/security.md "Users on the stock brokers"): every
    request signed by a known user and authorized by its ACL; the group's pairs are Super
    users, the cluster's users are written to each broker by the operator
    (stock_users_sync.py). Off by default: a stock client that signs nothing keeps working."""

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> RocketMQSettings:
        raw = spec.get("rocketmq") or {}
        settings = cls(
            auto_create_topic_enable=raw.get("autoCreateTopicEnable", False),
            flush_disk_type=raw.get("flushDiskType", "SYNC_FLUSH"),
            mapped_file_size_commit_log=raw.get("mappedFileSizeCommitLog", 1 << 30),
            heap_size=raw.get("heapSize", "1g"),
            topic_queue_nums=raw.get("topicQueueNums", 8),
            timer_wheel_enable=raw.get("timerWheelEnable", True),
            message_delay_level=raw.get("messageDelayLevel"),
            positive=tuple((k, raw[k]) for k in POSITIVE_SETTINGS if k in raw),
            proxy=ProxySettings.from_spec(raw.get("proxy") or {}),
            acl_enabled=raw.get("aclEnabled", False),
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        """The CRD's rules, again (SpecError text names the field and the rule)."""
        if not isinstance(self.auto_create_topic_enable, bool):
            raise RocketMQSpecError("spec.rocketmq.autoCreateTopicEnable must be true or false")
        if self.flush_disk_type not in FLUSH_DISK_TYPES:
            raise RocketMQSpecError(
                f"spec.rocketmq.flushDiskType must be one of {', '.join(FLUSH_DISK_TYPES)}, "
                f"got {self.flush_disk_type!r}"
            )
        size = self.mapped_file_size_commit_log
        if isinstance(size, bool) or not isinstance(size, int) or not 1 << 20 <= size <= 1 << 32:
            raise RocketMQSpecError(
                f"spec.rocketmq.mappedFileSizeCommitLog must be 1 MiB..4 GiB, got {size!r}"
            )
        heap = self.heap_size
        if (
            not isinstance(heap, str)
            or len(heap) < 2
            or heap[-1] not in "mg"
            or not heap[:-1].isdigit()
            or heap[0] == "0"
            or len(heap) > 7
        ):
            raise RocketMQSpecError(
                f"spec.rocketmq.heapSize must look like 512m or 2g, got {heap!r}"
            )
        queues = self.topic_queue_nums
        if isinstance(queues, bool) or not isinstance(queues, int) or not 1 <= queues <= 1024:
            raise RocketMQSpecError(f"spec.rocketmq.topicQueueNums must be 1..1024, got {queues!r}")
        if not isinstance(self.acl_enabled, bool):
            raise RocketMQSpecError("spec.rocketmq.aclEnabled must be true or false")
        if not isinstance(self.timer_wheel_enable, bool):
            raise RocketMQSpecError("spec.rocketmq.timerWheelEnable must be true or false")
        levels = self.message_delay_level
        if levels is not None and (
            not isinstance(levels, str) or not MESSAGE_DELAY_LEVEL_PATTERN.fullmatch(levels)
        ):
            raise RocketMQSpecError(
                "spec.rocketmq.messageDelayLevel must be 1-64 delays such as '1s 5s 10m 2h' "
                f"(a number and s, m, h or d, one space apart), got {levels!r}"
            )
        for key, value in self.positive:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RocketMQSpecError(f"spec.rocketmq.{key} must be ≥ 1, got {value!r}")
        self.proxy.validate()


def _heap_ok(heap: object) -> bool:
    return (
        isinstance(heap, str)
        and 2 <= len(heap) <= 7
        and heap[-1] in "mg"
        and heap[:-1].isdigit()
        and heap[0] != "0"
    )


@dataclass(frozen=True)
class ProxySettings:
    """spec.rocketmq.proxy: the group's stock RocketMQ proxy (rocketmq_proxy.py)."""

    enabled: bool = True
    replicas: int = 1
    heap_size: str = "512m"

    @classmethod
    def from_spec(cls, raw: Mapping[str, Any]) -> ProxySettings:
        return cls(
            enabled=raw.get("enabled", True),
            replicas=raw.get("replicas", 1),
            heap_size=raw.get("heapSize", "512m"),
        )

    def validate(self) -> None:
        if not isinstance(self.enabled, bool):
            raise RocketMQSpecError("spec.rocketmq.proxy.enabled must be true or false")
        replicas = self.replicas
        if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 16:
            raise RocketMQSpecError(f"spec.rocketmq.proxy.replicas must be 1..16, got {replicas!r}")
        if not _heap_ok(self.heap_size):
            raise RocketMQSpecError(
                f"spec.rocketmq.proxy.heapSize must look like 512m or 2g, got {self.heap_size!r}"
            )


def _hosts(controller_addresses: Sequence[str]) -> list[str]:
    """The host part of each controller API address (host:port), in order, without repeats."""
    hosts: list[str] = []
    for address in controller_addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise RocketMQSpecError(f"controller address {address!r} is not host:port")
        if host not in hosts:
            hosts.append(host)
    return hosts


def controller_addr(
    controller_addresses: Sequence[str], remoting_port: int = DEFAULT_REMOTING_PORT
) -> str:
    """RocketMQ's `controllerAddr`: every controller node's remoting port, `;`-separated.

    The operator knows the nodes by their HTTP API addresses (the StatefulSet's stable DNS
    names); the remoting port is on the same host."""
    return ";".join(f"{host}:{remoting_port}" for host in _hosts(controller_addresses))


def namesrv_addr(controller_addresses: Sequence[str], namesrv_port: int = NAMESRV_PORT) -> str:
    """RocketMQ's `namesrvAddr`: every controller node's name server. Registrations are
    per node (not replicated), so a broker must name them all, as with RocketMQ's."""
    return ";".join(f"{host}:{namesrv_port}" for host in _hosts(controller_addresses))


def broker_properties(
    *,
    cluster_name: str,
    broker_name: str,
    spec: Mapping[str, Any],
    controller_addresses: Sequence[str],
    remoting_port: int = DEFAULT_REMOTING_PORT,
) -> dict[str, str]:
    """The properties every pod of the group shares, in a stable order."""
    settings = RocketMQSettings.from_spec(spec)
    ha = spec.get("ha") or {}
    properties: dict[str, str] = {
        "brokerClusterName": cluster_name,
        "brokerName": broker_name,
        # Ignored in controller mode (the controller assigns the id, the broker persists it in
        # storePathRootDir/brokerIdentity); -1 says so to a reader of the file.
        "brokerId": "-1",
        "enableControllerMode": "true",
        "controllerAddr": controller_addr(controller_addresses, remoting_port),
        "namesrvAddr": namesrv_addr(controller_addresses),
        "listenPort": str(LISTEN_PORT),
        "haListenPort": str(HA_LISTEN_PORT),
        "mappedFileSizeCommitLog": str(settings.mapped_file_size_commit_log),
        "flushDiskType": settings.flush_disk_type,
        "autoCreateTopicEnable": _bool(settings.auto_create_topic_enable),
        "defaultTopicQueueNums": str(settings.topic_queue_nums),
        # No acknowledged loss by default (DESIGN.md §3.3); RocketMQ's default is false.
        "allAckInSyncStateSet": "true",
        # Timer messages (docs/rocketmq-compatibility.md "Engine rocketmq": a slave fetches the
        # master's timer checkpoint every 3 s; the wheel's files are on the PVC).
        "timerWheelEnable": _bool(settings.timer_wheel_enable),
        # A new master and a new controller leader are seen in about a second, not RocketMQ's
        # 5-10 s periods.
        "syncBrokerMetadataPeriod": "1000",
        "checkSyncStateSetPeriod": "1000",
        "syncControllerMetadataPeriod": "2000",
        "authenticationMetadataProvider": AUTH_PROVIDER,
    }
    if settings.acl_enabled:
        # The group's client pair (initAuthenticationUser) and broker pair (the inner
        # credentials) are Super users, so they keep working; the users come from the sync.
        properties.update(ACL_PROPERTIES)
    if settings.message_delay_level is not None:
        properties["messageDelayLevel"] = settings.message_delay_level
    for key, value in settings.positive:
        properties[key] = str(value)
    for ha_field, name in HA_PROPERTIES.items():
        if ha_field in ha:
            value = ha[ha_field]
            properties[name] = _bool(value) if isinstance(value, bool) else str(int(value))
    return properties


def _bool(value: bool) -> str:
    return "true" if value else "false"


def render(properties: Mapping[str, str]) -> str:
    """A Java properties file. Values here never need escapes; refuse the ones that would
    (a line break would start a new key, a backslash would be read as an escape)."""
    lines = []
    for key, value in properties.items():
        for text in (key, value):
            if any(c in text for c in "\\\n\r") or text != text.strip():
                raise RocketMQSpecError(
                    f"broker property {key}={value!r} cannot be written plainly"
                )
        lines.append(f"{key}={value}\n")
    return "".join(lines)


def tls_properties() -> dict[str, str]:
    """RocketMQ's TlsSystemConfig file (`tls.config.file`) of a stock broker with spec.tls
    (stock_tls.tls_properties): the group's certificate served on its remoting port and
    presented on its own connections, which verify the server against the trust bundle.
    `tls.server.mode` and `tls.enable` are read from system properties only
    (tls_jvm_options)."""
    return stock_tls.tls_properties(
        f"{TLS_DIR}/tls.crt", f"{TLS_DIR}/tls.key", f"{TLS_TRUST_DIR}/ca.crt"
    )


def tls_jvm_options(mode: str, client_tls: bool) -> list[str]:
    """The system properties TlsSystemConfig reads (stock_tls.tls_jvm_options), with the file
    above from the group's ConfigMap, and `tls.enable` for the broker's own connections when
    the release's name servers and controller remoting port serve TLS (`client_tls`)."""
    return stock_tls.tls_jvm_options(mode, f"{CONFIG_DIR}/{TLS_CONFIG_KEY}", client_tls)


def java_command(heap_size: str, config_path: str, extra_options: Sequence[str] = ()) -> list[str]:
    """The JVM command line of one stock broker (the image's java, its jars, no scripts);
    `extra_options`: system properties (tls_jvm_options)."""
    return [
        "java",
        f"-Xms{heap_size}",
        f"-Xmx{heap_size}",
        "-XX:+ExitOnOutOfMemoryError",
        *extra_options,
        # Logs (${user.home}/logs) and temporary files go to the emptyDir: read-only root.
        f"-Duser.home={TMP_DIR}",
        f"-Djava.io.tmpdir={TMP_DIR}",
        f"-Drocketmq.home.dir={ROCKETMQ_HOME}",
        "-cp",
        f"{ROCKETMQ_HOME}/lib/*",
        MAIN_CLASS,
        "-c",
        config_path,
    ]


def volume_properties() -> dict[str, str]:
    """Properties naming the pod's volumes: the store (with the brokerIdentity file that
    keeps the BrokerId) on the PVC, the local auth store on the emptyDir."""
    return {
        "storePathRootDir": STORE_DIR,
        "storePathCommitLog": f"{STORE_DIR}/commitlog",
        "authConfigPath": f"{TMP_DIR}/rocketmq-auth",
    }


def per_pod_lines() -> list[str]:
    """Shell lines printing the pod's own properties ($POD_IP from the downward API)."""
    client_pair = f"{CLIENT_DIR}/{CLIENT_CREDENTIALS_KEY}"
    return [
        *(f"echo {key}={value}" for key, value in volume_properties().items()),
        'echo "brokerIP1=$POD_IP"',
        'echo "brokerIP2=$POD_IP"',
        "printf innerClientAuthenticationCredentials=",
        f"cat {SECRETS_DIR}/{CREDENTIALS_KEY}",
        "echo",
        # {"accessKey","secretKey"} → RocketMQ's User {"username","password"}: the proxy
        # finds the SDKs' pair among the brokers' users (GET_USER).
        f"if [ -f {client_pair} ]; then printf initAuthenticationUser=; "
        f'sed -e \'s/"accessKey"/"username"/\' -e \'s/"secretKey"/"password"/\' '
        f"{client_pair}; echo; fi",
    ]


def launch_script(heap_size: str, extra_options: Sequence[str] = ()) -> str:
    """`sh -c` text: the shared file plus the pod's lines into the emptyDir, then the JVM."""
    final = f"{TMP_DIR}/{CONFIG_KEY}"
    parts = [f"cat {CONFIG_DIR}/{CONFIG_KEY}", *per_pod_lines()]
    return (
        "set -e; umask 077; { "
        + "; ".join(parts)
        + f"; }} > {final}; exec "
        + shlex.join(java_command(heap_size, final, extra_options))
    )
