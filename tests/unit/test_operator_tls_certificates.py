"""The operator's certificate decisions (operator/brokergroup_operator/certificates.py) and
spec.tls (tls_spec.py), pure: renewal windows, names, a CA rotation that trusts the new CA
on every pod before any pod presents a leaf it signed; and real certificates made the way
the shell makes them, verified by OpenSSL for the names a client dials."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from brokergroup_operator.certificates import (
    CaAction,
    CaFacts,
    LeafAction,
    LeafDecision,
    LeafRecord,
    RenewalPolicy,
    leaf_days,
    plan_ca,
    plan_leaf,
    server_names,
    tls_digest,
    trusted_cas,
)
from brokergroup_operator.tls_material import CA_POLICY, ca_facts, fingerprint, split_pems
from brokergroup_operator.tls_spec import Issuer, TlsSpec, TlsSpecError
from brokergroup_remoting.certificates import issue, make_ca

T0 = datetime.datetime(2027, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
POLICY = RenewalPolicy()
NAMES = server_names("bg", "ns")


def ca(fp: str, days_left: float) -> CaFacts:
    return CaFacts(fp, T0 + days_left * DAY)


def leaf(days_left: float, issuer: str = "ca1", names: tuple[str, ...] = NAMES) -> LeafRecord:
    return LeafRecord(T0 + days_left * DAY, names, issuer)


def decide(record: LeafRecord | None, current: CaFacts, trusted: bool = True, force: str = ""):
    return plan_leaf(
        record,
        wanted_names=NAMES,
        ca=current,
        trusted_by_pods=trusted,
        now=T0,
        policy=POLICY,
        force_token=force,
    )


def test_server_names_are_the_services_and_one_wildcard_for_the_pods() -> None:
    assert server_names("bg", "ns") == (
        "bg",
        "bg.ns",
        "bg.ns.svc",
        "bg.ns.svc.cluster.local",
        "*.bg-headless.ns.svc",
        "*.bg-headless.ns.svc.cluster.local",
    )


def test_each_reason_to_reissue_and_the_one_to_keep() -> None:
    current = ca("ca1", 1000)
    assert decide(None, current).action is LeafAction.ISSUE
    assert decide(leaf(200), current).action is LeafAction.KEEP
    assert decide(leaf(29.9), current).action is LeafAction.ISSUE
    assert decide(leaf(-1), current).action is LeafAction.ISSUE
    assert "names changed" in decide(leaf(200, names=NAMES[:3]), current).reason
    assert decide(leaf(200), current, force="now").action is LeafAction.ISSUE
    renewed = LeafRecord(T0 + 200 * DAY, NAMES, "ca1", renewed_for="now")
    assert decide(renewed, current, force="now").action is LeafAction.KEEP
    # Signed by a previous CA: trust first until every pod trusts the new one.
    assert decide(leaf(200, issuer="ca0"), current, trusted=False).action is LeafAction.TRUST_FIRST
    assert decide(leaf(200, issuer="ca0"), current, trusted=True).action is LeafAction.ISSUE


@given(
    days_left=st.floats(min_value=-400, max_value=400, allow_nan=False),
    renewal=st.integers(min_value=0, max_value=100),
    extra=st.integers(min_value=1, max_value=400),
    same_issuer=st.booleans(),
    trusted=st.booleans(),
)
def test_never_keeps_an_expired_or_soon_to_expire_leaf(
    days_left: float, renewal: int, extra: int, same_issuer: bool, trusted: bool
) -> None:
    policy = RenewalPolicy(renewal_days=renewal, validity_days=renewal + extra)
    record = leaf(days_left, issuer="ca1" if same_issuer else "ca0")
    decision = plan_leaf(
        record,
        wanted_names=NAMES,
        ca=ca("ca1", 2000),
        trusted_by_pods=trusted,
        now=T0,
        policy=policy,
    )
    if record.not_after - T0 <= policy.renew_before:
        assert decision.action is LeafAction.ISSUE, decision
    if decision.action is not LeafAction.ISSUE:
        assert record.not_after - T0 > policy.renew_before


@given(names=st.lists(st.sampled_from((*NAMES, "bg-0", "other.ns.svc")), min_size=1, max_size=6))
def test_changed_names_are_reissued(names: list[str]) -> None:
    decision = decide(leaf(200, names=tuple(names)), ca("ca1", 1000))
    assert (decision.action is LeafAction.KEEP) == (tuple(names) == NAMES)


def test_ca_created_kept_and_renewed_within_its_window() -> None:
    assert plan_ca(None, T0, CA_POLICY).action is CaAction.CREATE
    assert plan_ca(ca("a", 396), T0, CA_POLICY).action is CaAction.KEEP
    assert plan_ca(ca("a", 394), T0, CA_POLICY).action is CaAction.RENEW


def test_trust_bundle_is_the_current_ca_then_unexpired_previous_ones_newest_first() -> None:
    current = ca("new", 1800)
    previous = [ca("old", 100), ca("older", 5), ca("gone", -1), ca("new", 1800), ca("old", 100)]
    assert [c.fingerprint for c in trusted_cas(current, previous, T0)] == ["new", "old", "older"]


def test_a_leaf_never_outlives_its_ca() -> None:
    assert leaf_days(ca("a", 1000), T0, POLICY) == 365
    assert leaf_days(ca("a", 100), T0, POLICY) == 100


#: CI run 48's kind of history: checks 22 days apart; the group's leaf falls due (13 days
#: left) at the very check that renews the cluster CA (day 1,430).
DUE_AT_CA_RENEWAL = [22] * 69


def rotate(steps: list[int], hold_key: bool) -> list[tuple[int, LeafAction, str]]:
    """Simulated years of checks (each ≤ 29 days apart, renewalDays 30): the CA is renewed
    in its window (its predecessor's key held until that one expires when `hold_key`, as
    the operator does for its own CA; not held for a user's), leaves follow as plan_leaf
    decides. After every check and the roll it causes, asserts: every pod's bundle trusts
    the leaf every other pod presents (old and new revisions mid-roll), no presented leaf
    has expired or is inside its renewal window, no leaf outlives its signer. The one
    exception, only without a held key: a leaf due at the very check that renews the CA is
    issued under the new CA before the pods trust it (one roll in which an old pod and a
    new pod cannot verify each other). With a held key it cannot happen under CA_POLICY:
    the previous CA has at least 395 - 29 = 366 days left at that check, so a leaf under it
    always gains a year. Returns the transcript (day, action, signer) of leaf issues."""
    now = T0
    current = CaFacts("ca-0", now + 1825 * DAY)
    previous: list[CaFacts] = []
    record: LeafRecord | None = None
    pods_trust: frozenset[str] = frozenset()
    serial = 0
    transcript: list[tuple[int, LeafAction, str]] = []
    for step in steps:
        now += step * DAY
        if plan_ca(current, now, CA_POLICY).action is CaAction.RENEW:
            serial += 1
            previous.append(current)
            current = CaFacts(f"ca-{serial}", now + 1825 * DAY)
        trusted = frozenset(c.fingerprint for c in trusted_cas(current, previous, now))
        held = previous[-1] if hold_key and previous and previous[-1].not_after > now else None
        decision = plan_leaf(
            record,
            wanted_names=NAMES,
            ca=current,
            trusted_by_pods=current.fingerprint in pods_trust,
            now=now,
            policy=POLICY,
            previous_ca=held,
            previous_trusted_by_pods=held is not None and held.fingerprint in pods_trust,
        )
        old_leaf = record
        forced = False
        signer = current
        if decision.action is LeafAction.ISSUE_UNDER_PREVIOUS:
            assert held is not None and current.fingerprint not in pods_trust, decision
            signer = held
        elif (
            decision.action is LeafAction.ISSUE
            and current.fingerprint not in pods_trust
            and old_leaf is not None
            and old_leaf.issuer != current.fingerprint
        ):
            # A leaf of a new CA before every pod (old revision, mid-roll) trusts it: only
            # without a held key, and only for a leaf due at this check.
            forced = old_leaf.not_after - now <= POLICY.renew_before and not hold_key
            assert forced, decision
        if decision.action in (LeafAction.ISSUE, LeafAction.ISSUE_UNDER_PREVIOUS):
            record = LeafRecord(
                now + leaf_days(signer, now, POLICY) * DAY, NAMES, signer.fingerprint
            )
            assert record.not_after <= signer.not_after
            transcript.append(((now - T0).days, decision.action, signer.fingerprint))
        assert record is not None
        # Mid-roll, old pods trust `pods_trust` and present `old_leaf`; new pods trust
        # `trusted` and present `record`: each verifies the other, and nothing presented
        # is expired or inside its renewal window.
        for presented in (old_leaf, record):
            if presented is None:
                continue
            assert presented.issuer in trusted
            if not forced or presented is old_leaf:
                assert not pods_trust or presented.issuer in pods_trust, (presented, pods_trust)
        assert record.not_after - now > POLICY.renew_before
        pods_trust = trusted  # the roll this check made is over by the next check
    if sum(steps) > 5 * 365:
        assert serial >= 1
    return transcript


@settings(max_examples=60, deadline=None)
@example(steps=DUE_AT_CA_RENEWAL, hold_key=True)
@example(steps=DUE_AT_CA_RENEWAL, hold_key=False)
@given(
    steps=st.lists(st.integers(min_value=0, max_value=29), min_size=30, max_size=200),
    hold_key=st.booleans(),
)
def test_ca_rotation_keeps_every_presented_leaf_trusted_by_every_pod(
    steps: list[int], hold_key: bool
) -> None:
    rotate(steps, hold_key)


def test_a_leaf_due_at_the_ca_renewal_is_issued_under_the_previous_ca_then_the_new_one() -> None:
    """CI run 48's kind of history: with the previous key held, the leaf due at the renewal
    check (day 1,430) is issued under ca-0, which the pods trust, and under ca-1 at the
    next check, once they trust it (that roll carried ca-1 into their bundle); without the
    key (a user's CA), under ca-1 at once, before the pods trust it."""
    before = [
        (22, LeafAction.ISSUE, "ca-0"),
        (374, LeafAction.ISSUE, "ca-0"),
        (726, LeafAction.ISSUE, "ca-0"),
        (1078, LeafAction.ISSUE, "ca-0"),
    ]
    assert rotate(DUE_AT_CA_RENEWAL, hold_key=True) == [
        *before,
        (1430, LeafAction.ISSUE_UNDER_PREVIOUS, "ca-0"),
        (1452, LeafAction.ISSUE, "ca-1"),
    ]
    assert rotate(DUE_AT_CA_RENEWAL, hold_key=False) == [*before, (1430, LeafAction.ISSUE, "ca-1")]


def test_a_due_leaf_before_the_pods_trust_the_new_ca_each_branch() -> None:
    """The previous CA signs a due leaf only when its key is held, every pod trusts it, the
    pods do not trust the current CA, and its leaf lives at least a day longer; otherwise
    the decision is today's (the current CA signs at once, or trust first)."""
    current, prev = ca("ca1", 1800), ca("ca0", 380)

    def due(
        record: LeafRecord,
        *,
        trusted: bool = False,
        held: CaFacts | None = prev,
        held_trusted: bool = True,
    ) -> LeafDecision:
        return plan_leaf(
            record,
            wanted_names=NAMES,
            ca=current,
            trusted_by_pods=trusted,
            now=T0,
            policy=POLICY,
            previous_ca=held,
            previous_trusted_by_pods=held_trusted,
        )

    under_previous = LeafDecision(
        LeafAction.ISSUE_UNDER_PREVIOUS,
        "it expires 2027-01-11T00:00:00Z (10.0 days left) and not every pod trusts the new "
        "cluster CA yet: issued under the previous one, which they trust (it expires "
        "2028-01-16T00:00:00Z)",
    )
    at_once = LeafDecision(LeafAction.ISSUE, "it expires 2027-01-11T00:00:00Z (10.0 days left)")
    old = leaf(10, issuer="ca0")
    assert due(old) == under_previous
    # An expired leaf too (any later end is a gain).
    assert due(leaf(-3, issuer="ca0")).action is LeafAction.ISSUE_UNDER_PREVIOUS
    # No key held (a user's CA), or some pod does not trust the previous CA: at once.
    assert due(old, held=None) == at_once
    assert due(old, held_trusted=False) == at_once
    # Every pod trusts the current CA: its leaf, as always.
    assert due(old, trusted=True) == at_once
    # The previous CA would not give a day more (10.5 days left: a 10-day leaf), or has
    # less than a day left (an expired leaf would get a 1-day leaf outliving it): at once.
    assert due(old, held=ca("ca0", 10.5)) == at_once
    expired = leaf(-1, issuer="ca0")
    assert due(expired, held=ca("ca0", 0.5)) == LeafDecision(
        LeafAction.ISSUE, "it expires 2026-12-31T00:00:00Z (-1.0 days left)"
    )
    # A leaf of the current CA already is never moved back to the previous one.
    assert due(leaf(10, issuer="ca1")) == at_once
    # Not due: trust first, as before, whatever key is held.
    assert due(leaf(200, issuer="ca0")) == LeafDecision(
        LeafAction.TRUST_FIRST, "the cluster CA was renewed: every pod trusts it first"
    )


def test_the_digest_follows_the_leaf_and_the_trust() -> None:
    base = tls_digest("leaf1", ["ca1"])
    assert base == tls_digest("leaf1", ["ca1"])
    assert len({base, tls_digest("leaf2", ["ca1"]), tls_digest("leaf1", ["ca2", "ca1"])}) == 3


def test_spec_tls_defaults_and_refusals() -> None:
    assert TlsSpec.from_spec({}) is None
    tls = TlsSpec.from_spec({"tls": {}})
    assert tls is not None
    assert (tls.mode, tls.issuer, tls.policy) == ("permissive", Issuer.OPERATOR, RenewalPolicy())
    for bad, why in [
        ({"mode": "on"}, "spec.tls.mode must be one of"),
        ({"issuer": "vault"}, "spec.tls.issuer must be one of"),
        ({"renewalDays": 30, "validityDays": 30}, "renewalDays must be"),
        ({"validityDays": "1y"}, "whole number of days"),
        ({"issuer": "secret"}, "needs spec.tls.secretName"),
        ({"secretName": "x"}, "only with spec.tls.issuer secret"),
        ({"issuer": "cert-manager"}, "needs spec.tls.certManager.issuerRef.name"),
        ({"renewDays": 3}, "unknown field(s) ['renewDays']"),
        (
            {"issuer": "cert-manager", "certManager": {"issuerRef": {"name": "x", "kind": "Y"}}},
            "Issuer or ClusterIssuer",
        ),
    ]:
        with pytest.raises(TlsSpecError, match=None) as caught:
            TlsSpec.from_spec({"tls": bad})
        assert why in str(caught.value), (bad, caught.value)


def test_status_record_round_trip_and_an_unreadable_one_is_none() -> None:
    record = LeafRecord(T0, NAMES, "ca1", "x")
    assert LeafRecord.from_status(record.to_status()) == record
    assert LeafRecord.from_status({"notAfter": "yesterday", "issuerFingerprint": "a"}) is None
    assert LeafRecord.from_status({}) is None


def test_issued_leaf_verifies_for_every_name_against_a_bundle_across_a_rotation(
    tmp_path: Path,
) -> None:
    """Real certificates: a leaf of the old CA and one of the new both verify against the
    bundle (new + old), for the master Service and a pod's stable name (the wildcard);
    another CA's does not; a name outside the list does not."""
    now = datetime.datetime.now(datetime.UTC)
    old, new, stranger = (make_ca(n, now=now) for n in ("old", "new", "stranger"))
    bundle = tmp_path / "ca.crt"
    bundle.write_bytes(new.cert_pem + old.cert_pem)
    assert [ca_facts(p).fingerprint for p in split_pems(bundle.read_bytes())] == [
        fingerprint(new.cert_pem),
        fingerprint(old.cert_pem),
    ]
    context = ssl.create_default_context(cafile=str(bundle))
    for signer, expect in ((old, True), (new, True), (stranger, False)):
        issued = issue(signer, "bg.ns", list(NAMES), now=now, valid_days=30)
        cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
        issued.write(cert, key)
        for host, ok in (
            ("bg.ns.svc", expect),
            ("bg-2.bg-headless.ns.svc", expect),
            ("x.ns", False),
        ):
            assert _handshake(context, cert, key, host) is ok, (signer, host)


def _handshake(client: ssl.SSLContext, cert: Path, key: Path, host: str) -> bool:
    """A TLS handshake over a socket pair (memory BIOs would do; a socket pair is real)."""
    import socket
    import threading

    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    a, b = socket.socketpair()
    done: list[BaseException] = []

    def serve() -> None:
        try:
            with server.wrap_socket(b, server_side=True):
                pass
        except (ssl.SSLError, OSError) as exc:
            done.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client.wrap_socket(a, server_hostname=host):
            return True
    except ssl.SSLCertVerificationError:
        return False
    finally:
        a.close()
        thread.join(5)
        b.close()


def test_a_leaf_bound_by_a_ca_expiring_within_renewal_days_is_issued_once_not_every_pass() -> None:
    """Issue 36: a user CA valid 30 days (renewalDays 30). A leaf cannot outlive it, so a new
    leaf again expired within renewalDays and the old rule reissued it (and rolled the group)
    at every check. Now: issued once, then kept with a warning, until the CA is renewed."""
    user_ca = make_ca("user CA", now=T0, valid_days=30)
    facts = ca_facts(user_ca.cert_pem)
    record: LeafRecord | None = None
    actions = []
    for hour in range(0, 72):  # a check every hour for three days
        now = T0 + datetime.timedelta(hours=hour)
        decision = plan_leaf(
            record, wanted_names=NAMES, ca=facts, trusted_by_pods=True, now=now, policy=POLICY
        )
        actions.append(decision.action)
        if decision.action is LeafAction.ISSUE:
            days = leaf_days(facts, now, POLICY)
            cert = issue(user_ca, "bg.ns", list(NAMES), now=now, valid_days=days).certificate
            assert cert.not_valid_after_utc <= facts.not_after
            record = LeafRecord(cert.not_valid_after_utc, NAMES, facts.fingerprint)
        else:
            assert decision.ca_bound, decision
            assert "renew the CA" in decision.reason
    assert actions == [LeafAction.ISSUE] + [LeafAction.KEEP] * 71
    # The user renews their CA: the leaf is reissued under it once (trust first), then kept.
    renewed = ca_facts(make_ca("user CA 2", now=T0, valid_days=400).cert_pem)
    now = T0 + 3 * DAY
    assert record is not None
    step = plan_leaf(
        record, wanted_names=NAMES, ca=renewed, trusted_by_pods=False, now=now, policy=POLICY
    )
    assert step.action is LeafAction.ISSUE and not step.ca_bound  # it expires within 30 days
    fresh = LeafRecord(now + 365 * DAY, NAMES, renewed.fingerprint)
    kept = plan_leaf(
        fresh, wanted_names=NAMES, ca=renewed, trusted_by_pods=True, now=now, policy=POLICY
    )
    assert (kept.action, kept.ca_bound) == (LeafAction.KEEP, False)


@given(
    ca_days=st.floats(min_value=0.5, max_value=2000, allow_nan=False),
    leaf_left=st.floats(min_value=-5, max_value=400, allow_nan=False),
)
def test_a_leaf_within_renewal_days_is_reissued_exactly_when_a_new_one_lives_a_day_longer(
    ca_days: float, leaf_left: float
) -> None:
    current = ca("ca1", ca_days)
    decision = decide(leaf(leaf_left), current)
    if leaf_left * DAY > POLICY.renew_before:
        assert decision.action is LeafAction.KEEP and not decision.ca_bound
        return
    gain = T0 + leaf_days(current, T0, POLICY) * DAY - leaf(leaf_left).not_after
    if gain >= DAY or (leaf_left <= 0 and gain > datetime.timedelta(0)):
        assert decision.action is LeafAction.ISSUE, decision
    else:
        assert (decision.action, decision.ca_bound) == (LeafAction.KEEP, True), decision
