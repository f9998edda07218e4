"""What runs in a BrokerGroup's pods, per engine (pure): the broker container, the
volumes it mounts and the config files of the group's ConfigMap.

The built-in engine (`brokergroup broker`) reads broker.json, mounts the group's broker
credential, HA secret and, with the remoting port on, its RocketMQ key pairs. The rocketmq
engine runs stock RocketMQ 5.3 brokers (rocketmq_config.py): the JVM reads broker.conf and
signs with the group's broker pair. Each engine's container and volumes are built by its
own functions; both containers share their name, image, pull policy, hardened security
context and spec.resources. Everything else in the pod (the StatefulSet, labels,
Services) is the same for both engines (workload.py, networking.py).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from brokergroup_controller.api import INCARNATION_ENV
from brokergroup_operator import rocketmq_config as rmq
from brokergroup_operator.group_secrets import BROKER_CREDENTIAL_KEY
from brokergroup_operator.model import (
    BROKER_CONTAINER,
    CLIENT_PORT,
    HA_PORT,
    HTTP_PORT,
    REMOTING_PORT,
    Engine,
)
from brokergroup_operator.release_secret import HA_SECRET_KEY
from brokergroup_operator.spec import HA_FIELDS, GroupContext, SpecError
from brokergroup_operator.tls_spec import Issuer

SECRETS_DIR = "/etc/brokergroup/secrets"
#: The client pair of the user's own Secret, an optional key: its own volume, so the broker
#: credential and the HA secret stay required.
CLIENT_PAIR_DIR = "/etc/brokergroup/client-pair"
CONFIG_DIR = "/etc/brokergroup/config"
#: spec.tls: the server certificate (tls.crt, tls.key) and the CAs trusted (ca.crt).
TLS_DIR = "/etc/brokergroup/tls"
TRUST_DIR = "/etc/brokergroup/tls-trust"
DATA_DIR = "/data"


def engine_container(ctx: GroupContext) -> dict[str, Any]:
    """The broker container of the group's engine."""
    if ctx.engine is Engine.ROCKETMQ:
        return rocketmq_container(ctx)
    return broker_container(ctx)


def engine_volumes(ctx: GroupContext) -> list[dict[str, Any]]:
    """The volumes the group's engine mounts besides its data volume (the claim)."""
    if ctx.engine is Engine.ROCKETMQ:
        return rocketmq_volumes(ctx)
    return broker_volumes(ctx)


def config_map_name(ctx: GroupContext) -> str:
    """The ConfigMap `<bg>-config` holding config_data, mounted by both engines."""
    return f"{ctx.name}-config"


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
    """The ConfigMap's files: broker.json (built-in) or broker.conf (stock RocketMQ, and
    its tls.properties with spec.tls)."""
    if ctx.engine is Engine.ROCKETMQ:
        files = {rmq.CONFIG_KEY: rmq.render(rocketmq_properties(ctx))}
        if rocketmq_tls_options(ctx):
            files[rmq.TLS_CONFIG_KEY] = rmq.render(rmq.tls_properties())
        return files
    return {"broker.json": json.dumps(broker_config(ctx), sort_keys=True, indent=2) + "\n"}


def config_hash(ctx: GroupContext) -> str:
    """16 hex digits of the broker's config (broker.json's settings, or the stock broker's
    files): the pod template carries it, so a changed config makes a new revision."""
    return hashlib.sha256(
        json.dumps(
            broker_config(ctx) if ctx.engine is Engine.BROKERGROUP else config_data(ctx),
            sort_keys=True,
        ).encode()
    ).hexdigest()[:16]


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
        # No key pair at all (a release Secret without rocketmq-credentials): the client
        # port has nothing to check a client against and stays open, as before the
        # handshake; docs/security.md says to add the pair (the port then authenticates).
        else ["--insecure-no-client-auth"]
    )
    return [
        *_base_command(ctx),
        *remoting,
        *tls_flags(ctx),
    ]


def tls_flags(ctx: GroupContext) -> list[str]:
    """spec.tls on every port of the pod (docs/security.md "TLS on Kubernetes"):

    - the remoting port and the client protocol port in the group's mode (permissive by
      default: plaintext and TLS clients on one port), with the group's certificate;
    - HA replication in mutual TLS (the trust bundle as the CA: both ends hold the
      group's certificate), the master verified for the group's Service name, which
      every leaf of the group carries (a slave dials the master's pod IP, which none does);
    - the name server registrations over TLS when the release's name servers serve it
      (BROKERGROUP_CONTROLLER_TLS), else plaintext (`--namesrv-plaintext`);
    - the controllers' API in mutual TLS when it is HTTPS (BROKERGROUP_CONTROLLER_API_TLS);
    - with spec.tls.httpPort the HTTP port HTTPS only (`--http-tls`): the peers read it
      verified against the bundle for the group's Service name (`--ha-tls-server-name`).

    Without spec.tls nothing is added; with the controllers' API on HTTPS that is refused
    (SpecError): the brokers could not verify the controllers."""
    tls = ctx.tls
    if tls is None or not tls.enabled:
        if ctx.controller_api_tls:
            raise SpecError(
                "the release's controllers serve their API over HTTPS only "
                "(tls.controllers.httpsApi): the group needs spec.tls so its brokers hold a "
                "certificate and the cluster CA to reach them"
            )
        return []
    flags = [
        "--remoting-tls-mode",
        tls.mode,
        "--client-tls-mode",
        tls.mode,
        "--tls-cert-file",
        f"{TLS_DIR}/tls.crt",
        "--tls-key-file",
        f"{TLS_DIR}/tls.key",
        "--tls-ca-file",
        f"{TRUST_DIR}/ca.crt",
        "--ha-tls-server-name",
        ha_server_name(ctx),
    ]
    if not ctx.namesrv_tls:
        flags.append("--namesrv-plaintext")
    if ctx.controller_api_tls:
        flags.append("--controller-tls")
    if tls.http_port:
        flags.append("--http-tls")
    return flags


def ha_server_name(ctx: GroupContext) -> str:
    """The name a slave verifies its master's certificate for: the group's Service in its
    namespace, one of certificates.server_names (and of a cert-manager Certificate's)."""
    return f"{ctx.name}.{ctx.namespace}.svc"


def tls_trust_name(ctx: GroupContext) -> str:
    """The ConfigMap `<bg>-tls-trust` (ca.crt: the cluster CAs trusted) of issuer operator."""
    return f"{ctx.name}-tls-trust"


def tls_volumes(ctx: GroupContext) -> list[dict[str, Any]]:
    """The server certificate's Secret and the trust bundle (the operator's ConfigMap, or
    the ca.crt of the user's or cert-manager's Secret)."""
    tls = ctx.tls
    if tls is None or not tls.enabled:
        return []
    trust: dict[str, Any] = (
        {"configMap": {"name": tls_trust_name(ctx), "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
        if tls.issuer is Issuer.OPERATOR
        else {
            "secret": {
                "secretName": ctx.tls_secret,
                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                "defaultMode": 0o444,
            }
        }
    )
    return [
        {
            "name": "tls",
            "secret": {
                "secretName": ctx.tls_secret,
                "items": [
                    {"key": "tls.crt", "path": "tls.crt"},
                    {"key": "tls.key", "path": "tls.key"},
                ],
                "defaultMode": 0o400,
            },
        },
        {"name": "tls-trust", **trust},
    ]


def tls_mounts(ctx: GroupContext) -> list[dict[str, Any]]:
    if not tls_volumes(ctx):
        return []
    return [
        {"name": "tls", "mountPath": TLS_DIR, "readOnly": True},
        {"name": "tls-trust", "mountPath": TRUST_DIR, "readOnly": True},
    ]


def _base_command(ctx: GroupContext) -> list[str]:
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
    ]


def broker_container(ctx: GroupContext) -> dict[str, Any]:
    """The built-in broker's container: `brokergroup broker` (broker_command), its client,
    HA and HTTP ports (and the remoting port with the key pair), HTTP probes, its data,
    config and Secret files."""
    return _container(
        ctx,
        {
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
                {"name": http_port_name(ctx), "containerPort": HTTP_PORT, "protocol": "TCP"},
                *(
                    [{"name": "remoting", "containerPort": REMOTING_PORT, "protocol": "TCP"}]
                    if ctx.remoting_on
                    else []
                ),
            ],
            "readinessProbe": {
                "httpGet": _probe_get(ctx, "/readyz"),
                "periodSeconds": 1,
                "failureThreshold": 2,
            },
            "livenessProbe": {
                "httpGet": _probe_get(ctx, "/healthz"),
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
                *tls_mounts(ctx),
            ],
        },
    )


def http_tls_on(ctx: GroupContext) -> bool:
    """spec.tls.httpPort: the built-in broker's HTTP port (probes, status, `/metrics`)
    serves HTTPS only (`--http-tls`, with the group's certificate). Off by default."""
    tls = ctx.tls
    return ctx.engine is Engine.BROKERGROUP and tls is not None and tls.enabled and tls.http_port


def http_port_name(ctx: GroupContext) -> str:
    """The HTTP port's name on the pod and the headless Service: `https` when it serves
    HTTPS, so a scraper picks its scheme by the name (the chart's monitors have one
    endpoint per name) and a group's plain and TLS pods are never scraped the wrong way."""
    return "https" if http_tls_on(ctx) else "http"


def _probe_get(ctx: GroupContext, path: str) -> dict[str, Any]:
    """A probe's httpGet on the HTTP port; `scheme: HTTPS` when the port is HTTPS only (the
    kubelet does not verify the certificate: the probe proves the process answers, and
    the certificate names no pod IP)."""
    get: dict[str, Any] = {"path": path, "port": HTTP_PORT}
    if http_tls_on(ctx):
        get["scheme"] = "HTTPS"
    return get


def broker_volumes(ctx: GroupContext) -> list[dict[str, Any]]:
    return [
        {"name": "config", "configMap": {"name": config_map_name(ctx)}},
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
        *tls_volumes(ctx),
    ]


def rocketmq_tls_options(ctx: GroupContext) -> list[str]:
    """A stock broker's TLS system properties with spec.tls (none without). Enforcing needs
    the release's name servers and controller remoting port on TLS (tls.controllers.mode):
    RocketMQ's one `tls.enable` switches every outgoing connection of a JVM at once, so a
    client of enforcing brokers cannot also reach plaintext name servers (the group's stock
    proxy dials them and the brokers the same way, rocketmq_proxy.tls_jvm_options). Stock HA
    replication has no TLS (docs/security.md says so)."""
    tls = ctx.tls
    if tls is None or not tls.enabled:
        return []  # (stock brokers reach the controllers on the remoting port, not the API)
    if tls.http_port:
        raise SpecError(
            "spec.tls.httpPort is the built-in broker's HTTP port: stock RocketMQ brokers "
            "(spec.engine rocketmq) have none"
        )
    if tls.mode == "enforcing" and not ctx.namesrv_tls:
        raise SpecError(
            "spec.tls.mode enforcing with spec.engine rocketmq needs the release's controllers "
            "on TLS (tls.controllers.mode permissive or enforcing): a stock broker's one "
            "tls.enable switches all its outgoing connections"
        )
    return rmq.tls_jvm_options(tls.mode, ctx.namesrv_tls)


def rocketmq_container(ctx: GroupContext) -> dict[str, Any]:
    """A stock broker's container: the JVM (rocketmq_config.launch_script), its two ports,
    TCP probes (a stock broker has no HTTP port), its config, key pair and an emptyDir for
    broker.conf, logs and tmp."""
    settings = rmq.RocketMQSettings.from_spec(ctx.spec)
    return _container(
        ctx,
        {
            "command": [
                "sh",
                "-c",
                rmq.launch_script(settings.heap_size, rocketmq_tls_options(ctx)),
            ],
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
                {"name": "client-pair", "mountPath": rmq.CLIENT_DIR, "readOnly": True},
                {"name": "tmp", "mountPath": rmq.TMP_DIR},
                *(
                    [
                        {"name": "tls", "mountPath": rmq.TLS_DIR, "readOnly": True},
                        {"name": "tls-trust", "mountPath": rmq.TLS_TRUST_DIR, "readOnly": True},
                    ]
                    if tls_volumes(ctx)
                    else []
                ),
            ],
        },
    )


def _container(ctx: GroupContext, runs: dict[str, Any]) -> dict[str, Any]:
    """The container named BROKER_CONTAINER of the group's image around what `runs` says
    (command, env, ports, probes, volume mounts), with what both engines' containers
    share: the pull policy, a hardened security context and spec.resources."""
    container: dict[str, Any] = {
        "name": BROKER_CONTAINER,
        "image": ctx.image,
        "imagePullPolicy": ctx.spec.get("imagePullPolicy", "IfNotPresent"),
        **runs,
        "securityContext": {
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if ctx.spec.get("resources"):
        container["resources"] = dict(ctx.spec["resources"])
    return container


def rocketmq_volumes(ctx: GroupContext) -> list[dict[str, Any]]:
    return [
        {"name": "config", "configMap": {"name": config_map_name(ctx)}},
        {
            "name": "secrets",
            "secret": {
                "secretName": ctx.secret,
                # The key pair the stock broker signs with; nothing else.
                "items": [{"key": rmq.CREDENTIALS_KEY, "path": rmq.CREDENTIALS_KEY}],
                "defaultMode": 0o400,
            },
        },
        {
            # The group's client pair, kept by the broker as a user for the stock proxy's
            # signature checks (rocketmq_config.per_pod_lines); a user's own Secret may
            # lack it (then the proxy refuses every SDK, and nothing else changes).
            "name": "client-pair",
            "secret": {
                "secretName": ctx.secret,
                "items": [{"key": rmq.CLIENT_CREDENTIALS_KEY, "path": rmq.CLIENT_CREDENTIALS_KEY}],
                "defaultMode": 0o400,
                "optional": True,
            },
        },
        {"name": "tmp", "emptyDir": {}},
        *tls_volumes(ctx),
    ]
