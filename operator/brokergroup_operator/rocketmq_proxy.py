"""The stock RocketMQ proxy of a `spec.engine: rocketmq` group (pure): what the RocketMQ 5
SDKs (gRPC only) connect to.

RocketMQ 5.3's proxy in cluster mode (`ProxyStartup -pm cluster`) is stateless: it finds the
brokers through the name servers (every controller node's, as the brokers' namesrvAddr) and
serves gRPC (8081) and remoting (8080). One per group, owned by it:

- ConfigMap `<bg>-proxy` with `rmq-proxy.json` minus the secret: the cluster (= namespace),
  namesrvAddr, the ports, `enableAclRpcHookForClusterMode` (it signs what it sends to the
  name servers and brokers) and `authenticationEnabled` (it checks the SDKs' AccessKey
  signatures against the brokers' users: ProxyAuthenticationMetadataProvider asks a broker,
  which holds the group's client pair as a user, rocketmq_config.per_pod_lines);
- Deployment `<bg>-proxy` (spec.rocketmq.proxy.replicas, the group's RocketMQ image): `sh -c`
  appends `innerClientAuthenticationCredentials` (the group's client pair, from the group's
  Secret) to the file in an emptyDir and execs the JVM; non-root, read-only root, TCP probes;
- Service `<bg>-proxy`: the gRPC endpoint (`<bg>-proxy.<ns>.svc:8081`) and the remoting port.

With spec.tls the proxy serves the group's certificate (which then names the proxy's Service
too, `proxy_server_names`) on both ports in the group's mode, and, when the release's name
servers serve TLS, dials them and the brokers over TLS verified against the group's trust
bundle: RocketMQ's TlsSystemConfig (`tls.server.mode`, `tls.enable`, `tls.config.file`:
brokergroup_remoting.stock_tls, as the group's brokers and the local runtime's proxy).

The proxy's pods carry the group's name and instance labels but not its group label, so the
group's selectors (headless Service, PDB, NetworkPolicy, the operator's pod lists and role
labels) never see them.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from brokergroup_operator import rocketmq_config as rmq
from brokergroup_operator.containers import tls_volumes
from brokergroup_operator.model import APP_NAME, LABEL_INSTANCE, LABEL_NAME, Engine
from brokergroup_operator.spec import GroupContext
from brokergroup_remoting import stock_tls

MAIN_CLASS = "org.apache.rocketmq.proxy.ProxyStartup"
GRPC_PORT = 8081
REMOTING_PORT = 8080
CONFIG_KEY = "rmq-proxy.json"
CONFIG_DIR = "/etc/rocketmq/proxy"
LABEL_COMPONENT = "app.kubernetes.io/component"
COMPONENT = "proxy"
CONTAINER = "proxy"
AUTH_PROVIDER = "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider"
AUTH_METADATA_PROVIDER = "org.apache.rocketmq.proxy.auth.ProxyAuthenticationMetadataProvider"


def proxy_name(ctx: GroupContext) -> str:
    return f"{ctx.name}-proxy"


def proxy_enabled(ctx: GroupContext) -> bool:
    return ctx.engine is Engine.ROCKETMQ and rmq.RocketMQSettings.from_spec(ctx.spec).proxy.enabled


def proxy_server_names(ctx: GroupContext) -> tuple[str, ...]:
    """The names the SDKs dial the proxy at (its Service), for the group's certificate; none
    without a proxy. gRPC clients always verify the host name."""
    if not proxy_enabled(ctx):
        return ()
    service = proxy_name(ctx)
    return (service, f"{service}.{ctx.namespace}", f"{service}.{ctx.namespace}.svc")


def _tls_on(ctx: GroupContext) -> bool:
    return ctx.tls is not None and ctx.tls.enabled


def proxy_labels(ctx: GroupContext) -> dict[str, str]:
    """The proxy pods' labels (and selector): not the group's pod selector."""
    return {LABEL_NAME: APP_NAME, LABEL_INSTANCE: ctx.name, LABEL_COMPONENT: COMPONENT}


def proxy_settings(ctx: GroupContext) -> dict[str, Any]:
    """rmq-proxy.json without the key pair (that comes from the Secret at start)."""
    return {
        "rocketMQClusterName": ctx.namespace,
        "proxyClusterName": ctx.namespace,
        "proxyMode": "cluster",
        "namesrvAddr": rmq.namesrv_addr(ctx.addresses),
        "grpcServerPort": GRPC_PORT,
        "remotingListenPort": REMOTING_PORT,
        "enableAclRpcHookForClusterMode": True,
        # A 5.3.3 slave cannot sync a topic carrying attributes (AttributeUtil refuses the
        # master's keys: the whole topic sync stops), so topics carry no message.type and the
        # proxy does not ask for one (docs/rocketmq-compatibility.md).
        "enableTopicMessageTypeCheck": False,
        "authenticationEnabled": True,
        "authenticationProvider": AUTH_PROVIDER,
        "authenticationMetadataProvider": AUTH_METADATA_PROVIDER,
        "enablePrintJstack": False,
        **(
            stock_tls.proxy_settings(f"{rmq.TLS_DIR}/tls.crt", f"{rmq.TLS_DIR}/tls.key")
            if _tls_on(ctx)
            else {}
        ),
    }


def render(settings: dict[str, Any]) -> str:
    """One key per line and `}` alone on the last line, which the launcher replaces."""
    return json.dumps(settings, indent=1) + "\n"


def tls_jvm_options(ctx: GroupContext) -> list[str]:
    """TlsSystemConfig's system properties (none without spec.tls): the group's mode on the
    proxy's ports, its file from the proxy's ConfigMap, and `tls.enable` for its own
    connections when the release's name servers serve TLS (as the group's brokers)."""
    if ctx.tls is None or not _tls_on(ctx):
        return []
    return stock_tls.tls_jvm_options(
        ctx.tls.mode, f"{CONFIG_DIR}/{rmq.TLS_CONFIG_KEY}", ctx.namesrv_tls
    )


def launch_script(heap_size: str, jvm_options: list[str] | None = None) -> str:
    """`sh -c` text: the ConfigMap's JSON with the client pair added (as a JSON string, its
    quotes escaped), owner-only in the emptyDir, then the JVM."""
    final = f"{rmq.TMP_DIR}/{CONFIG_KEY}"
    pair = f"{rmq.CLIENT_DIR}/{rmq.CLIENT_CREDENTIALS_KEY}"
    parts = [
        f"sed '$d' {CONFIG_DIR}/{CONFIG_KEY}",
        """printf ',"innerClientAuthenticationCredentials":"'""",
        f"""sed 's/"/\\\\"/g' {pair} | tr -d '\\n'""",
        """printf '"}\\n'""",
    ]
    return (
        "set -e; umask 077; { "
        + "; ".join(parts)
        + f"; }} > {final}; exec "
        + shlex.join(java_command(heap_size, final, jvm_options or []))
    )


def java_command(heap_size: str, config_path: str, jvm_options: list[str]) -> list[str]:
    return [
        "java",
        f"-Xms{heap_size}",
        f"-Xmx{heap_size}",
        "-XX:+ExitOnOutOfMemoryError",
        *jvm_options,
        f"-Duser.home={rmq.TMP_DIR}",
        f"-Djava.io.tmpdir={rmq.TMP_DIR}",
        f"-Drocketmq.home.dir={rmq.ROCKETMQ_HOME}",
        f"-DRMQ_PROXY_HOME={rmq.TMP_DIR}",
        "-cp",
        f"{rmq.ROCKETMQ_HOME}/lib/*",
        MAIN_CLASS,
        "-pc",
        config_path,
        "-pm",
        "cluster",
    ]


def _meta(ctx: GroupContext) -> dict[str, Any]:
    meta = ctx.object_meta(proxy_name(ctx))
    meta["labels"] = {**meta["labels"], LABEL_COMPONENT: COMPONENT}
    return meta


def config_map(ctx: GroupContext) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(ctx),
        "data": {
            CONFIG_KEY: render(proxy_settings(ctx)),
            **({rmq.TLS_CONFIG_KEY: rmq.render(rmq.tls_properties())} if _tls_on(ctx) else {}),
        },
    }


def deployment(ctx: GroupContext) -> dict[str, Any]:
    settings = rmq.RocketMQSettings.from_spec(ctx.spec).proxy
    labels = proxy_labels(ctx)
    container = {
        "name": CONTAINER,
        "image": ctx.image,
        "imagePullPolicy": ctx.spec.get("imagePullPolicy", "IfNotPresent"),
        "command": ["sh", "-c", launch_script(settings.heap_size, tls_jvm_options(ctx))],
        "ports": [
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "remoting", "containerPort": REMOTING_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {"tcpSocket": {"port": GRPC_PORT}, "periodSeconds": 2},
        "livenessProbe": {
            "tcpSocket": {"port": GRPC_PORT},
            "initialDelaySeconds": 60,
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "client-pair", "mountPath": rmq.CLIENT_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": rmq.TMP_DIR},
            *(
                [
                    {"name": "tls", "mountPath": rmq.TLS_DIR, "readOnly": True},
                    {"name": "tls-trust", "mountPath": rmq.TLS_TRUST_DIR, "readOnly": True},
                ]
                if _tls_on(ctx)
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
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(ctx),
        "spec": {
            "replicas": settings.replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                    "containers": [container],
                    "volumes": [
                        {"name": "config", "configMap": {"name": proxy_name(ctx)}},
                        {
                            "name": "client-pair",
                            "secret": {
                                "secretName": ctx.secret,
                                "items": [
                                    {
                                        "key": rmq.CLIENT_CREDENTIALS_KEY,
                                        "path": rmq.CLIENT_CREDENTIALS_KEY,
                                    }
                                ],
                                "defaultMode": 0o400,
                            },
                        },
                        {"name": "tmp", "emptyDir": {}},
                        *tls_volumes(ctx),
                    ],
                },
            },
        },
    }


def service(ctx: GroupContext) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ctx),
        "spec": {
            "selector": proxy_labels(ctx),
            "ports": [
                {"name": "grpc", "port": GRPC_PORT, "targetPort": GRPC_PORT, "protocol": "TCP"},
                {
                    "name": "remoting",
                    "port": REMOTING_PORT,
                    "targetPort": REMOTING_PORT,
                    "protocol": "TCP",
                },
            ],
        },
    }


def proxy_objects(ctx: GroupContext) -> list[dict[str, Any]]:
    """The proxy's objects in apply order, or none (the built-in engine; proxy disabled)."""
    if not proxy_enabled(ctx):
        return []
    return [config_map(ctx), service(ctx), deployment(ctx)]
