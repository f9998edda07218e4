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
  RocketMQ name servers) and the HA settings from spec.ha;
- `per_pod_lines` (appended by `launch_script` when the container starts): the pod's own
  IP as `brokerIP1`/`brokerIP2` (what the controller records and the master Service's
  endpoint is), the signing credentials from the group's Secret, which must not sit in
  a ConfigMap, and the paths of the pod's volumes (the store on the PVC, the auth store on
  the emptyDir), which the container's command names (so a runtime that places volumes
  elsewhere, as the cluster tier's process kubelet does, rewrites them there).

`launch_script` is the whole launcher: four shell lines that write that file to the
emptyDir and `exec` the JVM (`java_command`); no RocketMQ script runs.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brokergroup_controller.config import DEFAULT_REMOTING_PORT

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
TMP_DIR = "/tmp"
CONFIG_KEY = "broker.conf"
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

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> RocketMQSettings:
        raw = spec.get("rocketmq") or {}
        settings = cls(
            auto_create_topic_enable=raw.get("autoCreateTopicEnable", False),
            flush_disk_type=raw.get("flushDiskType", "SYNC_FLUSH"),
            mapped_file_size_commit_log=raw.get("mappedFileSizeCommitLog", 1 << 30),
            heap_size=raw.get("heapSize", "1g"),
            topic_queue_nums=raw.get("topicQueueNums", 8),
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
        # Timer messages are not supported under brokergroup (docs/rocketmq-compatibility.md);
        # the timer wheel would also take its own files and threads.
        "timerWheelEnable": "false",
        # A new master and a new controller leader are seen in about a second, not RocketMQ's
        # 5-10 s periods.
        "syncBrokerMetadataPeriod": "1000",
        "checkSyncStateSetPeriod": "1000",
        "syncControllerMetadataPeriod": "2000",
        "authenticationMetadataProvider": AUTH_PROVIDER,
    }
    for field, name in HA_PROPERTIES.items():
        if field in ha:
            value = ha[field]
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


def java_command(heap_size: str, config_path: str) -> list[str]:
    """The JVM command line of one stock broker (the image's java, its jars, no scripts)."""
    return [
        "java",
        f"-Xms{heap_size}",
        f"-Xmx{heap_size}",
        "-XX:+ExitOnOutOfMemoryError",
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
    return [
        *(f"echo {key}={value}" for key, value in volume_properties().items()),
        'echo "brokerIP1=$POD_IP"',
        'echo "brokerIP2=$POD_IP"',
        "printf innerClientAuthenticationCredentials=",
        f"cat {SECRETS_DIR}/{CREDENTIALS_KEY}",
        "echo",
    ]


def launch_script(heap_size: str) -> str:
    """`sh -c` text: the shared file plus the pod's lines into the emptyDir, then the JVM."""
    final = f"{TMP_DIR}/{CONFIG_KEY}"
    parts = [f"cat {CONFIG_DIR}/{CONFIG_KEY}", *per_pod_lines()]
    return (
        "set -e; umask 077; { "
        + "; ".join(parts)
        + f"; }} > {final}; exec "
        + shlex.join(java_command(heap_size, final))
    )
