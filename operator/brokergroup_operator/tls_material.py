"""The TLS material of a group with spec.tls, made or renewed as certificates.py decides
(the shell: reads, issues, writes; docs/kubernetes.md "TLS").

Once per BROKERGROUP_TLS_CHECK_SECONDS per group (and at once on a spec change, a
force-renew request or a fresh operator), `group_tls`:
- issuer operator: loads the release's cluster CA (`load_cluster_ca`: created or renewed
  in its Secret), decides the group's leaf (`plan_leaf`) from its record on the status, and
  writes the Secret `<bg>-tls`, the ConfigMap `<bg>-tls-trust` and `status.tls`;
- issuer cert-manager: applies the group's `Certificate` and reads its revision;
- issuer secret: nothing to make (the user's Secret is mounted as it is).
It returns the group's context with the TLS digest the pod template carries: a new leaf
or a new trust bundle makes a new revision, and the planner rolls it (slaves first, a
switchover before the master). A reload without a restart is not available on the
remoting port yet, so a renewal is always a roll.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from brokergroup_operator.certificates import (
    CA_VALIDITY_DAYS,
    CaAction,
    CaFacts,
    LeafAction,
    LeafRecord,
    RenewalPolicy,
    controller_names,
    iso,
    leaf_days,
    plan_ca,
    plan_leaf,
    server_names,
    tls_digest,
    trusted_cas,
)
from brokergroup_operator.containers import tls_trust_name
from brokergroup_operator.rocketmq_proxy import proxy_server_names
from brokergroup_operator.runtime import GroupMemory, PostEvent, Runtime
from brokergroup_operator.spec import GroupContext, SpecError
from brokergroup_operator.stock_users_sync import GroupUsersMemory, remember_trust
from brokergroup_operator.tls_spec import Issuer, TlsSpec
from brokergroup_operator.workload import TLS_DIGEST_ANNOTATION
from brokergroup_remoting.certificates import Issued, issue, make_ca, names_of

log = logging.getLogger("brokergroup_operator")

#: Any new value on the BrokerGroup reissues its server certificate (Strimzi's
#: strimzi.io/force-renew); the value it was issued for is kept on status.tls.renewedFor.
FORCE_RENEW_ANNOTATION = "brokergroup.io/force-renew"
#: The cluster CA is renewed this long before it expires: more than a leaf lives, so no
#: leaf signed by it is cut short and the trust-first roll has a year to happen.
CA_POLICY = RenewalPolicy(renewal_days=395, validity_days=CA_VALIDITY_DAYS)


def group_server_names(ctx: GroupContext) -> tuple[str, ...]:
    """The group's certificate names: its brokers' (certificates.server_names) and, for an
    engine rocketmq group with its stock proxy, the proxy Service's (turning the proxy on
    or off reissues the leaf, and the group rolls onto it once)."""
    return server_names(ctx.name, ctx.namespace) + proxy_server_names(ctx)


#: The cluster CA Secret's keys for the CA the current one replaced (certificate and key),
#: kept while it is valid so a leaf falling due before the pods trust the new CA is signed
#: by one they do trust (certificates.LeafAction.ISSUE_UNDER_PREVIOUS); "" once it expired.
PREVIOUS_CA_CERT, PREVIOUS_CA_KEY = "ca-previous.crt", "ca-previous.key"


@dataclass(frozen=True)
class ClusterCa:
    """The current CA (certificate and key), the bundle of CAs trusted, newest first, and
    the previous CA with its key while the operator holds it (its own CA only)."""

    current: Issued
    trusted: tuple[tuple[bytes, CaFacts], ...]
    previous: Issued | None = None

    @property
    def previous_facts(self) -> CaFacts | None:
        return None if self.previous is None else ca_facts(self.previous.cert_pem)

    @property
    def facts(self) -> CaFacts:
        return self.trusted[0][1]

    @property
    def bundle_pem(self) -> str:
        return "".join(pem.decode() for pem, _ in self.trusted)

    @property
    def fingerprints(self) -> list[str]:
        return [facts.fingerprint for _, facts in self.trusted]


def fingerprint(cert_pem: bytes) -> str:
    """16 hex digits of the SHA-256 of the certificate's DER."""
    der = x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)
    return hashlib.sha256(der).hexdigest()[:16]


def ca_facts(cert_pem: bytes) -> CaFacts:
    cert = x509.load_pem_x509_certificate(cert_pem)
    return CaFacts(fingerprint(cert_pem), cert.not_valid_after_utc)


def split_pems(bundle: bytes) -> list[bytes]:
    """The certificates of a PEM bundle, in order."""
    end = b"-----END CERTIFICATE-----"
    return [part.strip() + b"\n" + end + b"\n" for part in bundle.split(end) if part.strip()]


async def load_cluster_ca(rt: Runtime, now: datetime.datetime, post: PostEvent) -> ClusterCa:
    """The release's cluster CA, made at first use and renewed within CA_POLICY's window
    (the previous one stays in ca-bundle.crt until it expires, and with its key in
    PREVIOUS_CA_CERT/PREVIOUS_CA_KEY until then: emptied at the first check after). A CA
    the user brought (BROKERGROUP_CLUSTER_CA_MANAGED false) is only read, and no previous
    key is read from it (they renew it: as before, a leaf falling due at their renewal is
    issued under the new CA at once); SpecError says what is missing."""
    ref = rt.settings.cluster_ca_ref()
    if ref is None:
        raise SpecError(
            "spec.tls issuer operator needs the release's cluster CA: set the operator's "
            "BROKERGROUP_CLUSTER_CA_SECRET (the chart does), or use issuer secret or cert-manager"
        )
    data = await rt.kube.read_secret_data(*ref)
    current = None
    if data and data.get("ca.crt") and data.get("ca.key"):
        current = Issued(data["ca.crt"], data["ca.key"])
    bundle = split_pems((data or {}).get("ca-bundle.crt", b""))
    previous = [ca_facts(p) for p in bundle]
    pems = {facts.fingerprint: pem for facts, pem in zip(previous, bundle, strict=True)}
    held = None
    pair = (data or {}).get(PREVIOUS_CA_CERT), (data or {}).get(PREVIOUS_CA_KEY)
    if rt.settings.cluster_ca_managed and pair[0] and pair[1]:
        held = Issued(pair[0], pair[1])
    # A previous key whose CA expired signs nothing any more: dropped (written below).
    drop = held is not None and ca_facts(held.cert_pem).not_after <= now
    if drop:
        held = None
    decision = plan_ca(None if current is None else ca_facts(current.cert_pem), now, CA_POLICY)
    if decision.action is not CaAction.KEEP:
        if not rt.settings.cluster_ca_managed:
            if current is None:
                raise SpecError(
                    f"the cluster CA Secret {'/'.join(ref)} (the user's own) lacks ca.crt/ca.key"
                )
            post("Warning", "ClusterCaExpiring", f"{decision.reason}: renew your CA")
        else:
            if current is not None:
                old = ca_facts(current.cert_pem)
                previous.append(old)
                pems[old.fingerprint] = current.cert_pem
                held = current
            current = make_ca(
                f"brokergroup cluster CA ({ref[1]})", now=now, valid_days=CA_VALIDITY_DAYS
            )
            post("Normal", "ClusterCaRenewed", f"{decision.reason}: new cluster CA made")
    assert current is not None
    facts = ca_facts(current.cert_pem)
    pems[facts.fingerprint] = current.cert_pem
    trusted = tuple((pems[f.fingerprint], f) for f in trusted_cas(facts, previous, now))
    ca = ClusterCa(current, trusted, held)
    if (decision.action is not CaAction.KEEP or drop) and rt.settings.cluster_ca_managed:
        string_data = {
            "ca.crt": current.cert_pem.decode(),
            "ca.key": current.key_pem.decode(),
            "ca-bundle.crt": ca.bundle_pem,
        }
        if held is not None or drop:
            # Emptied, not left out, once expired: a key left out of a server-side apply
            # of stringData need not be removed from the Secret's data.
            string_data[PREVIOUS_CA_CERT] = "" if held is None else held.cert_pem.decode()
            string_data[PREVIOUS_CA_KEY] = "" if held is None else held.key_pem.decode()
        await rt.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": ref[1], "namespace": ref[0]},
                "type": "Opaque",
                "stringData": string_data,
            }
        )
    return ca


def check_due(
    mem: GroupMemory, now_s: float, generation: int, force_token: str, interval_s: float
) -> bool:
    """The certificates are checked again: never yet, a spec change, a new force-renew
    token, or `interval_s` since the last check."""
    if mem.tls_checked is None or not mem.tls_digest:
        return True
    at, seen_generation, seen_token = mem.tls_checked
    return seen_generation != generation or seen_token != force_token or now_s - at >= interval_s


def pods_run(raw_pods: Sequence[Mapping[str, Any]], digest: str, replicas: int) -> bool:
    """Every pod of the group runs the template with `digest` (the roll that carried it
    is over)."""
    live = [p for p in raw_pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    return len(live) >= replicas and all(
        ((p.get("metadata") or {}).get("annotations") or {}).get(TLS_DIGEST_ANNOTATION) == digest
        for p in live
    )


async def group_tls(
    rt: Runtime,
    ctx: GroupContext,
    body: Mapping[str, Any],
    raw_pods: Sequence[Mapping[str, Any]],
    mem: GroupMemory,
    post: PostEvent,
    *,
    now: datetime.datetime | None = None,
) -> GroupContext:
    """The group's context with its TLS digest, after making or renewing what is due."""
    tls = ctx.tls
    if tls is None or not tls.enabled:
        mem.tls_digest, mem.tls_checked, mem.tls_status = "", None, None
        return ctx
    meta = body.get("metadata") or {}
    generation = int(meta.get("generation") or 0)
    force = str((meta.get("annotations") or {}).get(FORCE_RENEW_ANNOTATION) or "")
    clock = time.monotonic()
    if not check_due(mem, clock, generation, force, rt.settings.tls_check_s):
        return dataclasses.replace(ctx, tls_digest=mem.tls_digest)
    moment = now or datetime.datetime.now(datetime.UTC)
    written = mem.tls_status
    previous = dict(written if written is not None else (body.get("status") or {}).get("tls") or {})
    if tls.issuer is Issuer.OPERATOR:
        status = await _operator_issued(
            rt, ctx, tls, previous, raw_pods, moment, force, post, mem.stock_users
        )
    elif tls.issuer is Issuer.CERT_MANAGER:
        remember_trust(mem.stock_users, "")  # a CA the operator cannot read: unverified
        status = await _cert_manager_issued(rt, ctx, tls)
    else:
        # The user's Secret: the operator cannot read it, so it cannot tell a renewal;
        # they roll the pods (`kubectl brokergroup restart`) after changing it.
        remember_trust(mem.stock_users, "")
        status = {"issuer": str(tls.issuer), "mode": tls.mode, "secretName": ctx.tls_secret}
    if status != previous:
        await rt.kube.patch_group_status(ctx.namespace, ctx.name, {"tls": status})
    mem.tls_status = status
    mem.tls_digest = str(status.get("digest") or "user")
    mem.tls_checked = (clock, generation, force)
    return dataclasses.replace(ctx, tls_digest=mem.tls_digest)


async def _operator_issued(
    rt: Runtime,
    ctx: GroupContext,
    tls: TlsSpec,
    previous: Mapping[str, Any],
    raw_pods: Sequence[Mapping[str, Any]],
    now: datetime.datetime,
    force: str,
    post: PostEvent,
    stock_users: GroupUsersMemory,
) -> dict[str, Any]:
    ca = await load_cluster_ca(rt, now, post)
    # The operator's own dials of the group's stock brokers verify against the same bundle.
    remember_trust(stock_users, ca.bundle_pem)
    record = LeafRecord.from_status(previous)
    trusted_before = [str(f) for f in previous.get("trusted") or ()]
    settled = pods_run(raw_pods, str(previous.get("digest") or ""), ctx.replicas)
    trusted_by_pods = ca.facts.fingerprint in trusted_before and settled
    previous_ca = ca.previous_facts
    names = group_server_names(ctx)
    decision = plan_leaf(
        record,
        wanted_names=names,
        ca=ca.facts,
        trusted_by_pods=trusted_by_pods,
        now=now,
        policy=tls.policy,
        force_token=force,
        previous_ca=previous_ca,
        # Mid-roll the older revision's bundle is not recorded: only a settled group's.
        previous_trusted_by_pods=(
            previous_ca is not None and previous_ca.fingerprint in trusted_before and settled
        ),
    )
    if decision.ca_bound:
        # Kept, not reissued at every check (which rolled the group without end): the
        # CA's owner renews it (the operator its own, ClusterCaRenewed; a user CA, theirs).
        post("Warning", "CertificateBoundByCa", f"{ctx.tls_secret}: {decision.reason}")
        log.warning("%s/%s: %s", ctx.namespace, ctx.name, decision.reason)
    trusted = ca.fingerprints
    leaf_fingerprint = str(previous.get("fingerprint") or "")
    if decision.action is LeafAction.TRUST_FIRST:
        # Keep the leaf the pods hold; trust both CAs first (the roll this digest makes).
        trusted = [*trusted, *(f for f in trusted_before if f not in trusted)]
    await rt.kube.apply(_trust_config_map(ctx, ca))
    if decision.action in (LeafAction.ISSUE, LeafAction.ISSUE_UNDER_PREVIOUS):
        # Under the previous CA: the pods trust it; this roll's bundle (both CAs) makes
        # them trust the current one, under which the next check reissues the leaf.
        signer, signer_facts = ca.current, ca.facts
        if decision.action is LeafAction.ISSUE_UNDER_PREVIOUS:
            assert ca.previous is not None and previous_ca is not None
            signer, signer_facts = ca.previous, previous_ca
        days = leaf_days(signer_facts, now, tls.policy)
        leaf = issue(signer, f"{ctx.name}.{ctx.namespace}", list(names), now=now, valid_days=days)
        await rt.kube.apply(_leaf_secret(ctx, leaf, ca))
        cert = leaf.certificate
        record = LeafRecord(cert.not_valid_after_utc, names, signer_facts.fingerprint, force)
        leaf_fingerprint = fingerprint(leaf.cert_pem)
        post(
            "Normal", "CertificateIssued", f"server certificate {ctx.tls_secret}: {decision.reason}"
        )
        log.info("%s/%s: certificate issued (%s)", ctx.namespace, ctx.name, decision.reason)
    elif decision.action is LeafAction.TRUST_FIRST and trusted != trusted_before:
        post("Normal", "ClusterCaTrusted", decision.reason)
    assert record is not None
    return {
        **record.to_status(),
        "issuer": str(tls.issuer),
        "mode": tls.mode,
        "secretName": ctx.tls_secret,
        "fingerprint": leaf_fingerprint,
        "trusted": trusted,
        "caNotAfter": iso(ca.facts.not_after),
        "digest": tls_digest(leaf_fingerprint, trusted),
    }


def _leaf_secret(ctx: GroupContext, leaf: Issued, ca: ClusterCa) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": ctx.object_meta(ctx.tls_secret),
        "type": "kubernetes.io/tls",
        "stringData": {
            "tls.crt": leaf.cert_pem.decode(),
            "tls.key": leaf.key_pem.decode(),
            "ca.crt": ca.bundle_pem,
        },
    }


def _trust_config_map(ctx: GroupContext, ca: ClusterCa) -> dict[str, Any]:
    """The CAs trusted, public: a ConfigMap (the operator may read those back)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": ctx.object_meta(tls_trust_name(ctx)),
        "data": {"ca.crt": ca.bundle_pem},
    }


def certificate_object(ctx: GroupContext, tls: TlsSpec) -> dict[str, Any]:
    """The cert-manager Certificate of a group of issuer cert-manager (pure)."""
    assert tls.issuer_ref is not None
    ref = tls.issuer_ref
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": ctx.object_meta(f"{ctx.name}-tls"),
        "spec": {
            "secretName": ctx.tls_secret,
            "commonName": f"{ctx.name}.{ctx.namespace}",
            "dnsNames": list(group_server_names(ctx)),
            "duration": f"{tls.policy.validity_days * 24}h",
            "renewBefore": f"{tls.policy.renewal_days * 24}h",
            "issuerRef": {"name": ref.name, "kind": ref.kind, "group": ref.group},
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "usages": ["server auth", "client auth"],
        },
    }


async def _cert_manager_issued(rt: Runtime, ctx: GroupContext, tls: TlsSpec) -> dict[str, Any]:
    await rt.kube.apply(certificate_object(ctx, tls))
    found = await rt.kube.read_certificate(ctx.namespace, f"{ctx.name}-tls")
    status = (found or {}).get("status") or {}
    revision = str(status.get("revision") or 0)
    result: dict[str, Any] = {
        "issuer": str(tls.issuer),
        "mode": tls.mode,
        "secretName": ctx.tls_secret,
        "revision": revision,
        # cert-manager renews the Secret; a new revision rolls the pods onto it.
        "digest": tls_digest(f"cert-manager:{revision}", []),
    }
    if status.get("notAfter"):
        result["notAfter"] = str(status["notAfter"])
    return result


async def controller_tls(rt: Runtime, now: datetime.datetime, post: PostEvent) -> None:
    """The controllers' certificate (BROKERGROUP_CONTROLLER_TLS_SECRET), signed by the
    cluster CA for their hosts and the release's Services; issued when missing, renewed
    DEFAULT renewal days before expiry or when its names change. The controllers read it
    at start: a renewed one reaches them with their next restart."""
    ref = rt.settings.controller_tls_ref()
    if ref is None:
        return
    ca = await load_cluster_ca(rt, now, post)
    hosts = [a.rpartition(":")[0] for a in rt.settings.controller_addresses]
    names = controller_names(hosts, rt.settings.controller_tls_names)
    data = await rt.kube.read_secret_data(*ref) or {}
    record = None
    if data.get("tls.crt"):
        cert = x509.load_pem_x509_certificate(data["tls.crt"])
        record = LeafRecord(
            cert.not_valid_after_utc,
            tuple(names_of(data["tls.crt"])),
            ca.facts.fingerprint if cert.issuer == ca.current.certificate.subject else "another CA",
        )
    decision = plan_leaf(
        record,
        wanted_names=names,
        ca=ca.facts,
        trusted_by_pods=True,
        now=now,
        policy=RenewalPolicy(),
    )
    if decision.ca_bound:
        post("Warning", "CertificateBoundByCa", f"{'/'.join(ref)}: {decision.reason}")
    if decision.action is LeafAction.KEEP and data.get("ca.crt", b"").decode() == ca.bundle_pem:
        return
    if decision.action is LeafAction.KEEP:
        leaf = Issued(data["tls.crt"], data["tls.key"])
    else:
        days = leaf_days(ca.facts, now, RenewalPolicy())
        leaf = issue(ca.current, "brokergroup controller", list(names), now=now, valid_days=days)
        post("Normal", "ControllerCertificateIssued", f"{'/'.join(ref)}: {decision.reason}")
    await rt.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": ref[1], "namespace": ref[0]},
            "type": "kubernetes.io/tls",
            "stringData": {
                "tls.crt": leaf.cert_pem.decode(),
                "tls.key": leaf.key_pem.decode(),
                "ca.crt": ca.bundle_pem,
            },
        }
    )


async def ensure_controller_tls(rt: Runtime) -> None:
    """controller_tls at the operator's start (the controllers wait for their certificate
    to start) and then once per BROKERGROUP_TLS_CHECK_SECONDS from any group's pass, with
    or without spec.tls. A problem is logged and retried at the next pass."""
    if rt.settings.controller_tls_ref() is None:
        return
    clock = time.monotonic()
    last = rt.controller_tls_checked
    if last is not None and clock - last < rt.settings.tls_check_s:
        return

    def post(kind: str, reason: str, message: str) -> None:
        log.info("%s: %s", reason, message)

    try:
        await controller_tls(rt, datetime.datetime.now(datetime.UTC), post)
    except Exception as exc:  # the API server unreachable, RBAC: the next pass retries
        log.warning("the controllers' certificate could not be made yet: %s", exc)
    else:
        rt.controller_tls_checked = clock
