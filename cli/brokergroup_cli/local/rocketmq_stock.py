"""Stock Apache RocketMQ 5.3 processes as JDK command lines (no RocketMQ shell scripts).

The jars are what `tools/rocketmq/fetch.sh server` cached outside the repository
(`make rocketmq-servers`; `$BROKERGROUP_ROCKETMQ_HOME` overrides the place, server/VERSION
names the servers' version). Everything here builds text and argument lists; the callers
(the local runtime's supervisor, the integration harness, the benchmark) start the
processes. Each JVM gets a small heap, the serial collector and `-Duser.home` in its own
directory, so RocketMQ's logs land in `<dir>/logs/rocketmqlogs/`.

A stock broker in controller mode (`enableControllerMode=true`, `brokerId=-1`) asks the
controllers named in `controllerAddr` for a BrokerId, keeps it in `<store>/brokerIdentity`
(`cluster#brokerName#id`) and registers with the name servers in `namesrvAddr`, signing
everything with `innerClientAuthenticationCredentials` (AclClientRPCHook). It runs its timer
wheel (`TIMER_SETTINGS`) and, as master, its transaction check service.

The stock gRPC proxy (`ProxyStartup -pm cluster`, `StockProxyConfig`) reads one JSON file,
rmq-proxy.json: the name servers, its ports, and the key pair it signs with and checks.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# ACL 2.0 on a stock broker: RocketMQ's own switches (`--set authenticationEnabled=true
# --set authorizationEnabled=true`), off by default; the properties either one brings.
from brokergroup_remoting import stock_tls
from brokergroup_remoting.stock_users import ACL_PROPERTIES, acl_enabled

#: The cache directory's version (tools/rocketmq/fetch.sh); server/VERSION names the servers'.
VERSION = "5.3.1"
#: Small heaps and the serial collector for a laptop's group. Not C1 alone
#: (-XX:TieredStopAtLevel=1, the setting before 2026-12-01): with the timer wheel on, a broker's
#: TimerFlushService compares the whole 38.7 MB wheel byte by byte with its mapped file every
#: second (TimerWheel.flush), which C1's code made ~21 % of a core per idle broker and C2's ~2 %
#: (idle `local up --engine rocketmq`: each broker 20-26 % of a core -> 7-9 %, docs/local.md).
JVM_OPTIONS = ("-Xms128m", "-Xmx256m", "-XX:+UseSerialGC", "-Xss512k")

BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
CONTROLLER_MAIN = "org.apache.rocketmq.controller.ControllerStartup"
MQADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
PROXY_MAIN = "org.apache.rocketmq.proxy.ProxyStartup"
#: The proxy's file name (ProxyConfig.DEFAULT_CONFIG_FILE_NAME), read through `-pc`.
PROXY_CONFIG_FILE = "rmq-proxy.json"
#: Where the store keeps the id the controller gave it.
IDENTITY_FILE = "brokerIdentity"
#: The auth module's metadata store: the broker keeps its inner credentials there as a user
#: even with authenticationEnabled=false (AuthenticationMetadataManagerImpl.initUser).
LOCAL_AUTH_PROVIDER = (
    "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider"
)

#: The proxy checks its clients' AccessKey signatures with RocketMQ's default provider, against
#: the users of the brokers (ProxyAuthenticationMetadataProvider: GET_USER from a broker; a
#: cluster-mode proxy keeps none itself). The brokers hold the group's client pair as a user
#: (`initAuthenticationUser`, StockBrokerConfig.client_pair).
PROXY_AUTH_PROVIDER = (
    "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider"
)
PROXY_AUTH_METADATA_PROVIDER = "org.apache.rocketmq.proxy.auth.ProxyAuthenticationMetadataProvider"


@dataclass(frozen=True)
class RocketMQHome:
    server_lib: Path
    namesrv_jar: Path

    @property
    def classpath(self) -> str:
        return f"{self.server_lib}/*"

    @property
    def server_version(self) -> str:
        try:
            return (self.server_lib.parent / "VERSION").read_text().strip()
        except OSError:
            return "unknown"


def cache_home() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    default = Path(root) / "brokergroup" / "rocketmq" / VERSION
    return Path(os.environ.get("BROKERGROUP_ROCKETMQ_HOME", default))


def find_home() -> RocketMQHome | str:
    """The cached server jars, or why they cannot be used (a sentence for the user)."""
    if shutil.which("java") is None:
        return "java is not installed: stock RocketMQ brokers need a JDK (17 or newer)"
    lib = cache_home() / "server" / "lib"
    if not (lib / ".complete").exists():
        return (
            f"RocketMQ server jars are not cached in {lib}: run `tools/rocketmq/fetch.sh server` "
            "(or `make rocketmq-servers`)"
        )
    candidates = sorted(lib.glob("rocketmq-namesrv-*.jar"))
    if not candidates:
        return f"no rocketmq-namesrv jar in {lib}: run `tools/rocketmq/fetch.sh server` again"
    return RocketMQHome(lib, candidates[-1])


def proxy_missing(home: RocketMQHome) -> str | None:
    """Why the stock proxy cannot run from these jars (a cache from before it joined them)."""
    if not any(home.server_lib.glob("rocketmq-proxy-*.jar")):
        return (
            f"no rocketmq-proxy jar in {home.server_lib}: run `tools/rocketmq/fetch.sh server` "
            "again (it adds the proxy's jars)"
        )
    return None


def java_argv(
    home: RocketMQHome,
    main: str,
    args: list[str],
    *,
    user_home: Path,
    extra_cp: str = "",
    jvm_options: tuple[str, ...] = JVM_OPTIONS,
) -> list[str]:
    """`java … -cp <server/lib>/* MAIN ARGS` with the process's files under `user_home`."""
    cp = home.classpath + (f":{extra_cp}" if extra_cp else "")
    return [
        "java",
        *jvm_options,
        f"-Duser.home={user_home}",
        # ROCKETMQ_HOME without the environment (MixAll.ROCKETMQ_HOME_PROPERTY).
        f"-Drocketmq.home.dir={user_home}",
        "-Drocketmq.client.logUseSlf4j=false",
        "-cp",
        cp,
        main,
        *args,
    ]


def java_env(rocketmq_home: Path) -> dict[str, str]:
    """The environment: RocketMQ reads ${ROCKETMQ_HOME}/conf (mqadmin's tools.yml)."""
    return {**os.environ, "ROCKETMQ_HOME": str(rocketmq_home)}


def properties_text(values: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


def credentials_json(access_key: str, secret_key: str) -> str:
    return json.dumps({"accessKey": access_key, "secretKey": secret_key}, separators=(",", ":"))


def user_json(access_key: str, secret_key: str) -> str:
    """RocketMQ 5.3's `initAuthenticationUser`: a User (the broker makes it a super user)."""
    return json.dumps({"username": access_key, "password": secret_key}, separators=(",", ":"))


#: Faster than RocketMQ's defaults (heartbeat 1 s, timeout 10 s, metadata 5 s), so a dead
#: master is replaced in about a second; the same for every controller a broker runs under.
FAST_FAILOVER_SETTINGS: dict[str, str] = {
    "brokerHeartbeatInterval": "500",
    "controllerHeartBeatTimeoutMills": "3000",
    "syncBrokerMetadataPeriod": "1000",
    "syncControllerMetadataPeriod": "2000",
    "checkSyncStateSetPeriod": "1000",
}


#: The timer wheel (TimerMessageStore: timer messages, TIMER_DELIVER_MS / TIMER_DELAY_SEC /
#: TIMER_DELAY_MS; delay levels stay with the schedule service). It was off until timers
#: existed under brokergroup; what it costs: `<store>/timerwheel`, 7 days of slots whatever
#: timerPrecisionMs is (604,800 × 2 × 32 B = 38.7 MB, flushed whole, held once more in direct
#: memory), `<store>/timerlog/` segments of mappedFileSizeTimerLog (RocketMQ: 100 MB; here the
#: commit log's 16 MiB), `config/timercheck` and `config/timermetrics`, and ~8 threads. In
#: controller mode a slave asks the master for its timer checkpoint every 3 s
#: (GET_TIMER_CHECK_POINT, ReplicasManager.handleSlaveSynchronize) and enqueues only up to the
#: master's timer queue offset; a new master dequeues from that checkpoint's read time, so a
#: failover redelivers up to ~3 s of timers (duplicates) and loses none (docs/local.md).
TIMER_SETTINGS: dict[str, str] = {
    "timerWheelEnable": "true",
    "mappedFileSizeTimerLog": str(16 * 1024 * 1024),
}


#: RocketMQ's `transactionOpBatchInterval` (BrokerConfig: 3,000 ms): a master buffers the op
#: record of each END_TRANSACTION and writes the buffered ones as one message every this long.
ROCKETMQ_OP_BATCH_INTERVAL_MS = 3000
#: The floor of a derived op batch interval (a busier op writer, not a tighter loop).
MIN_OP_BATCH_INTERVAL_MS = 100


def op_batch_interval_ms(check_interval_ms: int) -> int:
    """`transactionOpBatchInterval` for a check interval: RocketMQ's 3 s, or a quarter of the
    check interval when that is shorter.

    Why: a stock master's check round (TransactionalMessageServiceImpl.check) re-puts each half
    message it checks and asks the producer; the producer's COMMIT or ROLLBACK for that copy is
    an op record, buffered up to this long before it is stored. The next round checks any half
    message older than transactionTimeOut with no stored op, so a copy whose op is still in the
    buffer is checked again, and a second COMMIT stores the message a second time. RocketMQ's
    defaults (30 s rounds, 3 s batches) leave a round ten batches; a check interval of 2 s (a
    test's) left less than one, and the stock master checked each committed transaction up to
    16 times. A quarter of the interval leaves three quarters for the producer's answer."""
    return max(MIN_OP_BATCH_INTERVAL_MS, min(ROCKETMQ_OP_BATCH_INTERVAL_MS, check_interval_ms // 4))


#: A stock process's TlsSystemConfig file, next to its broker.conf or rmq-proxy.json.
TLS_CONFIG_FILE = "tls.properties"


@dataclass(frozen=True)
class StockTls:
    """A stock process's TLS (brokergroup_remoting.stock_tls): its remoting (and the proxy's
    gRPC) port in `mode` with `cert_file`/`key_file` (PKCS#8), and its own connections over
    TLS verifying the servers against `ca_file` when `client_tls`."""

    mode: str
    cert_file: Path
    key_file: Path
    ca_file: Path
    client_tls: bool = True

    def properties(self) -> dict[str, str]:
        return stock_tls.tls_properties(str(self.cert_file), str(self.key_file), str(self.ca_file))

    def jvm_options(self, config_file: Path) -> list[str]:
        return stock_tls.tls_jvm_options(self.mode, str(config_file), self.client_tls)


@dataclass(frozen=True)
class StockBrokerConfig:
    """One stock broker in controller mode (brokerId=-1: the controller assigns its id)."""

    base_dir: Path
    host: str
    port: int
    controllers: str
    """`controllerAddr`: `host:port;host:port;…` of the controllers' remoting ports."""
    namesrv: str
    access_key: str
    secret_key: str
    cluster: str = "DefaultCluster"
    name: str = "broker-a"
    settings: tuple[tuple[str, str], ...] = ()
    """Overrides and extra broker.conf lines (last wins)."""
    client_pair: tuple[str, str] | None = None
    """The group's client pair (AccessKey, SecretKey), kept as a user in the broker's auth
    store (`initAuthenticationUser`): the stock proxy checks SDK signatures against it."""
    ha_port: int = 0
    """`haListenPort` (0: port + 1). RocketMQ binds it on every interface (DefaultHAService
    ignores bindAddress), so brokers sharing a machine need different HA ports even on
    different loopback addresses."""
    tls: StockTls | None = None
    """The remoting port's TLS and the broker's own connections' (None: RocketMQ's defaults,
    permissive with its self-signed test certificate). HA replication stays plaintext."""

    @property
    def store_dir(self) -> Path:
        return self.base_dir / "store"

    @property
    def conf_path(self) -> Path:
        return self.base_dir / "broker.conf"

    @property
    def tls_config_path(self) -> Path:
        return self.base_dir / TLS_CONFIG_FILE

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def properties(self) -> dict[str, str]:
        store = self.store_dir
        values = {
            "brokerClusterName": self.cluster,
            "brokerName": self.name,
            "brokerId": "-1",
            "enableControllerMode": "true",
            "controllerAddr": self.controllers,
            "namesrvAddr": self.namesrv,
            "brokerIP1": self.host,
            # The HA address slaves dial (the name server hands it out); the default is the
            # machine's first non-loopback address.
            "brokerIP2": self.host,
            "bindAddress": self.host,
            "listenPort": str(self.port),
            "haListenPort": str(self.ha_port or self.port + 1),
            "storePathRootDir": str(store),
            "storePathCommitLog": str(store / "commitlog"),
            "mappedFileSizeCommitLog": str(16 * 1024 * 1024),
            **TIMER_SETTINGS,
            "flushDiskType": "ASYNC_FLUSH",
            **FAST_FAILOVER_SETTINGS,
            # SEND_OK only once every replica in the SyncStateSet has the message (this
            # project's commit rule). RocketMQ's default (inSyncReplicas=1) acks from the
            # master alone, and a master SIGKILLed right after such an ack loses it: 3 of 435
            # acknowledged sends were never consumed in the integration test without it.
            "allAckInSyncStateSet": "true",
            "authenticationMetadataProvider": LOCAL_AUTH_PROVIDER,
            "authConfigPath": str(self.base_dir / "auth"),
            "innerClientAuthenticationCredentials": credentials_json(
                self.access_key, self.secret_key
            ),
        }
        if self.client_pair is not None:
            values["initAuthenticationUser"] = user_json(*self.client_pair)
        if acl_enabled(self.settings):
            # The group's pairs stay Super users (initAuthenticationUser and the inner
            # credentials): they keep working with rights on everything.
            values.update(ACL_PROPERTIES)
        values.update(dict(self.settings))
        check_interval = values.get("transactionCheckInterval", "")
        if "transactionOpBatchInterval" not in values and check_interval.isdigit():
            values["transactionOpBatchInterval"] = str(op_batch_interval_ms(int(check_interval)))
        return values

    def text(self) -> str:
        return properties_text(self.properties())

    def write(self) -> Path:
        """Write broker.conf readable by its owner only: it holds the group's broker pair
        (innerClientAuthenticationCredentials)."""
        if self.tls is not None:
            write_owner_only(self.tls_config_path, properties_text(self.tls.properties()))
        write_owner_only(self.conf_path, self.text())
        return self.conf_path

    def argv(self, home: RocketMQHome) -> list[str]:
        tls = () if self.tls is None else tuple(self.tls.jvm_options(self.tls_config_path))
        return java_argv(
            home,
            BROKER_MAIN,
            ["-c", str(self.conf_path)],
            user_home=self.base_dir,
            jvm_options=(*JVM_OPTIONS, *tls),
        )


@dataclass(frozen=True)
class StockProxyConfig:
    """The stock RocketMQ 5.3 proxy in cluster mode: stateless, it finds the brokers through
    the name servers and serves gRPC (the RocketMQ 5 SDKs) and remoting clients.

    It binds both ports on every interface (GrpcServerBuilder's NettyServerBuilder.forPort,
    NettyServerConfig's 0.0.0.0), like a stock broker's HA port."""

    base_dir: Path
    namesrv: str
    access_key: str
    secret_key: str
    """The pair it signs its requests to name servers and brokers with
    (enableAclRpcHookForClusterMode) and the one pair its clients must sign with
    (authenticationEnabled; the pair becomes its one user)."""
    grpc_port: int = 8081
    remoting_port: int = 8080
    cluster: str = "DefaultCluster"
    authenticate: bool = True
    tls: StockTls | None = None
    """Its gRPC and remoting ports' TLS and its connections to the name servers and brokers'
    (None: RocketMQ's defaults, permissive with a self-signed test certificate)."""

    @property
    def conf_path(self) -> Path:
        return self.base_dir / PROXY_CONFIG_FILE

    @property
    def tls_config_path(self) -> Path:
        return self.base_dir / TLS_CONFIG_FILE

    def settings(self) -> dict[str, object]:
        return {
            "rocketMQClusterName": self.cluster,
            "proxyClusterName": self.cluster,
            "proxyName": "brokergroup-local-proxy",
            "proxyMode": "cluster",
            "namesrvAddr": self.namesrv,
            "grpcServerPort": self.grpc_port,
            "remotingListenPort": self.remoting_port,
            "enableAclRpcHookForClusterMode": True,
            # No `message.type` topic attribute needed: a 5.3.3 slave cannot sync a topic
            # carrying attributes (AttributeUtil: "only add attribute is supported while
            # creating topic"; its whole topic sync stops there), so topics have none.
            "enableTopicMessageTypeCheck": False,
            "innerClientAuthenticationCredentials": credentials_json(
                self.access_key, self.secret_key
            ),
            "authenticationEnabled": self.authenticate,
            "authenticationProvider": PROXY_AUTH_PROVIDER,
            "authenticationMetadataProvider": PROXY_AUTH_METADATA_PROVIDER,
            # Two cores shared with three brokers: RocketMQ's pools are sized for a server.
            "grpcWorkerLoopNum": 2,
            "grpcThreadPoolNums": 8,
            "rocketmqMQClientNum": 2,
            "enablePrintJstack": False,
            **(
                {}
                if self.tls is None
                else stock_tls.proxy_settings(str(self.tls.cert_file), str(self.tls.key_file))
            ),
        }

    def text(self) -> str:
        return json.dumps(self.settings(), indent=2) + "\n"

    def write(self) -> Path:
        """rmq-proxy.json, readable by its owner only: it holds the group's client pair."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self.tls is not None:
            write_owner_only(self.tls_config_path, properties_text(self.tls.properties()))
        write_owner_only(self.conf_path, self.text())
        return self.conf_path

    def argv(self, home: RocketMQHome) -> list[str]:
        # RMQ_PROXY_HOME: where the proxy looks for conf/ (its TLS files come from
        # rmq-proxy.json and tls.properties instead).
        tls = () if self.tls is None else tuple(self.tls.jvm_options(self.tls_config_path))
        options = (*JVM_OPTIONS, *tls, f"-DRMQ_PROXY_HOME={self.base_dir}")
        return java_argv(
            home,
            PROXY_MAIN,
            ["-pc", str(self.conf_path), "-pm", "cluster"],
            user_home=self.base_dir,
            jvm_options=options,
        )


def read_broker_id(store_dir: Path) -> int | None:
    """The BrokerId the controller gave the broker whose store this is (None: not yet)."""
    try:
        text = (store_dir / IDENTITY_FILE).read_text().strip()
    except OSError:
        return None
    parts = text.split("#")
    if len(parts) != 3:
        return None
    try:
        return int(parts[2])
    except ValueError:
        return None


def write_owner_only(path: Path, text: str) -> None:
    """Replace `path` with `text`, mode 0600 from its first byte (temp file + fsync +
    rename): a file holding a secret is never briefly readable by others, and a reader
    sees the old file or the new one whole."""
    temp = path.with_name(path.name + ".tmp")
    temp.unlink(missing_ok=True)  # a crash's leftover
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


def namesrv_properties(host: str, port: int, extra: Mapping[str, str] | None = None) -> str:
    return properties_text({"listenPort": str(port), "bindAddress": host, **(extra or {})})


def tools_yml(access_key: str, secret_key: str) -> str:
    """${ROCKETMQ_HOME}/conf/tools.yml: the pair mqadmin signs with (AclUtils.getAclRPCHook)."""
    return f"accessKey: {access_key}\nsecretKey: {secret_key}\n"


def mqadmin_argv(home: RocketMQHome, base_dir: Path, args: list[str]) -> list[str]:
    """One mqadmin command; `base_dir` is its ROCKETMQ_HOME (conf/tools.yml under it)."""
    return java_argv(home, MQADMIN_MAIN, args, user_home=base_dir)
