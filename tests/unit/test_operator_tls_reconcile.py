"""spec.tls through the operator's passes (tls_material.py, reconcile.py), against the
recording Kubernetes fake of test_operator_handlers with Secrets it can read back: the
cluster CA and the group's certificate are made, mounted and recorded; a kept certificate
changes nothing; a forced renewal rolls the pods through the planner, slaves first; a CA
rotation rolls twice, trust first; a leaf due at the CA's renewal is signed by the previous
CA, whose key the CA Secret keeps until it expires; issuers secret and cert-manager;
refusals."""

from __future__ import annotations

import copy
import datetime
from typing import Any

from cryptography import x509

from brokergroup_operator.certificates import iso
from brokergroup_operator.containers import TLS_DIR, TRUST_DIR
from brokergroup_operator.reconcile import reconcile_group
from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.runtime import Runtime
from brokergroup_operator.settings import OperatorSettings
from brokergroup_operator.tls_material import (
    FORCE_RENEW_ANNOTATION,
    fingerprint,
    load_cluster_ca,
    split_pems,
)
from brokergroup_operator.workload import TLS_DIGEST_ANNOTATION
from brokergroup_remoting.certificates import Issued, issue, make_ca, names_of
from tests.unit.test_operator_handlers import Events, FakeController, FakeKube, info, pod

CA_REF = ("bg-system", "rel-cluster-ca")
PAIR = '{"accessKey":"bg-admin","secretKey":"s"}'


class TlsKube(FakeKube):
    """FakeKube keeping every applied object (Secrets readable back, as the API server's
    stringData becomes data), the merged status, and a StatefulSet whose updateRevision
    moves when its pod template changes (what the StatefulSet controller does)."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        super().__init__(pods, {"spec": {"replicas": 3}, "status": {"updateRevision": "r1"}})
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.merged: dict[str, Any] = {}
        self.certificate_status: dict[str, Any] = {}

    async def apply(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        if obj["kind"] == "StatefulSet":
            before = self.objects.get(key)
            if before is not None and before["spec"]["template"] != obj["spec"]["template"]:
                revision = self.sts["status"]["updateRevision"]
                self.sts["status"]["updateRevision"] = f"r{int(revision[1:]) + 1}"
        self.objects[key] = copy.deepcopy(obj)
        await super().apply(obj)

    async def read_secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None:
        found = self.objects.get(("Secret", namespace, name))
        if found is None:
            return None
        return {k: v.encode() for k, v in found["stringData"].items()}

    async def read_certificate(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get(("Certificate", namespace, name))
        return None if found is None else {**found, "status": self.certificate_status}

    async def patch_group_status(self, ns: str, name: str, status: dict[str, Any]) -> None:
        await super().patch_group_status(ns, name, status)
        self.merged.update(copy.deepcopy(status))

    def obj(self, kind: str, name: str, namespace: str = "ns") -> dict[str, Any]:
        return self.objects[(kind, namespace, name)]

    def run_pods_of_update_revision(self) -> None:
        """The kubelet's part of a roll, all at once: every pod on the newest template."""
        template = self.obj("StatefulSet", "bg")["spec"]["template"]["metadata"]
        for p in self.pods.values():
            p["metadata"].pop("deletionTimestamp", None)
            p["metadata"]["labels"]["controller-revision-hash"] = self.sts["status"][
                "updateRevision"
            ]
            p["metadata"]["annotations"] = dict(template["annotations"])


def tls_runtime(kube: TlsKube, controller: FakeController, **settings: Any) -> Runtime:
    options: dict[str, Any] = {
        "controller_addresses": ("c:9878",),
        "image": "img",
        "cluster_ca_secret": "/".join(CA_REF),
        "tls_check_s": 0.0,  # every pass checks (the test is the clock)
        **settings,
    }
    secrets = OperatorSecrets("admin-token", "broker-credential-root-0123", "ha-secret", PAIR)
    rt = Runtime(settings=OperatorSettings(**options), kube=kube, secrets=secrets)  # type: ignore[arg-type]
    rt.controller = lambda addresses: controller  # type: ignore[method-assign,assignment,return-value]
    return rt


def body(kube: TlsKube, tls: dict[str, Any] | None = None, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "bg",
            "namespace": "ns",
            "uid": "g1",
            "generation": 1,
            "annotations": annotations,
        },
        "spec": {"replicas": 3, "ha": {"minInSyncReplicas": 1}, "tls": tls or {}},
        "status": copy.deepcopy(kube.merged),
    }


def leaf_of(kube: TlsKube) -> x509.Certificate:
    return x509.load_pem_x509_certificate(
        kube.obj("Secret", "bg-tls")["stringData"]["tls.crt"].encode()
    )


def template(kube: TlsKube) -> dict[str, Any]:
    return dict(kube.obj("StatefulSet", "bg")["spec"]["template"])


async def test_a_group_with_spec_tls_gets_its_ca_certificate_mounts_and_record() -> None:
    kube = TlsKube([pod(i) for i in range(3)])
    events = Events()
    await reconcile_group(tls_runtime(kube, FakeController(info(1))), body(kube), events)
    ca = kube.obj("Secret", CA_REF[1], CA_REF[0])["stringData"]
    ca_cert = x509.load_pem_x509_certificate(ca["ca.crt"].encode())
    leaf = leaf_of(kube)
    leaf.verify_directly_issued_by(ca_cert)
    pem = kube.obj("Secret", "bg-tls")["stringData"]["tls.crt"].encode()
    assert names_of(pem) == [
        "bg",
        "bg.ns",
        "bg.ns.svc",
        "bg.ns.svc.cluster.local",
        "*.bg-headless.ns.svc",
        "*.bg-headless.ns.svc.cluster.local",
    ]
    assert kube.obj("Secret", "bg-tls")["metadata"]["ownerReferences"][0]["uid"] == "g1"
    assert kube.obj("ConfigMap", "bg-tls-trust")["data"]["ca.crt"] == ca["ca.crt"]
    tls = kube.merged["tls"]
    assert (tls["issuer"], tls["mode"], tls["secretName"]) == ("operator", "permissive", "bg-tls")
    assert tls["fingerprint"] == fingerprint(pem)
    assert tls["trusted"] == [fingerprint(ca["ca.crt"].encode())]
    assert tls["notAfter"] == leaf.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    spec = template(kube)
    assert spec["metadata"]["annotations"][TLS_DIGEST_ANNOTATION] == tls["digest"]
    command = spec["spec"]["containers"][0]["command"]
    at = command.index("--remoting-tls-mode")
    # Every port: remoting and client port in the group's mode, HA in mutual TLS against
    # the trust bundle (the master verified for the group's Service name).
    assert command[at:] == [
        "--remoting-tls-mode",
        "permissive",
        "--client-tls-mode",
        "permissive",
        "--tls-cert-file",
        f"{TLS_DIR}/tls.crt",
        "--tls-key-file",
        f"{TLS_DIR}/tls.key",
        "--tls-ca-file",
        f"{TRUST_DIR}/ca.crt",
        "--ha-tls-server-name",
        "bg.ns.svc",
        # The name servers do not serve TLS here; the controllers' API is plain HTTP.
        "--namesrv-plaintext",
    ]
    volumes = {v["name"]: v for v in spec["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "bg-tls"
    assert volumes["tls-trust"]["configMap"]["name"] == "bg-tls-trust"
    mounts = {m["name"]: m["mountPath"] for m in spec["spec"]["containers"][0]["volumeMounts"]}
    assert (mounts["tls"], mounts["tls-trust"]) == (TLS_DIR, TRUST_DIR)
    assert [e[1] for e in events if e[1].startswith(("Cluster", "Certificate"))] == [
        "ClusterCaRenewed",
        "CertificateIssued",
    ]


async def test_a_valid_certificate_is_kept_and_nothing_rolls() -> None:
    kube = TlsKube([pod(i) for i in range(3)])
    rt = tls_runtime(kube, FakeController(info(1)))
    await reconcile_group(rt, body(kube), Events())
    kube.run_pods_of_update_revision()
    first = dict(kube.merged["tls"])
    leaf = kube.obj("Secret", "bg-tls")["stringData"]["tls.crt"]
    rt.groups.clear()  # a fresh operator: it reads the record from the status
    kube.calls.clear()
    await reconcile_group(rt, body(kube), Events())
    assert kube.obj("Secret", "bg-tls")["stringData"]["tls.crt"] == leaf
    assert kube.merged["tls"] == first
    assert kube.sts["status"]["updateRevision"] == "r1"
    assert [c for c in kube.calls if c[0] == "delete"] == []


async def test_a_user_ca_expiring_within_renewal_days_rolls_the_group_once_not_every_pass() -> None:
    """Issue 36: a user's cluster CA valid 30 days (renewalDays 30). The leaf cannot outlive
    it; the old rule reissued it at every check and the group rolled without end (r2, r3, …).
    Now the first leaf is kept, with a Warning naming the CA, and nothing rolls again."""
    now = datetime.datetime.now(datetime.UTC)
    kube = TlsKube([pod(i) for i in range(3)])
    user_ca = make_ca("user", now=now, valid_days=30)
    kube.objects[("Secret", *CA_REF)] = {
        "stringData": {
            "ca.crt": user_ca.cert_pem.decode(),
            "ca.key": user_ca.key_pem.decode(),
            "ca-bundle.crt": user_ca.cert_pem.decode(),
        }
    }
    rt = tls_runtime(kube, FakeController(info(1)), cluster_ca_managed=False)
    await reconcile_group(rt, body(kube), Events())
    kube.run_pods_of_update_revision()
    leaf = kube.obj("Secret", "bg-tls")["stringData"]["tls.crt"]
    revision = kube.sts["status"]["updateRevision"]
    events = Events()
    for _ in range(3):  # three more checks (tls_check_s 0: every pass checks)
        await reconcile_group(rt, body(kube), events)
        kube.run_pods_of_update_revision()
    assert kube.obj("Secret", "bg-tls")["stringData"]["tls.crt"] == leaf
    assert kube.sts["status"]["updateRevision"] == revision
    assert "CertificateIssued" not in [e[1] for e in events]
    bound = [e for e in events if e[1] == "CertificateBoundByCa"]
    assert len(bound) == 3 and all(e[0] == "Warning" and "renew the CA" in e[2] for e in bound)


async def test_a_forced_renewal_reissues_and_rolls_slaves_first_then_switches_over() -> None:
    kube = TlsKube([pod(i) for i in range(3)])
    controller = FakeController(info(1))  # broker 1 = bg-0 is the master
    rt = tls_runtime(kube, controller)
    await reconcile_group(rt, body(kube), Events())
    kube.run_pods_of_update_revision()
    old_leaf, old_digest = leaf_of(kube), kube.merged["tls"]["digest"]
    events = Events()
    await reconcile_group(rt, body(kube, **{FORCE_RENEW_ANNOTATION: "2027-01-01"}), events)
    assert leaf_of(kube).serial_number != old_leaf.serial_number
    assert kube.merged["tls"]["renewedFor"] == "2027-01-01"
    new_digest = kube.merged["tls"]["digest"]
    assert new_digest != old_digest
    assert template(kube)["metadata"]["annotations"][TLS_DIGEST_ANNOTATION] == new_digest
    assert kube.sts["status"]["updateRevision"] == "r2"
    deleted = []
    for _ in range(8):
        kube.calls.clear()
        await reconcile_group(rt, body(kube, **{FORCE_RENEW_ANNOTATION: "2027-01-01"}), Events())
        for call in kube.calls:
            if call[0] == "delete":
                deleted.append(call[1])
                # The pod comes back on the new revision, ready.
                p = kube.pods[call[1]]
                p["metadata"].pop("deletionTimestamp")
                p["metadata"]["labels"]["controller-revision-hash"] = "r2"
        if controller.calls and controller.calls[-1][0] == "elect":
            break
    # Slaves first (highest ordinal), the master only after a switchover.
    assert deleted == ["bg-2", "bg-1"]
    assert controller.calls[-1][0] == "elect"
    assert leaf_of(kube).serial_number != old_leaf.serial_number


async def test_a_renewed_ca_is_trusted_by_every_pod_before_a_leaf_of_it_is_issued() -> None:
    now = datetime.datetime.now(datetime.UTC)
    kube = TlsKube([pod(i) for i in range(3)])
    # A cluster CA inside its renewal window (100 days left < 395).
    old_ca = make_ca("old", now=now, valid_days=100)
    kube.objects[("Secret", *CA_REF)] = {
        "stringData": {
            "ca.crt": old_ca.cert_pem.decode(),
            "ca.key": old_ca.key_pem.decode(),
            "ca-bundle.crt": old_ca.cert_pem.decode(),
        }
    }
    rt = tls_runtime(kube, FakeController(info(1)), cluster_ca_managed=False)
    await reconcile_group(rt, body(kube), Events())  # the user's CA: read, not renewed
    assert leaf_of(kube).issuer == old_ca.certificate.subject
    kube.run_pods_of_update_revision()
    old_leaf = leaf_of(kube)
    old_fp = fingerprint(old_ca.cert_pem)
    rt = tls_runtime(kube, FakeController(info(1)))  # now the operator manages the CA
    events = Events()
    await reconcile_group(rt, body(kube), events)
    ca = kube.obj("Secret", CA_REF[1], CA_REF[0])["stringData"]
    new_fp = fingerprint(ca["ca.crt"].encode())
    assert new_fp != old_fp
    assert [fingerprint(p) for p in split_pems(ca["ca-bundle.crt"].encode())] == [new_fp, old_fp]
    # Phase 1: the pods get the bundle (both CAs) and keep their leaf of the old CA.
    assert leaf_of(kube).serial_number == old_leaf.serial_number
    assert kube.merged["tls"]["trusted"] == [new_fp, old_fp]
    assert kube.obj("ConfigMap", "bg-tls-trust")["data"]["ca.crt"] == ca["ca-bundle.crt"]
    assert kube.sts["status"]["updateRevision"] == "r2"
    assert "ClusterCaTrusted" in [e[1] for e in events]
    # Not before every pod runs it: still the old leaf.
    await reconcile_group(rt, body(kube), Events())
    assert leaf_of(kube).serial_number == old_leaf.serial_number
    # Phase 2: every pod trusts the new CA; the leaf is reissued under it, and rolls.
    kube.run_pods_of_update_revision()
    await reconcile_group(rt, body(kube), Events())
    assert leaf_of(kube).issuer == x509.load_pem_x509_certificate(ca["ca.crt"].encode()).subject
    assert kube.merged["tls"]["issuerFingerprint"] == new_fp
    assert kube.merged["tls"]["trusted"] == [new_fp, old_fp]  # the old one until it expires
    assert kube.sts["status"]["updateRevision"] == "r3"


async def test_a_leaf_due_at_the_cas_renewal_is_signed_by_the_previous_ca_the_pods_trust() -> None:
    """CI run 48's case through the shell: the group's certificate falls due at the very
    check that renews the operator's cluster CA. Before, it was issued under the new CA at
    once, which no running pod trusted yet. Now the previous CA's key is kept in the CA
    Secret (ca-previous.crt/.key) and signs it; that roll brings the new CA into every
    pod's bundle, and the next check after the roll issues the leaf under the new CA."""
    now = datetime.datetime.now(datetime.UTC)
    kube = TlsKube([pod(i) for i in range(3)])
    old_ca = make_ca("old", now=now, valid_days=100)  # inside the CA's renewal window
    kube.objects[("Secret", *CA_REF)] = {
        "stringData": {
            "ca.crt": old_ca.cert_pem.decode(),
            "ca.key": old_ca.key_pem.decode(),
            "ca-bundle.crt": old_ca.cert_pem.decode(),
        }
    }
    rt = tls_runtime(kube, FakeController(info(1)), cluster_ca_managed=False)
    await reconcile_group(rt, body(kube), Events())  # a leaf of the old CA, 100 days
    kube.run_pods_of_update_revision()
    old_leaf, old_fp = leaf_of(kube), fingerprint(old_ca.cert_pem)
    # The record (what the operator decides from; it cannot read the group's Secret) now
    # says 10 days left: due at the check that renews the CA.
    kube.merged["tls"]["notAfter"] = iso(now + datetime.timedelta(days=10))
    rt = tls_runtime(kube, FakeController(info(1)))  # the operator's own CA: renewed now
    events = Events()
    await reconcile_group(rt, body(kube), events)
    ca = kube.obj("Secret", CA_REF[1], CA_REF[0])["stringData"]
    new_fp = fingerprint(ca["ca.crt"].encode())
    assert new_fp != old_fp
    assert (ca["ca-previous.crt"], ca["ca-previous.key"]) == (
        old_ca.cert_pem.decode(),
        old_ca.key_pem.decode(),
    )
    leaf = leaf_of(kube)
    leaf.verify_directly_issued_by(old_ca.certificate)  # the CA every running pod trusts
    assert leaf.serial_number != old_leaf.serial_number
    assert leaf.not_valid_after_utc <= old_ca.certificate.not_valid_after_utc
    tls = kube.merged["tls"]
    assert (tls["issuerFingerprint"], tls["trusted"]) == (old_fp, [new_fp, old_fp])
    assert kube.obj("Secret", "bg-tls")["stringData"]["ca.crt"] == ca["ca-bundle.crt"]
    assert kube.obj("ConfigMap", "bg-tls-trust")["data"]["ca.crt"] == ca["ca-bundle.crt"]
    assert kube.sts["status"]["updateRevision"] == "r2"
    issued = [e for e in events if e[1] == "CertificateIssued"]
    assert len(issued) == 1
    assert (
        "not every pod trusts the new cluster CA yet: issued under the previous one"
        in (issued[0][2])
    )
    # Mid-roll: the leaf stays (it has ~99 days; the pods do not all run the bundle yet).
    await reconcile_group(rt, body(kube), Events())
    assert leaf_of(kube).serial_number == leaf.serial_number
    # Every pod trusts the new CA: the leaf is reissued under it, one more roll.
    kube.run_pods_of_update_revision()
    await reconcile_group(rt, body(kube), Events())
    leaf_of(kube).verify_directly_issued_by(x509.load_pem_x509_certificate(ca["ca.crt"].encode()))
    assert kube.merged["tls"]["issuerFingerprint"] == new_fp
    assert kube.sts["status"]["updateRevision"] == "r3"


async def test_the_previous_ca_key_is_held_until_that_ca_expires_and_never_a_users() -> None:
    """The cluster CA Secret's ca-previous.crt/.key: read while that CA is valid; emptied
    at the first load after it expired (written once, then nothing); a user's own CA
    Secret (BROKERGROUP_CLUSTER_CA_MANAGED false) is only read and its previous key, if
    they keep one there, is not used."""
    now = datetime.datetime.now(datetime.UTC)
    kube = TlsKube([])
    current = make_ca("current", now=now)
    live = make_ca("live", now=now - datetime.timedelta(days=1500), valid_days=1825)
    gone = make_ca("gone", now=now - datetime.timedelta(days=20), valid_days=10)

    def ca_secret(previous: Issued) -> None:
        kube.objects[("Secret", *CA_REF)] = {
            "stringData": {
                "ca.crt": current.cert_pem.decode(),
                "ca.key": current.key_pem.decode(),
                "ca-bundle.crt": (current.cert_pem + previous.cert_pem).decode(),
                "ca-previous.crt": previous.cert_pem.decode(),
                "ca-previous.key": previous.key_pem.decode(),
            }
        }

    rt = tls_runtime(kube, FakeController(info(1)))
    ca_secret(live)
    ca = await load_cluster_ca(rt, now, Events())
    assert ca.previous == Issued(live.cert_pem, live.key_pem)
    assert ca.fingerprints == [fingerprint(current.cert_pem), fingerprint(live.cert_pem)]
    assert [c for c in kube.calls if c[0] == "apply"] == []
    ca_secret(gone)
    ca = await load_cluster_ca(rt, now, Events())
    assert (ca.previous, ca.fingerprints) == (None, [fingerprint(current.cert_pem)])
    written = kube.obj("Secret", CA_REF[1], CA_REF[0])["stringData"]
    assert written == {
        "ca.crt": current.cert_pem.decode(),
        "ca.key": current.key_pem.decode(),
        "ca-bundle.crt": current.cert_pem.decode(),
        "ca-previous.crt": "",
        "ca-previous.key": "",
    }
    kube.calls.clear()
    assert (await load_cluster_ca(rt, now, Events())).previous is None
    assert [c for c in kube.calls if c[0] == "apply"] == []
    ca_secret(live)
    user = tls_runtime(kube, FakeController(info(1)), cluster_ca_managed=False)
    assert (await load_cluster_ca(user, now, Events())).previous is None
    assert [c for c in kube.calls if c[0] == "apply"] == []


async def test_issuer_cert_manager_writes_a_certificate_and_rolls_on_its_revision() -> None:
    kube = TlsKube([pod(i) for i in range(3)])
    rt = tls_runtime(kube, FakeController(info(1)), cluster_ca_secret="")
    tls = {
        "issuer": "cert-manager",
        "certManager": {"issuerRef": {"name": "ca", "kind": "ClusterIssuer"}},
    }
    kube.certificate_status = {"revision": 1, "notAfter": "2027-03-01T00:00:00Z"}
    await reconcile_group(rt, body(kube, tls), Events())
    certificate = kube.obj("Certificate", "bg-tls")
    assert certificate["spec"]["secretName"] == "bg-tls"
    assert certificate["spec"]["issuerRef"] == {
        "name": "ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert certificate["spec"]["dnsNames"][0] == "bg"
    assert (certificate["spec"]["duration"], certificate["spec"]["renewBefore"]) == (
        "8760h",
        "720h",
    )
    assert kube.merged["tls"]["notAfter"] == "2027-03-01T00:00:00Z"
    first = template(kube)["metadata"]["annotations"][TLS_DIGEST_ANNOTATION]
    volumes = {v["name"]: v for v in template(kube)["spec"]["volumes"]}
    assert volumes["tls-trust"]["secret"]["secretName"] == "bg-tls"  # cert-manager's ca.crt
    kube.certificate_status = {"revision": 2, "notAfter": "2028-03-01T00:00:00Z"}
    await reconcile_group(rt, body(kube, tls), Events())
    assert template(kube)["metadata"]["annotations"][TLS_DIGEST_ANNOTATION] != first
    assert kube.sts["status"]["updateRevision"] == "r2"


async def test_issuer_secret_mounts_the_users_secret_and_makes_nothing() -> None:
    kube = TlsKube([pod(i) for i in range(3)])
    rt = tls_runtime(kube, FakeController(info(1)), cluster_ca_secret="")
    await reconcile_group(
        rt, body(kube, {"issuer": "secret", "secretName": "mine", "mode": "enforcing"}), Events()
    )
    assert [k for k in kube.objects if k[0] in ("Certificate",) or k[2].endswith("-tls")] == []
    volumes = {v["name"]: v for v in template(kube)["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "mine"
    command = template(kube)["spec"]["containers"][0]["command"]
    assert command[command.index("--remoting-tls-mode") + 1] == "enforcing"
    assert kube.merged["tls"] == {"issuer": "secret", "mode": "enforcing", "secretName": "mine"}


async def test_no_cluster_ca_setting_blocks_the_group_with_the_reason() -> None:
    kube = TlsKube([pod(i) for i in range(3)])
    events = Events()
    await reconcile_group(
        tls_runtime(kube, FakeController(info(1)), cluster_ca_secret=""), body(kube), events
    )
    assert ("StatefulSet", "ns", "bg") not in kube.objects
    assert [e[1] for e in events] == ["TlsUnavailable"]
    assert "BROKERGROUP_CLUSTER_CA_SECRET" in events[0][2]


async def test_a_group_without_spec_tls_is_unchanged() -> None:
    kube = TlsKube([pod(i) for i in range(3)])
    b = body(kube)
    del b["spec"]["tls"]
    await reconcile_group(tls_runtime(kube, FakeController(info(1))), b, Events())
    assert [k for k in kube.objects if "tls" in k[2] or k[2] == CA_REF[1]] == []
    assert TLS_DIGEST_ANNOTATION not in template(kube)["metadata"]["annotations"]
    assert "--remoting-tls-mode" not in template(kube)["spec"]["containers"][0]["command"]


def test_the_issued_leaf_chains_to_the_bundle_after_rotation() -> None:
    """The bundle the shell writes (new CA first, then the old) verifies leaves of both."""
    now = datetime.datetime.now(datetime.UTC)
    old, new = make_ca("old", now=now), make_ca("new", now=now)
    bundle = split_pems(new.cert_pem + old.cert_pem)
    for signer in (old, new):
        leaf = issue(signer, "bg.ns", ["bg.ns.svc"], now=now).certificate
        assert any(_issued_by(leaf, x509.load_pem_x509_certificate(pem)) for pem in bundle)


def _issued_by(leaf: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, Exception):
        return False
    return True


async def test_the_controllers_certificate_is_made_renewed_and_brokers_verify_them() -> None:
    kube = TlsKube([pod(i) for i in range(3)])
    rt = tls_runtime(
        kube,
        FakeController(info(1)),
        controller_addresses=("ctl-0.ctl.bg-system.svc:9878", "ctl-1.ctl.bg-system.svc:9878"),
        controller_tls=True,
        controller_tls_secret="bg-system/rel-controller-tls",
        controller_tls_names=("rel-namesrv", "rel-namesrv.bg-system.svc"),
    )
    await reconcile_group(rt, body(kube), Events())
    made = kube.obj("Secret", "rel-controller-tls", "bg-system")["stringData"]
    ca = kube.obj("Secret", CA_REF[1], CA_REF[0])["stringData"]
    assert names_of(made["tls.crt"].encode()) == [
        "ctl-0.ctl.bg-system.svc",
        "ctl-1.ctl.bg-system.svc",
        "rel-namesrv",
        "rel-namesrv.bg-system.svc",
    ]
    x509.load_pem_x509_certificate(made["tls.crt"].encode()).verify_directly_issued_by(
        x509.load_pem_x509_certificate(ca["ca.crt"].encode())
    )
    assert made["ca.crt"] == ca["ca-bundle.crt"]
    command = template(kube)["spec"]["containers"][0]["command"]
    assert command[command.index("--tls-ca-file") + 1] == f"{TRUST_DIR}/ca.crt"
    assert "--namesrv-plaintext" not in command  # the name servers serve TLS
    # Kept while valid; an expiring one (here: 10 days left) is made again.
    await reconcile_group(rt, body(kube), Events())
    assert kube.obj("Secret", "rel-controller-tls", "bg-system")["stringData"] == made
    signer = Issued(ca["ca.crt"].encode(), ca["ca.key"].encode())
    short = issue(
        signer,
        "c",
        names_of(made["tls.crt"].encode()),
        now=datetime.datetime.now(datetime.UTC),
        valid_days=10,
    )
    kube.objects[("Secret", "bg-system", "rel-controller-tls")]["stringData"]["tls.crt"] = (
        short.cert_pem.decode()
    )
    await reconcile_group(rt, body(kube), Events())
    renewed = kube.obj("Secret", "rel-controller-tls", "bg-system")["stringData"]["tls.crt"]
    assert renewed not in (made["tls.crt"], short.cert_pem.decode())
    days = x509.load_pem_x509_certificate(
        renewed.encode()
    ).not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert days > datetime.timedelta(days=300)


async def test_a_stale_body_does_not_issue_a_second_certificate() -> None:
    """The next pass may see the BrokerGroup before the watch brings the status.tls just
    written: the operator's own record wins, so one renewal request makes one certificate."""
    kube = TlsKube([pod(i) for i in range(3)])
    rt = tls_runtime(kube, FakeController(info(1)))
    await reconcile_group(rt, body(kube), Events())
    stale = body(kube, **{FORCE_RENEW_ANNOTATION: "once"})  # status before the renewal
    await reconcile_group(rt, stale, Events())
    renewed = leaf_of(kube).serial_number
    events = Events()
    await reconcile_group(rt, stale, events)
    assert leaf_of(kube).serial_number == renewed
    assert "CertificateIssued" not in [e[1] for e in events]
